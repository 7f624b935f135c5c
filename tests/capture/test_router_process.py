"""The session router in its own process (:class:`shadoweval.capture.router_process.RouterProcess`):
a real spawned child, real gRPC ext_proc calls to it, the split file written with
:func:`shadoweval.capture.canary_split.write_split`; every wait is on a condition.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from prometheus_client import CollectorRegistry, generate_latest

from shadoweval.capture.canary_split import ARM_HEADER, WEIGHT_TOTAL, Split, write_split
from shadoweval.capture.envoy_config import CanarySpec, EnvoyConfigSpec
from shadoweval.capture.router_process import RouterProcess
from shadoweval.capture.session_router import stable_bucket
from shadoweval.errors import ConfigError
from shadoweval.process_death import die_with_parent_argv
from tests.capture.envoy_harness import LoopThread, envoy_binary
from tests.capture.test_envoy_cli import _cli_env, _free_port, _nice_values, _pid_alive
from tests.waiting import wait_until


def _spec(split_dir: Path) -> EnvoyConfigSpec:
    return EnvoyConfigSpec(
        upstream_url="http://baseline.internal:8000",
        canary=CanarySpec(candidate_url="http://candidate.internal:8000", split_dir=split_dir),
    )


class Child:
    """A :class:`RouterProcess` on a free loopback port, driven from a loop thread."""

    def __init__(self, split_dir: Path, restart_delay_s: float = 1.0) -> None:
        self.split_dir = split_dir
        self.registry = CollectorRegistry()
        self.loop = LoopThread()
        self.proc = RouterProcess(
            split_dir,
            ("x-session-id",),
            "127.0.0.1",
            0,
            self.registry,
            restart_delay_s=restart_delay_s,
        )

    def __enter__(self) -> Child:
        try:
            self.loop.run(self.proc.start())
        except BaseException:
            self.loop.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.loop.run(self.proc.stop())
        finally:
            self.loop.close()

    def metric(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def revision(self) -> int | None:
        status = self.proc.status()
        return None if status is None else status.revision

    def arm(self, session: str) -> str:
        """One ext_proc exchange with the child: the arm header it sets for ``session``."""
        request = ext_proc_pb2.ProcessingRequest(
            request_headers=ext_proc_pb2.HttpHeaders(
                headers=base_pb2.HeaderMap(
                    headers=[base_pb2.HeaderValue(key="x-session-id", raw_value=session.encode())]
                )
            )
        )
        with grpc.insecure_channel(f"127.0.0.1:{self.proc.port}") as channel:
            stub = ext_proc_grpc.ExternalProcessorStub(channel)
            (answer,) = list(stub.Process(iter([request]), timeout=30))
        (option,) = answer.request_headers.response.header_mutation.set_headers
        assert option.header.key == ARM_HEADER
        return str(option.header.raw_value.decode())


@pytest.fixture
def split_dir(tmp_path: Path) -> Path:
    write_split(tmp_path, _spec(tmp_path), Split(candidate_share=0.0, revision=0))
    return tmp_path


@pytest.fixture
def child(split_dir: Path) -> Iterator[Child]:
    with Child(split_dir, restart_delay_s=0.05) as c:
        yield c


def test_the_child_decides_applies_new_splits_and_its_metrics_reach_the_parent(
    child: Child,
) -> None:
    assert child.proc.port is not None
    assert child.proc.port > 0
    status = child.proc.status()
    assert status is not None
    assert status.revision == 0
    assert status.pid != os.getpid()
    assert child.arm("a") == "baseline"
    write_split(child.split_dir, _spec(child.split_dir), Split(candidate_share=0.5, revision=1))
    wait_until(lambda: child.revision() == 1, "the router process to read revision 1")
    sessions = [f"s-{i}" for i in range(30)]
    arms = {s: child.arm(s) for s in sessions}
    assert arms == {
        s: "candidate" if stable_bucket(s) < WEIGHT_TOTAL // 2 else "baseline" for s in sessions
    }
    # the child's metrics, under their names, on the parent's registry
    assert child.metric("shadoweval_canary_split_revision") == 1
    assert child.metric("shadoweval_canary_split_share") == 0.5
    assert child.metric("shadoweval_canary_pinned_sessions") == 31
    assert (
        child.metric("shadoweval_canary_decisions_total", arm="baseline", reason="rolled_back") == 1
    )
    new = sum(
        child.metric("shadoweval_canary_decisions_total", arm=arm, reason="new") or 0
        for arm in ("baseline", "candidate")
    )
    assert new == 30
    assert child.metric("shadoweval_canary_router_exits_total") == 0
    text = generate_latest(child.registry).decode()
    assert "shadoweval_canary_split_reload_errors_total 0.0" in text
    assert child.proc.describe_state() == (
        True,
        f"session router pid {status.pid} on :{child.proc.port}: revision 1, candidate share 0.5",
    )


def test_a_killed_child_is_counted_and_restarted_on_the_same_port(child: Child) -> None:
    port, first = child.proc.port, child.proc.process
    assert first is not None
    assert first.pid is not None
    assert child.arm("k") == "baseline"
    os.kill(first.pid, signal.SIGKILL)
    wait_until(
        lambda: child.metric("shadoweval_canary_router_restarts_total") == 1,
        "the router process to be restarted",
    )
    assert child.metric("shadoweval_canary_router_exits_total") == 1
    assert child.proc.port == port
    assert child.proc.process is not first
    status = child.proc.status()
    assert status is not None
    assert status.pid != first.pid
    assert status.pinned_sessions == 0  # a restarted router has no pins
    assert child.arm("k") == "baseline"
    up, detail = child.proc.describe_state()
    assert up, detail


def test_stop_child_is_graceful_and_not_restarted(child: Child) -> None:
    proc = child.proc.process
    assert proc is not None
    child.loop.run(child.proc.stop_child())
    assert proc.exitcode == 0
    assert not child.proc.alive()
    assert child.proc.status() is None
    assert child.metric("shadoweval_canary_router_exits_total") == 0
    # no child: the router's families are absent from a scrape, the parent's are there
    assert child.metric("shadoweval_canary_split_revision") is None
    assert child.metric("shadoweval_canary_router_restarts_total") == 0
    up, detail = child.proc.describe_state()
    assert not up
    assert "fallback" in detail


def test_a_port_in_use_is_a_config_error_naming_the_port(split_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        registry = CollectorRegistry()
        loop = LoopThread()
        try:
            proc = RouterProcess(split_dir, ("x-session-id",), "127.0.0.1", port, registry)
            with pytest.raises(ConfigError) as err:
                loop.run(proc.start())
        finally:
            loop.close()
    assert err.value.field == "envoy.canary.router_port"
    assert err.value.value == port
    assert f"127.0.0.1:{port}" in str(err.value)


def test_a_missing_split_file_is_a_config_error(tmp_path: Path) -> None:
    loop = LoopThread()
    try:
        proc = RouterProcess(tmp_path, ("x-session-id",), "127.0.0.1", 0, CollectorRegistry())
        with pytest.raises(ConfigError) as err:
            loop.run(proc.start())
    finally:
        loop.close()
    assert err.value.field == "envoy.canary.split_dir"
    assert str(tmp_path) in str(err.value)


def test_the_cli_front_end_runs_the_router_at_its_starting_priority(tmp_path: Path) -> None:
    """``shadow-eval capture envoy`` with the canary: the capture service lowers its own
    priority by ``envoy.capture_nice`` (10) once Envoy is live; the router's process,
    started before, keeps the priority the service started with, and ends with it."""
    envoy_binary()
    admin_port = _free_port()
    write_split(tmp_path / "split", _spec(tmp_path / "split"), Split(0.0, 0))
    env = _cli_env() | {
        "SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL": "http://127.0.0.1:9",
        "SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR": str(tmp_path / "split"),
        "SHADOWEVAL_ENVOY__CANARY__ROUTER_PORT": "0",
    }
    log = tmp_path / "stderr.txt"
    cmd = [
        sys.executable, "-m", "shadoweval.cli", "capture", "envoy",
        "--upstream", "http://127.0.0.1:9", "--port", str(_free_port()),
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
        assert proc.poll() is None, log.read_text()
        report = httpx.get(f"http://127.0.0.1:{admin_port}/readyz", timeout=30).json()
        detail = report["checks"]["canary_router"]["detail"]
        match = re.search(r"pid (\d+)", detail)
        assert match, detail
        router_pid = int(match.group(1))
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert _nice_values(proc.pid) == {min(19, base + 10)}
        assert _nice_values(router_pid) == {base}
        metrics = httpx.get(f"http://127.0.0.1:{admin_port}/metrics", timeout=30).text
        assert "shadoweval_canary_split_revision 0.0" in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_until(lambda: not _pid_alive(router_pid), "the router process to exit")
