"""The demo: the whole loop on one machine with simulated models.

1. Generate a workload (:mod:`simulation.workload`): the same prompts answered by a
   baseline and by a candidate with two planted regressions (:data:`PLANTED`).
2. Import the baseline answers as the capture log (what the sidecar would have captured,
   :func:`application.importing.import_table`).
3. Serve the candidate answers, and the baseline answers as a baseline-repeat replica, from
   two mock-llm servers (test doubles of model servers, with per-request latencies).
4. Evaluate (:func:`application.evaluation.evaluate`): replay every exchange to both,
   score, gate, write a JSON report.
5. Check that the verdict caught the planted regressions: ROLLBACK, and a FAILED check on
   each planted (task type, metric) (:func:`demo_succeeded`).

:func:`run_demo` does all five in a working directory the demo owns (:func:`reset_workdir`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from application.evaluation import EvaluationRequest, EvaluationResult, evaluate
from application.importing import ImportRequest, TableSource, import_table
from application.mock_llm import MockLlmRequest, build_mock_llm
from application.runs import RunRequest
from shadoweval.config import DatabaseSettings, ReplaySettings, Settings
from shadoweval.errors import ShadowEvalError
from shadoweval.records import CheckOutcome, Decision, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.tables import TableMapping
from simulation.workload import (
    DEMO_MAPPING,
    PLANTED,
    TASK_TYPES,
    WorkloadSpec,
    write_workload,
)

__all__ = [
    "DEMO_MAPPING",
    "DEMO_OUTPUTS",
    "MARKER",
    "PLANTED",
    "DemoPaths",
    "DemoRequest",
    "DemoResult",
    "caught_regressions",
    "demo_succeeded",
    "reset_workdir",
    "run_demo",
]

CANDIDATE_MODEL = "demo-candidate-v2"
BASELINE_MODEL = "demo-baseline-v1"
DEMO_COMMAND = "shadow-eval demo"

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


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where the demo writes: tables, capture log, database, report (under ``root``)."""

    root: Path

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def capture_log(self) -> Path:
        return self.root / "capture"

    @property
    def database(self) -> Path:
        return self.root / "shadow-eval.db"

    @property
    def report(self) -> Path:
        return self.root / "report.json"


@dataclass(frozen=True, slots=True)
class DemoRequest:
    """One demo run.

    Attributes:
        workdir: where the demo writes (see :func:`reset_workdir`).
        per_task_type: requests per task type (four task types).
        seed: the workload's and the latencies' seed.
        concurrency: replay requests in flight.
        encoder: the similarity encoder (``minilm`` or ``hashing``).
        progress: show a replay progress bar.
    """

    workdir: Path = Path(".demo")
    per_task_type: int = 200
    seed: int = 7
    concurrency: int = 32
    encoder: str = "minilm"
    progress: bool = True


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo produced: the evaluation, and whether it caught the regressions.

    Attributes:
        paths: where it wrote (the report is at ``paths.report``).
        evaluation: the evaluation's run, counts, verdict and stage timings.
        planted: the planted (task type, metric) regressions.
        caught: those whose check FAILED.
        succeeded: ROLLBACK and every planted regression caught.
    """

    paths: DemoPaths
    evaluation: EvaluationResult
    planted: tuple[tuple[str, str], ...]
    caught: list[tuple[str, str]]
    succeeded: bool


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


def reset_workdir(root: Path) -> None:
    """Prepare ``root`` for a new demo run: remove what an earlier demo run wrote there.

    Only the names in :data:`DEMO_OUTPUTS` are removed, and only in a directory that holds
    :data:`MARKER` (made by the demo); anything else in it is left alone. A non-empty
    directory without the marker is refused, so ``--workdir .`` can never delete files.

    Raises:
        ShadowEvalError: ``root`` is a file, or a non-empty directory the demo did not make.
    """
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
    """Write the workload and import the baseline as the capture log (fresh each time).

    Returns:
        The baseline and candidate tables.

    Raises:
        ShadowEvalError: the workdir is refused (:func:`reset_workdir`), or the import
            wrote nothing.
    """
    reset_workdir(paths.root)
    baseline_table, candidate_table = write_workload(paths.tables, spec)
    report = import_table(
        ImportRequest(
            table=TableSource(baseline_table, mapping=TableMapping(**DEMO_MAPPING)),
            out=paths.capture_log,
            stream=True,
        )
    )
    if report.written == 0:
        raise ShadowEvalError(f"the demo import wrote nothing: {report}")
    return baseline_table, candidate_table


def _mock_server(table: Path, model_name: str, seed: int) -> BackgroundServer:
    """A mock-llm server (not started) answering from ``table`` with its own latencies
    (:func:`application.mock_llm.build_mock_llm`, latency profile ``table``, no faults)."""
    mock = build_mock_llm(
        MockLlmRequest(
            table=TableSource(table, mapping=TableMapping(**DEMO_MAPPING)),
            latency_profile="table",
            seed=seed,
            model_name=model_name,
        )
    )
    return BackgroundServer(mock.app)


def run_demo(
    request: DemoRequest,
    *,
    console: Console | None = None,
    on_workload: Callable[[DemoPaths, int], None] = lambda paths, task_types: None,
    on_servers: Callable[[str, str], None] = lambda candidate, baseline: None,
) -> DemoResult:
    """Run the demo (see the module docstring) and write the JSON report.

    Args:
        request: the demo's options.
        console: where replay progress goes.
        on_workload: called once the capture log is imported, with the paths and the
            number of task types (each with ``request.per_task_type`` requests).
        on_servers: called once both mock-llm servers listen, with the candidate's and the
            baseline replica's base URLs.

    Raises:
        ShadowEvalError: the workdir is refused, or the evaluation could not run.
        OSError: the report cannot be written.
    """
    paths = DemoPaths(request.workdir)
    spec = WorkloadSpec(per_task_type=request.per_task_type, seed=request.seed)
    baseline_table, candidate_table = prepare(paths, spec)
    on_workload(paths, len(TASK_TYPES))
    settings = Settings(
        database=DatabaseSettings(url=f"sqlite:///{paths.database}"),
        replay=ReplaySettings(concurrency=request.concurrency, warmup_requests=8, timeout_s=60),
    )
    with (
        _mock_server(candidate_table, CANDIDATE_MODEL, request.seed) as candidate,
        _mock_server(baseline_table, BASELINE_MODEL, request.seed) as baseline,
    ):
        on_servers(candidate.url, baseline.url)
        result = evaluate(
            EvaluationRequest(
                capture_log=paths.capture_log,
                run=RunRequest(
                    candidate_url=candidate.url,
                    baseline_repeat_url=baseline.url,
                    baseline_repeat_share=1.0,
                    run_name=f"demo: {BASELINE_MODEL} → {CANDIDATE_MODEL}",
                    encoder=request.encoder,
                    command=DEMO_COMMAND,
                ),
                progress=request.progress,
            ),
            settings,
            console=console,
        )
    result.write_report(paths.report)
    verdict = result.gate.verdict
    return DemoResult(
        paths=paths,
        evaluation=result,
        planted=PLANTED,
        caught=caught_regressions(verdict),
        succeeded=demo_succeeded(verdict),
    )
