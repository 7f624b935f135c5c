"""benchmarks/latency_aa.py runs at a tiny size (2 runs × 40 requests, one burner), so it
cannot rot between the times docs/benchmarks.md is remeasured ("Latency A/A under load").
The table's shape is checked, never its numbers (no timed assertions)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_latency_aa_benchmark_prints_its_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.latency_aa", "--runs", "2", "--requests", "40",
         "--burners", "1"],
        capture_output=True, text=True, timeout=600, check=True, cwd=REPO,
    )  # fmt: skip
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("# command: python -m benchmarks.latency_aa --runs 2")
    assert re.fullmatch(r"# cpu: .+ \(\d+ cores\); burners: 1", lines[1]), lines[1]
    assert lines[2].startswith("# load average before: ")
    assert lines[3].split("\t") == [
        "run", "seed", "pairs", "p50_ratio", "ci_low", "ci_high", "covers_1", "nw_var_factor",
    ]  # fmt: skip
    for run, line in enumerate(lines[4:6]):
        cells = line.split("\t")
        assert cells[:2] == [str(run), str(1000 + run)]
        assert int(cells[2]) == 35  # 40 requests, 5 warm-up
        low, ratio, high = float(cells[4]), float(cells[3]), float(cells[5])
        assert low <= ratio <= high
        assert cells[6] == str(low <= 1.0 <= high)
        assert float(cells[7]) >= 1.0  # the Newey–West factor never narrows
    assert lines[6].startswith("# load average after: ")
    assert re.fullmatch(
        r"summary: runs 2, interval covers 1 in [012] \(\d+\.\d%\), target >= 95%", lines[7]
    ), lines[7]
