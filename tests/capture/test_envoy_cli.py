"""``shadow-eval capture envoy`` and ``capture envoy-config`` as a user runs them.

The front end runs as a real process (the CLI) with the real Envoy binary as its child:
it must come up as a plain proxy a load generator can hit (the benchmark's start command),
print ``ready``, capture to the file sink, and stop both processes cleanly on SIGTERM.
The checked-in example config must equal the renderer's output for its documented
arguments (deploy/envoy/README.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shadoweval.capture.envoy_config import EnvoyConfigSpec, render_envoy_config
from shadoweval.capture.envoy_fragment import render_envoy_fragment
from shadoweval.capture.envoy_process import EnvoyProcess
from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.process_death import die_with_parent_argv
from shadoweval.records import ExchangeOutcome
from tests.capture.envoy_harness import LoopThread, envoy_binary
from tests.capture.upstreams import ScriptedUpstream, ServerThread
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
REQUEST = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nice_values(pid: int) -> set[int]:
    """The nice value of every thread of ``pid`` (``/proc/PID/task/TID/stat`` field 19)."""
    values = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        values.add(int(stat[stat.rindex(")") + 2 :].split()[16]))
    return values


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def test_checked_in_example_equals_the_renderer() -> None:
    # deploy/envoy/README.md: --upstream http://127.0.0.1:8000 --host 0.0.0.0, defaults else
    spec = EnvoyConfigSpec.from_settings(
        CaptureSettings(upstream_url="http://127.0.0.1:8000", host="0.0.0.0"), EnvoySettings()
    )
    checked_in = (REPO / "deploy/envoy/envoy.yaml").read_text(encoding="utf-8")
    assert checked_in == render_envoy_config(spec), (
        "deploy/envoy/envoy.yaml is stale: regenerate it (deploy/envoy/README.md)"
    )


def test_envoy_config_command_writes_what_the_renderer_renders(tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    args = ["--upstream", "http://10.0.0.5:8000", "--port", "9000", "--ext-proc-port", "7000"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "shadoweval.cli",
            "capture",
            "envoy-config",
            *args,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    spec = EnvoyConfigSpec(
        upstream_url="http://10.0.0.5:8000", listen_port=9000, ext_proc_port=7000
    )
    assert out.read_text(encoding="utf-8") == render_envoy_config(spec)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "shadoweval.cli",
            "capture",
            "envoy-config",
            "--upstream",
            "ftp://x",
        ],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=120,
        check=False,
    )
    assert bad.returncode == 3
    assert "upstream_url" in bad.stderr


def _envoy_config(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shadoweval.cli", "capture", "envoy-config", *args],
        capture_output=True,
        text=True,
        env=_cli_env(),
        timeout=120,
        check=False,
    )


def test_envoy_config_fragment_writes_the_filter_and_cluster(tmp_path: Path) -> None:
    out = tmp_path / "fragment.json"
    done = _envoy_config(
        "--fragment", "--ext-proc-host", "capture.internal", "--ext-proc-port", "7000",
        "--format", "json", "--message-timeout-ms", "150", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    spec = EnvoyConfigSpec(
        upstream_url="http://127.0.0.1:8000", ext_proc_host="capture.internal", ext_proc_port=7000
    )
    assert out.read_text(encoding="utf-8") == render_envoy_fragment(
        spec, message_timeout_ms=150, output_format="json"
    )
    fragment = json.loads(out.read_text(encoding="utf-8"))
    assert set(fragment) == {"http_filters", "clusters"}  # no listener, no bootstrap
    yaml_text = _envoy_config("--fragment").stdout
    assert "BEFORE envoy.filters.http.router" in yaml_text
    assert "static_resources.clusters" in yaml_text


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--fragment", "--port", "9000"], "--port = 9000"),
        (["--fragment", "--upstream", "http://m:8000"], "--upstream = 'http://m:8000'"),
        (["--fragment", "--format", "xml"], "--format = 'xml'"),
        (["--fragment", "--message-timeout-ms", "0"], "--message-timeout-ms = 0"),
        (["--fragment", "--ext-proc-port", "0"], "--ext-proc-port = 0"),
        (["--upstream", "http://m:8000", "--format", "json"], "--format = 'json'"),
        (["--host", "0.0.0.0"], "--upstream is required"),
    ],
)
def test_envoy_config_refuses_options_naming_them(args: list[str], named: str) -> None:
    done = _envoy_config(*args)
    assert done.returncode == 3, done.stderr
    assert named in done.stderr


def test_capture_envoy_serves_captures_and_stops_on_sigterm(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    envoy_binary()  # a missing binary fails here, with the reason
    _app, up_url = upstream
    port = _free_port()
    capture_dir = tmp_path / "capture"
    log = tmp_path / "stderr.txt"
    cmd = [
        sys.executable, "-m", "shadoweval.cli", "capture", "envoy",
        "--upstream", up_url, "--port", str(port),
        "--admin-port", "0", "--ext-proc-port", "0", "--envoy-admin-port", "0",
        "--capture-dir", str(capture_dir), "--grace-period", "10",
    ]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(
            die_with_parent_argv(cmd),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_cli_env(),
        )
    try:
        wait_until(lambda: "ready" in log.read_text() or proc.poll() is not None, "the ready line")
        text = log.read_text()
        assert proc.poll() is None, text
        match = re.search(r"envoy pid (\d+)", text.replace("\n", " "))
        assert match, text
        envoy_pid = int(match.group(1))
        # the capture service lowered its own priority, Envoy (the live path) kept its own
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert _nice_values(proc.pid) == {min(19, base + 10)}
        assert _nice_values(envoy_pid) == {base}
        query = "?mode=sse&n=5&gap_ms=10"
        with httpx.Client(timeout=30) as client:
            direct = client.post(f"{up_url}{CHAT}{query}", content=REQUEST).content
            for _ in range(3):
                resp = client.post(f"http://127.0.0.1:{port}{CHAT}{query}", content=REQUEST)
                assert resp.status_code == 200
                assert resp.content == direct
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_until(lambda: not _pid_alive(envoy_pid), "the Envoy child to exit")
    entries = list(read_capture_log(capture_dir))
    assert len(entries) == 3
    assert all(e.exchange is not None for e in entries)
    assert {e.exchange.outcome for e in entries if e.exchange} == {ExchangeOutcome.DONE}


def test_no_launch_serves_an_envoy_run_from_envoy_config(
    upstream: tuple[ScriptedUpstream, str], tmp_path: Path
) -> None:
    """The production split: the capture service alone, Envoy started by someone else from
    the YAML that ``capture envoy-config`` wrote."""
    _app, up_url = upstream
    grpc_port, port = _free_port(), _free_port()
    capture_dir = tmp_path / "capture"
    log = tmp_path / "stderr.txt"
    config = tmp_path / "envoy.yaml"
    common = ["--upstream", up_url, "--port", str(port), "--ext-proc-port", str(grpc_port)]
    written = subprocess.run(
        [sys.executable, "-m", "shadoweval.cli", "capture", "envoy-config", *common,
         "--envoy-admin-port", "0", "--out", str(config)],
        capture_output=True, text=True, env=_cli_env(), timeout=120, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    cmd = [sys.executable, "-m", "shadoweval.cli", "capture", "envoy", "--no-launch", *common,
           "--admin-port", "0", "--capture-dir", str(capture_dir)]  # fmt: skip
    with log.open("w") as err:
        proc = subprocess.Popen(
            die_with_parent_argv(cmd),
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_cli_env(),
        )
    loop = LoopThread()
    envoy = EnvoyProcess(
        envoy_binary(), config.read_text(), tmp_path / "envoy", log_path=tmp_path / "envoy.log"
    )
    try:
        wait_until(lambda: "ready" in log.read_text() or proc.poll() is not None, "the ready line")
        assert proc.poll() is None, log.read_text()
        assert "Envoy not launched" in log.read_text().replace("\n", " ")
        loop.run(envoy.start())
        with httpx.Client(timeout=30) as client:
            resp = client.post(f"http://127.0.0.1:{port}{CHAT}?mode=sse&n=3", content=REQUEST)
        assert resp.status_code == 200
        assert resp.content.endswith(b"data: [DONE]\n\n")
        admin = re.search(r"admin\s+(http://127\.0\.0\.1:\d+)", log.read_text().replace("\n", " "))
        assert admin, log.read_text()

        def captured() -> bool:  # the service read the whole exchange (it may lag Envoy)
            text = httpx.get(admin.group(1) + "/metrics", timeout=10).text
            return 'shadoweval_capture_captured_total{outcome="done"' in text

        wait_until(captured, "the exchange to be captured")
        loop.run(envoy.stop())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        loop.run(envoy.stop())
        loop.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    entries = list(read_capture_log(capture_dir))
    assert [e.exchange.outcome for e in entries if e.exchange] == [ExchangeOutcome.DONE]
