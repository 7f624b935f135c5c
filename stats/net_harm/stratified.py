"""The stratified two-phase mean over all pairs, the net-harm estimator's arithmetic.

One variable with values in a finite support (the quality −1, 0, +1, or an indicator 0, 1)
judged on a stratified random subsample of the changed pairs and 0 on every unchanged pair:
its estimate, its standard error over the traffic and over these pairs, and the widening
for strata without a judged pair (the method and its sources: :mod:`shadoweval.stats.net_harm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from shadoweval.stats.inputs import FloatArray

__all__ = [
    "Spread",
    "StratifiedMean",
    "fewest_more",
    "stratified_mean",
    "stratum_spread",
    "z_value",
]


@dataclass(frozen=True)
class StratifiedMean:
    """A stratified two-phase estimate of a mean over all pairs (:mod:`shadoweval.stats.net_harm`).

    Attributes:
        estimate: ``Σ_h w_h·ȳ_h`` (unjudged strata at the midpoint of the value range).
        se: the standard error over the traffic (phase 1 + phase 2).
        se_finite: the phase-2 standard error alone (Cochran 5.6, these pairs only).
        unknown: the half-width added to each bound for the unjudged strata
            (``Σ w_h`` × the value range's half-width).
    """

    estimate: float
    se: float
    se_finite: float
    unknown: float

    def interval(self, level_one_sided: float) -> tuple[float, float]:
        """``estimate ∓ unknown ∓ z_{1−a}·se`` (unclipped), ``a = level_one_sided``."""
        z = z_value(level_one_sided)
        half = self.unknown + z * self.se
        return self.estimate - half, self.estimate + half


def z_value(level_one_sided: float) -> float:
    """``z_{1−a}``, the standard normal quantile at ``1 − level_one_sided``.

    Raises:
        ValueError: ``level_one_sided`` outside (0, 0.5).
    """
    if not 0.0 < level_one_sided < 0.5:
        raise ValueError(f"level_one_sided must be in (0, 0.5), got {level_one_sided}")
    return float(special.ndtri(1.0 - level_one_sided))


@dataclass(frozen=True)
class Spread:
    """Per-stratum means and variances of one variable, arrays of shape ``(H,)``."""

    mean: FloatArray  # NaN where nothing is judged
    sample_variance: FloatArray  # ddof 1; NaN below 2 judged
    variance: FloatArray  # the within variance used; NaN where nothing is judged


def stratum_spread(counts: FloatArray, support: FloatArray) -> Spread:
    """Means and within variances from the counts of each support value per stratum.

    ``counts`` has shape ``(H, K)``: stratum h's judged pairs with value ``support[j]``.
    The variance used is the largest variance over the support at one judged pair, else
    ``max(s², s̃²)`` capped at it, ``s̃²`` the variance after one pseudo-observation of
    each support value (:mod:`shadoweval.stats.net_harm`, "Small strata").
    """
    top = ((support.max() - support.min()) / 2.0) ** 2
    k = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (counts @ support) / k
        squares = (counts * (support[None, :] - mean[:, None]) ** 2).sum(axis=1)
        sample = np.where(k >= 2, squares / (k - 1), np.nan)
    pseudo_counts = counts + 1.0
    pseudo_k = k + support.size
    pseudo_mean = (pseudo_counts @ support) / pseudo_k
    pseudo = (pseudo_counts * (support[None, :] - pseudo_mean[:, None]) ** 2).sum(1) / pseudo_k
    used = np.minimum(top, np.fmax(sample, pseudo))
    used = np.where(k == 1, top, used)
    used = np.where(k == 0, np.nan, used)
    return Spread(np.where(k > 0, mean, np.nan), sample, used)


def stratified_mean(
    n: int, size: FloatArray, counts: FloatArray, support: FloatArray
) -> tuple[StratifiedMean, Spread]:
    """The two-phase stratified mean over ``n`` pairs (0 on every unchanged pair).

    ``size`` holds ``N_h`` per changed stratum, ``counts`` the judged pairs per support
    value (:func:`stratum_spread`).
    """
    low, high = float(support.min()), float(support.max())
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    top = half * half
    spread = stratum_spread(counts, support)
    k = counts.sum(axis=1)
    judged = k > 0
    w = size / n
    estimate = float(np.sum(w * np.where(judged, spread.mean, mid)))
    unknown = float(np.sum(w[~judged])) * half
    kj, wj, vj, mj = k[judged], w[judged], spread.variance[judged], spread.mean[judged]
    phase2 = float(np.sum(wj * wj * (1.0 - kj / size[judged]) * vj / kj))
    sigma2 = (1.0 - float(size.sum()) / n) * estimate * estimate
    sigma2 += float(np.sum(wj * (vj + (mj - estimate) ** 2)))
    sigma2 += float(np.sum(w[~judged])) * 4.0 * top  # v + (mean − Δ)² ≤ (high − low)²
    sigma2 = min(top, sigma2)
    se = math.sqrt(sigma2 / n + phase2)
    return StratifiedMean(estimate, se, math.sqrt(phase2), unknown), spread


def fewest_more(upper_after: Callable[[int], float], room: int, margin: float) -> int:
    """The smallest ``more`` in [0, room] with ``upper_after(more) < margin`` (bisection;
    ``upper_after`` non-increasing), or −1 when even ``room`` leaves the bound at or above
    ``margin``: how many more pairs to judge (:meth:`NetHarmEstimate.judged_needed`) or to
    label (:meth:`shadoweval.stats.net_harm.ppi.PPIEstimate.labels_needed`)."""
    if upper_after(room) >= margin:
        return -1
    if upper_after(0) < margin:
        return 0
    lo, hi = 0, room  # upper(lo) >= margin > upper(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if upper_after(mid) < margin:
            hi = mid
        else:
            lo = mid
    return hi
