"""The canary's validity checks as check families: the step's minimum window and minimum
requests, and the session split (SRM, :mod:`shadoweval.stats.canary.srm`)."""

from __future__ import annotations

import math

from shadoweval.records import StepCheck, StepStatus, finite_or_none
from shadoweval.stats.canary.srm import sample_ratio_mismatch
from shadoweval.stats.canary.step import CanaryJudged, StepContext, judged

__all__ = ["min_requests", "sample_ratio", "window"]


def window(ctx: StepContext) -> list[CanaryJudged]:
    """The step has run its minimum window (``min_window_s``)."""
    elapsed_s, need_s = ctx.elapsed_s, ctx.step.min_window_s
    detail = f"the step has run {elapsed_s:.0f} s of its minimum window {need_s:g} s"
    status: StepStatus = "pass" if elapsed_s >= need_s else "fail"
    check = StepCheck.of(
        "window", "validity", status, (elapsed_s, None, None), need_s, None, detail,
        statistic="window",
    )  # fmt: skip
    return [judged(check)]


def min_requests(ctx: StepContext) -> list[CanaryJudged]:
    """Each arm has ``min_requests_per_arm`` requests (the candidate alone at share 1.0)."""
    n_c, n_b, needed = ctx.n_candidate, ctx.n_baseline, ctx.step.min_requests_per_arm
    enough = n_c >= needed if ctx.last else min(n_c, n_b) >= needed
    counted = (
        f"{n_c} candidate requests (share 1.0: the only arm)"
        if ctx.last
        else f"{n_c} candidate and {n_b} baseline requests"
    )
    check = StepCheck.of(
        "min_requests",
        "validity",
        "pass" if enough else "not_enough_data",
        (float(n_c if ctx.last else min(n_c, n_b)), None, None),
        float(needed),
        None,
        f"{counted}; at least {needed} per arm are needed (min_requests_per_arm)",
        statistic="min_requests",
    )
    return [judged(check)]


def sample_ratio(ctx: StepContext) -> list[CanaryJudged]:
    """The split of new sessions matches the step's share (always-valid SRM test at
    ``srm_alpha``); none at share 1.0."""
    if ctx.last:
        return []
    share, alpha = ctx.step.share, ctx.policy.srm_alpha
    cand, base = ctx.sessions["candidate"], ctx.sessions["baseline"]
    srm = sample_ratio_mismatch(cand, base, share, alpha)
    detail = (
        f"sessions: {cand} candidate, {base} baseline "
        f"(candidate share {_fmt_share(srm.observed_share)}, expected {share:g}); "
        f"always-valid p = {srm.p_always_valid:.3g} (fixed-n chi-square p = "
        f"{_fmt_p(srm.p_fixed_n)}) at level {alpha:g}"
    )
    check = StepCheck.of(
        "srm",
        "validity",
        "fail" if srm.mismatch else "pass",
        (finite_or_none(srm.observed_share), None, None),
        share,
        alpha,
        detail,
        statistic="srm_beta_binomial_mixture",
    )
    return [judged(check)]


def _fmt_share(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.4f}"


def _fmt_p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"
