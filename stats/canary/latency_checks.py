"""The canary's latency checks as check families: the candidate/baseline quantile ratio
(promote) and the candidate's quantile above an absolute limit (rollback), from order
statistics (:mod:`shadoweval.stats.canary.quantiles`)."""

from __future__ import annotations

import pandas as pd

from shadoweval.records import StepCheck, StepStatus, finite_or_none
from shadoweval.stats.canary.frames import latencies
from shadoweval.stats.canary.looks import truncate_at_candidate
from shadoweval.stats.canary.policy import latency_key_parts
from shadoweval.stats.canary.quantiles import quantile_above_limit, quantile_ratio_interval
from shadoweval.stats.canary.step import CanaryJudged, StepContext, judged, look_note

__all__ = ["latency_limit_check", "latency_limits", "latency_ratio_check", "latency_ratios"]

_RATIO = "quantile_ratio_order_statistics"
_LIMIT = "quantile_above_limit_order_statistics"

_Bounds = tuple[float | None, float | None, float | None]
"""A check's (estimate, low, high)."""


def latency_ratio_check(
    frame: pd.DataFrame, key: str, margin: float, level: float, note: str
) -> CanaryJudged:
    """Promote: the one-sided upper bound of the candidate/baseline ratio of the latency
    quantile ``key`` (e.g. ``e2e_ms.p95``) below ``margin``. No values in either arm: not
    applicable, not blocking; too few for a bound: blocking, ``not_enough_data``."""
    column, q = latency_key_parts(key)
    cand = latencies(frame, "candidate", column)
    base = latencies(frame, "baseline", column)
    name = f"latency_ratio.{key}"

    def check(status: StepStatus, bounds: _Bounds, detail: str) -> StepCheck:
        return StepCheck.of(
            name, "promote", status, bounds, margin, level, detail, statistic=_RATIO
        )

    if cand.size == 0 and base.size == 0:
        detail = f"{key}: no {column} values in either arm (not applicable, not required)"
        return judged(check("not_enough_data", (None, None, None), detail), blocking=False)
    result = quantile_ratio_interval(cand, base, q, level)
    if not result.enough:
        detail = (
            f"{key}: {result.n_candidate} candidate and {result.n_baseline} baseline "
            f"latencies are too few for an order-statistic bound at level {level:.4g} "
            f"({note})"
        )
        ratio_bounds = (finite_or_none(result.estimate), None, None)
        return judged(check("not_enough_data", ratio_bounds, detail))
    passed = result.below(margin)
    detail = (
        f"{key}: candidate {result.candidate_quantile:.1f} ms vs baseline "
        f"{result.baseline_quantile:.1f} ms, ratio {result.estimate:.3f}, one-sided "
        f"{1 - level:.4f} upper bound {result.high:.3f} "
        f"({result.candidate_upper_ms:.1f} / {result.baseline_lower_ms:.1f} ms); "
        f"{'below' if passed else 'not shown below'} the margin {margin:g} ({note})"
    )
    return judged(check("pass" if passed else "fail", (result.estimate, None, result.high), detail))


def latency_limit_check(
    frame: pd.DataFrame, key: str, limit_ms: float, level: float, note: str
) -> CanaryJudged:
    """Rollback: the one-sided lower bound of the candidate's latency quantile ``key``
    above ``limit_ms`` (a breach); no look yet or too few values: ``not_enough_data``."""
    column, q = latency_key_parts(key)
    name = f"latency_limit.{key}"
    values = latencies(frame, "candidate", column)

    def check(status: StepStatus, bounds: _Bounds, detail: str) -> StepCheck:
        at_level = level if level > 0.0 else None  # no rollback look yet: no level
        return StepCheck.of(
            name, "rollback", status, bounds, limit_ms, at_level, detail, statistic=_LIMIT
        )

    if level <= 0.0:
        detail = f"{key}: no rollback look yet ({note})"
        return judged(check("not_enough_data", (None, None, None), detail))
    result = quantile_above_limit(values, q, limit_ms, level)
    if not result.enough:
        detail = (
            f"{key}: {result.n} candidate latencies are too few for a lower order-statistic "
            f"bound at level {level:.4g} ({note})"
        )
        limit_bounds = (finite_or_none(result.estimate), None, None)
        return judged(check("not_enough_data", limit_bounds, detail))
    detail = (
        f"{key}: candidate {result.estimate:.1f} ms, one-sided {1 - level:.4f} lower bound "
        f"{result.low:.1f} ms; {'above' if result.above else 'not shown above'} the limit "
        f"{limit_ms:g} ms (n = {result.n}, {note})"
    )
    status: StepStatus = "breach" if result.above else "pass"
    return judged(check(status, (result.estimate, result.low, None), detail))


def latency_limits(ctx: StepContext) -> list[CanaryJudged]:
    """Rollback: every ``rollback.latency_limits_ms`` key on the data cut at the rollback
    checkpoint (also at share 1.0: the candidate alone)."""
    note = look_note(ctx.rollback, "rollback")
    return [
        latency_limit_check(ctx.rollback_frame, key, limit, ctx.rollback.level, note)
        for key, limit in ctx.policy.rollback.latency_limits_ms.items()
    ]


def latency_ratios(ctx: StepContext) -> list[CanaryJudged]:
    """Promote: every ``promote.latency_ratio_margins`` key on the data cut at the promote
    checkpoint (none before the first checkpoint or at share 1.0)."""
    if ctx.last or ctx.promote.k == 0:
        return []
    frame = truncate_at_candidate(ctx.obs, ctx.promote.n_k)
    note = look_note(ctx.promote, "promote")
    return [
        latency_ratio_check(frame, key, margin, ctx.promote.level, note)
        for key, margin in ctx.policy.promote.latency_ratio_margins.items()
    ]
