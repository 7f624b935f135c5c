"""The demo: the whole loop on one machine with simulated models, both directions.

1. Generate a workload (:mod:`shadoweval.simulation.workload`): the same prompts answered by a
   baseline (which loops or refuses on some support questions), by a **regressed**
   candidate with two planted regressions (:data:`PLANTED`), and by a **better** candidate
   whose answers changed and got better (it answers the baseline's loops and refusals
   properly, with no regression). Capture times span 26 hours.
2. Import the baseline answers as the capture log (what the sidecar would have captured,
   :func:`shadoweval.application.importing.import_table`).
3. Serve each candidate, and the baseline answers as a baseline-repeat replica, from
   mock-llm servers (test doubles of model servers, with per-request latencies), and a
   **simulated judge** (:mod:`shadoweval.simulation.mock_judge`, a test double that prefers the
   answer
   the workload's judge key scores higher: it says the better candidate is better).
4. Evaluate each candidate (:func:`shadoweval.application.evaluation.evaluate`) under the demo's
   policy (:data:`DEMO_POLICY_FILE`): replay every exchange to the candidate and the
   replica, score, judge the changed pairs, gate, write a JSON report.
5. Check that both verdicts are as planted (:func:`demo_succeeded`): the regressed
   candidate is ROLLBACK with a FAILED check on each planted (task type, metric), the
   better one is PROMOTE.

:func:`run_demo` does all five in a working directory the demo owns (:func:`reset_workdir`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from shadoweval.application.evaluation import EvaluationRequest, EvaluationResult, evaluate
from shadoweval.application.importing import ImportRequest, TableSource, import_table
from shadoweval.application.mock_llm import MockLlmRequest, build_mock_llm
from shadoweval.application.runs import RunRequest
from shadoweval.config import DatabaseSettings, JudgeSettings, ReplaySettings, Settings
from shadoweval.errors import ShadowEvalError
from shadoweval.records import CheckOutcome, Decision, Verdict
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_judge import create_judge_app, prefer_higher, quality_table
from shadoweval.simulation.workload import (
    DEMO_MAPPING,
    PLANTED,
    TASK_TYPES,
    DemoTables,
    WorkloadSpec,
    write_demo_tables,
)
from shadoweval.tables import TableMapping

__all__ = [
    "DEMO_MAPPING",
    "DEMO_OUTPUTS",
    "DEMO_POLICY_FILE",
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
BETTER_MODEL = "demo-candidate-v2b"
BASELINE_MODEL = "demo-baseline-v1"
JUDGE_MODEL = "demo-judge (simulated)"
DEMO_COMMAND = "shadow-eval demo"
BASELINE_DEFECT_SHARE = 0.06
"""Share of support questions the demo's baseline answers badly (a loop or a refusal)."""
SLOW_ITL_FACTOR = 3.0
"""The regressed candidate's inter-token latency on long summaries, × the baseline's."""
BASELINE_LOOP_SHARE = 0.25
"""Of those, the share that loop (40 repeats of one sentence: slow to stream); the rest
refuse (short). With half of 6% looping, 3% of support answers formed a slow cluster just
above the p95, and the p95 ratio's interval (normal on the log scale, so symmetric there
while the bootstrap law of a quantile 2% below a cliff is one-sided) reached 0.35 to 2.2
for two equally fast models; at 1.5% the p95 lies 3.5 points below the cliff."""
SUPPORT_CHAT_FACTOR = 2
"""``support_chat`` requests per request of each other task type. Support is the busiest
route, as in production traffic; with four equal task types the pooled p50 latency would
fall exactly in the gap between the two short task types and the two long ones, where it
is not determined (any value in the gap is a median: the pooled p50 ratio of two equally
fast models came out 0.8 or 1.3 by chance)."""

DEMO_POLICY_FILE = Path(__file__).with_name("demo_policy.yaml")
"""The demo's gate policy: the default one with margins sized for 1,000 pairs (its comments
say what differs and why)."""

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
    "report-better.json",
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
        """The regressed candidate's report."""
        return self.root / "report.json"

    @property
    def better_report(self) -> Path:
        """The better candidate's report."""
        return self.root / "report-better.json"


@dataclass(frozen=True, slots=True)
class DemoRequest:
    """One demo run.

    Attributes:
        workdir: where the demo writes (see :func:`reset_workdir`).
        per_task_type: requests per task type (four task types; ``support_chat`` has
            :data:`SUPPORT_CHAT_FACTOR` times as many).
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
    """What the demo produced: both evaluations, and whether each verdict is as planted.

    Attributes:
        paths: where it wrote (the reports are at ``paths.report`` and
            ``paths.better_report``).
        evaluation: the regressed candidate's evaluation (run, counts, verdict, timings).
        better: the better candidate's evaluation.
        planted: the planted (task type, metric) regressions.
        caught: those whose check FAILED in the regressed candidate's verdict.
        succeeded: the regressed candidate is ROLLBACK with every planted regression
            caught, and the better candidate is PROMOTE.
    """

    paths: DemoPaths
    evaluation: EvaluationResult
    better: EvaluationResult
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


def demo_succeeded(verdict: Verdict, better: Verdict | None = None) -> bool:
    """True when ``verdict`` (the regressed candidate's) is ROLLBACK with every planted
    regression's check FAILED and, when given, ``better`` (the better candidate's) is
    PROMOTE."""
    caught = verdict.decision is Decision.ROLLBACK and len(caught_regressions(verdict)) == len(
        PLANTED
    )
    return caught and (better is None or better.decision is Decision.PROMOTE)


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


def prepare(paths: DemoPaths, spec: WorkloadSpec) -> DemoTables:
    """Write the workload and import the baseline as the capture log (fresh each time).

    Returns:
        The tables (baseline, both candidates, the judge key).

    Raises:
        ShadowEvalError: the workdir is refused (:func:`reset_workdir`), or the import
            wrote nothing.
    """
    reset_workdir(paths.root)
    tables = write_demo_tables(paths.tables, spec)
    report = import_table(
        ImportRequest(
            table=TableSource(tables.baseline, mapping=TableMapping(**DEMO_MAPPING)),
            out=paths.capture_log,
            stream=True,
        )
    )
    if report.written == 0:
        raise ShadowEvalError(f"the demo import wrote nothing: {report}")
    return tables


def _mock_server(table: Path, model_name: str, seed: int) -> BackgroundServer:
    """A mock-llm server (not started) answering from ``table`` with its own latencies
    (:func:`shadoweval.application.mock_llm.build_mock_llm`, latency profile ``table``, no
    faults)."""
    mock = build_mock_llm(
        MockLlmRequest(
            table=TableSource(table, mapping=TableMapping(**DEMO_MAPPING)),
            latency_profile="table",
            seed=seed,
            model_name=model_name,
        )
    )
    return BackgroundServer(mock.app)


def _judge_server(judge_key: Path) -> BackgroundServer:
    """The simulated judge (not started): prefers the answer the judge key scores higher."""
    scores = json.loads(judge_key.read_text("utf-8"))
    app = create_judge_app(prefer_higher(quality_table(scores)), model_name=JUDGE_MODEL)
    return BackgroundServer(app)


def run_demo(
    request: DemoRequest,
    *,
    console: Console | None = None,
    on_workload: Callable[[DemoPaths, dict[str, int]], None] = lambda paths, counts: None,
    on_servers: Callable[[str, str], None] = lambda candidate, baseline: None,
    on_evaluation: Callable[[str, EvaluationResult], None] = lambda name, result: None,
) -> DemoResult:
    """Run the demo (see the module docstring) and write both JSON reports.

    Args:
        request: the demo's options.
        console: where replay progress goes.
        on_workload: called once the capture log is imported, with the paths and the
            requests per task type (``request.per_task_type`` each, ``support_chat``
            :data:`SUPPORT_CHAT_FACTOR` times that).
        on_servers: called once the servers listen, with the regressed candidate's and
            the baseline replica's base URLs.
        on_evaluation: called after each evaluation with ``"regressed"`` or ``"better"``.

    Raises:
        ShadowEvalError: the workdir is refused, or an evaluation could not run.
        OSError: a report cannot be written.
    """
    paths = DemoPaths(request.workdir)
    spec = WorkloadSpec(
        per_task_type=request.per_task_type,
        seed=request.seed,
        baseline_defect_share=BASELINE_DEFECT_SHARE,
        slow_itl_factor=SLOW_ITL_FACTOR,
        support_chat_factor=SUPPORT_CHAT_FACTOR,
        baseline_loop_share=BASELINE_LOOP_SHARE,
    )
    tables = prepare(paths, spec)
    on_workload(paths, {t: spec.count(t) for t in TASK_TYPES})
    with (
        _mock_server(tables.candidate, CANDIDATE_MODEL, request.seed) as candidate,
        _mock_server(tables.better, BETTER_MODEL, request.seed) as better,
        _mock_server(tables.baseline, BASELINE_MODEL, request.seed) as baseline,
        _judge_server(tables.judge_key) as judge,
    ):
        on_servers(candidate.url, baseline.url)
        settings = Settings(
            database=DatabaseSettings(url=f"sqlite:///{paths.database}"),
            replay=ReplaySettings(concurrency=request.concurrency, warmup_requests=8, timeout_s=60),
            # The simulated judge is a local test double: the demo sends it the pairs.
            judge=JudgeSettings(url=judge.url, model=JUDGE_MODEL, send_pairs=True),
        )
        results: dict[str, EvaluationResult] = {}
        for name, server, model in (
            ("regressed", candidate, CANDIDATE_MODEL),
            ("better", better, BETTER_MODEL),
        ):
            results[name] = evaluate(
                EvaluationRequest(
                    capture_log=paths.capture_log,
                    run=RunRequest(
                        candidate_url=server.url,
                        baseline_repeat_url=baseline.url,
                        baseline_repeat_share=1.0,
                        policy_path=DEMO_POLICY_FILE,
                        run_name=f"demo: {BASELINE_MODEL} → {model}",
                        encoder=request.encoder,
                        command=DEMO_COMMAND,
                    ),
                    progress=request.progress,
                    judge=True,
                ),
                settings,
                console=console,
            )
            on_evaluation(name, results[name])
    results["regressed"].write_report(paths.report)
    results["better"].write_report(paths.better_report)
    verdict = results["regressed"].gate.verdict
    better_verdict = results["better"].gate.verdict
    return DemoResult(
        paths=paths,
        evaluation=results["regressed"],
        better=results["better"],
        planted=PLANTED,
        caught=caught_regressions(verdict),
        succeeded=demo_succeeded(verdict, better_verdict),
    )
