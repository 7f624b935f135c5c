"""``shadow-eval capture serve`` as operators run it: SIGTERM drains in-flight streams,
flushes the tee and exits 0; ``/healthz``, ``/readyz`` and ``/metrics`` answer."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shadoweval.capture_log import read_capture_log
from shadoweval.process_death import die_with_parent_argv
from shadoweval.records import ExchangeOutcome
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm.app import create_app
from shadoweval.simulation.mock_llm.faults import FaultConfig
from shadoweval.simulation.mock_llm.latency import FixedLatency
from shadoweval.tables import RecordedRow
from tests.kafka_broker import free_port
from tests.waiting import wait_until


@pytest.fixture
def slow_live_model(alpaca_rows: list[RecordedRow]) -> Iterator[str]:
    """mock-llm streaming one token every 10 ms (a few seconds per answer)."""
    app = create_app(
        alpaca_rows,
        latency=FixedLatency(ttft_ms=100.0, itl_ms=10.0),
        faults=FaultConfig(),
        seed=0,
        model_name="mock-live",
    )
    with BackgroundServer(app) as server:
        yield server.url


def _wait_ready(
    url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("sidecar did not become ready")


def _refuses_connections(port: int) -> bool:
    """True when nothing listens on ``port`` (a connection that opens is closed unused)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.slow
def test_sigterm_lets_inflight_streams_finish_and_flushes(
    tmp_path: Path, slow_live_model: str, alpaca_rows: list[RecordedRow]
) -> None:
    port, admin_port = free_port(), free_port()
    capture_dir = tmp_path / "capture"
    log_path = tmp_path / "sidecar.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        die_with_parent_argv(
            [
                sys.executable,
                "-m",
                "shadoweval.cli",
                "capture",
                "serve",
                "--upstream",
                slow_live_model,
                "--port",
                str(port),
                "--admin-port",
                str(admin_port),
                "--sink",
                "file",
                "--capture-dir",
                str(capture_dir),
                "--spool-dir",
                str(tmp_path / "spool"),
                "--grace-period",
                "30",
            ]
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    admin = f"http://127.0.0.1:{admin_port}"
    try:
        _wait_ready(admin, proc, log_path)
        assert httpx.get(admin + "/healthz").json() == {"status": "ok"}
        row = next(r for r in alpaca_rows if r.output_text and len(r.output_text) > 600)
        received: list[str] = []
        errors: list[BaseException] = []

        def stream() -> None:
            try:
                with httpx.stream(
                    "POST",
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": "mock-live", "messages": row.messages, "stream": True},
                    timeout=60,
                ) as resp:
                    for line in resp.iter_lines():
                        received.append(line)
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=stream)
        worker.start()
        deadline = time.monotonic() + 60
        while len(received) < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(received) >= 5, "the stream did not start"
        proc.send_signal(signal.SIGTERM)
        # Draining: not ready any more, and new connections are refused (waited for as a
        # condition: a loaded machine may take longer than a fixed pause to close the port)
        wait_until(lambda: _refuses_connections(port), "the port to refuse connections")
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={}, timeout=2)
        worker.join(60)
        assert not errors, errors
        assert received[-1] == "data: [DONE]" or "data: [DONE]" in received
        code = proc.wait(timeout=60)
        assert code == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    entries = list(read_capture_log(capture_dir))
    assert len(entries) == 1
    exchange = entries[0].exchange
    assert exchange is not None
    assert exchange.outcome is ExchangeOutcome.DONE
    assert exchange.response is not None
    assert exchange.response.text == row.output_text
