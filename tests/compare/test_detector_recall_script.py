"""scripts/detector_recall.py runs at a tiny size, so the docs/gate.md table cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_detector_recall_at_a_tiny_size(shared_data: Path) -> None:
    done = subprocess.run(
        [
            sys.executable, str(REPO / "scripts" / "detector_recall.py"),
            "--data", str(shared_data / "alpaca_eval"), "--n", "12", "--json",
        ],
        capture_output=True, text=True, check=True, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    rows = {(row["detector"], row["set"]): row for row in json.loads(done.stdout)}
    real_switch = rows[("language_switch", "AlpacaEval real (4 × 805)")]
    assert (real_switch["flagged"], real_switch["true_positives"]) == (45, 45)
    real_loops = rows[("degeneration", "AlpacaEval real (4 × 805)")]
    assert (real_loops["flagged"], real_loops["true_positives"]) == (48, 48)
    assert rows[("degeneration", "spliced: originals")]["flagged"] == 0
    assert rows[("language_switch", "spliced: originals")]["flagged"] == 0
    assert rows[("degeneration", "spliced: a line ×3–5 back to back")]["recall"] == 1.0
    assert rows[("language_switch", "spliced: a CJK fragment mid-sentence")]["recall"] == 1.0
