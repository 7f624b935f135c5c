"""The capture sidecar's live port under hostile and long-running traffic (docs/reliability.md).

Usage::

    .venv/bin/python benchmarks/live_port_reliability.py [--duration-s 300] [--rate 20]
        [--slow 500] [--large 8] [--large-mb 50]

Starts ``shadow-eval capture serve`` (defaults, file sink) in front of a uvicorn upstream
with uvicorn's default 5 s keep-alive timeout (vLLM's and SGLang's servers are uvicorn), and
measures, printing one table:

* **stale keep-alives**: ``--rate`` requests/s (Poisson arrivals, half streamed, half not)
  for ``--duration-s`` through the sidecar and, at the same time and schedule, directly to
  the upstream (the control); every request that does not get a complete 200 is a failure.
  The gaps between requests fall on both sides of every keep-alive timeout.
* **slow connections**: ``--slow`` connections that send half a request line and stop
  (slowloris); how many the sidecar closed, and when (``header_read_timeout_s``, 10 s).
* **large bodies**: ``--large`` concurrent ``--large-mb`` MB bodies, with ``Content-Length``
  and chunked; the statuses and the sidecar's RSS (its process tree, ``VmRSS``).
* **path traversal**: with ``--upstream http://host/base`` in front of a static file server
  (Python's ``http.server``, which resolves dot segments), ``GET /../secret.txt`` and
  encoded variants through the sidecar, and the same target directly (the control shows the
  file would leak if the sidecar normalised or forwarded it).
* ``OPTIONS *``, ``GET *`` and an HTTP/1.0 client that half-closes after sending.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from shadoweval.serving import BackgroundServer


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A tiny OpenAI-shaped upstream: ``?stream=1`` sends 5 SSE events 10 ms apart."""
    import asyncio

    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    if b"stream=1" in scope["query_string"]:
        await send(
            {"type": "http.response.start", "status": 200,
             "headers": [(b"content-type", b"text/event-stream")]}
        )  # fmt: skip
        for i in range(5):
            await asyncio.sleep(0.01)
            data = b'data: {"i": %d}\n\n' % i
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
        return
    body = json.dumps({"object": "chat.completion", "choices": [{"index": 0}]}).encode()
    await send(
        {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json")]}
    )  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def sidecar(upstream_url: str, work: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port, admin = free_port(), free_port()
    exe = Path(sys.executable).parent / "shadow-eval"
    cmd = [
        str(exe), "capture", "serve", "--upstream", upstream_url, "--port", str(port),
        "--admin-port", str(admin), "--sink", "file", "--capture-dir", str(work / "capture"),
        "--spool-dir", str(work / "spool"),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
    work.mkdir(parents=True, exist_ok=True)
    log = (work / "sidecar.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{admin}/readyz", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((work / "sidecar.log").read_text())
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        log.close()


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children, MB."""
    total = 0
    pids = [pid]
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[1]) == pid:
                        pids.append(int(entry.name))
    for p in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def stale_keepalive(proxy: str, direct: str, rate: float, duration_s: float) -> dict[str, Any]:
    """Same Poisson schedule to both targets; failures per target."""
    rng = random.Random(12)
    results: dict[str, list[int]] = {"sidecar": [0, 0], "direct": [0, 0]}  # [sent, failed]
    lock = threading.Lock()
    clients = {
        name: httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_connections=64))
        for name, url in (("sidecar", proxy), ("direct", direct))
    }

    def one(name: str, stream: bool) -> None:
        ok = False
        try:
            if stream:
                with clients[name].stream(
                    "POST", "/v1/chat/completions?stream=1", content=b"{}"
                ) as r:
                    ok = r.status_code == 200 and r.read().endswith(b"data: [DONE]\n\n")
            else:
                r = clients[name].post("/v1/chat/completions", content=b"{}")
                ok = r.status_code == 200 and b"chat.completion" in r.content
        except httpx.HTTPError:
            ok = False
        with lock:
            results[name][0] += 1
            results[name][1] += 0 if ok else 1

    end = time.monotonic() + duration_s
    with ThreadPoolExecutor(64) as pool:
        while time.monotonic() < end:
            stream = rng.random() < 0.5
            for name in clients:
                pool.submit(one, name, stream)
            time.sleep(rng.expovariate(rate))
    for client in clients.values():
        client.close()
    return {name: {"sent": s, "failed": f} for name, (s, f) in results.items()}


def slow_connections(proxy: str, n: int) -> dict[str, Any]:
    host, port = proxy.removeprefix("http://").split(":")
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        socks.append(sock)
    t0 = time.monotonic()
    closed_at: list[float] = []
    for sock in socks:
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass
        closed_at.append(time.monotonic() - t0)
        sock.close()
    return {"connections": n, "closed": len(closed_at), "last_closed_after_s": max(closed_at)}


def large_bodies(proxy: str, pid: int, n: int, mb: int) -> dict[str, Any]:
    before = rss_mb(pid)
    peak = [before]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(pid))
            time.sleep(0.05)

    def send(chunked: bool) -> int:
        data = b"x" * (1024 * 1024)

        def pieces() -> Iterator[bytes]:
            for _ in range(mb):
                yield data

        try:
            content: Any = pieces() if chunked else data * mb
            return httpx.post(
                f"{proxy}/v1/chat/completions", content=content, timeout=120
            ).status_code
        except httpx.HTTPError as exc:  # the sidecar may close while a body is still sent
            return -1 if "413" not in str(exc) else 413

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with ThreadPoolExecutor(n) as pool:
        statuses = list(pool.map(send, [i % 2 == 1 for i in range(n)]))
    stop.set()
    watcher.join()
    return {"statuses": statuses, "rss_before_mb": round(before), "rss_peak_mb": round(peak[0])}


def traversal(work: Path) -> dict[str, Any]:
    root = work / "www"
    (root / "base").mkdir(parents=True)
    (root / "base" / "ok.txt").write_text("inside")
    (root / "secret.txt").write_text("TOP-SECRET")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    up = f"http://127.0.0.1:{server.server_address[1]}"
    targets = ["/../secret.txt", "/%2e%2e/secret.txt", "/..%2fsecret.txt", "/ok.txt"]
    out: dict[str, Any] = {}
    try:
        with sidecar(up + "/base", work / "traversal") as (proxy, _):
            host, port = proxy.removeprefix("http://").split(":")
            for target in targets:
                out[target] = raw_get((host, int(port)), target)
        host, port = up.removeprefix("http://").split(":")
        out["direct /base/../secret.txt"] = raw_get((host, int(port)), "/base/../secret.txt")
    finally:
        server.shutdown()
    return out


def raw_get(addr: tuple[str, int], target: str, version: str = "1.1") -> str:
    with socket.create_connection(addr, timeout=30) as sock:
        sock.sendall(
            f"GET {target} HTTP/{version}\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = data.split(b"\r\n", 1)[0].decode()
    return f"{status}{' (SECRET LEAKED)' if b'TOP-SECRET' in data else ''}"


def odd_requests(proxy: str) -> dict[str, str]:
    host, port = proxy.removeprefix("http://").split(":")
    addr = (host, int(port))
    out = {}
    for line in ("OPTIONS * HTTP/1.1", "GET * HTTP/1.1"):
        with socket.create_connection(addr, timeout=30) as sock:
            sock.sendall(f"{line}\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            out[line] = sock.recv(65536).split(b"\r\n", 1)[0].decode()
    with socket.create_connection(addr, timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}")
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        out["HTTP/1.0 + half-close"] = data.split(b"\r\n", 1)[0].decode()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=300.0)
    parser.add_argument("--rate", type=float, default=20.0, help="requests/s per target")
    parser.add_argument("--slow", type=int, default=500)
    parser.add_argument("--large", type=int, default=8)
    parser.add_argument("--large-mb", type=int, default=50)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="live-port-") as tmp,
        BackgroundServer(upstream_app, start_timeout_s=60) as upstream,
    ):  # uvicorn defaults: 5 s keep-alive
        work = Path(tmp)
        with sidecar(upstream.url, work / "main") as (proxy, proc):
            report["odd requests"] = odd_requests(proxy)
            report["slow connections"] = slow_connections(proxy, args.slow)
            report["large bodies"] = large_bodies(proxy, proc.pid, args.large, args.large_mb)
            report["stale keep-alives"] = stale_keepalive(
                proxy, upstream.url, args.rate, args.duration_s
            )
        report["path traversal"] = traversal(work)
    report["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
