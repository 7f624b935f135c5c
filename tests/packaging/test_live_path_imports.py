"""``replay run`` and ``capture serve`` import nothing of the gate (issue 33 item 4).

The two live commands start often (a replay worker per run, a sidecar per pod): they may
not pay for the gate's statistics. A fresh interpreter shows each command's ``--help``
and imports the modules the command runs (:data:`REPLAY_RUN_MODULES`,
:data:`CAPTURE_SERVE_MODULES`), then checks ``sys.modules``: none of :data:`GATE_PACKAGES`
may be there. The policy schema (:mod:`shadoweval.stats.policy`) is loaded only when a
replay opens or checks a run (:mod:`shadoweval.application.run_policy`), not at import.
``tests/packaging/test_light_imports.py`` checks the wider list of heavy packages for
every light command; this one adds the gate's own package.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.deploy.processes import REPO_ROOT, cli_env
from tests.packaging.light import CLOSURE_SCRIPT

GATE_PACKAGES: tuple[str, ...] = ("shadoweval.stats", "scipy", "statsmodels", "torch")
"""What the two commands may not import: the gate, and the numeric stacks behind it."""

REPLAY_RUN_MODULES: tuple[str, ...] = (
    "shadoweval.cli.replay_cmd",
    "shadoweval.cli.evaluate_cmd",
    "shadoweval.application.replaying",
    "shadoweval.application.candidate_runs",
    "shadoweval.application.runs",
    "shadoweval.application.run_policy",
    "shadoweval.replay.runner",
    "shadoweval.replay.kafka_worker",
)
"""The modules ``replay run`` imports (at the top of its command function and below)."""

CAPTURE_SERVE_MODULES: tuple[str, ...] = (
    "shadoweval.cli.capture_cmd",
    "shadoweval.application.capture",
    "shadoweval.capture.sidecar",
)
"""The modules ``capture serve`` imports."""


def closure(heavy: tuple[str, ...], modules: tuple[str, ...], command: str) -> tuple[int, str]:
    run = subprocess.run(
        [sys.executable, "-c", CLOSURE_SCRIPT, ",".join(heavy), ",".join(modules), command],
        env=cli_env({}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return run.returncode, run.stdout + run.stderr


@pytest.mark.parametrize(
    ("command", "modules"),
    [("replay run", REPLAY_RUN_MODULES), ("capture serve", CAPTURE_SERVE_MODULES)],
)
def test_live_command_imports_nothing_of_the_gate(command: str, modules: tuple[str, ...]) -> None:
    code, out = closure(GATE_PACKAGES, modules, command)
    assert code == 0, f"`shadow-eval {command}` imports:\n{out}"


def test_the_watch_sees_a_gate_import() -> None:
    """The check itself: a dotted prefix is reported with its first importer."""
    code, out = closure(("shadoweval.stats",), ("shadoweval.application.gating",), "")
    assert code == 1, out
    assert out.startswith("shadoweval.stats imported by "), out
