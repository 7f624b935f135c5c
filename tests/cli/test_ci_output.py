"""CLI output read in a CI log: stdout is a pipe, ``COLUMNS`` unset (issue 13).

rich's default of 80 columns for output that is not a terminal folded the per-task table's
task type to three letters a line (``cla/ssi/fic/ati/on``) and cut option names in
``--help`` (``--baseline-repe…`` three times). These tests run the real CLI as a process
with its stdout piped, as a CI runner does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from shadoweval.application.gating import load_gate_policy
from shadoweval.cli import app
from shadoweval.cli.render import CI_WIDTH
from shadoweval.storage import Database, Repository
from shadoweval.testing import pair_seeding

REPO_ROOT = Path(__file__).resolve().parents[2]
TRUNCATED_OPTION = re.compile(r"--[A-Za-z0-9][\w-]*…")


def run_cli(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m shadoweval.cli ARGS`` with stdout and stderr piped; ``COLUMNS`` only if given."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "LINES")}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "shadoweval.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=300,
        check=False,
    )


def commands_by_longest_option(count: int) -> list[tuple[list[str], list[str]]]:
    """The ``count`` commands whose longest option name is the longest, with every option
    name each one has (``--x``, ``--no-x``, aliases)."""
    found: list[tuple[list[str], list[str]]] = []

    def walk(command: object, path: list[str]) -> None:
        sub = getattr(command, "commands", None)
        if sub:
            for name, child in sub.items():
                walk(child, [*path, name])
            return
        names = [
            opt
            for param in getattr(command, "params", [])
            for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("--")
        ]
        found.append((path, names))

    walk(typer.main.get_command(app), [])
    found.sort(key=lambda item: -max((len(n) for n in item[1]), default=0))
    return found[:count]


@pytest.mark.parametrize(("path", "options"), commands_by_longest_option(4))
def test_help_shows_every_option_name_in_full(path: list[str], options: list[str]) -> None:
    result = run_cli(*path, "--help")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert TRUNCATED_OPTION.findall(out) == []
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", out), (path, option)
    assert max(len(line) for line in out.splitlines()) <= CI_WIDTH


def test_help_honours_columns_when_set() -> None:
    (path, _), *_ = commands_by_longest_option(1)
    result = run_cli(*path, "--help", columns=100)
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100


@pytest.fixture(scope="module")
def gated_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A seeded, scored run over task types with long names, not gated yet."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ci-output') / 'runs.db'}"
    _, policy_yaml, policy_hash = load_gate_policy(None)
    with Database(url) as db:
        db.upgrade()
        pair_seeding.seed_run(
            Repository(db),
            policy_yaml=policy_yaml,
            policy_hash=policy_hash,
            mix={"extraction": 120, "summarize": 100},
        )
    return url


def task_rows(out: str) -> dict[str, str]:
    """The per-task table's rows, by the task type that starts them."""
    rows: dict[str, str] = {}
    for line in out.splitlines():
        for name in ("extraction", "summarize", "all (pooled)"):
            if line.strip().startswith(name + " "):
                rows[name] = line
    return rows


@pytest.mark.parametrize("columns", [None, 100])
def test_the_per_task_table_keeps_task_names_whole(gated_db: str, columns: int | None) -> None:
    result = run_cli("gate", "--run", "run-dash", "--database-url", gated_db, columns=columns)
    assert result.returncode in (0, 1, 2), result.stderr
    out = result.stdout
    rows = task_rows(out)
    assert set(rows) == {"extraction", "summarize", "all (pooled)"}, out
    width = CI_WIDTH if columns is None else columns
    assert max(len(line) for line in out.splitlines()) <= width
    for line in out.splitlines():  # no folded fragment of a name on a line of its own
        assert line.strip() not in ("ext", "rac", "tion", "sum", "mar", "ize", "all", "(po")
    if columns is None:  # wide enough for every column that has a value
        header = next(line for line in out.splitlines() if line.strip().startswith("task type"))
        for column in ("sim", "noise", "p10", "fail", "e2e p50×", "e2e p95×", "checks"):
            assert column in header, header


def test_a_burst_of_a_few_starts_shows_no_rate() -> None:
    from shadoweval.cli.render import load_text

    # 9 measured starts fired at once gave "81494.6/s" (a fresh user's run): no load at all
    assert load_text({"achieved_rate_per_s": 81494.6, "measured_starts": 9}) == (
        "– (9 starts: too few for a rate)"
    )
    assert load_text({"achieved_rate_per_s": 12.0, "measured_starts": 400}) == "12.0/s"
