"""Cost against quality: a cost guardrail alone does not roll back a better candidate.

A candidate that answers better but longer (BFCL: six categories significantly better,
output tokens ×1.52) is a trade-off for a person to weigh, not a regression: rolling it
back on ``output_tokens`` alone throws the quality gain away without saying so. When the
only checks that would roll a run back are cost guardrails (:data:`COST_METRICS`) and some
unit's quality is significantly better — its ``net_harm`` interval at the look's level lies
wholly below 0 (:mod:`shadoweval.stats.net_harm`: P(worse) − P(better) < 0) — the cost FAILs
hold instead of rolling back, and the verdict's first reason states the trade-off. The
policy's ``cost.decides: true`` keeps the rollback. A significant harm or any other
rollback FAIL rolls back as before; a cost FAIL without a quality gain rolls back as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shadoweval.records import POOLED, Check, CheckOutcome
from shadoweval.stats.engine import Judged
from shadoweval.stats.net_harm import NET_HARM_METRIC
from shadoweval.stats.policy import GatePolicy

__all__ = ["COST_METRICS", "cost_trade_off"]

COST_METRICS = frozenset({"output_tokens"})
"""The cost guardrails: metrics that measure what an answer costs, not how good it is."""


def _better_units(judged: Sequence[Judged[Check]]) -> list[Check]:
    """The ``net_harm`` checks whose interval lies wholly below 0 (candidate better)."""
    return [
        j.check
        for j in judged
        if j.check.metric == NET_HARM_METRIC
        and j.check.ci_high is not None
        and j.check.ci_high < 0.0
    ]


def _where(checks: Sequence[Check]) -> str:
    task_types = [c.task_type for c in checks if c.task_type != POOLED]
    if not task_types:
        return "pooled"
    word = "task type" if len(task_types) == 1 else "task types"
    return f"{len(task_types)} {word} ({', '.join(f'`{t}`' for t in task_types)})"


def _cost_text(checks: Sequence[Check]) -> str:
    pooled = [c for c in checks if c.task_type == POOLED]
    shown = pooled or list(checks)
    parts = []
    for c in shown:
        unit = "pooled" if c.task_type == POOLED else f"in `{c.task_type}`"
        ratio = f"x{c.estimate:.2f}" if c.estimate is not None else "above its limit"
        parts.append(f"{c.metric} {ratio} {unit} (limit x{c.margin:g})")
    more = len(checks) - len(shown)
    return ", ".join(parts) + (f" and in {more} task types" if more else "")


def cost_trade_off(
    judged: list[Judged[Check]], policy: GatePolicy
) -> tuple[list[Judged[Check]], list[str]]:
    """The judged checks with cost FAILs turned into holds where quality is better, and
    the trade-off's reason line (``[]`` when nothing was turned).

    Nothing changes when ``policy.cost.decides`` is true, when no cost guardrail FAILs
    with a rollback, when a significant harm or a FAIL of another check would roll the
    run back anyway, or when no unit's quality is significantly better.
    """
    cost_fails = [
        j
        for j in judged
        if j.check.metric in COST_METRICS
        and j.check.outcome == CheckOutcome.FAIL
        and j.on_fail == "rollback"
    ]
    if policy.cost.decides or not cost_fails:
        return judged, []
    other_rollback = any(
        j.harm
        or (
            j.check.outcome == CheckOutcome.FAIL
            and j.on_fail == "rollback"
            and j.check.metric not in COST_METRICS
        )
        for j in judged
    )
    better = _better_units(judged)
    if other_rollback or not better:
        return judged, []
    turned = {id(j) for j in cost_fails}
    out = [dataclasses.replace(j, on_fail="hold") if id(j) in turned else j for j in judged]
    line = (
        f"trade-off: quality better in {_where(better)} (net harm significantly below 0), "
        f"{_cost_text([j.check for j in cost_fails])}: a cost guardrail alone does not roll "
        "back a candidate whose quality is significantly better (cost.decides false): HOLD "
        "for a person to weigh the cost against the gain; set cost.decides: true to let "
        "cost decide"
    )
    return out, [line]
