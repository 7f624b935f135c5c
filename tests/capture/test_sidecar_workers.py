"""``capture serve --workers 2``: two whole sidecars on one port (``SO_REUSEPORT``), each
with its own admin port; SIGTERM to the parent drains both; every exchange is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from shadoweval.capture_log import read_capture_log
from shadoweval.process_death import die_with_parent_argv
from tests.capture.upstreams import ScriptedUpstream, ServerThread
from tests.kafka_broker import free_port, free_port_run
from tests.waiting import wait_until

CHAT = "/v1/chat/completions"
REQUEST = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def _forwarded(admin: str) -> float:
    text = httpx.get(admin + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("shadoweval_proxy_requests_total{")
    )


def test_two_workers_share_the_port_and_both_drain(tmp_path: Path) -> None:
    app = ScriptedUpstream()
    # the two workers' admin ports are admin_port and admin_port + 1: a free run of two
    port, admin_port = free_port(), free_port_run(2)
    capture_dir = tmp_path / "capture"
    log_path = tmp_path / "sidecar.log"
    with ServerThread(app) as upstream, log_path.open("wb") as log:
        proc = subprocess.Popen(
            die_with_parent_argv([
                sys.executable, "-m", "shadoweval.cli", "capture", "serve",
                "--upstream", upstream.url, "--port", str(port),
                "--admin-port", str(admin_port), "--sink", "file",
                "--capture-dir", str(capture_dir), "--spool-dir", str(tmp_path / "spool"),
                "--workers", "2",
            ]),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        admins = [f"http://127.0.0.1:{admin_port + i}" for i in range(2)]
        try:

            def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()
                try:
                    return all(
                        httpx.get(a + "/readyz", timeout=1).status_code == 200 for a in admins
                    )
                except httpx.HTTPError:
                    return False

            wait_until(ready, "both workers ready", timeout_s=120)
            statuses = []
            for _ in range(60):  # a new connection each: the kernel spreads them
                with httpx.Client(timeout=30) as client:
                    statuses.append(
                        client.post(f"http://127.0.0.1:{port}{CHAT}", content=REQUEST).status_code
                    )
            per_worker = [_forwarded(a) for a in admins]
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert rc == 0, log_path.read_text()
    assert statuses == [200] * 60
    assert sum(per_worker) == 60
    assert all(n > 0 for n in per_worker), per_worker
    entries = list(read_capture_log(capture_dir))
    assert len(entries) == 60


def test_worker_settings_share_the_port_and_split_the_rest() -> None:
    from shadoweval.capture.sidecar import worker_settings
    from shadoweval.config import CaptureSettings, SpoolSettings

    cap = CaptureSettings(
        port=8080,
        admin_port=9464,
        workers=3,
        max_client_connections=100,
        spool=SpoolSettings(directory="/var/spool/se"),
    )
    ws = [worker_settings(cap, i) for i in range(3)]
    assert [w.port for w in ws] == [8080] * 3
    assert [w.admin_port for w in ws] == [9464, 9465, 9466]
    assert [w.spool.directory for w in ws] == [f"/var/spool/se/worker-{i}" for i in range(3)]
    assert [w.max_client_connections for w in ws] == [34] * 3
    assert worker_settings(CaptureSettings(), 0) == CaptureSettings()
