"""Replay throughput: the candidate client against an instant endpoint in another process.

Endpoints (``--upstreams``, rows interleaved over them):

* ``nginx``: Debian's ``/usr/sbin/nginx`` (one worker, run non-daemon from a config in a
  temporary directory) answering every POST at once with a fixed ``chat.completion`` JSON
  (``/ns/v1/chat/completions``) or a fixed 24-event SSE stream (``/s/v1/chat/completions``,
  ``text/event-stream``) — the whole stream in **one write**, so the client usually reads
  it in one piece;
* ``events``: a raw-asyncio HTTP/1.1 server in a child process (no nginx needed) with the
  same bodies, the stream sent chunked, **one write per SSE event** (each a ``send`` of its
  own: TCP_NODELAY, the loop yielded between events), as a model server streams — the
  client pays its per-read and per-event cost for every event.

JSON rows run against the first upstream listed only (both send it in one write). Rows:
the old path (httpx ``AsyncHTTPTransport``, given as ``transport=``) and the new default path
(:mod:`shadoweval.http1`), non-streamed and streamed, at each concurrency, interleaved.
Columns: replays/s, client CPU ms/replay (``getrusage`` of this process), server CPU
ms/replay (the nginx worker's utime+stime from ``/proc/<pid>/stat``).

Usage::

    PYTHONPATH=. python -m benchmarks.replay_throughput \\
        [--requests 2000] [--concurrency 32,256,1024] [--upstreams nginx,events]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from shadoweval.capture_log import LogEntry
from shadoweval.records import (
    Exchange,
    HeaderPair,
    ModelIdentity,
    ReplayTarget,
    RequestRecord,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.rewrite import ReplayRequest
from shadoweval.replay.runner import ReplayRunner, TargetSpec
from shadoweval.storage import Database, Repository

EVENTS = 24
_CLK = os.sysconf("SC_CLK_TCK")


def _bodies() -> tuple[bytes, bytes]:
    completion = orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello " * 20},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
        }
    )
    events = []
    for i in range(EVENTS):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": f"tok{i} "}
        finish = "stop" if i == EVENTS - 1 else None
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return completion, b"".join(events)


def _nginx_string(body: bytes) -> str:
    text = body.decode()
    assert "'" not in text
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def start_nginx(tmp: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start nginx; returns (master process, port, worker pid)."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    completion, sse = _bodies()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = f"""
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    keepalive_requests 10000000;
    keepalive_timeout 65s;
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location /ns/ {{ default_type application/json; return 200 '{_nginx_string(completion)}'; }}
        location /s/ {{ default_type text/event-stream; return 200 '{_nginx_string(sse)}'; }}
    }}
}}
"""
    (tmp / "nginx.conf").write_text(conf)
    proc = subprocess.Popen([nginx, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)])
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("nginx did not start") from None
            time.sleep(0.05)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return proc, port, int(children[0])


def _serve_events(sock: socket.socket, completion: bytes, events: list[bytes]) -> None:
    """The ``events`` upstream (child process): every POST answered at once, the SSE
    stream chunked with one write per event (module docstring)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                if head.split(b" ", 2)[1].startswith(b"/s/"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n"
                    )
                    for event in events:
                        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                        await writer.drain()
                        await asyncio.sleep(0)  # the next event is a send of its own
                    writer.write(b"0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(completion), completion)
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, sock=sock, limit=1 << 20)
        await server.serve_forever()

    asyncio.run(serve())


def start_events_upstream() -> tuple[multiprocessing.process.BaseProcess, int, int]:
    """Start the ``events`` upstream; returns (process, port, its pid)."""
    completion, sse = _bodies()
    events = [e + b"\n\n" for e in sse.split(b"\n\n") if e]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)  # before the fork: connections wait in the backlog until it serves
    proc = multiprocessing.get_context("fork").Process(
        target=_serve_events, args=(sock, completion, events), daemon=True
    )
    proc.start()
    port = sock.getsockname()[1]
    sock.close()
    assert proc.pid is not None
    return proc, port, proc.pid


def _server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK


def _client_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _one_row(
    base_url: str, old: bool, stream: bool, concurrency: int, n: int, warm: bool
) -> tuple[float, int]:
    transport = None
    if old:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        transport = httpx.AsyncHTTPTransport(limits=limits)
    body = orjson.dumps(
        {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    )
    req = ReplayRequest(
        exchange_id="bench",
        path="/v1/chat/completions",
        body=body,
        headers={"content-type": "application/json"},
        stream=stream,
    )
    errors = 0
    remaining = n

    async with CandidateClient(
        base_url, max_connections=concurrency, transport=transport, connect_retries=0
    ) as client:

        async def worker() -> None:
            nonlocal remaining, errors
            while remaining > 0:
                remaining -= 1
                result = await client.send(req)
                if (
                    result.error_kind is not None
                    or result.response is None
                    or not (result.response.text or "").startswith(("hello", "tok1"))
                ):
                    errors += 1

        if warm:  # one untimed request per worker first: every connection is open
            await asyncio.gather(*(client.send(req) for _ in range(concurrency)))
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return elapsed, errors


async def _runner_row(
    base_url: str, stream: bool, concurrency: int, n: int, db_dir: Path
) -> tuple[float, int]:
    """The product path: :class:`ReplayRunner` over ``n`` exchanges into a SQLite store."""
    db = Database(f"sqlite:///{db_dir / f'runner-{stream}-{concurrency}.db'}")
    db.upgrade()
    repo = Repository(db)
    baseline, cand = ModelIdentity(name="baseline"), ModelIdentity(name="bench")
    run_id = repo.create_run(
        name="bench",
        baseline=baseline,
        candidate=cand,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id
    body = orjson.dumps(
        {"model": "baseline", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    ).decode()
    entries = [
        LogEntry(
            f"mem:{i}",
            "",
            exchange=Exchange(
                route="/v1/chat/completions",
                task_type="default",
                request=RequestRecord(
                    path="/v1/chat/completions",
                    headers=(HeaderPair(name="content-type", value="application/json"),),
                    body=body,
                ),
                baseline_model=baseline,
            ),
        )
        for i in range(n)
    ]
    client = CandidateClient(base_url, max_connections=concurrency, connect_retries=0)
    target = TargetSpec(ReplayTarget.CANDIDATE, client, cand, model_name="bench", api_key="k")
    async with client:
        runner = ReplayRunner(repo, run_id, [target], concurrency=concurrency, progress=False)
        start = time.perf_counter()
        report = await runner.run(entries)
        elapsed = time.perf_counter() - start
    db.dispose()
    failed = n - sum(report.ok.values())
    return elapsed, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", default="32,256,1024")
    parser.add_argument(
        "--upstreams",
        default="nginx,events",
        help="comma-separated: nginx (whole stream in one write), events (one write per "
        "SSE event, no nginx needed)",
    )
    parser.add_argument("--runner", action="store_true", help="add ReplayRunner rows")
    parser.add_argument("--only-runner", action="store_true", help="ReplayRunner rows only")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="open every connection with one untimed request per worker before timing "
        "(steady state; CPU columns then include the warm-up requests' share)",
    )
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    names = [u for u in args.upstreams.split(",") if u]
    if not names or set(names) - {"nginx", "events"}:
        parser.error(f"--upstreams: nginx and/or events, not {args.upstreams!r}")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmpdir, contextlib.ExitStack() as stack:
        upstreams: dict[str, tuple[int, int]] = {}  # name -> (port, server pid)
        for name in names:
            if name == "nginx":
                proc, port, pid = start_nginx(Path(tmpdir))
                stack.callback(proc.wait, timeout=10)
                stack.callback(proc.terminate)
            else:
                child, port, pid = start_events_upstream()
                stack.callback(child.join, timeout=10)
                stack.callback(child.terminate)
            upstreams[name] = (port, pid)
        print(f"load before: {os.getloadavg()[0]:.2f} (1-min), cpus {os.cpu_count()}")
        print(
            "| client | upstream | body | concurrency | replays/s | client CPU ms/replay "
            "| server CPU ms/replay | errors |"
        )
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for concurrency in levels if not args.only_runner else ():
            for stream in (False, True):
                for name in names if stream else names[:1]:
                    port, pid = upstreams[name]
                    for old in (True, False):
                        base = f"http://127.0.0.1:{port}/{'s' if stream else 'ns'}"
                        n = args.requests if not stream else args.requests // 2
                        c0, s0 = _client_cpu_s(), _server_cpu_s(pid)
                        elapsed, errors = asyncio.run(
                            _one_row(base, old, stream, concurrency, n, args.warm)
                        )
                        c1, s1 = _client_cpu_s(), _server_cpu_s(pid)
                        _print_row(
                            "httpx (old)" if old else "http1 (new)", name, stream,
                            concurrency, n, elapsed, c1 - c0, s1 - s0, errors,
                        )  # fmt: skip
        if args.runner or args.only_runner:
            for concurrency in levels:
                for stream in (False, True):
                    for name in names if stream else names[:1]:
                        port, pid = upstreams[name]
                        base = f"http://127.0.0.1:{port}/{'s' if stream else 'ns'}"
                        n = args.requests if not stream else args.requests // 2
                        c0, s0 = _client_cpu_s(), _server_cpu_s(pid)
                        elapsed, failed = asyncio.run(
                            _runner_row(base, stream, concurrency, n, Path(tmpdir))
                        )
                        c1, s1 = _client_cpu_s(), _server_cpu_s(pid)
                        _print_row(
                            "ReplayRunner + SQLite (new)", name, stream,
                            concurrency, n, elapsed, c1 - c0, s1 - s0, failed,
                        )  # fmt: skip
        print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")


def _print_row(
    client: str,
    upstream: str,
    stream: bool,
    concurrency: int,
    n: int,
    elapsed_s: float,
    client_cpu_s: float,
    server_cpu_s: float,
    errors: int,
) -> None:
    writes = "1 write" if upstream == "nginx" else f"{EVENTS + 1} writes"
    body = f"stream {EVENTS} ev, {writes}" if stream else "json"
    print(
        f"| {client} | {upstream} | {body} | {concurrency} | {n / elapsed_s:,.0f} "
        f"| {client_cpu_s * 1e3 / n:.2f} | {server_cpu_s * 1e3 / n:.3f} | {errors} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
