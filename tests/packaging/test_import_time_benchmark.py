"""benchmarks/import_time.py runs at its smallest size (one import of one module), so it cannot
rot between the times docs/benchmarks.md is remeasured ("The light install")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_time_benchmark_prints_its_row() -> None:
    out = subprocess.run(
        [
            sys.executable, str(REPO / "benchmarks" / "import_time.py"), sys.executable,
            "shadoweval.capture.sidecar", "--pythonpath", str(REPO), "--runs", "1",
        ],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    module, python, wall, cpu = out.stdout.strip().split("\t")
    assert (module, python) == ("shadoweval.capture.sidecar", sys.executable)
    assert re.fullmatch(r"wall \d+ ms", wall), wall
    assert re.fullmatch(r"cpu \d+ ms", cpu), cpu
