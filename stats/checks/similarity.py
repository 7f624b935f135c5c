"""The similarity check: output divergence ``D = 1 − similarity``, on the noise floor.

A run that sent baseline repeats (the baseline replayed against itself) is judged
against that noise floor in every unit: ``e_i = D_cand_i − (1 + r)·D_noise_i``
(gate-statistics.md §1.6, Diffy's noise floor) must have a mean below ``noise_margin``
by the look's sequential interval; a run without any repeat compares the mean divergence
with the absolute ``max_mean_divergence``. The split-sample tail-rate report is added to
the reason (report only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shadoweval.records import Check, CheckOutcome
from stats.checks.pair_arrays import PairArrays
from stats.checks.reasons import CheckNumbers, fmt_p, fmt_pct, infra_note, make_check
from stats.checks.sequential_interval import (
    mean_min_pairs_note,
    mean_outcome,
    sequential_mean_interval,
)
from stats.looks import LookLevels
from stats.noise_floor import noise_floor_values, tail_rate_split
from stats.policy import SimilarityPolicy

__all__ = [
    "NO_NOISE_FLOOR",
    "SIMILARITY_NOISE_STATISTIC",
    "SIMILARITY_STATISTIC",
    "BaselineRepeats",
    "similarity_check",
]

SIMILARITY_STATISTIC = "seq_mean_divergence"
"""Statistic of a similarity check without a noise floor: mean divergence vs a limit."""
SIMILARITY_NOISE_STATISTIC = "seq_mean_noise_floor"
"""Statistic of a similarity check on the noise floor: mean of e vs ``noise_margin``."""
NO_NOISE_FLOOR = "no baseline-repeat outcomes in this run: absolute limit, no noise floor"
"""Said in the reason of a similarity check of a run without baseline repeats."""


@dataclass(frozen=True)
class BaselineRepeats:
    """The run's baseline-repeat replays, as the similarity reasons report them.

    ``sent`` counts the baseline-repeat outcomes that were sent (not skipped) and
    ``failed`` those with an error (:class:`~shadoweval.records.Coverage`
    ``baseline_repeat_replayed`` / ``baseline_repeat_errored``). ``from_coverage`` is
    False when the coverage record carried no such counts (0) but the pairs have
    baseline-repeat similarities: ``sent`` then counts those pairs and ``failed`` is
    unknown (0).
    """

    sent: int
    failed: int = 0
    from_coverage: bool = True

    def describe(self) -> str:
        """``the run sent 800 baseline repeats, 800 of them failed``."""
        if not self.from_coverage:
            return f"{self.sent} pairs of the run have a baseline-repeat similarity"
        return f"the run sent {self.sent} baseline repeats, {self.failed} of them failed"

    def failed_note(self) -> str:
        """A reason suffix counting the failed repeats ('' when none failed)."""
        if not self.failed:
            return ""
        return (
            f"; {self.failed} of the {self.sent} baseline repeats the run sent failed "
            "(counted, not dropped: their pairs have no noise similarity)"
        )


def similarity_check(
    arrays: PairArrays,
    *,
    task_type: str,
    block: SimilarityPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
    noise_floor: bool,
    repeats: BaselineRepeats | None = None,
) -> Check:
    """Output divergence ``D = 1 − similarity``: against the noise floor, or a limit.

    Pairs with an infrastructure error on either side are left out (counted). A pair
    where both outputs are present (neither side failed) but the similarity is NaN is a
    scoring fault: INCONCLUSIVE rather than a silent drop. Similarities must lie in
    [−1, 1].

    * ``noise_floor`` (the run's design has baseline repeats: it sent some, whether or
      not they answered): on the pairs with both a similarity and a noise similarity,
      ``e_i = D_cand_i − (1 + r)·D_noise_i``
      (:func:`stats.noise_floor.noise_floor_values`) must have a mean below
      ``noise_margin``; PASS when the sequential upper bound is below it, FAIL when the
      lower bound is above it. The reason adds the split-sample tail-rate report
      (:func:`stats.noise_floor.tail_rate_split`, report only). A unit without any such
      pair is INCONCLUSIVE — never judged against the looser absolute limit — and its
      reason counts the repeats the run sent and how many failed (``repeats``); failed
      repeats are counted in every similarity reason.
    * otherwise (no baseline repeat was sent): mean ``D`` against
      ``max_mean_divergence``, and the reason says that no noise floor was available
      (:data:`NO_NOISE_FLOOR`).
    """
    keep = ~arrays.infra
    left_out = infra_note(int(np.count_nonzero(arrays.infra)))
    failed_repeats = repeats.failed_note() if noise_floor and repeats is not None else ""
    similarity = arrays.similarity[keep]
    noise = arrays.noise_similarity[keep]
    both_present = ~arrays.model_failed[keep]
    margin = block.noise_margin if noise_floor else block.max_mean_divergence
    statistic = f"{SIMILARITY_NOISE_STATISTIC if noise_floor else SIMILARITY_STATISTIC}; "
    statistic += levels.describe()

    def check(
        outcome: CheckOutcome, reason: str, numbers: CheckNumbers, *, repeats_counted: bool = False
    ) -> Check:
        # A reason that already counts the repeats sent and failed does not repeat them.
        tail = left_out if repeats_counted else failed_repeats + left_out
        return make_check(
            "similarity", task_type, statistic, margin, outcome, reason + tail, numbers
        )

    unscored = int(np.count_nonzero(np.isnan(similarity) & both_present))
    if unscored:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{unscored} of {int(np.count_nonzero(both_present))} pairs with both outputs "
            "present have no similarity (NaN); the scorer must be fixed before this can be "
            "judged",
            CheckNumbers(n=int(np.count_nonzero(~np.isnan(similarity)))),
        )
    scored = ~np.isnan(similarity)
    if noise_floor:
        scored &= ~np.isnan(noise)
    values = similarity[scored]
    n = int(values.size)
    n_scored = int(np.count_nonzero(~np.isnan(similarity)))
    if n == 0:
        if not noise_floor:
            return check(
                CheckOutcome.INCONCLUSIVE, "no pairs with a similarity score", CheckNumbers()
            )
        sent = f"{repeats.describe()}; " if repeats is not None else ""
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"no pairs with a similarity and a baseline-repeat similarity ({n_scored} pairs "
            f"with a similarity, none with a usable baseline repeat): no noise floor for "
            f"this unit ({sent}a run with baseline repeats is judged against the noise "
            "floor only, never the absolute limit); fix the baseline-repeat replica or its "
            "share and replay again",
            CheckNumbers(),
            repeats_counted=repeats is not None and repeats.from_coverage,
        )
    bad = int(np.count_nonzero(~np.isfinite(values) | (np.abs(values) > 1.0 + 1e-6)))
    if noise_floor:
        noise_values = noise[scored]
        bad += int(
            np.count_nonzero(~np.isfinite(noise_values) | (np.abs(noise_values) > 1.0 + 1e-6))
        )
    if bad:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"{bad} of {n} similarities are infinite or outside [-1, 1]",
            CheckNumbers(n=n),
        )
    if n < 2:
        return check(
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {n} < min_pairs {min_pairs}",
            CheckNumbers(n=n),
        )
    d_cand = 1.0 - np.clip(values, -1.0, 1.0)
    tail = ""
    if noise_floor:
        d_noise = 1.0 - np.clip(noise[scored], -1.0, 1.0)
        e = noise_floor_values(d_cand, d_noise, block.noise_ratio)
        interval = sequential_mean_interval(e, levels)
        report = tail_rate_split(
            d_cand, d_noise, quantile=block.tail_quantile, seed=block.tail_seed
        )
        tail = (
            f"; tail (report only): {fmt_pct(report.cand_rate)} of candidate vs "
            f"{fmt_pct(report.noise_rate)} of noise divergences above the noise "
            f"p{100 * block.tail_quantile:g} {report.threshold:.3f} (split sample, "
            f"{report.n_eval} pairs, McNemar mid-p {fmt_p(report.p_value)})"
        )
        summary = (
            f"noise-floor difference e = D_cand - {1 + block.noise_ratio:g}*D_noise: mean "
            f"{interval.mean:.4f} (candidate divergence {float(d_cand.mean()):.3f}, "
            f"baseline-repeat {float(d_noise.mean()):.3f}), {interval.label} "
            f"{interval.low:.4f} to {interval.high:.4f} on {n} pairs with a baseline "
            f"repeat, limit {margin:g}"
        )
        if n_scored > n:
            summary += (
                f" ({n_scored - n} pairs with a similarity but no baseline-repeat "
                "similarity are not in the noise floor)"
            )
    else:
        interval = sequential_mean_interval(d_cand, levels)
        summary = (
            f"mean divergence (1 - similarity) {interval.mean:.3f}, {interval.label} "
            f"{interval.low:.3f} to {interval.high:.3f} on {n} pairs, limit {margin:g}; "
            f"{NO_NOISE_FLOOR}"
        )
    if interval.note:
        summary += f" (note: {interval.note})"
    need = mean_min_pairs_note(interval, margin, min_pairs, alpha, power)
    outcome, reason = mean_outcome(
        interval, margin, need, summary, "outputs diverge more than allowed"
    )
    numbers = CheckNumbers(interval.mean, interval.low, interval.high, n)
    return check(outcome, reason + tail, numbers)
