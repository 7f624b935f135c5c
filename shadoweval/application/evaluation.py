"""One whole evaluation: capture log → replay → scores → verdict → report.

The stages, in order, each timed (:class:`StageTimer`): ``setup`` (open the run,
:func:`shadoweval.application.runs.prepare_run`), ``replay``
(:func:`shadoweval.application.replaying.replay_capture_log`), ``load_encoder`` and ``compare``
(:mod:`shadoweval.application.scoring`), ``judge`` (only when asked:
:func:`shadoweval.application.judging.run_judge`, the changed pairs within the policy's budget,
before
the gate so that the look's first evaluation has them), ``gate``
(:func:`shadoweval.application.gating.gate_run`). Used by ``shadow-eval evaluate`` and the demo.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from shadoweval.application.database import open_repository
from shadoweval.application.gating import GateResult, gate_run
from shadoweval.application.judging import (
    JudgeRunReport,
    check_judge_settings,
    preflight_judge_endpoint,
    run_judge,
)
from shadoweval.application.judging.cost import check_judge_arms, request_arms, run_arms
from shadoweval.application.replaying import ReplayReport, replay_capture_log, replay_pacing
from shadoweval.application.reports import json_records
from shadoweval.application.runs import RunRequest, prepare_run
from shadoweval.application.scoring import CompareReport, compare_run, make_encoder
from shadoweval.compare.encoders import Encoder
from shadoweval.config import JudgeSettings, Settings
from shadoweval.records import Coverage
from shadoweval.storage import Repository, RunInfo

__all__ = [
    "EvaluationRequest",
    "EvaluationResult",
    "StageTimer",
    "coverage_report",
    "evaluate",
    "evaluate_in",
    "judge_preflight",
]


@dataclass(frozen=True, slots=True)
class EvaluationRequest:
    """What to evaluate and how.

    Attributes:
        capture_log: the capture log replayed (a segment file or directory).
        run: the run to open (candidate, baseline replica, policy, run id, encoder name).
        device: the encoder's torch device.
        progress: show a replay progress bar.
        judge: send the run's changed pairs to the configured judge (``settings.judge``)
            after scoring; sending must also be allowed there or by ``send_pairs``
            (:func:`shadoweval.application.judging.check_judge_settings`, checked before the
            replay), and with ``judge.preflight`` (default) one made-up pair is sent to the
            judge before the replay
            (:func:`shadoweval.application.judging.preflight_judge_endpoint`).
        send_pairs: ``--send-pairs``: allow sending pairs to the judge for this evaluation.
    """

    capture_log: Path
    run: RunRequest
    device: str = "cpu"
    progress: bool = True
    judge: bool = False
    send_pairs: bool = False


class StageTimer:
    """Wall-clock seconds per named stage, in the order they ran (rounded to 1 ms)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)


@dataclass(frozen=True, slots=True)
class EvaluationResult:
    """Everything one evaluation produced.

    Attributes:
        run: the run as stored after the gate (its status updated).
        replay: the replay's counts.
        compare: the scoring's counts.
        gate: the verdict and the table it was computed from.
        stages_s: seconds per stage (see the module docstring).
        rejected: rejected records of the run, by stage.
        judge: what the judge stage did (``None`` when not asked).
    """

    run: RunInfo
    replay: ReplayReport
    compare: CompareReport
    gate: GateResult
    stages_s: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    judge: JudgeRunReport | None = None

    def report(self) -> dict[str, Any]:
        """The JSON report: run, stage timings, replay and compare counts, the judge run
        (where the pairs went, counts, judge tokens apart from the run's), the judgement
        summary (sources, judge, judge–human agreement), table, coverage by route and by
        task type (:func:`coverage_report`), the policy's names that match no traffic,
        verdict."""
        run = self.run
        return {
            "run": {
                "run_id": run.run_id,
                "name": run.name,
                "baseline": run.baseline.model_dump(mode="json"),
                "candidate": run.candidate.model_dump(mode="json"),
                "candidate_base_url": run.candidate_base_url,
                "source": run.source,
                "policy_hash": run.policy_hash,
            },
            "stages_s": self.stages_s,
            "replay": self.replay.as_dict(),
            "compare": self.compare.as_dict(),
            "rejected": self.rejected,
            "judge_run": self.judge.as_dict() if self.judge is not None else None,
            "judgement": (
                self.gate.judgement.as_dict() if self.gate.judgement is not None else None
            ),
            "per_task_type": json_records(self.gate.summary),
            "coverage": coverage_report(self.gate.verdict.coverage),
            "policy_warnings": list(self.gate.warnings),
            "verdict": self.gate.verdict.model_dump(mode="json"),
        }

    def write_report(self, path: Path) -> None:
        """Write :meth:`report` as indented JSON (UTF-8), creating the parent directory.

        Raises:
            OSError: the file cannot be written.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.report(), indent=2, ensure_ascii=False) + "\n", "utf-8")


def coverage_report(coverage: Coverage) -> dict[str, Any]:
    """The report's ``coverage`` section: the run's totals; ``by_route`` (captured,
    replayed, skipped with reasons, paired, ``evaluated``: any pair at all); ``by_task_type``
    (captured, paired, share); the replay passes with their pace and achieved load."""
    paired = coverage.paired_per_task_type
    return {
        "captured": coverage.captured,
        "paired": coverage.paired,
        "share": round(coverage.share, 6),
        "rejected": coverage.rejected,
        "by_route": {
            route: {**counts.model_dump(mode="json"), "evaluated": counts.paired > 0}
            for route, counts in sorted(coverage.per_route.items())
        },
        "by_task_type": {
            task_type: {
                "captured": n,
                "paired": paired.get(task_type, 0),
                "share": round(paired.get(task_type, 0) / n, 6) if n else 0.0,
            }
            for task_type, n in sorted(coverage.per_task_type.items())
        },
        "replay_passes": [
            {**p.model_dump(mode="json"), "shortfall": p.shortfall} for p in coverage.replay_passes
        ],
    }


def judge_preflight(
    request: EvaluationRequest, settings: Settings
) -> tuple[JudgeSettings, str | None]:
    """The judge settings the evaluation runs with, and the preflight's warning.

    With ``request.judge``, the settings are checked and (``judge.preflight``) one made-up
    pair is sent to the judge now, before any replay; the returned settings then have
    ``preflight`` off so later judge runs do not repeat it.

    Raises:
        ConfigError: the judge settings are incomplete or sending is not allowed.
        PreflightError: the judge endpoint failed the preflight.
    """
    judge_settings = settings.judge
    if not request.judge:
        return judge_settings, None
    check_judge_settings(judge_settings, send_pairs=request.send_pairs)
    # A judge that is the candidate or the replica (name or URL) is refused before anything
    # runs; the baseline's name (and each of several candidates) is known once a run is set
    # up: evaluate_in checks again.
    arms = request_arms(
        request.run.candidate_url,
        request.run.candidate_model,
        request.run.baseline_repeat_url,
        request.run.baseline_repeat_model,
    )
    check_judge_arms(judge_settings.model, judge_settings.url, arms)
    if not judge_settings.preflight:
        return judge_settings, None
    # Before the replay: a wrong judge URL or key stops the run now, not after it.
    warning = preflight_judge_endpoint(judge_settings)
    return judge_settings.model_copy(update={"preflight": False}), warning


def evaluate(
    request: EvaluationRequest, settings: Settings, *, console: Console | None = None
) -> EvaluationResult:
    """Run one evaluation end to end and return what it produced.

    The database is migrated to head first; replay progress goes to ``console``.

    Raises:
        ShadowEvalError: bad input (unreadable log, bad policy, unreachable database).
            Candidate failures are not errors: they are counted and gated.
        FileNotFoundError: the capture log does not exist.
    """
    replay_pacing(settings.replay)  # a bad pace is refused before a run is created
    judge = judge_preflight(request, settings)
    with open_repository(
        settings.database.url, body_redaction=settings.capture.body_redaction
    ) as repo:
        return evaluate_in(repo, request, request.run, settings, judge=judge, console=console)


def evaluate_in(
    repo: Repository,
    request: EvaluationRequest,
    run_request: RunRequest,
    settings: Settings,
    *,
    judge: tuple[JudgeSettings, str | None],
    console: Console | None = None,
    encoders: dict[str, Encoder] | None = None,
    preflighted: bool = False,
) -> EvaluationResult:
    """:func:`evaluate` of run ``run_request`` in an open repository: setup, replay,
    scoring, (judge,) gate. ``judge`` is :func:`judge_preflight`'s answer; ``encoders``
    (by encoder name) shares a loaded encoder between evaluations of one sample;
    ``preflighted``: the targets were preflighted already (several candidates: all of
    them before any replay), the replay does not preflight them again.

    Raises:
        ShadowEvalError, FileNotFoundError: as :func:`evaluate`.
    """
    timer = StageTimer()
    judge_settings, early_warning = judge
    judged: JudgeRunReport | None = None
    with timer.stage("setup"):
        run, targets = prepare_run(repo, run_request, settings, capture_log=request.capture_log)
        if request.judge:  # the baseline's and the resolved candidate's names, too
            check_judge_arms(judge_settings.model, judge_settings.url, run_arms(run))
    with timer.stage("replay"):
        replay = asyncio.run(
            replay_capture_log(
                repo,
                run.run_id,
                request.capture_log,
                targets,
                settings.replay,
                progress=request.progress,
                console=console,
                preflight=not preflighted,
            )
        )
    with timer.stage("load_encoder"):
        cache = {} if encoders is None else encoders
        encoder = cache.get(run_request.encoder)
        if encoder is None:
            encoder = cache[run_request.encoder] = make_encoder(
                run_request.encoder,
                device=request.device,
                model_path=settings.compare.model_path,
                backend=settings.compare.backend,
                cache_dir=settings.compare.cache_dir,
            )
    with timer.stage("compare"):
        compared = compare_run(
            repo,
            run.run_id,
            encoder,
            structured_task_types=run_request.structured_task_types,
            refusal_patterns=settings.compare.refusal_patterns,
            covered_scripts=settings.compare.covered_scripts(),
            embedding_cache=settings.compare.embedding_cache,
        )
    if request.judge:
        with timer.stage("judge"):
            judged = run_judge(
                repo,
                run.run_id,
                judge_settings,
                send_pairs=request.send_pairs,
                command=run_request.command,
                on_plan=None if console is None else _plan_printer(console),
            )
            if early_warning is not None:
                judged.warnings.insert(0, early_warning)
    with timer.stage("gate"):
        gate = gate_run(repo, run, command=run_request.command)
        run = repo.get_run(run.run_id) or run
    rejected = repo.count_rejected(run.run_id)
    return EvaluationResult(run, replay, compared, gate, timer.seconds, rejected, judged)


def _plan_printer(console: Console) -> Callable[[JudgeRunReport], None]:
    """Print the judge run's plan and self-preference risks before it sends anything."""

    def show(report: JudgeRunReport) -> None:
        lines = [*(report.plan.lines() if report.plan else []), *report.self_preference]
        for line in lines:
            console.print(f"judge {line}", highlight=False, markup=False)

    return show
