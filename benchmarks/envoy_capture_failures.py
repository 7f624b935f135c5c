"""Latency the Envoy front end adds when its capture service is healthy, hung or stopped.

Usage::

    .venv/bin/python benchmarks/envoy_capture_failures.py [--rounds 4] [--concurrency 50]
        [--requests 4] [--json out.json]

One run: a warm-up burst per row (not recorded), then rows interleaved round by round,
the order rotated each round (direct, healthy, hung, stopped; healthy, hung, stopped,
direct; …), so machine noise and ordering hit every row alike; *added* = the row's
percentile − direct's, pooled over the rounds:

* **upstream** (in this process): a raw-asyncio SSE server; every response is headers at
  once, the first event after ``--ttft-ms``, ``--events`` more ``--itl-ms`` apart (an
  absolute schedule from when it read the request), ``data: [DONE]``, the chunked end.
* **direct**: clients talk to the upstream.
* **healthy**: ``shadow-eval capture envoy --upstream URL --port P …`` as an operator runs
  it (the capture service with the file sink, Envoy as its child).
* **hung**: Envoy with the same rendered config, its ext_proc cluster pointing at a gRPC
  server (in this process) that accepts every stream and never reads it.
* **stopped**: Envoy with its ext_proc cluster pointing at a closed port.

Every Envoy runs ``--concurrency 1`` (one worker thread). Clients: ``--concurrency``
closed-loop clients, one keep-alive connection each, on a lean asyncio HTTP/1.1 client;
per request the end-to-end latency and TTFT (first SSE event). A request that fails or
whose body differs from the upstream's is a live failure. After the run the capture
service's ``/metrics`` and each Envoy's ext_proc counters are read: nothing lost beyond
what is counted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from shadoweval.capture.envoy_config import EnvoyConfigSpec, find_envoy_binary, render_envoy_config
from shadoweval.capture.envoy_process import EnvoyProcess

ROUTE = "/v1/chat/completions"
REQUEST = b'{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}'
_now = time.perf_counter


# --------------------------------------------------------------------------- upstream


class Upstream(asyncio.Protocol):
    """One connection of the SSE upstream (keep-alive; one request at a time)."""

    def __init__(self, ttft_s: float, itl_s: float, events: int) -> None:
        self.ttft_s, self.itl_s, self.events = ttft_s, itl_s, events
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        match = re.search(rb"content-length:\s*(\d+)", head)
        length = int(match.group(1)) if match else 0
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length :]
        self._respond()

    def _respond(self) -> None:
        t = self.transport
        assert t is not None
        t.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(self.events):
            event = b'data: {"choices":[{"delta":{"content":"tok%d "}}]}\n\n' % i
            loop.call_at(start + self.ttft_s + i * self.itl_s, self._chunk, event)
        loop.call_at(start + self.ttft_s + self.events * self.itl_s, self._end)

    def _end(self) -> None:  # one callback: timers due at the same moment have no order
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        t = self.transport
        if t is None or t.is_closing():
            return
        t.write(b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n")


# --------------------------------------------------------------------------- client


class RequestFailedError(Exception):
    """A live request failed (status, connection, or body)."""


async def one_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
) -> tuple[float, float, bytes]:
    """Send one request on a keep-alive connection; ``(e2e_s, ttft_s, body)``."""
    t0 = _now()
    writer.write(
        b"POST %s HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (ROUTE.encode(), port, len(REQUEST), REQUEST)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RequestFailedError(head[:40].decode(errors="replace"))
    body = bytearray()
    ttft = 0.0
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            break
        piece = await reader.readexactly(size + 2)
        if not ttft:
            ttft = _now() - t0
        body += piece[:-2]
    return _now() - t0, ttft, bytes(body)


@dataclass
class Samples:
    e2e_s: list[float] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    failures: int = 0
    wrong_body: int = 0


async def client(port: int, n: int, expected: bytes | None, out: Samples) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = b""
    try:
        for _ in range(n):
            try:
                e2e, ttft, body = await one_request(reader, writer, port)
            except (RequestFailedError, OSError, asyncio.IncompleteReadError, ValueError):
                out.failures += 1
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            if expected is not None and body != expected:
                out.wrong_body += 1
            out.e2e_s.append(e2e)
            out.ttft_s.append(ttft)
    finally:
        writer.close()
    return body


# --------------------------------------------------------------------------- rows


class HungProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Accepts every ext_proc stream and never reads it."""

    async def Process(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        await asyncio.Event().wait()
        yield  # pragma: no cover


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def bare_envoy(upstream_url: str, ext_proc_port: int, work: Path) -> EnvoyProcess:
    spec = EnvoyConfigSpec(
        upstream_url=upstream_url, listen_port=0, ext_proc_port=ext_proc_port, admin_port=0
    )
    proc = EnvoyProcess(
        find_envoy_binary(),
        render_envoy_config(spec),
        work,
        concurrency=1,
        log_path=work / "envoy.log",
    )
    await proc.start()
    return proc


async def start_front_end(
    upstream_url: str, work: Path
) -> tuple[subprocess.Popen[bytes], int, str]:
    """``shadow-eval capture envoy`` as an operator runs it; (process, live port, admin URL)."""
    port = free_port()
    log = work / "front.log"
    cmd = [
        sys.executable, "-m", "shadoweval.cli", "capture", "envoy",
        "--upstream", upstream_url, "--port", str(port), "--admin-port", "0",
        "--ext-proc-port", "0", "--envoy-admin-port", "0", "--concurrency", "1",
        "--capture-dir", str(work / "capture"), "--grace-period", "5",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
    with log.open("wb") as err:
        proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before any load)
            cmd, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    deadline = time.monotonic() + 120
    while "ready" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("front end did not start:\n" + log.read_text(errors="replace"))
        await asyncio.sleep(0.1)
    text = log.read_text(errors="replace").replace("\n", " ")
    match = re.search(r"admin (http://127\.0\.0\.1:\d+); sinks", text)
    assert match, text
    return proc, port, match.group(1)


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Upstream(args.ttft_ms / 1000, args.itl_ms / 1000, args.events), "127.0.0.1", 0
    )
    up_port = server.sockets[0].getsockname()[1]
    upstream_url = f"http://127.0.0.1:{up_port}"
    hung = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(HungProcessor(), hung)
    hung_port = hung.add_insecure_port("127.0.0.1:0")
    await hung.start()
    closed_port = free_port()
    tmp = tempfile.TemporaryDirectory(prefix="envoy-failures-bench-")
    work = Path(tmp.name)
    (work / "hung").mkdir()
    (work / "stopped").mkdir()
    front, front_port, admin_url = await start_front_end(upstream_url, work)
    envoys = {
        "hung": await bare_envoy(upstream_url, hung_port, work / "hung"),
        "stopped": await bare_envoy(upstream_url, closed_port, work / "stopped"),
    }
    ports = {
        "direct": up_port,
        "healthy": front_port,
        "hung": envoys["hung"].listen_port or 0,
        "stopped": envoys["stopped"].listen_port or 0,
    }
    expected_holder = Samples()
    expected = await client(up_port, 1, None, expected_holder)
    samples = {row: Samples() for row in ports}
    order = list(ports)
    try:
        for row in order:  # warm-up, not recorded: connections, Envoy's pools, the service
            await asyncio.gather(
                *(client(ports[row], 1, expected, Samples()) for _ in range(args.concurrency))
            )
        for r in range(args.rounds):
            for row in order[r % len(order) :] + order[: r % len(order)]:  # rotate the order
                await asyncio.gather(
                    *(
                        client(ports[row], args.requests, expected, samples[row])
                        for _ in range(args.concurrency)
                    )
                )
        async with httpx.AsyncClient(timeout=30) as http:
            metrics = (await http.get(admin_url + "/metrics")).text
        envoy_stats = {row: await p.stats("http.live.ext_proc.") for row, p in envoys.items()}
    finally:
        front.send_signal(signal.SIGTERM)
        front.wait(120)
        for p in envoys.values():
            await p.stop()
        await hung.stop(0)
        server.close()
        tmp.cleanup()
    captured = sum(
        float(m.group(1))
        for m in re.finditer(r"shadoweval_capture_captured_total\{[^}]*\} ([0-9.e+]+)", metrics)
    )
    direct = samples["direct"]
    rows = []
    for row, s in samples.items():
        rows.append(
            {
                "row": row,
                "requests": len(s.e2e_s) + s.failures,
                "failures": s.failures,
                "wrong_body": s.wrong_body,
                "e2e_p50_ms": pct(s.e2e_s, 0.5) * 1000,
                "e2e_p99_ms": pct(s.e2e_s, 0.99) * 1000,
                "added_e2e_p50_ms": (pct(s.e2e_s, 0.5) - pct(direct.e2e_s, 0.5)) * 1000,
                "added_e2e_p99_ms": (pct(s.e2e_s, 0.99) - pct(direct.e2e_s, 0.99)) * 1000,
                "added_ttft_p50_ms": (pct(s.ttft_s, 0.5) - pct(direct.ttft_s, 0.5)) * 1000,
                "added_ttft_p99_ms": (pct(s.ttft_s, 0.99) - pct(direct.ttft_s, 0.99)) * 1000,
            }
        )
    return {
        "args": vars(args),
        "rows": rows,
        "healthy_captured_total": captured,
        "envoy_ext_proc": envoy_stats,
    }


def print_table(result: dict[str, Any]) -> None:
    cols = (
        "row", "requests", "failures", "wrong_body", "e2e_p50_ms", "e2e_p99_ms",
        "added_e2e_p50_ms", "added_e2e_p99_ms", "added_ttft_p50_ms", "added_ttft_p99_ms",
    )  # fmt: skip
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in result["rows"]:
        cells = [f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols]
        print("| " + " | ".join(cells) + " |")
    print(f"\nhealthy: exchanges captured by the service: {result['healthy_captured_total']:.0f}")
    for row, stats in result["envoy_ext_proc"].items():
        keep = ("streams_started", "streams_failed", "failure_mode_allowed", "streams_closed")
        shown = {k.rsplit(".", 1)[1]: v for k, v in stats.items() if k.rsplit(".", 1)[1] in keep}
        print(f"{row}: Envoy ext_proc {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--requests", type=int, default=4, help="per client per round")
    parser.add_argument("--ttft-ms", type=float, default=100.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print_table(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
