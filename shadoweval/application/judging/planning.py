"""Which changed pairs of a run a judge run sends (the budget), and what it shows of each."""

from __future__ import annotations

from dataclasses import dataclass

from shadoweval.errors import ConfigError
from shadoweval.judge import (
    Answer,
    PairText,
    select_pairs,
)
from shadoweval.judge.selection import Selection
from shadoweval.records import (
    JudgementSource,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import GatePolicy, effective, parse_policy_yaml
from shadoweval.storage import Repository, RunInfo
from shadoweval.storage.samples import Sample


@dataclass(frozen=True)
class JudgePlan:
    """Which pairs a judge run would send, and why.

    Attributes:
        run: the run.
        policy: its frozen policy.
        selection: the budget's choice (:func:`shadoweval.judge.selection.select_pairs`).
        judged_before: exchange ids with a successful judge judgement before this run.
        budgets: the per-task-type budget applied.
    """

    run: RunInfo
    policy: GatePolicy
    selection: Selection
    judged_before: frozenset[str]
    budgets: dict[str, int]


def plan_judging(
    repo: Repository, run: RunInfo, *, max_per_task_type: int | None = None
) -> JudgePlan:
    """Select the changed pairs of ``run`` to send to the judge (no request is sent).

    The pairs table is built under the run's frozen policy and classified by
    :func:`shadoweval.stats.change.classify_changes`; the budget per task type is
    ``max_per_task_type`` or the policy's ``net_harm.max_judged_per_task_type`` of that
    task type.

    Raises:
        ConfigError: ``max_per_task_type`` < 1.
        StorageError: on database failure.
    """
    if max_per_task_type is not None and max_per_task_type < 1:
        raise ConfigError(
            f"--max-per-task-type {max_per_task_type} must be >= 1",
            field="--max-per-task-type",
            value=max_per_task_type,
        )
    policy = parse_policy_yaml(run.policy_yaml)
    frame = pairs_frame(repo.load_pair_scores(run.run_id), policy)
    changes = classify_changes(frame, policy)
    judged_before = frozenset(
        j.exchange_id
        for j in repo.list_judgements(run.run_id, JudgementSource.JUDGE)
        if j.outcome is not None
    )
    task_types = [str(t) for t in frame["task_type"]]
    budgets = {
        t: max_per_task_type
        if max_per_task_type is not None
        else effective(policy, t).net_harm.max_judged_per_task_type
        for t in sorted(set(task_types))
    }
    selection = select_pairs(
        run_id=run.run_id,
        exchange_ids=[str(e) for e in frame["exchange_id"]],
        task_types=task_types,
        changed=changes.changed,
        stratum=changes.stratum,
        already_judged=judged_before,
        max_per_task_type=budgets,
    )
    return JudgePlan(run, policy, selection, judged_before, budgets)


def pair_text(sample: Sample, stratum: int | None) -> PairText:
    """What the judge is shown of one pair: the stored request and both stored answers."""
    tools = sample.request_params.get("tools")
    return PairText(
        run_id=sample.run_id,
        exchange_id=sample.exchange_id,
        task_type=sample.task_type,
        messages=sample.request_messages,
        tools=tools if isinstance(tools, list) else None,
        baseline=Answer(text=sample.baseline_text, tool_calls=sample.baseline_tool_calls),
        candidate=Answer(
            text=sample.candidate_text,
            tool_calls=sample.candidate_tool_calls,
            error=sample.candidate_error_kind,
        ),
        stratum=stratum,
    )
