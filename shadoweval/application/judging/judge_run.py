"""``shadow-eval judge run``: judge a run's selected changed pairs and store the judgements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from shadoweval.application.judging.cost import (
    BudgetOutcome,
    JudgeCostPlan,
    check_judge_arms,
    cost_plan,
    judge_budget,
    run_arms,
)
from shadoweval.application.judging.identity import check_judge_settings, freeze_judge, judge_client
from shadoweval.application.judging.planning import JudgePlan, pair_text, plan_judging
from shadoweval.config import JudgeSettings
from shadoweval.errors import PreflightError, ShadowEvalError
from shadoweval.judge import (
    Answer,
    JudgeClient,
    JudgeProbe,
    PairText,
    preflight_judge,
)
from shadoweval.judge.budgeted import judge_within_budget
from shadoweval.judge.cost import (
    JudgeBudget,
    PairEstimate,
    estimate_pair,
    template_tokens,
)
from shadoweval.judge.selection import send_order
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
        not_sent: pairs selected but not sent because the budget was reached (they stay
            unjudged; ``selected`` counts the pairs sent).
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
    not_sent: int = 0

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
        plan: what the run planned to send and its estimated cost (``None`` before it is
            made); budget: the budget applied; outcome: how the run ended against it.
        self_preference: one line per arm that shares the judge's family
            (:func:`shadoweval.judge.arms.self_preference_risks`).
        dry_run: the plan only: nothing was sent and the judge was not frozen.
    """

    run_id: str
    identity: JudgeIdentity
    endpoint: str
    first_use: bool
    task_types: dict[str, TaskTypeJudging]
    failures: list[str] = field(default_factory=list)
    released: bool = False
    warnings: list[str] = field(default_factory=list)
    plan: JudgeCostPlan | None = None
    budget: JudgeBudget = field(default_factory=JudgeBudget)
    outcome: BudgetOutcome = field(default_factory=BudgetOutcome)
    self_preference: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def budget_message(self) -> str:
        """``budget of N tokens reached after K of M pairs (T tokens used)…`` or ``""``."""
        return self.outcome.message(self.budget)

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
            "dry_run": self.dry_run,
            "plan": None if self.plan is None else self.plan.as_dict(),
            "budget_outcome": self.outcome.as_dict(self.budget),
            "self_preference_risks": self.self_preference,
        }


def _pair_texts(
    repo: Repository, run_id: str, plan: JudgePlan, ids: Sequence[str], client: JudgeClient
) -> tuple[list[PairText], list[PairEstimate]]:
    """What the judge is shown of the selected pairs, in ``ids`` order, and each pair's
    estimated tokens (:func:`shadoweval.judge.cost.estimate_pair`, from the usage the capture
    and the replay stored), read :data:`_SAMPLE_CHUNK` at a time."""
    pairs: list[PairText] = []
    estimates: list[PairEstimate] = []
    template = template_tokens(client.response_format)
    for start in range(0, len(ids), _SAMPLE_CHUNK):
        chunk = ids[start : start + _SAMPLE_CHUNK]
        for sample in repo.samples_by_ids(run_id, chunk):
            pair = pair_text(sample, plan.selection.stratum_of[sample.exchange_id])
            captured = sample.tokens
            pairs.append(pair)
            estimates.append(
                estimate_pair(
                    pair,
                    captured,
                    max_tokens=client.max_tokens,
                    response_format=client.response_format,
                    template=template,
                )
            )
    return pairs, estimates


async def _judge_all(
    client: JudgeClient,
    pairs: Sequence[PairText],
    estimates: Sequence[PairEstimate],
    on_judged: Callable[[PairJudgement], None],
    report: JudgeRunReport,
    *,
    preflight: bool,
) -> int | None:
    """Judge ``pairs`` within ``report.budget`` (the client started here), after the
    preflight of the first one when ``preflight`` (its warning added to
    ``report.warnings``, its tokens counted in ``report.outcome.spend``, apart in its
    ``preflight_tokens``, and calibrating the first pair's estimate).

    Returns:
        The index of the first pair the budget did not admit, ``None`` when all were sent.

    Raises:
        PreflightError: the judge failed the preflight request.
    """
    spend = report.outcome.spend
    async with client:
        if preflight:

            def count(probe: JudgeProbe) -> None:
                if probe.vote is not None:
                    spend.count_preflight(probe.vote, estimates[0])

            warning = await preflight_judge(client, pairs[0], on_probe=count)
            if warning is not None:
                report.warnings.append(warning)
        return await judge_within_budget(
            client, pairs, estimates, report.budget, spend, on_judged=on_judged
        )


def _first_fits(plan: JudgeCostPlan) -> bool:
    """The first pair's two calls (and the preflight's one) fit the budget by estimate."""
    if not plan.estimates:
        return True
    first = plan.estimates[0]
    calls = 2 + plan.preflight_calls
    return plan.budget.fits(
        calls * first.prompt_tokens_per_call, calls * first.completion_tokens_per_call
    )


def _not_sent(report: JudgeRunReport, pairs: Sequence[PairText], stop: int) -> None:
    """Record that ``pairs[stop:]`` were not sent (the budget): counted per task type."""
    outcome = report.outcome
    outcome.status = "budget_reached"
    outcome.sent = stop
    if report.plan is not None and stop < len(report.plan.estimates):
        outcome.next_pair_tokens = report.plan.estimates[stop].pair_tokens
    for pair in pairs[stop:]:
        tally = report.task_types[pair.task_type]
        tally.selected -= 1
        tally.not_sent += 1


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


def _new_report(
    run_id: str,
    client: JudgeClient,
    plan: JudgePlan,
    pairs: Sequence[PairText],
    estimates: Sequence[PairEstimate],
    budget: JudgeBudget,
    preflight: bool,
) -> JudgeRunReport:
    """The report of a judge run before it sends: the selection's counts and the plan."""
    return JudgeRunReport(
        run_id=run_id,
        identity=client.identity,
        endpoint=client.endpoint,
        first_use=False,
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
        plan=cost_plan(estimates, budget, max_tokens=client.max_tokens, preflight=preflight),
        budget=budget,
        outcome=BudgetOutcome(planned=len(pairs), sent=len(pairs)),
    )


def run_judge(
    repo: Repository,
    run_id: str,
    settings: JudgeSettings,
    *,
    send_pairs: bool = False,
    max_per_task_type: int | None = None,
    command: str = JUDGE_COMMAND,
    transport: httpx.AsyncBaseTransport | None = None,
    budget_tokens: int | None = None,
    budget_usd: float | None = None,
    dry_run: bool = False,
    on_plan: Callable[[JudgeRunReport], None] | None = None,
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
        budget_tokens, budget_usd: ``--budget-tokens`` / ``--budget-usd``, over the run's
            policy (``judge.budget_tokens`` / ``judge.budget_usd``;
            :func:`shadoweval.application.judging.cost.judge_budget`).
        dry_run: make the plan and return: nothing is sent, the judge is not frozen (and
            sending need not be switched on).
        on_plan: called with the report once the plan is made, before anything is sent
            (the CLI prints ``report.plan.lines()`` there).

    Before anything is sent: the judge is refused when it is one of the run's arms (same
    model name or base URL; :func:`shadoweval.application.judging.cost.check_judge_arms`), a
    judge of an arm's family is named in ``report.self_preference``, and the plan
    (``report.plan``: pairs, calls, estimated tokens, budget) is made. The pairs are sent
    in :func:`shadoweval.judge.selection.send_order` while the budget admits the next pair
    (:mod:`shadoweval.judge.budgeted`); when it does not, the run stops there
    (``report.outcome.status`` ``budget_reached``, :attr:`JudgeRunReport.budget_message`):
    the judged pairs are stored, the rest are not sent and stay unjudged. A budget that
    does not admit the first pair sends nothing and freezes no judge.

    With ``settings.preflight`` (the default) the first selected pair is sent once before
    the others (:mod:`shadoweval.judge.preflight`, its answer not stored, its tokens counted
    against the budget): no connection or a configuration status stops the run, any other
    failure is a warning in ``report.warnings``.

    Raises:
        ConfigError: sending is off, the URL or model is missing, the judge is one of the
            arms (the setting and value named), the run has another judge (both named), or
            a bad budget; ShadowEvalError: unknown run.
        PreflightError: the judge failed the preflight request (URL, status and body
            named); nothing was judged, and a judge this call froze is unfrozen again.
        StorageError: on database failure.

    When this call froze the judge and every call failed, the freeze is removed again
    (:meth:`Repository.release_judge`, ``report.released``).
    """
    check_judge_settings(settings, send_pairs=send_pairs or dry_run)
    run = repo.get_run(run_id)
    if run is None:
        raise ShadowEvalError(f"run {run_id!r} not found")
    client = judge_client(settings, transport)
    identity = client.identity
    risks = check_judge_arms(identity.model, settings.url, run_arms(run))
    plan = plan_judging(repo, run, max_per_task_type=max_per_task_type)
    budget = judge_budget(plan.policy, budget_tokens=budget_tokens, budget_usd=budget_usd)
    ids = send_order(plan.selection)
    pairs, estimates = _pair_texts(repo, run_id, plan, ids, client) if ids else ([], [])
    report = _new_report(run_id, client, plan, pairs, estimates, budget, settings.preflight)
    report.self_preference, report.dry_run = risks, dry_run
    if on_plan is not None:
        on_plan(report)
    if dry_run:
        report.outcome.sent = 0
        return report
    assert report.plan is not None
    fits = _first_fits(report.plan)
    if not fits and repo.run_judge(run_id) is None:
        _not_sent(report, pairs, 0)  # nothing is sent: no preflight, no judge frozen
        return report
    report.first_use = freeze_judge(repo, run, identity, command)  # or refuse another
    if not fits:
        _not_sent(report, pairs, 0)
    if not fits or not pairs:
        return report
    _send(repo, report, client, pairs, estimates, settings=settings, command=command)
    return report


def _send(
    repo: Repository,
    report: JudgeRunReport,
    client: JudgeClient,
    pairs: Sequence[PairText],
    estimates: Sequence[PairEstimate],
    *,
    settings: JudgeSettings,
    command: str,
) -> None:
    """Judge and store the pairs (:func:`run_judge` after the freeze)."""
    pending: list[PairJudgement] = []
    run_id, identity, first_use = report.run_id, report.identity, report.first_use

    def on_judged(judgement: PairJudgement) -> None:
        report.task_types[judgement.task_type].add(judgement)
        if judgement.outcome is None and len(report.failures) < 10:
            report.failures.append(f"{judgement.exchange_id}: {judgement.error}")
        pending.append(judgement)
        if len(pending) >= _SAVE_EVERY:
            repo.save_judgements(pending)
            pending.clear()

    try:
        stop = asyncio.run(
            _judge_all(client, pairs, estimates, on_judged, report, preflight=settings.preflight)
        )
    except PreflightError as exc:
        if first_use:  # nothing was judged: the judge that failed must not bind the run
            repo.release_judge(run_id, identity, command=command, reason=str(exc))
        raise
    finally:
        if pending:
            repo.save_judgements(pending)
    if stop is not None:
        _not_sent(report, pairs, stop)
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
