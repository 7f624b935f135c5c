"""``shadow-eval judge run``: judge a run's selected changed pairs and store the judgements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from shadoweval.application.judging.identity import check_judge_settings, freeze_judge, judge_client
from shadoweval.application.judging.planning import JudgePlan, pair_text, plan_judging
from shadoweval.config import JudgeSettings
from shadoweval.errors import PreflightError, ShadowEvalError
from shadoweval.judge import (
    Answer,
    JudgeClient,
    PairText,
    judge_pairs,
    preflight_judge,
)
from shadoweval.records import (
    JudgeIdentity,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.storage import Repository

JUDGE_COMMAND = "shadow-eval judge run"

_SAVE_EVERY = 25
"""Judgements stored per transaction while a judge run goes on."""
_SAMPLE_CHUNK = 500


@dataclass
class TaskTypeJudging:
    """One task type of a judge run.

    Attributes:
        task_type: the task type.
        pairs: its pairs; changed: its changed pairs.
        already_judged: changed pairs judged successfully before this run.
        budget: the budget applied; selected: pairs sent now.
        judged: of those, judged successfully; failed: judgements that failed (kept).
        better, tie, worse: outcomes of the pairs judged now.
        disagreements: ties because the two orders disagreed (position bias).
        prompt_tokens, completion_tokens: the judge's tokens for this task type (votes
            that reported usage), apart from the run's own accounting.
    """

    task_type: str
    pairs: int
    changed: int
    already_judged: int
    budget: int
    selected: int
    judged: int = 0
    failed: int = 0
    better: int = 0
    tie: int = 0
    worse: int = 0
    disagreements: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, judgement: PairJudgement) -> None:
        """Count one judgement of this run."""
        for vote in judgement.votes:
            self.prompt_tokens += vote.prompt_tokens or 0
            self.completion_tokens += vote.completion_tokens or 0
        if judgement.outcome is None:
            self.failed += 1
            return
        self.judged += 1
        if judgement.outcome is QualityOutcome.CANDIDATE_BETTER:
            self.better += 1
        elif judgement.outcome is QualityOutcome.CANDIDATE_WORSE:
            self.worse += 1
        else:
            self.tie += 1
            if judgement.rationale.startswith("orders disagree"):
                self.disagreements += 1


@dataclass
class JudgeRunReport:
    """What a judge run did: the judge, where the pairs went, and the counts per task type.

    Attributes:
        run_id: the run.
        identity: the run's (frozen) judge.
        endpoint: where the pairs were sent (the judge's public base URL).
        first_use: this run froze the judge.
        task_types: task type → :class:`TaskTypeJudging`.
        failures: the first failed judgements' errors (at most 10), for the operator.
        released: every call of this run failed, so the judge it froze was unfrozen
            (audit ``judge_released``): a corrected judge may judge the run.
        warnings: the preflight's warning when the judge failed it in a way a retry may
            fix (:mod:`shadoweval.judge.preflight`), for the operator.
    """

    run_id: str
    identity: JudgeIdentity
    endpoint: str
    first_use: bool
    task_types: dict[str, TaskTypeJudging]
    failures: list[str] = field(default_factory=list)
    released: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def selected(self) -> int:
        """Pairs sent to the judge."""
        return sum(t.selected for t in self.task_types.values())

    @property
    def judged(self) -> int:
        """Pairs the judge gave an outcome for in this run."""
        return sum(t.judged for t in self.task_types.values())

    @property
    def all_failed(self) -> bool:
        """Pairs were sent and not one was judged (wrong URL, model or key, an outage)."""
        return self.selected > 0 and self.judged == 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "run_id": self.run_id,
            "endpoint": self.endpoint,
            "judge": self.identity.model_dump(mode="json"),
            "first_use": self.first_use,
            "released": self.released,
            "task_types": [asdict(t) for t in self.task_types.values()],
            "failures": self.failures,
            "warnings": self.warnings,
        }


def _pair_texts(
    repo: Repository, run_id: str, plan: JudgePlan, ids: Sequence[str]
) -> list[PairText]:
    """What the judge is shown of the selected pairs, read :data:`_SAMPLE_CHUNK` at a time."""
    pairs: list[PairText] = []
    for start in range(0, len(ids), _SAMPLE_CHUNK):
        chunk = ids[start : start + _SAMPLE_CHUNK]
        pairs.extend(
            pair_text(sample, plan.selection.stratum_of[sample.exchange_id])
            for sample in repo.samples_by_ids(run_id, chunk)
        )
    return pairs


async def _judge_all(
    client: JudgeClient,
    pairs: Sequence[PairText],
    on_judged: Callable[[PairJudgement], None],
    report: JudgeRunReport,
    *,
    preflight: bool,
) -> None:
    """Judge ``pairs`` (the client started here), after the preflight of the first one
    when ``preflight`` (its warning added to ``report.warnings``).

    Raises:
        PreflightError: the judge failed the preflight request.
    """
    async with client:
        if preflight:
            warning = await preflight_judge(client, pairs[0])
            if warning is not None:
                report.warnings.append(warning)
        await judge_pairs(client, pairs, on_judged=on_judged)


_PREFLIGHT_PAIR = PairText(
    run_id="preflight",
    exchange_id="preflight",
    task_type="preflight",
    messages=({"role": "user", "content": "What is 2 + 2?"},),
    baseline=Answer(text="4"),
    candidate=Answer(text="2 + 2 = 4"),
)
"""A pair made up for the judge's preflight before a run has pairs: no user data."""


def preflight_judge_endpoint(
    settings: JudgeSettings, transport: httpx.AsyncBaseTransport | None = None
) -> str | None:
    """Send one made-up pair to the judge the settings describe, before anything else runs
    (``evaluate --judge`` calls it before the replay, so a wrong judge URL or key stops
    the run at once instead of after the whole replay and compare; issue 29 item 1).

    Returns:
        ``None`` when the judge answered a verdict; a warning when it failed in a way a
        retry may fix (:func:`shadoweval.judge.preflight_judge`).

    Raises:
        ConfigError: a bad URL or an empty model.
        PreflightError: no connection, or a configuration status (URL, status and the
            first bytes of the body named).
    """
    client = judge_client(settings, transport)

    async def probe() -> str | None:
        async with client:
            return await preflight_judge(client, _PREFLIGHT_PAIR)

    return asyncio.run(probe())


def run_judge(
    repo: Repository,
    run_id: str,
    settings: JudgeSettings,
    *,
    send_pairs: bool = False,
    max_per_task_type: int | None = None,
    command: str = JUDGE_COMMAND,
    transport: httpx.AsyncBaseTransport | None = None,
) -> JudgeRunReport:
    """Judge the run's selected changed pairs and store the judgements (module docstring).

    Args:
        repo: the results database.
        run_id: the run.
        settings: the judge settings (``settings.judge``).
        send_pairs: ``--send-pairs`` (else ``settings.send_pairs`` must be true).
        max_per_task_type: the budget per task type instead of the policy's.
        command: what asked (the audit log's ``command``).
        transport: an httpx transport seam for tests.

    With ``settings.preflight`` (the default) the first selected pair is sent once before
    the others (:mod:`shadoweval.judge.preflight`, its answer not stored): no connection or
    a configuration status stops the run, any other failure is a warning in
    ``report.warnings``.

    Raises:
        ConfigError: sending is off, the URL or model is missing, the run has another
            judge (both named), or a bad budget; ShadowEvalError: unknown run.
        PreflightError: the judge failed the preflight request (URL, status and body
            named); nothing was judged, and a judge this call froze is unfrozen again.
        StorageError: on database failure.

    When this call froze the judge and every call failed, the freeze is removed again
    (:meth:`Repository.release_judge`, ``report.released``).
    """
    check_judge_settings(settings, send_pairs=send_pairs)
    run = repo.get_run(run_id)
    if run is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    client = judge_client(settings, transport)
    identity = client.identity
    first_use = freeze_judge(repo, run, identity, command)
    plan = plan_judging(repo, run, max_per_task_type=max_per_task_type)
    report = JudgeRunReport(
        run_id=run_id,
        identity=identity,
        endpoint=client.endpoint,
        first_use=first_use,
        task_types={
            t: TaskTypeJudging(
                task_type=t,
                pairs=s.pairs,
                changed=s.changed,
                already_judged=s.already_judged,
                budget=s.budget,
                selected=len(s.selected),
            )
            for t, s in plan.selection.task_types.items()
        },
    )
    ids = plan.selection.exchange_ids
    if not ids:
        return report
    pairs = _pair_texts(repo, run_id, plan, ids)
    pending: list[PairJudgement] = []

    def on_judged(judgement: PairJudgement) -> None:
        report.task_types[judgement.task_type].add(judgement)
        if judgement.outcome is None and len(report.failures) < 10:
            report.failures.append(f"{judgement.exchange_id}: {judgement.error}")
        pending.append(judgement)
        if len(pending) >= _SAVE_EVERY:
            repo.save_judgements(pending)
            pending.clear()

    try:
        asyncio.run(_judge_all(client, pairs, on_judged, report, preflight=settings.preflight))
    except PreflightError as exc:
        if first_use:  # nothing was judged: the judge that failed must not bind the run
            repo.release_judge(run_id, identity, command=command, reason=str(exc))
        raise
    finally:
        if pending:
            repo.save_judgements(pending)
    if first_use and report.all_failed:
        # The freeze came before the first call; a judge that answered nothing must not
        # bind the run, or the corrected judge would be refused.
        report.released = repo.release_judge(
            run_id,
            identity,
            command=command,
            reason=f"all {report.selected} judge calls failed; first: "
            + (report.failures[0] if report.failures else "unknown"),
        )
    return report
