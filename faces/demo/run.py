"""The demo: the whole loop on one machine with simulated models.

1. Generate a workload (:mod:`simulation.workload`): the same prompts answered by a
   baseline and by a candidate with two planted regressions.
2. Import the baseline answers as the capture log (what the sidecar would have captured).
3. Serve the candidate answers, and the baseline answers as a baseline-repeat replica, from
   two mock-llm servers (test doubles of model servers, with per-request latencies).
4. ``evaluate``: replay every exchange to both, score, gate, print, write a JSON report.
5. Check that the verdict caught the planted regressions: not PROMOTE, and a non-passing
   check on each planted (task type, metric).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from shadoweval.records import CheckOutcome, Decision, Verdict
from simulation.workload import WorkloadSpec, write_workload

PLANTED: tuple[tuple[str, str], ...] = (
    ("extraction", "format_parse"),
    ("summarization", "latency_e2e_ms_p50"),
)
"""(task type, check metric) pairs where the demo planted a regression."""

DEMO_MAPPING = {
    "messages_col": "messages",
    "output_col": "output",
    "task_type_col": "task_type",
    "model_col": "model",
    "id_col": "id",
    "ttft_col": "ttft_ms",
    "itl_col": "itl_ms",
    "latency_unit": "ms",
    "prompt_tokens_col": "prompt_tokens",
    "completion_tokens_col": "completion_tokens",
    "request_fields_col": "request_fields",
}
"""Column mapping of the generated tables (the same for import and mock-llm)."""


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where the demo writes: tables, capture log, database, report."""

    root: Path

    @property
    def capture_log(self) -> Path:
        return self.root / "capture"

    @property
    def database(self) -> Path:
        return self.root / "shadow-eval.db"

    @property
    def report(self) -> Path:
        return self.root / "report.json"


def caught_regressions(verdict: Verdict) -> list[tuple[str, str]]:
    """The planted (task type, metric) pairs whose check FAILED (inconclusive is not caught)."""
    caught = []
    for task_type, metric in PLANTED:
        for check in verdict.checks:
            if (
                check.task_type == task_type
                and check.metric == metric
                and check.outcome is CheckOutcome.FAIL
            ):
                caught.append((task_type, metric))
                break
    return caught


def demo_succeeded(verdict: Verdict) -> bool:
    """True when the verdict is ROLLBACK and every planted regression's check FAILED."""
    return verdict.decision is Decision.ROLLBACK and len(caught_regressions(verdict)) == len(
        PLANTED
    )


MARKER = ".shadow-eval-demo"
"""File the demo writes into its working directory, listing what it made there."""

DEMO_OUTPUTS: tuple[str, ...] = (
    "tables",
    "capture",
    "capture.rejected.jsonl",
    "shadow-eval.db",
    "shadow-eval.db-journal",
    "shadow-eval.db-wal",
    "shadow-eval.db-shm",
    "report.json",
)
"""The only names the demo ever creates (and so the only ones it removes) in its workdir."""


def reset_workdir(root: Path) -> None:
    """Prepare ``root`` for a new demo run: remove what an earlier demo run wrote there.

    Only the names in :data:`DEMO_OUTPUTS` are removed, and only in a directory that holds
    :data:`MARKER` (made by the demo); anything else in it is left alone. A non-empty
    directory without the marker is refused, so ``--workdir .`` can never delete files.

    Raises:
        ShadowEvalError: ``root`` is a file, or a non-empty directory the demo did not make.
    """
    from shadoweval.errors import ShadowEvalError

    if root.exists() and not root.is_dir():
        raise ShadowEvalError(f"demo workdir {root} is a file, not a directory")
    if root.is_dir() and not (root / MARKER).is_file() and any(root.iterdir()):
        raise ShadowEvalError(
            f"demo workdir {root} is not empty and was not made by the demo; "
            "choose another --workdir"
        )
    root.mkdir(parents=True, exist_ok=True)
    for name in DEMO_OUTPUTS:
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    (root / MARKER).write_text(
        "made by `shadow-eval demo`; each run replaces only: " + ", ".join(DEMO_OUTPUTS) + "\n",
        "utf-8",
    )


def prepare(paths: DemoPaths, spec: WorkloadSpec) -> tuple[Path, Path]:
    """Write the workload and import the baseline as the capture log (fresh each time)."""
    from capture.table_import import import_table
    from shadoweval.tables import TableMapping

    reset_workdir(paths.root)
    baseline_table, candidate_table = write_workload(paths.root / "tables", spec)
    report = import_table(
        baseline_table, out=paths.capture_log, mapping=TableMapping(**DEMO_MAPPING), stream=True
    )
    if report.written == 0:
        raise RuntimeError(f"the demo import wrote nothing: {report}")
    return baseline_table, candidate_table
