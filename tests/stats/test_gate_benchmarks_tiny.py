"""The gate's benchmarks run at a tiny size, so none rots between re-measurements.

``benchmarks/gate_simulation.py`` had rotted: its synthetic pairs table lacked the columns
``stats.frame`` gained (``baseline_interrupted`` …), so the script, ``gate_scale.py`` and
``gate_direction_simulation.py`` (built on it) crashed with a pandas ``KeyError``. Each runs
here at a few replications; the tables' shape and the edge cases' decisions are checked,
never timings or rates (no timed assertions).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def bench(script: str, *args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        capture_output=True, text=True, timeout=900, check=True, cwd=REPO,
    )  # fmt: skip
    return out.stdout.splitlines()


def rows(lines: list[str], first_cell: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in lines
        if line.startswith(f"| {first_cell}")
    ]


def test_gate_simulation_tiny() -> None:
    lines = bench("gate_simulation.py", "--reps", "2", "--only", "aa_capped")
    [aa, *_] = rows(lines, "aa_capped")
    assert aa[1:3] == ["34540", "2"], aa
    # Every edge case holds, with a reason and exit 1 (a CI job must not promote on it).
    edges = [r for r in rows(lines, "") if r[0] not in ("case", "scenario", "---")]
    cases = [r for r in edges if len(r) == 4]
    assert len(cases) == 5, lines
    assert all(r[1] == "HOLD" and r[2] == "1" and r[3] for r in cases), cases


def test_gate_direction_simulation_tiny() -> None:
    lines = bench("gate_direction_simulation.py", "--reps", "2", "--only", "aa")
    [aa, *_] = rows(lines, "aa ")
    assert aa[1] == "default", aa
    assert aa[4].startswith(("0/2", "1/2", "2/2")), aa  # PROMOTE k/2 [interval]


def test_gate_scale_tiny() -> None:
    lines = bench("gate_scale.py", "--pairs", "20000", "--task-types", "4", "--repeats", "1")
    steps = {r[0]: r for r in rows(lines, "") if len(r) == 4 and r[0] not in ("step", "---:")}
    assert any(step.startswith("evaluate_gate") for step in steps), lines
    assert any(step.startswith("evaluate_poll") for step in steps), lines


def test_ppi_simulation_tiny() -> None:
    lines = bench("ppi_simulation.py", "--reps", "3", "--pairs", "400", "--fractions", "0.1")
    table = rows(lines, "10%")
    assert [r[2] for r in table] == ["PPI++", "labels alone", "judge alone"], lines
