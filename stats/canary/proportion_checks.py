"""The canary's two-arm proportion checks as check families: the error, harm and
format-failure rates (rollback excess and promote non-inferiority) and the spot checks'
share rated bad (:mod:`shadoweval.stats.canary.two_arm`, :mod:`shadoweval.stats.canary.exact`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from shadoweval.records import StepCheck, StepStatus
from shadoweval.stats.canary.exact import (
    EXACT_BELOW_EXPECTED,
    exact_unconditional_test,
    smallest_expected_count,
)
from shadoweval.stats.canary.frames import ArmCounts, arm_counts
from shadoweval.stats.canary.looks import truncate_at_candidate
from shadoweval.stats.canary.step import CanaryJudged, StepContext, judged, look_note
from shadoweval.stats.canary.two_arm import (
    TwoProportionResult,
    proportion_excess,
    proportion_noninferiority,
)

__all__ = ["promote_rates", "proportion_check", "rollback_rates", "spot_checks"]

_RATE_WHAT = {
    "error_rate": ("error rate", "requests"),
    "harm_rate": ("harm rate", "answered requests"),
    "format_failure": ("format-failure rate", "format-expected answers"),
    "spot_check_bad": ("share of spot checks rated bad", "ratings"),
}


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}%"


def proportion_check(
    name: str,
    role: Literal["promote", "rollback"],
    counts: tuple[int, int, int, int],
    threshold: float,
    level: float,
    note: str,
) -> StepCheck:
    """One rate check on ``counts`` = (x_candidate, n_candidate, x_baseline, n_baseline):
    non-inferiority within the margin ``threshold`` (promote) or an excess over the
    tolerated ``threshold`` (rollback), one-sided at ``level``; the exact unconditional
    test replaces the score test when an expected count is below 5. No data or no look
    (``level`` 0) is ``not_enough_data``."""
    x_c, n_c, x_b, n_b = counts
    what, unit = _RATE_WHAT[name]
    if n_c == 0 or n_b == 0 or level <= 0.0:
        why = (
            f"no rollback look yet ({note})"
            if level <= 0.0
            else f"{n_c} candidate and {n_b} baseline {unit}"
        )
        return StepCheck.of(
            name,
            role,
            "not_enough_data",
            (None, None, None),
            threshold,
            None,
            f"{what}: {why}",
            statistic="two_proportion",
        )
    result: TwoProportionResult = (
        proportion_noninferiority(x_c, n_c, x_b, n_b, threshold, level)
        if role == "promote"
        else proportion_excess(x_c, n_c, x_b, n_b, threshold, level)
    )
    method, statistic = "score p", "farrington_manning"
    if smallest_expected_count(x_c, n_c, x_b, n_b, threshold) < EXACT_BELOW_EXPECTED:
        exact = exact_unconditional_test(
            x_c, n_c, x_b, n_b, threshold, "smaller" if role == "promote" else "larger", level
        )
        result = replace(result, p_value=exact.p_value, rejected=exact.rejected)
        method, statistic = "exact unconditional p (an expected count < 5)", "exact_unconditional"
    shown = f"candidate {x_c}/{n_c} ({_pct(x_c / n_c)}) vs baseline {x_b}/{n_b} ({_pct(x_b / n_b)})"
    tested = f"{method} = {result.p_value:.3g}, level {level:.4g}, {note}"
    status: StepStatus
    if role == "promote":
        status = "pass" if result.passed else "fail"
        detail = (
            f"{what}: {shown}, difference {_pct(result.estimate)}, one-sided {1 - level:.4f} "
            f"upper bound {_pct(result.high)}; {'is' if result.passed else 'is not shown'} "
            f"below the margin {_pct(threshold)} ({tested})"
        )
    else:
        status = "breach" if result.breach else "pass"
        detail = (
            f"{what}: {shown}, excess {_pct(result.estimate)}, one-sided {1 - level:.4f} lower "
            f"bound {_pct(result.low)}; {'exceeds' if result.breach else 'is not shown above'} "
            f"the tolerated {_pct(threshold)} ({tested})"
        )
    return StepCheck.of(
        name,
        role,
        status,
        (result.estimate, result.low, result.high),
        threshold,
        level,
        detail,
        statistic=statistic,
    )


def _rates(
    ctx: StepContext,
    arms: dict[str, ArmCounts],
    role: Literal["promote", "rollback"],
    thresholds: tuple[float, float, float],
    level: float,
    note: str,
) -> list[CanaryJudged]:
    """The error, harm and (when any answer expected a format) format-failure checks."""
    c, b = arms["candidate"], arms["baseline"]
    error_t, harm_t, format_t = thresholds
    checks = [
        proportion_check(
            "error_rate", role, (c.errors, c.requests, b.errors, b.requests), error_t, level, note
        ),
        proportion_check(
            "harm_rate", role, (c.harmed, c.answered, b.harmed, b.answered), harm_t, level, note
        ),
    ]
    if c.format_n or b.format_n:
        counts = (c.format_failed, c.format_n, b.format_failed, b.format_n)
        checks.append(proportion_check("format_failure", role, counts, format_t, level, note))
    return [judged(check) for check in checks]


def rollback_rates(ctx: StepContext) -> list[CanaryJudged]:
    """Rollback: the rate excesses on the data cut at the rollback checkpoint (none at
    share 1.0: no baseline arm)."""
    if ctx.last:
        return []
    rb = ctx.policy.rollback
    thresholds = (
        rb.error_rate_max_increase,
        rb.harm_rate_max_increase,
        rb.format_failure_max_increase,
    )
    note = look_note(ctx.rollback, "rollback")
    return _rates(ctx, ctx.rollback_arms, "rollback", thresholds, ctx.rollback.level, note)


def promote_rates(ctx: StepContext) -> list[CanaryJudged]:
    """Promote: rate non-inferiority on the data cut at the promote checkpoint (none before
    the first checkpoint or at share 1.0)."""
    if ctx.last or ctx.promote.k == 0:
        return []
    pm = ctx.policy.promote
    arms = arm_counts(truncate_at_candidate(ctx.obs, ctx.promote.n_k))
    thresholds = (pm.error_rate_margin, pm.harm_rate_margin, pm.format_failure_margin)
    note = look_note(ctx.promote, "promote")
    return _rates(ctx, arms, "promote", thresholds, ctx.promote.level, note)


def spot_checks(ctx: StepContext) -> list[CanaryJudged]:
    """The share of spot checks rated bad (rating ≤ ``rating_bad_at_or_below``), at the
    rating look on the smaller arm's rating count: a promote check (blocking once the
    look is reached) and a rollback check on the same counts."""
    if ctx.last:
        return []
    policy, look = ctx.policy, ctx.rating
    promote_t = policy.promote.spot_check_bad_margin
    rollback_t = policy.rollback.spot_check_bad_max_increase
    per_arm = ctx.ratings
    if look.k == 0:
        detail = (
            f"spot checks: {per_arm['candidate'].size} candidate and "
            f"{per_arm['baseline'].size} baseline ratings, fewer than "
            f"{policy.promote.min_ratings_per_arm} per arm (min_ratings_per_arm): "
            "not checked, not required"
        )
        return [
            judged(
                StepCheck.of(
                    "spot_check_bad",
                    role,
                    "not_enough_data",
                    (None, None, None),
                    threshold,
                    None,
                    detail,
                    statistic="two_proportion",
                ),
                blocking=False,
            )
            for role, threshold in (("promote", promote_t), ("rollback", rollback_t))
        ]
    bad_at = policy.rating_bad_at_or_below
    c_bad = int((per_arm["candidate"][: look.n_k] <= bad_at).sum())
    b_bad = int((per_arm["baseline"][: look.n_k] <= bad_at).sum())
    counts = (c_bad, look.n_k, b_bad, look.n_k)
    note = look_note(look, "rating")
    return [
        judged(proportion_check("spot_check_bad", "promote", counts, promote_t, look.level, note)),
        judged(
            proportion_check("spot_check_bad", "rollback", counts, rollback_t, look.level, note)
        ),
    ]
