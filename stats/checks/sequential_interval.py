"""The sequential interval of a mean, and the decision of a mean-type check on it.

Mean-type checks (the paired binary difference without a cap, the similarity noise
floor or divergence, the output-token linearisation) judge the mean of per-pair values
against a margin with an interval that stays valid over the looks of a polled run
(gate-statistics.md §2.4): the asymptotic confidence sequence without a sample cap, the
z interval at the look's spent ``α_k`` with one (:class:`~shadoweval.stats.looks.LookLevels`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from shadoweval.records import CheckOutcome
from shadoweval.stats.checks.pair_arrays import FloatArray
from shadoweval.stats.checks.reasons import fmt_g, min_pairs_note
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.power import mean_min_pairs
from shadoweval.stats.sequential import confidence_sequence, cs_half_width

__all__ = [
    "PAIRS_SEARCH_LIMIT",
    "SequentialInterval",
    "mean_min_pairs_note",
    "mean_outcome",
    "pairs_to_clear",
    "sequential_mean_interval",
]

PAIRS_SEARCH_LIMIT = 10_000_000
"""The most pairs :func:`pairs_to_clear` looks for; beyond it: ``None`` (out of reach)."""


@dataclass(frozen=True)
class SequentialInterval:
    """A sequential interval of a mean: each side one-sided at level α (CS) or α_k.

    ``low``/``high`` bound the mean at every look simultaneously (confidence sequence)
    or at this look with the look's spent level (spending). ``sd`` is the standard
    deviation used (after any floor); ``multiplier`` is the half-width in units of
    ``sd/√n`` (≈ z for a fixed-n interval); ``note`` records degenerate data.
    """

    mean: float
    low: float
    high: float
    sd: float
    n: int
    multiplier: float
    label: str
    note: str = ""


@contextmanager
def _degenerate_notes(notes: list[str]) -> Iterator[None]:
    """Collect :class:`DegenerateDataWarning` messages as notes; re-raise other warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if issubclass(w.category, DegenerateDataWarning):
            notes.append(str(w.message))
        else:
            warnings.warn(w.message, w.category, stacklevel=3)


def sequential_mean_interval(
    values: FloatArray, levels: LookLevels, *, sd_floor: float = 0.0
) -> SequentialInterval:
    """The look's interval of the mean of ``values`` (shape ``(n,)``, n ≥ 2, finite).

    Without a sample cap: the asymptotic confidence sequence
    (:func:`shadoweval.stats.sequential.confidence_sequence`, Waudby-Smith et al. 2021) tuned at
    ``levels.n_star``, one-sided at ``levels.alpha`` on each side, valid at every look.
    With a cap: the z interval at the look's spent level ``α_k`` (group-sequential α
    spending, valid over the planned looks by the union bound). ``sd_floor`` bounds the
    standard deviation used from below.
    """
    notes: list[str] = []
    n = int(values.size)
    if levels.mean_method == "cs":
        with _degenerate_notes(notes):
            upper = confidence_sequence(
                values, alpha=levels.alpha, n_star=levels.n_star, side="upper", sd_floor=sd_floor
            )
            lower = confidence_sequence(
                values, alpha=levels.alpha, n_star=levels.n_star, side="lower", sd_floor=sd_floor
            )
        sd = upper.sd
        mult = (upper.high - upper.mean) * math.sqrt(n) / sd if sd > 0 else math.nan
        label = f"{100 * (1 - 2 * levels.alpha):g}% confidence sequence (N* {levels.n_star})"
        return SequentialInterval(
            upper.mean, lower.low, upper.high, sd, n, mult, label, "; ".join(notes)
        )
    mean = float(np.mean(values))
    sd = max(float(np.std(values, ddof=1)), sd_floor)
    if sd == 0.0:
        notes.append(f"all {n} values equal {mean:.6g} (no variance)")
    z = float(scipy_stats.norm.isf(levels.alpha_k))
    half = z * sd / math.sqrt(n)
    label = f"interval at alpha_k {fmt_g(levels.alpha_k)} per side (spent at look {levels.look})"
    return SequentialInterval(mean, mean - half, mean + half, sd, n, z, label, "; ".join(notes))


def mean_outcome(
    interval: SequentialInterval,
    margin: float,
    min_pairs: tuple[int, str],
    summary: str,
    harmful: str,
) -> tuple[CheckOutcome, str]:
    """PASS below the margin (upper bound), FAIL wholly above it, else INCONCLUSIVE.

    ``min_pairs`` is the effective minimum and its wording (:func:`mean_min_pairs_note`);
    fewer pairs can FAIL but not PASS. ``summary`` states the numbers, ``harmful`` leads a
    FAIL's reason. Returns the outcome and its reason.
    """
    if interval.low > margin:
        return CheckOutcome.FAIL, f"{harmful}: {summary}: the interval lies wholly above the limit"
    if interval.n < min_pairs[0]:
        return (
            CheckOutcome.INCONCLUSIVE,
            f"too few pairs: {interval.n} < {min_pairs[1]}; {summary}",
        )
    if interval.high < margin:
        return CheckOutcome.PASS, f"non-inferior: {summary} (on >= {min_pairs[1]})"
    return CheckOutcome.INCONCLUSIVE, f"non-inferiority not shown yet: {summary}"


def mean_min_pairs_note(
    interval: SequentialInterval, margin: float, floor: int, alpha: float, power: float
) -> tuple[int, str]:
    """The minimum pairs of a mean-type check: ``floor``, or the power calculation if larger.

    The power calculation (:func:`shadoweval.stats.power.mean_min_pairs`, one-sided level ``alpha``,
    ``power``) runs at the observed mean and standard deviation when the mean is below
    the margin and the spread positive. Returns the pairs and their wording.
    """
    computed = None
    if interval.sd > 0 and interval.mean < margin:
        computed = mean_min_pairs(interval.sd, interval.mean, margin, alpha=alpha, power=power)
    basis = f"{100 * power:g}% at the observed mean {interval.mean:.3g} and sd {interval.sd:.3g}"
    return min_pairs_note(floor, computed, basis)


def pairs_to_clear(mean: float, sd: float, margin: float, levels: LookLevels) -> int | None:
    """The fewest pairs at which the look's upper bound of a mean clears ``margin``,
    the mean and standard deviation staying as observed.

    The bound is the one :func:`sequential_mean_interval` computes: ``mean +`` the
    confidence sequence's half-width (:func:`shadoweval.stats.sequential.cs_half_width`)
    without a cap, ``mean + z(α_k)·sd/√n`` at this look's spent level with one (later
    looks spend differently: an estimate). The bound falls with ``n``; the smallest ``n``
    with ``bound < margin`` is found by doubling, then bisection.

    Args:
        mean: the observed mean (the margin's unit).
        sd: the standard deviation used, after any floor, ≥ 0.
        margin: the non-inferiority margin the upper bound must fall below.
        levels: the look's levels.

    Returns:
        The pairs, ≥ 2; ``None`` when the mean is not below the margin or more than
        :data:`PAIRS_SEARCH_LIMIT` pairs would be needed.
    """
    if not (math.isfinite(mean) and math.isfinite(sd)) or mean >= margin:
        return None
    if sd <= 0.0:
        return 2
    z = float(scipy_stats.norm.isf(levels.alpha_k))

    def clears(n: int) -> bool:
        if levels.mean_method == "cs":
            half = cs_half_width(n, sd, alpha=levels.alpha, n_star=levels.n_star, side="upper")
        else:
            half = z * sd / math.sqrt(n)
        return mean + half < margin

    high = 2
    while not clears(high):
        if high >= PAIRS_SEARCH_LIMIT:
            return None
        high *= 2
    low = high // 2
    while high - low > 1:  # clears(high), not clears(low) (or low < 2)
        mid = (low + high) // 2
        if clears(mid):
            high = mid
        else:
            low = mid
    return max(high, 2)
