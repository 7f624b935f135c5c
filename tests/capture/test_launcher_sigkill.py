"""A ``shadow-eval capture envoy`` launcher killed with SIGKILL takes its children with it.

The launcher (with the canary, so the session router's process runs too) is started as a
user starts it; once Envoy is LIVE, the live port accepts and the router reports its pid,
the launcher gets SIGKILL — no chance to drain or stop anything. Envoy, the router and
every other descendant must then be gone (Linux's parent-death signal,
:mod:`shadoweval.process_death`) and the live port free for a restart. Before: Envoy kept
the live port (parent pid 1) and the restart failed on "port in use".
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from shadoweval.capture.canary_split import Split, write_split
from shadoweval.process_death import SUPPORTED, die_with_parent_argv
from tests.capture.envoy_harness import envoy_binary
from tests.capture.test_envoy_cli import _cli_env, _free_port
from tests.capture.test_router_process import _spec
from tests.leftovers import cmdline, descendants, running
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="parent-death signal is Linux-only")


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _bindable(port: int) -> bool:
    """Whether a restarted listener could bind ``port`` (``SO_REUSEADDR``, as Envoy does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
        return True


def test_sigkill_of_the_launcher_ends_envoy_and_the_router(tmp_path: Path) -> None:
    envoy_binary()  # a missing binary fails here, with the reason
    admin_port, port = _free_port(), _free_port()
    write_split(tmp_path / "split", _spec(tmp_path / "split"), Split(0.0, 0))
    env = _cli_env() | {
        "SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL": "http://127.0.0.1:9",
        "SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR": str(tmp_path / "split"),
        "SHADOWEVAL_ENVOY__CANARY__ROUTER_PORT": "0",
    }
    log = tmp_path / "stderr.txt"
    cmd = [
        sys.executable, "-m", "shadoweval.cli", "capture", "envoy",
        "--upstream", "http://127.0.0.1:9", "--port", str(port),
        "--admin-port", str(admin_port), "--ext-proc-port", "0", "--envoy-admin-port", "0",
        "--capture-dir", str(tmp_path / "capture"),
    ]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(
            die_with_parent_argv(cmd),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        wait_until(lambda: "ready" in log.read_text() or proc.poll() is not None, "the ready line")
        text = log.read_text()
        assert proc.poll() is None, text
        match = re.search(r"envoy pid (\d+)", text.replace("\n", " "))
        assert match, text
        envoy_pid = int(match.group(1))
        detail = httpx.get(f"http://127.0.0.1:{admin_port}/readyz", timeout=30).json()
        router = re.search(r"pid (\d+)", detail["checks"]["canary_router"]["detail"])
        assert router, detail
        router_pid = int(router.group(1))
        assert _accepts(port)
        children = descendants(proc.pid)
        assert {envoy_pid, router_pid} <= children, {p: cmdline(p) for p in children}
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    def left() -> dict[int, str]:
        return {pid: cmdline(pid) for pid in children if running(pid)}

    wait_until(lambda: not left(), "Envoy, the router and every other descendant to end")
    wait_until(lambda: _bindable(port), f"the live port {port} to be free")
