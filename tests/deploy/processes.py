"""Child processes for deployment tests: each shadow-eval part as the compose file runs it.

:class:`Service` is one child (argv + environment, stdout and stderr in a log file);
:class:`Services` owns every child a test starts and kills them all at teardown, so no
process outlives its test. Waiting is on conditions (:func:`tests.waiting.wait_until`),
never on a clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

from shadoweval.process_death import die_with_parent_argv
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
START_S = 180.0
"""Deadline for a process to come up on a loaded 2-core machine (only a hang runs out)."""


def cli_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The test's environment without any ``SHADOWEVAL_*`` variable, plus ``extra``.

    ``PYTHONPATH`` points at this checkout so the children run the code under test.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


class Service:
    """One ``python -m shadoweval.cli ...`` child: stdout to ``<name>.out``, stderr to
    ``<name>.log``."""

    def __init__(
        self, name: str, args: Sequence[str], env: Mapping[str, str], log_dir: Path
    ) -> None:
        self.name = name
        self.args = [sys.executable, "-m", "shadoweval.cli", *args]
        self.env = dict(env)
        self.log_path = log_dir / f"{name}.log"
        self.stdout_path = log_dir / f"{name}.out"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        """Start the child (stdout to ``<name>.out``, stderr to ``<name>.log``)."""
        with self.stdout_path.open("wb") as out, self.log_path.open("wb") as err:
            self.process = subprocess.Popen(
                die_with_parent_argv(self.args),
                stdout=out,
                stderr=err,
                env=self.env,
                cwd=REPO_ROOT,
            )
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        assert self.process is not None, f"{self.name} was not started"
        return self.process

    def alive(self) -> bool:
        """True while the child runs."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """What the child wrote to stderr so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def describe(self) -> str:
        """The last lines of the child's log and its exit status, for failure messages."""
        code = None if self.process is None else self.process.poll()
        return f"{self.name} (exit {code}): …{self.log()[-3000:]}"

    def wait_for_log(self, text: str, what: str, timeout_s: float = START_S) -> None:
        """Wait until ``text`` is in the child's log; fail at once when the child exits."""
        wait_until(lambda: text in self.log() or not self.alive(), what, timeout_s)
        assert self.alive(), self.describe()
        assert text in self.log(), self.describe()

    def wait_for_http(self, url: str, timeout_s: float = START_S) -> None:
        """Wait until ``GET url`` answers 200; fail at once when the child exits."""

        def ok() -> bool:
            if not self.alive():
                return True
            try:
                return httpx.get(url, timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ok, f"{self.name} to answer {url}", timeout_s, interval_s=0.2)
        assert self.alive(), self.describe()

    def sigkill(self) -> None:
        """SIGKILL the child (no cleanup runs in it) and reap it."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(60) == -signal.SIGKILL

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; return the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        return self.process.returncode


class Services:
    """Every child of one test; :meth:`kill_all` (teardown) kills whichever still runs."""

    def __init__(self, log_dir: Path, env: Mapping[str, str]) -> None:
        self.log_dir = log_dir
        self.env = dict(env)
        self.started: list[Service] = []

    def start(self, name: str, args: Sequence[str], **env: str) -> Service:
        """Start ``shadow-eval <args>`` named ``name`` with the shared environment + ``env``."""
        service = Service(name, args, {**self.env, **env}, self.log_dir).start()
        self.started.append(service)
        return service

    def kill_all(self) -> None:
        """SIGKILL every child still running and reap it."""
        for service in self.started:
            if service.process is not None and service.process.poll() is None:
                service.process.kill()
        for service in self.started:
            if service.process is not None:
                service.process.wait(60)
