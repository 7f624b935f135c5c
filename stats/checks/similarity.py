"""The similarity check: output divergence ``D = 1 − similarity``, on the noise floor.

A run that sent baseline repeats (the baseline replayed against itself) is judged
against that noise floor in every unit: ``e_i = D_cand_i − (1 + r)·D_noise_i``
(gate-statistics.md §1.6, Diffy's noise floor) must have a mean below ``noise_margin``
by the look's sequential interval; a run without any repeat compares the mean divergence
with the absolute ``max_mean_divergence``. The split-sample tail-rate report is added to
the reason (report only).

What the check means depends on ``change.mode`` (issue 11; :mod:`shadoweval.stats.change`):

* ``judge`` (default): every real upgrade changes answers, so divergence beyond the noise
  says *how much* changed, never in which direction. The check is **reported, never
  blocking and never rolling back**: its reason leads with the unit's changed share
  ("changed beyond the noise: 312 of 805 pairs (38.8%)"), and where the interval lies
  wholly above the margin it is INCONCLUSIVE ("answers changed beyond the noise"), never
  FAIL. The direction comes from the harm checks and ``net_harm``.
* ``no_change``: the check is a guardrail as before (FAIL beyond the margin, which rolls
  back), for swaps that must not change answers (a quantisation, a serving-stack move).

A degenerate noise floor (:class:`shadoweval.stats.change.DegenerateNoise`: the baseline repeat
returned the captured answer on nearly every sampled request) makes the check
INCONCLUSIVE in either mode, its reason led by the degenerate sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict, Unpack

import numpy as np

from shadoweval.records import Check, CheckOutcome
from shadoweval.stats.checks.pair_arrays import BoolArray, FloatArray, PairArrays
from shadoweval.stats.checks.reasons import CheckNumbers, fmt_p, fmt_pct, infra_note, make_check
from shadoweval.stats.checks.sequential_interval import (
    SequentialInterval,
    mean_min_pairs_note,
    mean_outcome,
    sequential_mean_interval,
)
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.noise_floor import noise_floor_values, tail_rate_split
from shadoweval.stats.policy import ChangeMode, SimilarityPolicy

__all__ = [
    "NO_NOISE_FLOOR",
    "REPORT_ONLY",
    "SIMILARITY_NOISE_STATISTIC",
    "SIMILARITY_STATISTIC",
    "BaselineRepeats",
    "SimilarityInputs",
    "UnitChanges",
    "scoring_faults",
    "similarity_check",
]

SIMILARITY_STATISTIC = "seq_mean_divergence"
"""Statistic of a similarity check without a noise floor: mean divergence vs a limit."""
SIMILARITY_NOISE_STATISTIC = "seq_mean_noise_floor"
"""Statistic of a similarity check on the noise floor: mean of e vs ``noise_margin``."""
NO_NOISE_FLOOR = "no baseline-repeat outcomes in this run: absolute limit, no noise floor"
"""Said in the reason of a similarity check of a run without baseline repeats."""
REPORT_ONLY = (
    "report only (change.mode judge): divergence selects pairs for a quality judgement "
    "and never blocks or rolls back by itself"
)
"""Said in the reason of every similarity check in ``change.mode: judge``."""


@dataclass(frozen=True)
class UnitChanges:
    """A unit's changed pairs (:func:`shadoweval.stats.change.classify_changes`), for the reason.

    ``changed`` of ``pairs`` (the unit's pairs without an infrastructure error) changed;
    ``threshold`` is the unit's divergence threshold, ``source`` how it was set
    (``noise``, ``pooled noise`` or ``divergence_threshold``) and ``quantile`` the
    policy's ``change.noise_quantile``. ``found`` counts the unit's pairs with a
    similarity that ground truth or the exact comparison found changed, ``missed`` those
    of them the divergence alone called unchanged (the similarity's miss rate,
    :mod:`shadoweval.stats.change`).
    """

    changed: int
    pairs: int
    threshold: float
    source: str
    quantile: float = 0.95
    found: int = 0
    missed: int = 0

    def miss_rate(self) -> str:
        """``similarity miss rate 64.8%: of the 253 pairs that ground truth or exact
        comparison found changed, the embedding alone called 164 unchanged (all counted as
        changed)``; ``""`` when no pair was found changed that way (report only)."""
        if not self.found:
            return ""
        return (
            f"similarity miss rate {fmt_pct(self.missed / self.found)}: of the {self.found} "
            "pairs that ground truth or exact comparison found changed, the embedding alone "
            f"called {self.missed} unchanged (all counted as changed)"
        )

    def describe(self) -> str:
        """``changed beyond the noise: 312 of 805 pairs (38.8%; D > 0.213, the noise p95)``."""
        share = fmt_pct(self.changed / self.pairs) if self.pairs else "no pairs"
        q = f"p{100 * self.quantile:g}"
        basis = {
            "noise": f"the unit's baseline-repeat {q}",
            "pooled noise": f"the pooled baseline-repeat {q}: too few repeats in the unit",
        }.get(self.source, "divergence_threshold: no usable noise floor")
        return (
            f"changed beyond the noise: {self.changed} of {self.pairs} pairs ({share}; "
            f"D > {self.threshold:.3g}, {basis}; or a harm, format, tool or failure "
            "difference)"
        )


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


def scoring_faults(arrays: PairArrays) -> int:
    """Pairs whose similarities cannot be read: a scoring fault, not a model's change.

    Counted on the pairs without an infrastructure error: both outputs present but no
    similarity (NaN), or a similarity or baseline-repeat similarity that is infinite or
    outside [−1, 1]. Change classification (:mod:`shadoweval.stats.change`) reads the similarities,
    so in ``change.mode: judge`` such a fault still blocks PROMOTE (:mod:`shadoweval.stats.gate`).
    """
    keep = ~arrays.infra
    similarity = arrays.similarity[keep]
    noise = arrays.noise_similarity[keep]
    both_present = ~arrays.model_failed[keep]

    def out_of_range(values: FloatArray) -> BoolArray:
        known = ~np.isnan(values)
        with np.errstate(invalid="ignore"):
            bad: BoolArray = known & (~np.isfinite(values) | (np.abs(values) > 1.0 + 1e-6))
        return bad

    faults = (np.isnan(similarity) & both_present) | out_of_range(similarity)
    faults |= out_of_range(noise)
    return int(np.count_nonzero(faults))


class SimilarityInputs(TypedDict):
    """The keyword arguments :func:`similarity_check` passes on unchanged to the check
    itself: the unit's task type, its ``similarity`` block, minimum pairs, look levels,
    alpha and power, whether the run has a noise floor, and its baseline repeats (``None``,
    the default: none sent)."""

    task_type: str
    block: SimilarityPolicy
    min_pairs: int
    levels: LookLevels
    alpha: float
    power: float
    noise_floor: bool
    repeats: NotRequired[BaselineRepeats | None]


def similarity_check(
    arrays: PairArrays,
    *,
    mode: ChangeMode = "no_change",
    changes: UnitChanges | None = None,
    degenerate: str | None = None,
    **inputs: Unpack[SimilarityInputs],
) -> Check:
    """Output divergence ``D = 1 − similarity``: against the noise floor, or a limit.

    ``mode`` is the unit's ``change.mode``: ``judge`` makes the check report-only (never
    FAIL; the reason leads with ``changes``), ``no_change`` (the default here) keeps it a
    guardrail. ``degenerate`` is the sentence of a degenerate noise floor
    (:meth:`shadoweval.stats.change.DegenerateNoise.describe`): the check is then INCONCLUSIVE and
    its reason leads with it. The other keyword arguments are the :class:`SimilarityInputs`.

    Pairs with an infrastructure error on either side are left out (counted). A pair
    where both outputs are present (neither side failed) but the similarity is NaN is a
    scoring fault: INCONCLUSIVE rather than a silent drop. Similarities must lie in
    [−1, 1].

    * ``noise_floor`` (the run's design has baseline repeats: it sent some, whether or
      not they answered): on the pairs with both a similarity and a noise similarity,
      ``e_i = D_cand_i − (1 + r)·D_noise_i``
      (:func:`shadoweval.stats.noise_floor.noise_floor_values`) must have a mean below
      ``noise_margin``; PASS when the sequential upper bound is below it, FAIL when the
      lower bound is above it. The reason adds the split-sample tail-rate report
      (:func:`shadoweval.stats.noise_floor.tail_rate_split`, report only). A unit without any such
      pair is INCONCLUSIVE — never judged against the looser absolute limit — and its
      reason counts the repeats the run sent and how many failed (``repeats``); failed
      repeats are counted in every similarity reason.
    * otherwise (no baseline repeat was sent): mean ``D`` against
      ``max_mean_divergence``, and the reason says that no noise floor was available
      (:data:`NO_NOISE_FLOOR`).
    """
    check = _similarity_check(arrays, judge=mode == "judge", **inputs)
    lead = [degenerate] if degenerate else []
    if changes is not None and (mode == "judge" or degenerate):
        lead.append(changes.describe())
    if changes is not None and changes.miss_rate():
        lead.append(changes.miss_rate())
    if mode == "judge":
        lead.append(REPORT_ONLY)
    outcome = check.outcome
    if degenerate:
        outcome = CheckOutcome.INCONCLUSIVE
        lead.insert(
            1,
            "the similarity check cannot judge divergence against a deterministic replica "
            "(INCONCLUSIVE); replay with a baseline-repeat replica that draws a fresh seed "
            "per request",
        )
    if not lead:
        return check
    return check.model_copy(update={"outcome": outcome, "reason": "; ".join([*lead, check.reason])})


def _similarity_check(
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
    judge: bool,
) -> Check:
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
    bad = _outside(values) + (_outside(noise[scored]) if noise_floor else 0)
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
        interval, summary, tail = _noise_floor_summary(
            d_cand, d_noise, block, levels, margin, n_scored
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
    harmful = "answers changed beyond the noise" if judge else "outputs diverge more than allowed"
    outcome, reason = mean_outcome(interval, margin, need, summary, harmful)
    if judge and outcome == CheckOutcome.FAIL:
        outcome = CheckOutcome.INCONCLUSIVE  # report only: a change is not a harm
    numbers = CheckNumbers(interval.mean, interval.low, interval.high, n)
    return check(outcome, reason + tail, numbers)


def _outside(values: FloatArray) -> int:
    """How many of ``values`` are infinite or outside [-1, 1] (with a 1e-6 tolerance)."""
    return int(np.count_nonzero(~np.isfinite(values) | (np.abs(values) > 1.0 + 1e-6)))


def _noise_floor_summary(
    d_cand: FloatArray,
    d_noise: FloatArray,
    block: SimilarityPolicy,
    levels: LookLevels,
    margin: float,
    n_scored: int,
) -> tuple[SequentialInterval, str, str]:
    """The noise-floor interval of ``e = D_cand − (1+r)·D_noise``, its summary sentence and
    the report-only tail-rate words (``d_cand``/``d_noise``: divergences of the pairs with
    a baseline repeat; ``n_scored``: pairs with a similarity)."""
    n = int(d_cand.size)
    e = noise_floor_values(d_cand, d_noise, block.noise_ratio)
    interval = sequential_mean_interval(e, levels)
    report = tail_rate_split(d_cand, d_noise, quantile=block.tail_quantile, seed=block.tail_seed)
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
    return interval, summary, tail
