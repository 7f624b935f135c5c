"""Replay throughput: the candidate client against an instant endpoint in another process.

The endpoint is nginx (Debian's ``/usr/sbin/nginx``, one worker, run non-daemon from a
config in a temporary directory) answering every POST at once with a fixed
``chat.completion`` JSON (``/ns/v1/chat/completions``) or a fixed 24-event SSE stream
(``/s/v1/chat/completions``, ``text/event-stream``). Rows: the old path (httpx
``AsyncHTTPTransport``, given as ``transport=``) and the new default path
(:mod:`shadoweval.http1`), non-streamed and streamed, at each concurrency, interleaved.
Columns: replays/s, client CPU ms/replay (``getrusage`` of this process), server CPU
ms/replay (the nginx worker's utime+stime from ``/proc/<pid>/stat``).

Usage::

    PYTHONPATH=. python -m benchmarks.replay_throughput \\
        [--requests 2000] [--concurrency 32,256,1024]
"""

from __future__ import annotations

import argparse
import asyncio
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
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmpdir:
        proc, port, worker_pid = start_nginx(Path(tmpdir))
        try:
            print(f"load before: {os.getloadavg()[0]:.2f} (1-min), cpus {os.cpu_count()}")
            print(
                "| client | body | concurrency | replays/s | client CPU ms/replay "
                "| server CPU ms/replay | errors |"
            )
            print("|---|---|---:|---:|---:|---:|---:|")
            for concurrency in levels if not args.only_runner else ():
                for stream in (False, True):
                    for old in (True, False):
                        base = f"http://127.0.0.1:{port}/{'s' if stream else 'ns'}"
                        n = args.requests if not stream else args.requests // 2
                        c0, s0 = _client_cpu_s(), _server_cpu_s(worker_pid)
                        elapsed, errors = asyncio.run(
                            _one_row(base, old, stream, concurrency, n, args.warm)
                        )
                        c1, s1 = _client_cpu_s(), _server_cpu_s(worker_pid)
                        print(
                            f"| {'httpx (old)' if old else 'http1 (new)'} "
                            f"| {'stream 24 ev' if stream else 'json'} | {concurrency} "
                            f"| {n / elapsed:,.0f} | {(c1 - c0) * 1e3 / n:.2f} "
                            f"| {(s1 - s0) * 1e3 / n:.3f} | {errors} |",
                            flush=True,
                        )
            if args.runner or args.only_runner:
                for concurrency in levels:
                    for stream in (False, True):
                        base = f"http://127.0.0.1:{port}/{'s' if stream else 'ns'}"
                        n = args.requests if not stream else args.requests // 2
                        c0, s0 = _client_cpu_s(), _server_cpu_s(worker_pid)
                        elapsed, failed = asyncio.run(
                            _runner_row(base, stream, concurrency, n, Path(tmpdir))
                        )
                        c1, s1 = _client_cpu_s(), _server_cpu_s(worker_pid)
                        print(
                            f"| ReplayRunner + SQLite (new) "
                            f"| {'stream 24 ev' if stream else 'json'} | {concurrency} "
                            f"| {n / elapsed:,.0f} | {(c1 - c0) * 1e3 / n:.2f} "
                            f"| {(s1 - s0) * 1e3 / n:.3f} | {failed} |",
                            flush=True,
                        )
            print(f"load after: {os.getloadavg()[0]:.2f} (1-min)")
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
