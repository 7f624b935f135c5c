"""Gating a run: its verdict under the run's frozen policy, computed once per checkpoint.

Every face that asks for a verdict (``shadow-eval gate``, ``evaluate``, the HTTP API, the
demo) calls :func:`gate_run`, so they cannot disagree.

The pairs' quality judgements — the LLM judge's, reference correctness and the analysts'
labels — are resolved to one per pair (:func:`shadoweval.stats.judgements.resolve_judgements`: human
> reference > judge, a failed judgement never over a successful one) and enter the pairs
table (:func:`shadoweval.stats.frame.pairs_frame`, its ``quality`` / ``quality_source`` columns),
from
which the net-harm check estimates the direction of the change. :attr:`GateResult.judgement`
summarizes them for the report (:func:`shadoweval.application.judging.summarize_judgements`).

The LLM judge votes only where it earns it: its agreement with the analysts' labels and the
reference judgements is read against the policy's ``judge.min_agreement``
(:func:`shadoweval.stats.judge_quality.apply_judge_floor`); in a task type below the floor its
judgements are left out before resolving, and the verdict's coverage names the task type
(:attr:`~shadoweval.records.Coverage.judge_not_voting`) so that its net-harm check holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from shadoweval.application.environment import environment_failures
from shadoweval.application.judging import JudgementSummary, summarize_judgements
from shadoweval.application.run_policy import load_gate_policy, run_policy_warnings
from shadoweval.records import Coverage, Decision, Verdict
from shadoweval.stats.checkpoints import at_sample_cap, evaluate_poll
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.judge_quality import apply_judge_floor, not_voting_notes
from shadoweval.stats.judgements import ppi_columns, resolve_judgements
from shadoweval.stats.policy import GatePolicy, parse_policy_yaml, policy_traffic_problems
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage import Repository, RunInfo, RunStatus

# load_gate_policy and run_policy_warnings are run_policy's (the replay needs them without the
# gate's statistics), re-exported here for the faces that gate.
__all__ = [
    "GateResult",
    "gate_run",
    "load_gate_policy",
    "policy_warnings",
    "run_policy_warnings",
]


@dataclass(slots=True)
class GateResult:
    """A verdict with the table it was computed from (``pairs``) and whether it is new.

    ``judgement`` summarizes the run's quality judgements (sources, the frozen judge and
    its endpoint, judge tokens, judge–human agreement): the report's ``judgement``
    section (:meth:`JudgementSummary.as_dict`). ``warnings``: the policy's task types and
    routes that match none of the run's traffic (:func:`policy_warnings`), for the faces
    to print; a task type among them also holds the verdict.
    """

    verdict: Verdict
    pairs: pd.DataFrame
    policy: GatePolicy
    reused_terminal: bool = False
    reused_look: bool = False
    judgement: JudgementSummary | None = None
    warnings: tuple[str, ...] = ()
    summary: pd.DataFrame = field(init=False)

    def __post_init__(self) -> None:
        self.summary = task_type_summary(self.pairs, self.verdict)

    def settled(self) -> str:
        """Why no later poll can change this verdict (``""`` when one can).

        PROMOTE and ROLLBACK are terminal (``"terminal"``; new judgements reopen them, but
        a poll alone does not); a HOLD at the sample cap ``sequential.n_max`` is final: more
        pairs map to the same, last look (:func:`shadoweval.stats.checkpoints.at_sample_cap`).
        """
        verdict = self.verdict
        if verdict.decision in (Decision.PROMOTE, Decision.ROLLBACK):
            return "terminal"
        if at_sample_cap(verdict, self.policy):
            return (
                f"final HOLD at the sample cap n_max {self.policy.sequential.n_max}: more "
                "pairs cannot change it (new labels or judgements re-open the look: gate again)"
            )
        return ""


def policy_warnings(policy: GatePolicy, coverage: Coverage, pairs: pd.DataFrame) -> tuple[str, ...]:
    """``policy task_types.extration matches no traffic (…); did you mean 'extraction'?``
    for every policy key that matches none of the run's task types or routes
    (:func:`shadoweval.stats.policy.policy_traffic_problems`)."""
    seen = {t for t, n in coverage.per_task_type.items() if n > 0}
    if len(pairs):
        seen |= set(pairs["task_type"].astype(str).unique())
    routes = set(coverage.per_route) if coverage.per_route else None
    problems = policy_traffic_problems(policy, task_types=seen, routes=routes)
    return tuple(f"policy {problem.describe()}" for problem in problems)


def gate_run(repo: Repository, run: RunInfo, *, command: str) -> GateResult:
    """Compute, store and return the verdict of ``run`` under its frozen policy.

    PROMOTE and ROLLBACK are terminal for the evidence they saw: later calls return that
    verdict (``reused_terminal``) until judgements of its look's pairs change — new ground
    truth (``labels import-reference``, ``labels import``) or judge outcomes — which
    reopen the gate (:func:`shadoweval.stats.checkpoints.evaluate_poll`): the new verdict
    is stored after the terminal one, so the run's verdict history shows both. The
    verdict is that of the run's latest checkpoint
    (:func:`shadoweval.stats.checkpoints.evaluate_poll`:
    the first ``n_k`` pairs by capture time; its ``look`` is the checkpoint index, 0
    before the first checkpoint). Each checkpoint is evaluated once: a poll that reaches
    the look of the stored verdict returns it as stored (``reused_look``) and stores
    nothing, so polls between two checkpoints repeat the same verdict even when late
    pairs have been scored meanwhile. The pairs table carries each pair's resolved quality
    judgement (judge, reference or human). The candidate's failures of the environment
    are named on the verdict's coverage (:func:`environment_failures`), and a look whose
    such pairs changed (a re-run replayed them) is evaluated again.
    """
    policy = parse_policy_yaml(run.policy_yaml)
    # A capture whose live model changed: the policy's baseline_model scopes pairs and
    # coverage to its exchanges (stats.gate.validity.baseline_model_problems says so).
    scores = repo.load_pair_scores(run.run_id, baseline_model=policy.baseline_model)
    judgements = repo.list_judgements(run.run_id)
    labels = repo.load_labels(run.run_id)
    # The judge votes only where it agrees with the labels enough (judge.min_agreement):
    # below the floor it is neither a pair's quality nor the PPI predictor.
    floor = apply_judge_floor(judgements, labels, policy.judge)
    resolved = resolve_judgements(floor.voting, labels)
    ppi = ppi_columns(floor.voting, labels)
    pairs = pairs_frame(scores, policy, judgements=resolved, ppi=ppi)
    judgement = summarize_judgements(
        run.run_id, judgements, labels, repo.run_judge(run.run_id), resolved, floor=floor
    )
    latest = repo.latest_verdict(run.run_id)
    coverage = repo.coverage_counts(run.run_id, baseline_model=policy.baseline_model)
    warnings = policy_warnings(policy, coverage, pairs)
    coverage = coverage.model_copy(
        update={
            "environment_failures": environment_failures(repo, run, scores),
            "judge_not_voting": not_voting_notes(floor.standings),
        }
    )
    verdict = evaluate_poll(pairs, policy, run_id=run.run_id, coverage=coverage, previous=latest)
    if latest is not None and verdict is latest:
        terminal = latest.decision in (Decision.PROMOTE, Decision.ROLLBACK)
        return GateResult(
            latest,
            pairs,
            policy,
            reused_terminal=terminal,
            reused_look=not terminal,
            judgement=judgement,
            warnings=warnings,
        )
    status = {
        Decision.PROMOTE: RunStatus.PROMOTED,
        Decision.ROLLBACK: RunStatus.ROLLED_BACK,
        Decision.HOLD: RunStatus.HELD,
    }[verdict.decision]
    repo.save_verdict(verdict, command)
    reopened = latest is not None and latest.decision in (Decision.PROMOTE, Decision.ROLLBACK)
    repo.set_run_status(run.run_id, status, reopen=reopened)
    return GateResult(verdict, pairs, policy, judgement=judgement, warnings=warnings)
