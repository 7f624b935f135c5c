"""The output-tokens check: is the candidate's mean output within ``k`` times the baseline's?

A ratio margin ``E[c]/E[b] < k`` (e.g. k = 1.2: at most 20% more output tokens) is
tested through the linearisation of gate-statistics.md §1.6: with ``e_i = c_i − k·b_i``
per paired request, ``E[e] < 0 ⟺ E[c] < k·E[b]``, so the ratio test becomes a test of a
mean against 0 — here by the look's sequential interval of ``E[e]``
(:func:`shadoweval.stats.checks.sequential_interval.sequential_mean_interval`), with no delta
method or Fieller interval in the decision. The ratio ``R = Σc/Σb`` itself is reported
with the delta-method interval of a ratio of means, ``sd(c − R·b)/(√n·b̄)`` (Cochran,
*Sampling Techniques*, 3rd ed., §6.4). Token counts are heavy-tailed; the interval is
asymptotic (CLT), which is why the check needs its minimum pairs before it can pass.
"""

from __future__ import annotations

import math

import numpy as np

from shadoweval.records import Check, CheckOutcome
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.checks.reasons import CheckNumbers, infra_note, make_check
from shadoweval.stats.checks.sequential_interval import (
    mean_min_pairs_note,
    mean_outcome,
    sequential_mean_interval,
)
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import OutputTokensPolicy

__all__ = ["COST_STATISTIC", "cost_check"]

COST_STATISTIC = "seq_mean_token_linearisation"
"""Statistic of the output-tokens check: the sequential mean of ``c − k·b`` against 0."""


def cost_check(
    arrays: PairArrays,
    *,
    task_type: str,
    block: OutputTokensPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
) -> Check:
    """Output tokens: ``E[c]/E[b] < ratio_max`` through ``e_i = c_i − ratio_max·b_i``.

    Pairs: no infrastructure error on either side, both token counts known (a failed
    side has none; an empty answer has 0). PASS when the sequential upper bound of
    ``E[e]`` is below 0, FAIL when its lower bound is above 0 (gate-statistics.md §1.6,
    this module's docstring). The reported ratio ``Σc/Σb`` has a delta-method interval
    (``sd(c − R·b)/(√n·b̄)``) with the same width multiplier as the decision's interval.
    """
    k = block.ratio_max
    statistic = f"{COST_STATISTIC}; {levels.describe()}"
    keep = ~arrays.infra
    left_out = infra_note(int(np.count_nonzero(arrays.infra)))
    cand = arrays.cand_tokens[keep]
    base = arrays.base_tokens[keep]
    known = ~np.isnan(cand) & ~np.isnan(base)
    unknown = int(np.count_nonzero(~known & ~arrays.model_failed[keep]))
    note = (
        f" ({unknown} pairs with both outputs present have no token counts and were left out)"
        if unknown
        else ""
    )
    c, b = cand[known], base[known]
    n = int(c.size)

    def check(outcome: CheckOutcome, reason: str, numbers: CheckNumbers) -> Check:
        return make_check(
            "output_tokens", task_type, statistic, k, outcome, reason + note + left_out, numbers
        )

    if n == 0:
        return check(CheckOutcome.INCONCLUSIVE, "no pairs with output token counts", CheckNumbers())
    bad = int(np.count_nonzero(~np.isfinite(c) | ~np.isfinite(b) | (c < 0) | (b < 0)))
    if bad:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{bad} of {n} pairs have invalid (negative or infinite) token counts",
            CheckNumbers(n=n),
        )
    if n < 2 or float(b.sum()) <= 0.0:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs with baseline output tokens: {n} pairs, baseline total "
            f"{float(b.sum()):g}",
            CheckNumbers(n=n),
        )
    e = c - k * b
    interval = sequential_mean_interval(e, levels)
    ratio = float(c.sum() / b.sum())
    ratio_sd = float(np.std(c - ratio * b, ddof=1))
    mult = interval.multiplier if math.isfinite(interval.multiplier) else 0.0
    half = mult * ratio_sd / (math.sqrt(n) * float(b.mean()))
    summary = (
        f"mean output tokens ratio candidate/baseline {ratio:.3f} ({float(c.mean()):.1f} vs "
        f"{float(b.mean()):.1f}), {interval.label} {ratio - half:.3f} to {ratio + half:.3f} on "
        f"{n} pairs, limit {k:g}; decided on e = c - {k:g}*b: mean {interval.mean:.2f}, bound "
        f"{interval.low:.2f} to {interval.high:.2f} tokens against 0"
    )
    if interval.note:
        summary += f" (note: {interval.note})"
    need = mean_min_pairs_note(interval, 0.0, min_pairs, alpha, power)
    outcome, reason = mean_outcome(interval, 0.0, need, summary, "more output tokens than allowed")
    return check(outcome, reason, CheckNumbers(ratio, ratio - half, ratio + half, n))
