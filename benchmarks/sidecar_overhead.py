"""Latency and CPU a proxy adds in front of a model server: direct, nginx, the sidecar, any other.

Usage::

    .venv/bin/python benchmarks/sidecar_overhead.py [--quick] [--rounds 4] [--duration 6]
        [--scenarios stream:50 stream:200 nonstream:200]
        [--rows nginx sidecar envoy envoy-canary envoy-plain] [--proxy NAME=COMMAND ...]
        [--canary-share 0.5] [--router-timeout-ms MS] [--envoy-env SHADOWEVAL_K=V ...]
        [--sidecar-workers 1]
        [--nginx-workers 1] [--envoy-concurrency 1] [--pin] [--burners 2]
        [--json out.json] [--markdown]

Every path the load takes is a **row**, all fed by the same upstream and load generator:

* ``direct``: the load generator talks to the upstream itself (the baseline);
* ``nginx``: Debian's nginx (``apt-get install -y nginx``) as a plain reverse proxy, config
  generated into a temp dir: ``proxy_buffering off``, HTTP/1.1 keep-alive to the upstream
  (``keepalive 1024``), ``--nginx-workers`` worker processes, no access log;
* ``sidecar``: started as an operator would, ``shadow-eval capture serve --upstream URL
  --port P --admin-port A --sink file ...`` (default builder: one worker process;
  ``--sidecar-workers`` relay processes);
* ``envoy``: the Envoy front end, ``shadow-eval capture envoy --upstream URL --port P
  --admin-port A --envoy-admin-port E --concurrency 1 --sink file ...`` (Envoy with
  ``--envoy-concurrency`` worker threads, the gRPC capture service and its builder);
* ``envoy-canary``: the same front end with ``envoy.canary`` set (environment
  ``SHADOWEVAL_ENVOY__CANARY__*``): the candidate URL is the same upstream (two clusters,
  one server), the split file is written before the start at ``--canary-share`` (revision
  1, :func:`shadoweval.capture.canary_split.write_split`), so every request also waits for the
  session router (:mod:`shadoweval.capture.session_router`, at most ``--router-timeout-ms``, the
  product default 20 ms when not given). The row is ready once Envoy serves revision 1
  and the router reads it. After the run its router counters are reported: Envoy's
  ext_proc stats ``http.live.ext_proc.shadow_eval_router.*`` (``message_timeouts``,
  ``failure_mode_allowed``: requests routed by the weighted fallback) and the router's
  ``shadoweval_canary_decisions_total`` by arm and reason; with ``envoy`` in the same
  run, the canary row is also compared with it (*vs envoy* = canary row − envoy row);
* ``envoy-plain``: the same Envoy bootstrap with the capture filter left out (plain Envoy:
  the reference of issue 33), ``benchmarks/envoy_variants.py plain`` (which also runs the
  tap-filter and bare-gRPC variants as ``--proxy`` rows). For every row with an Envoy
  process the markdown adds a table splitting its CPU into Envoy's own, the capture
  builder's and the rest (the Python capture service), and × ``envoy-plain``;
* ``--proxy NAME=COMMAND``: any other front end; ``COMMAND`` is a shell-style template with
  ``{listen_port}`` and ``{upstream_url}``, e.g. ``--proxy "envoy=shadow-eval capture envoy
  --upstream {upstream_url} --port {listen_port}"``. Every row is ready when
  ``GET /v1/models`` through it answers 200 (polled).

The **upstream** (``--role upstream``) is a small OpenAI-compatible server on raw asyncio:
``POST /v1/chat/completions`` answers on a fixed schedule (first event after ``--ttft-ms``,
``--events`` content events with gaps spread over ``--itl-ms MIN MAX``, then a finish chunk,
a usage chunk and ``data: [DONE]``; a non-streamed request gets one JSON after the same
time). The **load generator** (``--role loadgen``) runs closed-loop keep-alive clients on a
lean asyncio HTTP/1.1 client, staggered over one response time, recording requests started
inside the measuring window (end-to-end latency and TTFT). Each client is one session: its
requests carry ``x-session-id: bench-{seed}-{client}`` (the default
``capture.session_headers``' first), so the canary router pins sessions as in production.

Rounds are interleaved: in each scenario every round runs every row, in the order of the
rows and reversed on the next round, so machine noise hits all rows alike; *added* = row
percentile − direct percentile over the pooled rounds. **CPU per 1,000 requests** of a row
is utime + stime from ``/proc`` of its process and every live descendant (nginx's workers;
the sidecar's builder process), read before a round and after it — for the sidecar after
``/metrics`` shows every capture of the round written — divided by the requests the load
generator sent (a ``--proxy`` row's right after its round: its work must be done by
then). For the sidecar the builder's share is shown apart (``of which capture
builder``; the relay alone is the difference).

``--pin``: the proxies run on CPU 0 (``taskset -c 0``: nginx's workers; the sidecar's relay
process, whose builder process is moved to the other CPUs after the warm-up), the upstream
and the load generators on the other CPUs; that is how "a core of its own" is measured.
``--burners N``: N processes spin on the CPUs (a ``while`` loop, nice 0, like any other
busy job on the host) from after the warm-up to the end of the run: the *starved* machine of
issue 33 item 2 (the sidecar's added p50 against nginx's + 5 ms). The CPU columns then also
count time the burners' competition costs (cache, wake-ups); compare added latency.
``--quick``: one round of 3 s per row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODEL = "bench-llm"
ROUTE = "/v1/chat/completions"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HERE = Path(__file__).resolve()
_now_ns = time.monotonic_ns


# --------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class Shape:
    """What every upstream response looks like in time."""

    ttft_ms: float = 100.0
    itl_min_ms: float = 20.0
    itl_max_ms: float = 50.0
    events: int = 20

    def gaps_s(self) -> list[float]:
        """Inter-token gaps: evenly spread over [min, max], in a fixed scrambled order."""
        n = self.events
        step = (self.itl_max_ms - self.itl_min_ms) / max(n - 1, 1)
        order = [(k * 7) % n for k in range(n)] if n % 7 else list(range(n))
        return [(self.itl_min_ms + step * i) / 1000 for i in order]

    def offsets_s(self) -> list[float]:
        """Send time of each content event and of the finish chunk, from request receipt."""
        out = [self.ttft_ms / 1000]
        for gap in self.gaps_s():
            out.append(out[-1] + gap)
        return out  # events + 1 entries: the last one is the finish chunk

    @property
    def total_s(self) -> float:
        return self.offsets_s()[-1]


# --------------------------------------------------------------------------- upstream


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n\r\n"
)
_WORDS = (" The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _plain_response(status: str, body: bytes, ctype: bytes = b"application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: ".encode()
        + ctype
        + f"\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )


class UpstreamProtocol(asyncio.Protocol):
    """One keep-alive connection of the fake model server (one request at a time)."""

    counter = 0

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.offsets = shape.offsets_s()
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.task is not None:
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.task is None:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        method, target, _ = lines[0].split(" ", 2)
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        recv_ns = _now_ns()
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        coro = self._serve(method, target, body, recv_ns)
        self.task = asyncio.get_running_loop().create_task(coro)
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.task = None
        if not task.cancelled() and task.exception() is not None and self.transport:
            self.transport.close()
        elif self.transport is not None and not self.transport.is_closing():
            self._next()

    def _write(self, data: bytes) -> bool:
        if self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(data)
        return True

    async def _serve(self, method: str, target: str, body: bytes, recv_ns: int) -> None:
        if method == "GET" and target.startswith("/v1/models"):
            models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            self._write(_plain_response("200 OK", json.dumps(models).encode()))
            return
        if method != "POST" or not target.startswith(ROUTE):
            self._write(_plain_response("404 Not Found", b'{"error":"not found"}'))
            return
        request = json.loads(body)
        UpstreamProtocol.counter += 1
        rid = f"chatcmpl-bench{UpstreamProtocol.counter}"
        if request.get("stream"):
            await self._stream(rid, recv_ns)
        else:
            await self._complete(rid, recv_ns)

    async def _sleep_until(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        delay = when - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _stream(self, rid: str, recv_ns: int) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        created = int(time.time())
        head = (
            f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":{created},'
            f'"model":"{MODEL}","system_fingerprint":null,"choices":['
        ).encode()
        tail = f'],"x_recv_ns":{recv_ns},"x_sent_ns":'.encode()
        if not self._write(_SSE_HEAD):
            return
        n = self.shape.events
        for k, offset in enumerate(self.offsets):
            await self._sleep_until(loop, t0 + offset)
            if k == 0:
                choice = '{"index":0,"delta":{"role":"assistant","content":"' + _WORDS[0] + '"},'
            elif k < n:
                word = _WORDS[k % len(_WORDS)]
                choice = '{"index":0,"delta":{"content":"' + word + '"},'
            else:
                choice = '{"index":0,"delta":{},'
            choice += '"logprobs":null,"finish_reason":%s}' % ('"stop"' if k == n else "null")
            event = head + choice.encode() + tail + str(_now_ns()).encode() + b"}\n\n"
            if not self._write(_chunk(event)):
                return
        usage = f'"usage":{{"prompt_tokens":96,"completion_tokens":{n},"total_tokens":{96 + n}}}'
        event = (
            head[:-1] + b"]," + usage.encode() + tail + str(_now_ns()).encode() + b"}\n\n"
        )  # "choices":[] and the usage
        self._write(_chunk(event))
        self._write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")

    async def _complete(self, rid: str, recv_ns: int) -> None:
        loop = asyncio.get_running_loop()
        await self._sleep_until(loop, loop.time() + self.shape.total_s)
        n = self.shape.events
        text = "".join(_WORDS[k % len(_WORDS)] for k in range(n))
        created = int(time.time())
        body = (
            f'{{"id":"{rid}","object":"chat.completion","created":{created},"model":"{MODEL}",'
            f'"system_fingerprint":null,"choices":[{{"index":0,"message":{{"role":"assistant",'
            f'"content":"{text}"}},"logprobs":null,"finish_reason":"stop"}}],'
            f'"usage":{{"prompt_tokens":96,"completion_tokens":{n},"total_tokens":{96 + n}}},'
            f'"x_recv_ns":{recv_ns},"x_sent_ns":{_now_ns()}}}'
        ).encode()
        self._write(_plain_response("200 OK", body))


async def serve_upstream(port: int, shape: Shape) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: UpstreamProtocol(shape), "127.0.0.1", port, backlog=4096
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


# --------------------------------------------------------------------------- load generator


class RequestFailedError(Exception):
    """A request that did not complete with 200 and a whole body."""


class ClientConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 client connection with a minimal response parser.

    The arrival time of every ``data_received`` is taken first thing; SSE events complete in
    that piece get it as their arrival time.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.buf = bytearray()
        self.state = "head"
        self.status = 0
        self.chunked = False
        self.remaining = 0
        self.body = bytearray()
        self.sse = bytearray()
        self.t_send = 0
        self.first_ns = 0
        self.req_oneway = -1
        self.end_ns = 0
        self.delays: list[int] = []
        self.done_seen = False

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(RequestFailedError(f"connection lost: {exc!r}"))

    def data_received(self, data: bytes) -> None:
        now = _now_ns()
        try:
            self._feed(data, now)
        except Exception as exc:
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(RequestFailedError(f"bad response: {exc!r}"))
            if self.transport is not None:
                self.transport.close()

    # -- request
    async def request(self, payload: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.waiter = asyncio.get_running_loop().create_future()
        self.t_send = _now_ns()
        self.transport.write(payload)
        await self.waiter

    # -- parsing
    def _feed(self, data: bytes, now: int) -> None:
        self.buf += data
        while True:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                lines = bytes(self.buf[:end]).split(b"\r\n")
                del self.buf[: end + 4]
                self.status = int(lines[0].split(b" ", 2)[1])
                self.remaining = 0
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        self.remaining = int(value)
                    elif name == b"transfer-encoding" and b"chunked" in value.lower():
                        self.chunked = True
                self.state = "size" if self.chunked else "length"
            elif self.state == "length":
                part = bytes(self.buf[: self.remaining])
                del self.buf[: self.remaining]
                self.remaining -= len(part)
                self.body += part
                if self.remaining:
                    return
                self._finish(now)
                return
            elif self.state == "size":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(self.buf[:end]).split(b";")[0], 16)
                del self.buf[: end + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.remaining = size
                    self.state = "data"
            elif self.state == "data":
                if len(self.buf) >= self.remaining + 2:  # the rest of the chunk and its CRLF
                    take = bytes(self.buf[: self.remaining])
                    del self.buf[: self.remaining + 2]
                    self.remaining = 0
                    self.state = "size"
                    if take:
                        self._body_piece(take, now)
                    continue
                n = min(len(self.buf), self.remaining)
                if n:
                    some = bytes(self.buf[:n])
                    del self.buf[:n]
                    self.remaining -= n
                    self._body_piece(some, now)
                return
            elif self.state == "trailer":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return
                trailer = bytes(self.buf[:end])
                del self.buf[: end + 2]
                if not trailer:
                    self._finish(now)
                    return
            else:
                return

    def _body_piece(self, piece: bytes, now: int) -> None:
        if self.status != 200:
            self.body += piece
            return
        self.sse += piece
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return
            event = bytes(self.sse[:end])
            del self.sse[: end + 2]
            if event == b"data: [DONE]":
                self.done_seen = True
                continue
            if not self.first_ns:
                self.first_ns = now
                self.req_oneway = _field(event, b'"x_recv_ns":') - self.t_send
            self.delays.append(now - _field(event, b'"x_sent_ns":'))

    def _finish(self, now: int) -> None:
        self.end_ns = now
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.status != 200:
            waiter.set_exception(RequestFailedError(f"status {self.status}"))
        elif self.chunked and not self.done_seen:
            waiter.set_exception(RequestFailedError("stream ended without [DONE]"))
        elif not self.chunked:
            body = bytes(self.body)
            self.req_oneway = _field(body, b'"x_recv_ns":') - self.t_send
            self.delays.append(now - _field(body, b'"x_sent_ns":'))
            waiter.set_result(None)
        else:
            waiter.set_result(None)
        self.state = "head"


def _field(data: bytes, key: bytes) -> int:
    """The integer after ``key`` in a JSON text (our own x_*_ns fields)."""
    i = data.rfind(key)
    if i < 0:
        raise ValueError(f"no {key!r} in {data[:80]!r}")
    i += len(key)
    j = i
    while j < len(data) and 48 <= data[j] <= 57:
        j += 1
    return int(data[i:j])


def request_bytes(host: str, port: int, stream: bool, session: str | None = None) -> bytes:
    body = {
        "model": MODEL,
        "messages": [
            {
                "role": "system",
                "content": "You are a concise assistant. Answer in one short paragraph and "
                "do not repeat the question back to the user.",
            },
            {
                "role": "user",
                "content": "Summarise in two sentences why a reverse proxy in front of a "
                "model server must not buffer server-sent events, and what a client would "
                "notice if it did. Mention time to first token.",
            },
        ],
        "max_tokens": 64,
        "temperature": 0.7,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    data = json.dumps(body).encode()
    head = (
        f"POST {ROUTE} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"accept: application/json\r\nauthorization: Bearer sk-bench-not-a-real-key\r\n"
        f"user-agent: shadow-eval-bench/1\r\n"
        + ("" if session is None else f"x-session-id: {session}\r\n")
        + f"content-length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


@dataclass
class LoadResult:
    e2e: list[int] = field(default_factory=list)
    ttft: list[int] = field(default_factory=list)
    req_oneway: list[int] = field(default_factory=list)
    chunk: list[int] = field(default_factory=list)
    recorded: int = 0
    sent: int = 0
    failures: int = 0
    failure_kinds: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_ms: list[float] = field(default_factory=list)


async def run_load(
    host: str,
    port: int,
    stream: bool,
    concurrency: int,
    duration_s: float,
    response_s: float,
    seed: int,
) -> LoadResult:
    """Closed-loop load: ramp (stagger + one warm-up request), measure, tail."""
    loop = asyncio.get_running_loop()
    rng = random.Random(seed)
    result = LoadResult()
    t_begin = loop.time()
    measure_from = t_begin + 2 * response_s + 0.2
    measure_to = measure_from + duration_s
    stop_at = measure_to + response_s * 1.2 + 0.1
    cpu0 = os.times()

    async def lag_monitor() -> None:
        while loop.time() < stop_at:
            t = loop.time()
            await asyncio.sleep(0.005)
            result.loop_lag_ms.append((loop.time() - t - 0.005) * 1000)

    async def connect() -> ClientConnection:
        _, conn = await loop.create_connection(ClientConnection, host, port)
        return conn

    async def client(index: int) -> None:
        payload = request_bytes(host, port, stream, session=f"bench-{seed}-{index}")
        await asyncio.sleep(rng.uniform(0, response_s))
        conn = await connect()
        first = True
        while True:
            now = loop.time()
            if now >= stop_at:
                break
            record = not first and measure_from <= now < measure_to
            first = False
            if conn.closed:
                conn = await connect()
            result.sent += 1
            try:
                await conn.request(payload)
            except RequestFailedError as exc:
                if record:
                    result.failures += 1
                    kind = str(exc).split(":")[0]
                    result.failure_kinds[kind] = result.failure_kinds.get(kind, 0) + 1
                if conn.transport is not None:
                    conn.transport.close()
                conn = await connect()
                continue
            if record:
                result.recorded += 1
                result.e2e.append(conn.end_ns - conn.t_send)
                result.req_oneway.append(conn.req_oneway)
                result.chunk.extend(conn.delays)
                if stream:
                    result.ttft.append(conn.first_ns - conn.t_send)
        if conn.transport is not None:
            conn.transport.close()

    monitor = asyncio.create_task(lag_monitor())
    await asyncio.gather(*(client(i) for i in range(concurrency)))
    await monitor
    cpu1 = os.times()
    result.cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    result.wall_s = loop.time() - t_begin
    return result


# --------------------------------------------------------------------------- /proc and metrics


def _stat_times(path: str) -> tuple[float, float]:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # utime, stime


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    return sum(_stat_times(f"/proc/{pid}/stat"))


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (walks /proc for parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and each live descendant (nginx workers, the builder...)."""
    out: dict[int, float] = {}
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(OSError, IndexError, ValueError):
            out[p] = proc_cpu_s(p)
    return out


def cpu_delta(after: dict[int, float], before: dict[int, float]) -> float:
    return sum(v - before.get(k, 0.0) for k, v in after.items())


def envoy_pids(pids: Sequence[int]) -> set[int]:
    """Those of ``pids`` that are an Envoy binary (``/proc/PID/comm`` is ``envoy``): a
    row's Envoy share apart from its Python processes."""
    out: set[int] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "envoy":
                out.add(pid)
    return out


def builder_pids(pid: int, exclude: int | None = None) -> set[int]:
    """Descendants of the sidecar that are its capture builder (multiprocessing spawn),
    except ``exclude`` (the Envoy front end's session router, also a spawned process)."""
    out: set[int] = set()
    for child in descendants(pid):
        if child == exclude:
            continue
        with contextlib.suppress(OSError):
            if b"multiprocessing" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.add(child)
    return out


Metrics = dict[str, list[tuple[dict[str, str], float]]]


def scrape(admin_url: str) -> Metrics:
    """The sidecar's ``shadoweval_*`` samples: name → [(labels, value)]."""
    import httpx

    text = httpx.get(admin_url + "/metrics", timeout=10).text
    out: Metrics = {}
    for line in text.splitlines():
        if not line.startswith("shadoweval_"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: dict[str, str] = {}
        for part in rest.rstrip("}").split('",'):
            if "=" in part:
                key, _, val = part.partition("=")
                labels[key.strip()] = val.strip().strip('"')
        out.setdefault(name, []).append((labels, float(value)))
    return out


def total(metrics: Metrics, name: str) -> float:
    return sum(v for _, v in metrics.get(name, []))


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_http(url: str, timeout_s: float, proc: Any, log: Path) -> None:
    """Poll ``url`` until it answers 200 (the readiness of any row)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited ({proc.returncode}):\n{tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"{url} not ready within {timeout_s} s:\n{tail(log)}")


class Processes:
    """Every subprocess this benchmark starts; all are stopped on exit, also on errors."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        cmd: Sequence[str],
        log: Path,
        cwd: Path | None = None,
        settings_env: dict[str, str] | None = None,
    ) -> Any:
        """Start ``cmd`` (output to ``log``) without the caller's ``SHADOWEVAL_*``
        environment, with ``settings_env`` (``SHADOWEVAL_*`` settings of this row) added."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(settings_env or {})
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,  # its own process group: its children go with it
            )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> int | None:
        """SIGTERM, wait, then SIGKILL the process group (only ours: its pgid is its pid)."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc in self.procs:
            self.procs.remove(proc)
        return proc.returncode

    def stop_all(self) -> None:
        for proc in list(reversed(self.procs)):
            self.stop(proc, timeout_s=20.0)


BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
"""A CPU burner that spins until this benchmark's process is gone (even killed)."""


@contextlib.contextmanager
def managed() -> Iterator[Processes]:
    """Every process started through the yielded :class:`Processes` is stopped on the way
    out, also on an error or SIGTERM (turned into ``SystemExit`` here)."""
    procs = Processes()

    def on_sigterm(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield procs
    finally:
        signal.signal(signal.SIGTERM, previous)
        procs.stop_all()


# --------------------------------------------------------------------------- rows (proxies)


NGINX_CONF = """\
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream live {{ server 127.0.0.1:{upstream_port}; keepalive 1024; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        location / {{
            proxy_pass http://live;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""
"""A plain reverse proxy: HTTP/1.1 keep-alive upstream, responses not buffered."""


@dataclass
class Row:
    """One path the load goes through: ``direct`` (no proxy) or a proxy process tree."""

    name: str
    port: int
    proc: Any = None
    admin_url: str | None = None  # the capture service's: wait until its captures are written
    log: Path | None = None
    envoy_admin_url: str | None = None  # the Envoy front end's Envoy (its /stats)
    canary: bool = False  # the Envoy front end with the canary router
    router_timeout_ms: int | None = None  # its envoy.canary.router_timeout_ms
    router_pid: int | None = None  # its session router's process (not the builder)


def pin_prefix(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus else []


def start_nginx(
    procs: Processes, upstream_port: int, work: Path, workers: int, cpus: str | None
) -> Row:
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(exe).exists():
        raise SystemExit("nginx not found: apt-get install -y nginx (or pass --rows without it)")
    prefix = work / "nginx"
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = prefix / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(workers=workers, prefix=prefix, upstream_port=upstream_port, port=port)
    )
    log = prefix / "stdout.log"
    cmd = [*pin_prefix(cpus), exe, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"]
    proc = procs.start(cmd, log)
    wait_http(f"http://127.0.0.1:{port}/v1/models", 30, proc, prefix / "error.log")
    return Row("nginx", port, proc, log=log)


def start_sidecar(
    procs: Processes, upstream_port: int, work: Path, workers: int, cpus: str | None
) -> Row:
    work = work / "sidecar"
    work.mkdir(parents=True, exist_ok=True)
    port, admin = free_port(), free_port()
    exe = Path(sys.executable).parent / "shadow-eval"
    cmd = [
        *pin_prefix(cpus),
        str(exe),
        "capture",
        "serve",
        "--upstream",
        f"http://127.0.0.1:{upstream_port}",
        "--port",
        str(port),
        "--admin-port",
        str(admin),
        "--sink",
        "file",
        "--capture-dir",
        str(work / "capture"),
        "--spool-dir",
        str(work / "spool"),
    ]
    if workers != 1:
        cmd += ["--workers", str(workers)]
    log = work / "sidecar.log"
    proc = procs.start(cmd, log, cwd=work)
    admin_url = f"http://127.0.0.1:{admin}"
    wait_http(admin_url + "/readyz", 60, proc, log)
    wait_http(f"http://127.0.0.1:{port}/v1/models", 30, proc, log)
    return Row("sidecar", port, proc, admin_url=admin_url, log=log)


ROUTER_STAT_PREFIX = "http.live.ext_proc.shadow_eval_router."
"""Envoy's counters of the session router's ext_proc filter (stat prefix in
:func:`shadoweval.capture.envoy_config.render_envoy_config`)."""


def envoy_stats(envoy_admin_url: str, prefix: str) -> dict[str, int]:
    """Envoy's counters and gauges whose name starts with ``prefix`` (admin ``/stats``)."""
    import httpx

    data = httpx.get(envoy_admin_url + "/stats", params={"format": "json"}, timeout=10).json()
    out: dict[str, int] = {}
    for stat in data.get("stats", []):
        name, value = stat.get("name", ""), stat.get("value")
        if name.startswith(prefix) and isinstance(value, int):
            out[name.removeprefix(prefix)] = value
    return out


def wait_for(what: str, check: Any, timeout_s: float, proc: Any, log: Path) -> None:
    """Poll ``check()`` until it is true (the process must stay up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited ({proc.returncode}):\n{tail(log)}")
        if check():
            return
        time.sleep(0.1)
    raise SystemExit(f"{what}: not within {timeout_s} s:\n{tail(log)}")


def start_envoy(
    procs: Processes,
    name: str,
    upstream_port: int,
    work: Path,
    cpus: str | None,
    *,
    concurrency: int,
    canary_share: float | None = None,
    router_timeout_ms: int | None = None,
    extra_env: dict[str, str] | None = None,
) -> Row:
    """The Envoy front end (``shadow-eval capture envoy``, file sink), with the canary split
    at ``canary_share`` when given (the benchmark's upstream as both baseline and
    candidate; the split file written before the start, so the front end keeps it).
    ``extra_env``: more ``SHADOWEVAL_*`` settings of the front end (``--envoy-env``)."""
    from shadoweval.capture.canary_split import Split, applied_revision, write_split
    from shadoweval.capture.envoy_config import EnvoyConfigSpec
    from shadoweval.config import CaptureSettings, EnvoyCanarySettings, EnvoySettings

    work = work / name
    work.mkdir(parents=True, exist_ok=True)
    port, admin, envoy_admin = free_port(), free_port(), free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}"
    exe = Path(sys.executable).parent / "shadow-eval"
    cmd = [
        *pin_prefix(cpus),
        str(exe),
        "capture",
        "envoy",
        "--upstream",
        upstream_url,
        "--port",
        str(port),
        "--admin-port",
        str(admin),
        "--ext-proc-port",
        "0",
        "--envoy-admin-port",
        str(envoy_admin),
        "--concurrency",
        str(concurrency),
        "--sink",
        "file",
        "--capture-dir",
        str(work / "capture"),
        "--spool-dir",
        str(work / "spool"),
        "--grace-period",
        "5",
    ]
    settings_env: dict[str, str] = dict(extra_env or {})
    if canary_share is not None:
        split_dir = work / "split"
        canary = EnvoyCanarySettings(candidate_url=upstream_url, split_dir=split_dir, router_port=0)
        if router_timeout_ms is not None:
            canary = canary.model_copy(update={"router_timeout_ms": router_timeout_ms})
        settings_env |= {
            "SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL": canary.candidate_url,
            "SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR": str(split_dir),
            "SHADOWEVAL_ENVOY__CANARY__ROUTER_PORT": "0",
            "SHADOWEVAL_ENVOY__CANARY__ROUTER_TIMEOUT_MS": str(canary.router_timeout_ms),
        }
        # the routes are rendered from the same settings the front end runs with
        spec = EnvoyConfigSpec.from_settings(
            CaptureSettings(upstream_url=upstream_url), EnvoySettings(canary=canary)
        )
        write_split(split_dir, spec, Split(candidate_share=canary_share, revision=1))
    log = work / "front.log"
    proc = procs.start(cmd, log, cwd=work, settings_env=settings_env)
    admin_url, envoy_admin_url = f"http://127.0.0.1:{admin}", f"http://127.0.0.1:{envoy_admin}"
    wait_http(admin_url + "/readyz", 120, proc, log)
    wait_http(f"http://127.0.0.1:{port}/v1/models", 60, proc, log)
    if canary_share is not None:
        wait_for(
            "Envoy serving split revision 1",
            lambda: asyncio.run(applied_revision(envoy_admin_url)) == 1,
            60,
            proc,
            log,
        )
        wait_for(
            "the session router reading split revision 1",
            lambda: total(scrape(admin_url), "shadoweval_canary_split_revision") == 1,
            60,
            proc,
            log,
        )
    return Row(
        name,
        port,
        proc,
        admin_url=admin_url,
        log=log,
        envoy_admin_url=envoy_admin_url,
        canary=canary_share is not None,
        router_timeout_ms=None
        if canary_share is None
        else int(settings_env["SHADOWEVAL_ENVOY__CANARY__ROUTER_TIMEOUT_MS"]),
        router_pid=None if canary_share is None else router_pid(admin_url),
    )


def router_pid(admin_url: str) -> int | None:
    """The session router's process id, from the front end's ``/readyz`` (its
    ``canary_router`` probe: "session router pid N on :PORT ...")."""
    import httpx

    report = httpx.get(admin_url + "/readyz", timeout=10).json()
    detail = str(report.get("checks", {}).get("canary_router", {}).get("detail", ""))
    found = re.search(r"pid (\d+)", detail)
    return int(found.group(1)) if found else None


def router_report(row: Row) -> dict[str, Any]:
    """The canary row's router counters since its start (warm-up included): Envoy's
    ext_proc stats of the router filter and the router's decisions by arm and reason."""
    assert row.envoy_admin_url is not None
    assert row.admin_url is not None
    stats = envoy_stats(row.envoy_admin_url, ROUTER_STAT_PREFIX)
    decisions = {
        f"{labels.get('arm')}/{labels.get('reason')}": int(value)
        for labels, value in scrape(row.admin_url).get("shadoweval_canary_decisions_total", [])
        if value
    }
    live = envoy_stats(row.envoy_admin_url, "http.live.downstream_rq_")
    return {
        "router_timeout_ms": row.router_timeout_ms,
        "envoy_ext_proc": stats,
        "router_decisions": decisions,
        "router_decisions_total": sum(decisions.values()),
        "downstream_requests": live.get("total"),
    }


def start_template(
    procs: Processes, name: str, template: str, upstream_port: int, work: Path, cpus: str | None
) -> Row:
    """Any front end: ``template`` with ``{listen_port}`` and ``{upstream_url}``."""
    port = free_port()
    text = template.format(listen_port=port, upstream_url=f"http://127.0.0.1:{upstream_port}")
    (work / name).mkdir(parents=True, exist_ok=True)
    log = work / name / "stdout.log"
    proc = procs.start([*pin_prefix(cpus), *shlex.split(text)], log, cwd=work / name)
    wait_http(f"http://127.0.0.1:{port}/v1/models", 120, proc, log)
    return Row(name, port, proc, log=log)


def wait_captured(row: Row, timeout_s: float = 60.0) -> None:
    """For the sidecar: wait until every capture so far reached the file sink (or was
    dropped), so the builder's CPU for the round is counted."""
    if row.admin_url is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = scrape(row.admin_url)
        captured = total(m, "shadoweval_capture_captured_total")
        done = total(m, "shadoweval_capture_produced_total") + total(
            m, "shadoweval_capture_dropped_total"
        )
        if done >= captured:
            return
        time.sleep(0.2)


# --------------------------------------------------------------------------- one round


def run_loadgen(
    procs: Processes,
    port: int,
    stream: bool,
    concurrency: int,
    duration_s: float,
    shape: Shape,
    generators: int,
    seed: int,
    work: Path,
    cpus: str | None,
) -> LoadResult:
    """One round: ``generators`` loadgen processes splitting ``concurrency``."""
    outs: list[Path] = []
    started: list[Any] = []
    per = [concurrency // generators + (i < concurrency % generators) for i in range(generators)]
    for i, c in enumerate(per):
        out = work / f"load-{seed}-{i}.json"
        outs.append(out)
        cmd = [
            *pin_prefix(cpus),
            sys.executable,
            str(HERE),
            "--role",
            "loadgen",
            "--target-port",
            str(port),
            "--load-mode",
            "stream" if stream else "nonstream",
            "--load-concurrency",
            str(c),
            "--duration",
            str(duration_s),
            "--response-s",
            str(shape.total_s),
            "--seed",
            str(seed * 100 + i),
            "--out",
            str(out),
        ]
        started.append(procs.start(cmd, work / "loadgen.log"))
    result = LoadResult()
    timeout = duration_s + 4 * shape.total_s + 60
    for proc, out in zip(started, outs, strict=True):
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            procs.stop(proc, 5)
            raise SystemExit(f"load generator hung:\n{tail(work / 'loadgen.log')}") from None
        procs.stop(proc, 5)
        if proc.returncode != 0:
            raise SystemExit(f"load generator failed:\n{tail(work / 'loadgen.log')}")
        part = LoadResult(**json.loads(out.read_text()))
        out.unlink()
        merge(result, part)
    return result


def merge(into: LoadResult, part: LoadResult) -> None:
    for name in ("e2e", "ttft", "req_oneway", "chunk", "loop_lag_ms"):
        getattr(into, name).extend(getattr(part, name))
    into.recorded += part.recorded
    into.sent += part.sent
    into.failures += part.failures
    for k, v in part.failure_kinds.items():
        into.failure_kinds[k] = into.failure_kinds.get(k, 0) + v
    into.cpu_s += part.cpu_s
    into.wall_s = max(into.wall_s, part.wall_s)


# --------------------------------------------------------------------------- statistics


def pct(values: Sequence[float], q: float) -> float:
    import numpy as np

    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def ms(values: Sequence[int]) -> list[float]:
    return [v / 1e6 for v in values]


@dataclass
class Cell:
    """One scenario (mode × concurrency): pooled results and CPU per row."""

    mode: str
    concurrency: int
    loads: dict[str, LoadResult] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    builder_cpu_s: dict[str, float] = field(default_factory=dict)
    envoy_cpu_s: dict[str, float] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)


def cell_report(cell: Cell) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": cell.mode, "concurrency": cell.concurrency, "rows": {}}
    direct = cell.loads["direct"]
    for name, load in cell.loads.items():
        row: dict[str, Any] = {
            "requests": load.recorded,
            "sent": load.sent,
            "failures": load.failures,
            "failure_kinds": load.failure_kinds,
        }
        for metric in ("e2e", "ttft"):
            mine, base = ms(getattr(load, metric)), ms(getattr(direct, metric))
            for q in (50, 99):
                row[f"{metric}_p{q}_ms"] = round(pct(mine, q), 3) if mine else None
                row[f"added_{metric}_p{q}_ms"] = (
                    round(pct(mine, q) - pct(base, q), 3) if mine and base else None
                )
        sent = cell.sent.get(name, 0)
        row["cpu_ms_per_1000_requests"] = (
            round(cell.cpu_s[name] * 1e6 / sent, 1) if name in cell.cpu_s and sent else None
        )
        builder = cell.builder_cpu_s.get(name)
        row["builder_cpu_ms_per_1000_requests"] = (
            round(builder * 1e6 / sent, 1) if builder is not None and sent else None
        )
        row["relay_cpu_ms_per_1000_requests"] = (
            round((cell.cpu_s[name] - (builder or 0.0)) * 1e6 / sent, 1)
            if name in cell.cpu_s and sent
            else None
        )
        own = cell.envoy_cpu_s.get(name)
        row["envoy_process_cpu_ms_per_1000_requests"] = (
            round(own * 1e6 / sent, 1) if own and sent else None
        )
        out["rows"][name] = row
    envoy = cell.loads.get("envoy")
    canary = cell.loads.get("envoy-canary")
    if envoy is not None and canary is not None:  # the session router's cost
        vs: dict[str, Any] = {}
        for metric in ("e2e", "ttft"):
            mine, base = ms(getattr(canary, metric)), ms(getattr(envoy, metric))
            for q in (50, 99):
                vs[f"{metric}_p{q}_ms"] = (
                    round(pct(mine, q) - pct(base, q), 3) if mine and base else None
                )
        sent_c, sent_e = cell.sent.get("envoy-canary", 0), cell.sent.get("envoy", 0)
        if "envoy-canary" in cell.cpu_s and "envoy" in cell.cpu_s and sent_c and sent_e:
            vs["cpu_ms_per_1000_requests"] = round(
                (cell.cpu_s["envoy-canary"] / sent_c - cell.cpu_s["envoy"] / sent_e) * 1e6, 1
            )
        out["canary_vs_envoy"] = vs
    nginx = out["rows"].get("nginx", {}).get("cpu_ms_per_1000_requests")
    for row in out["rows"].values():
        cpu, relay = row["cpu_ms_per_1000_requests"], row["relay_cpu_ms_per_1000_requests"]
        row["cpu_vs_nginx"] = round(cpu / nginx, 2) if cpu and nginx else None
        row["relay_cpu_vs_nginx"] = round(relay / nginx, 2) if relay and nginx else None
    plain = out["rows"].get("envoy-plain", {}).get("cpu_ms_per_1000_requests")
    for row in out["rows"].values():
        cpu, own = row["cpu_ms_per_1000_requests"], row["envoy_process_cpu_ms_per_1000_requests"]
        row["cpu_vs_envoy_plain"] = round(cpu / plain, 2) if cpu and plain else None
        row["envoy_process_cpu_vs_envoy_plain"] = round(own / plain, 2) if own and plain else None
    return out


# --------------------------------------------------------------------------- orchestration


def main_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(stderr=True, width=max(shutil.get_terminal_size().columns, 200))
    log = console.print
    shape = Shape(args.ttft_ms, args.itl_ms[0], args.itl_ms[1], args.events)
    scenarios = [tuple(s.split(":")) for s in args.scenarios]
    cells = [Cell(mode, int(c)) for mode, c in scenarios]
    ncpu = os.cpu_count() or 2
    proxy_cpus = "0" if args.pin else None
    other_cpus = f"1-{ncpu - 1}" if args.pin and ncpu > 1 else None
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp, managed() as procs:
        work = Path(tmp)
        upstream_port = free_port()
        upstream_log = work / "upstream.log"
        upstream = procs.start(
            [
                *pin_prefix(other_cpus),
                sys.executable,
                str(HERE),
                "--role",
                "upstream",
                "--target-port",
                str(upstream_port),
                "--ttft-ms",
                str(shape.ttft_ms),
                "--itl-ms",
                str(shape.itl_min_ms),
                str(shape.itl_max_ms),
                "--events",
                str(shape.events),
            ],
            upstream_log,
        )
        wait_http(f"http://127.0.0.1:{upstream_port}/v1/models", 30, upstream, upstream_log)
        rows = [Row("direct", upstream_port)]
        for name in args.rows:
            if name == "nginx":
                rows.append(start_nginx(procs, upstream_port, work, args.nginx_workers, proxy_cpus))
            elif name == "sidecar":
                rows.append(
                    start_sidecar(procs, upstream_port, work, args.sidecar_workers, proxy_cpus)
                )
            elif name == "envoy-plain":  # the same bootstrap without the capture filter
                variants = HERE.parent / "envoy_variants.py"
                command = f"{sys.executable} {variants} plain {{upstream_url}} {{listen_port}}"
                rows.append(start_template(procs, name, command, upstream_port, work, proxy_cpus))
            elif name in ("envoy", "envoy-canary"):
                canary = name == "envoy-canary"
                rows.append(
                    start_envoy(
                        procs,
                        name,
                        upstream_port,
                        work,
                        proxy_cpus,
                        concurrency=args.envoy_concurrency,
                        canary_share=args.canary_share if canary else None,
                        router_timeout_ms=args.router_timeout_ms if canary else None,
                        extra_env=dict(kv.split("=", 1) for kv in args.envoy_env),
                    )
                )
        for spec in args.proxy:
            name, _, template = spec.partition("=")
            rows.append(start_template(procs, name, template, upstream_port, work, proxy_cpus))
        log(
            "rows: "
            + ", ".join(f"{r.name} :{r.port}" for r in rows)
            + f"; response {shape.ttft_ms:g} ms TTFT + {shape.events} events "
            f"{shape.itl_min_ms:g}-{shape.itl_max_ms:g} ms apart = {shape.total_s * 1000:.0f} ms"
            + (
                f"; pinned: proxies on CPU {proxy_cpus}, upstream + load on {other_cpus}"
                if args.pin
                else ""
            )
        )
        for row in rows[1:]:  # warm-up: pools, the sidecar's builder process
            for stream in (True, False):
                run_loadgen(procs, row.port, stream, 20, 1.0, shape, 1, 999, work, other_cpus)
            wait_captured(row)
            if args.pin and row.admin_url is not None and other_cpus:
                # the relay keeps CPU 0 to itself; its builder runs beside the load
                others = set(range(1, ncpu))
                for pid in builder_pids(row.proc.pid, row.router_pid):
                    os.sched_setaffinity(pid, others)
        for b in range(args.burners):  # the starved machine: spinning, nice 0, until we end
            procs.start([sys.executable, "-c", BURNER], work / f"burner-{b}.log")
        if args.burners:
            log(f"{args.burners} CPU burner(s) running")
        for n, cell in enumerate(cells):
            stream = cell.mode == "stream"
            for r in range(args.rounds):
                order = rows if r % 2 == 0 else list(reversed(rows))
                for k, row in enumerate(order):
                    before = tree_cpu(row.proc.pid) if row.proc is not None else {}
                    load = run_loadgen(
                        procs,
                        row.port,
                        stream,
                        cell.concurrency,
                        args.duration,
                        shape,
                        args.generators,
                        (n + 1) * 1000 + r * 10 + k,
                        work,
                        other_cpus,
                    )
                    if row.proc is not None:
                        wait_captured(row)
                        after = tree_cpu(row.proc.pid)
                        cpu = cpu_delta(after, before)
                        cell.cpu_s[row.name] = cell.cpu_s.get(row.name, 0.0) + cpu
                        own = envoy_pids(list(after))
                        if own:  # the Envoy process(es) of the row, apart
                            cell.envoy_cpu_s[row.name] = cell.envoy_cpu_s.get(
                                row.name, 0.0
                            ) + cpu_delta(
                                {p: v for p, v in after.items() if p in own},
                                {p: v for p, v in before.items() if p in own},
                            )
                        if row.admin_url is not None:  # a capture service: its builder apart
                            pids = builder_pids(row.proc.pid, row.router_pid)
                            built = cpu_delta(
                                {p: v for p, v in after.items() if p in pids},
                                {p: v for p, v in before.items() if p in pids},
                            )
                            cell.builder_cpu_s[row.name] = (
                                cell.builder_cpu_s.get(row.name, 0.0) + built
                            )
                    cell.sent[row.name] = cell.sent.get(row.name, 0) + load.sent
                    merge(cell.loads.setdefault(row.name, LoadResult()), load)
                    e2e = ms(load.e2e)
                    log(
                        f"  {cell.mode:9} c={cell.concurrency:<4} round {r + 1}/{args.rounds} "
                        f"{row.name:10} n={load.recorded:<5} fail={load.failures} "
                        f"e2e p50/p99 {pct(e2e, 50):.1f}/{pct(e2e, 99):.1f} ms"
                    )
        report = {
            "machine": machine_info(),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "pinned": bool(args.pin),
            "burners": args.burners,
            "shape": {**asdict(shape), "response_ms": round(shape.total_s * 1000, 1)},
            "rounds": args.rounds,
            "duration_s_per_round": args.duration,
            "cells": [cell_report(c) for c in cells],
            "wall_s": round(time.time() - started, 1),
            "envoy_env": args.envoy_env,
            "canary": {
                "share": args.canary_share,
                "routers": {r.name: router_report(r) for r in rows if r.canary},
            },
        }
        for row in rows[1:]:
            rc = procs.stop(row.proc)
            log(f"{row.name} exited {rc}")
    print_table(report, console)
    if args.markdown:
        print(markdown(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
        log(f"wrote {args.json}")
    return 0


def machine_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _f(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:.{digits}f}"


HEADERS = [
    "scenario",
    "row",
    "e2e p50 / p99 (ms)",
    "added e2e p50 / p99 (ms)",
    "added TTFT p50 / p99 (ms)",
    "CPU ms / 1k req (all processes)",
    "of which capture builder",
    "CPU × nginx (all / without builder)",
    "requests",
    "failures",
]


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    out: list[list[str]] = []
    for c in report["cells"]:
        scenario = f"{c['mode']} × {c['concurrency']}"
        for name, r in c["rows"].items():
            stream = c["mode"] == "stream"
            out.append(
                [
                    scenario,
                    name,
                    f"{_f(r['e2e_p50_ms'], 1)} / {_f(r['e2e_p99_ms'], 1)}",
                    "–"
                    if name == "direct"
                    else f"{_f(r['added_e2e_p50_ms'])} / {_f(r['added_e2e_p99_ms'])}",
                    "–"
                    if name == "direct" or not stream
                    else f"{_f(r['added_ttft_p50_ms'])} / {_f(r['added_ttft_p99_ms'])}",
                    _f(r["cpu_ms_per_1000_requests"], 0),
                    _f(r["builder_cpu_ms_per_1000_requests"], 0),
                    "–"
                    if r["cpu_vs_nginx"] is None
                    else f"{_f(r['cpu_vs_nginx'], 1)} / {_f(r['relay_cpu_vs_nginx'], 1)}",
                    f"{r['requests']:,}",
                    str(r["failures"]),
                ]
            )
    return out


def print_table(report: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    pinned = " (pinned: proxy on a core of its own)" if report["pinned"] else ""
    table = Table(title=f"proxy overhead (added = row − direct){pinned}")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("scenario", "row") else "right")
    for r in table_rows(report):
        table.add_row(*r)
    console.print(table)


def canary_lines(report: dict[str, Any]) -> list[str]:
    """Markdown: the canary row against the Envoy row, and the router's counters."""
    lines: list[str] = []
    cells = [c for c in report["cells"] if "canary_vs_envoy" in c]
    if cells:
        lines += [
            "",
            "| scenario | envoy-canary − envoy: e2e p50 / p99 (ms) | TTFT p50 / p99 (ms) "
            "| CPU ms / 1k req |",
            "|---|---:|---:|---:|",
        ]
        for c in cells:
            vs = c["canary_vs_envoy"]
            ttft = (
                f"{_f(vs['ttft_p50_ms'])} / {_f(vs['ttft_p99_ms'])}"
                if c["mode"] == "stream"
                else "–"
            )
            lines.append(
                f"| {c['mode']} × {c['concurrency']} | {_f(vs['e2e_p50_ms'])} / "
                f"{_f(vs['e2e_p99_ms'])} | {ttft} | {_f(vs.get('cpu_ms_per_1000_requests'), 0)} |"
            )
    for name, r in report.get("canary", {}).get("routers", {}).items():
        stats = r["envoy_ext_proc"]
        lines += [
            "",
            f"{name} (share {report['canary']['share']}, router_timeout_ms "
            f"{r['router_timeout_ms']}), warm-up included: "
            f"{r['downstream_requests']} requests through Envoy; router filter "
            f"streams_started {stats.get('streams_started')}, message_timeouts "
            f"{stats.get('message_timeouts')}, failure_mode_allowed "
            f"{stats.get('failure_mode_allowed')}, streams_failed "
            f"{stats.get('streams_failed')}; router decisions "
            f"{r['router_decisions_total']} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(r["router_decisions"].items()))
            + ")",
        ]
    return lines


def markdown(report: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|---|---|" + "---:|" * (len(HEADERS) - 2)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(report)]
    lines += canary_lines(report)
    lines += envoy_split_lines(report)
    return "\n".join(lines)


def envoy_split_lines(report: dict[str, Any]) -> list[str]:
    """Markdown: each row with an Envoy process, its CPU split into Envoy's own, the
    capture builder's and the rest (the Python capture service), and × ``envoy-plain``."""
    rows = [
        (f"{c['mode']} × {c['concurrency']}", name, r)
        for c in report["cells"]
        for name, r in c["rows"].items()
        if r.get("envoy_process_cpu_ms_per_1000_requests") is not None
    ]
    if not rows:
        return []
    lines = [
        "",
        "| scenario | row | CPU ms / 1k req (all) | Envoy process | capture builder "
        "| other (Python capture service) | × envoy-plain (all / Envoy process) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for scenario, name, r in rows:
        cpu, own = r["cpu_ms_per_1000_requests"], r["envoy_process_cpu_ms_per_1000_requests"]
        builder = r["builder_cpu_ms_per_1000_requests"] or 0.0
        rest = cpu - own - builder if cpu is not None else None
        ratio = (
            "–"
            if r.get("cpu_vs_envoy_plain") is None
            else f"{_f(r['cpu_vs_envoy_plain'])} / {_f(r['envoy_process_cpu_vs_envoy_plain'])}"
        )
        lines.append(
            f"| {scenario} | {name} | {_f(cpu, 0)} | {_f(own, 0)} | {_f(builder, 0)} "
            f"| {_f(rest, 0)} | {ratio} |"
        )
    return lines


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 3 s per row")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per row per scenario")
    parser.add_argument("--duration", type=float, default=6.0, help="measured s per round")
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["stream:50", "stream:200", "nonstream:200"],
        help="MODE:CLIENTS, MODE stream or nonstream",
    )
    parser.add_argument(
        "--rows",
        nargs="*",
        default=["nginx", "sidecar"],
        choices=["nginx", "sidecar", "envoy", "envoy-canary", "envoy-plain"],
    )
    parser.add_argument(
        "--proxy",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="another front end as a row; COMMAND may use {listen_port} and {upstream_url}",
    )
    parser.add_argument("--nginx-workers", type=int, default=1)
    parser.add_argument(
        "--envoy-concurrency", type=int, default=1, help="Envoy worker threads (envoy rows)"
    )
    parser.add_argument(
        "--canary-share",
        type=float,
        default=0.5,
        help="the candidate's share of the envoy-canary row's split (0..1)",
    )
    parser.add_argument(
        "--router-timeout-ms",
        type=int,
        default=None,
        help="envoy.canary.router_timeout_ms of the envoy-canary row (default: the product's)",
    )
    parser.add_argument(
        "--envoy-env",
        action="append",
        default=[],
        metavar="SHADOWEVAL_KEY=VALUE",
        help="a setting of both envoy rows, e.g. SHADOWEVAL_ENVOY__CAPTURE_NICE=0",
    )
    parser.add_argument("--sidecar-workers", type=int, default=1)
    parser.add_argument(
        "--burners", type=int, default=0, help="CPU burner processes (a starved machine)"
    )
    parser.add_argument(
        "--pin", action="store_true", help="proxies on CPU 0, upstream + load on the others"
    )
    parser.add_argument("--generators", type=int, default=1, help="loadgen processes")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, nargs=2, default=[20.0, 50.0])
    parser.add_argument("--events", type=int, default=20, help="content events per stream")
    parser.add_argument("--json", help="write the full report here")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    # internal roles
    parser.add_argument("--role", choices=["run", "upstream", "loadgen"], default="run")
    parser.add_argument("--target-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--load-mode", help=argparse.SUPPRESS)
    parser.add_argument("--load-concurrency", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--response-s", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for kv in args.envoy_env:
        if not kv.startswith("SHADOWEVAL_") or "=" not in kv:
            parser.error(f"--envoy-env {kv!r}: expected SHADOWEVAL_KEY=VALUE")

    if args.role == "upstream":
        shape = Shape(args.ttft_ms, args.itl_ms[0], args.itl_ms[1], args.events)
        asyncio.run(serve_upstream(args.target_port, shape))
        return 0
    if args.role == "loadgen":
        result = asyncio.run(
            run_load(
                "127.0.0.1",
                args.target_port,
                args.load_mode == "stream",
                args.load_concurrency,
                args.duration,
                args.response_s,
                args.seed,
            )
        )
        Path(args.out).write_text(json.dumps(asdict(result)))
        return 0
    if args.quick:
        args.rounds, args.duration = 1, 3.0
    return main_run(args)


if __name__ == "__main__":
    sys.exit(main())
