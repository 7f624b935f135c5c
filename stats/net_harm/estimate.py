"""The net harm of one analysis unit: :func:`estimate_net_harm` and its result.

:class:`NetHarmEstimate` holds a unit's counts, the stratified estimate of
``Δ = P(worse) − P(better)`` with its standard errors, the shares and the changed strata,
and answers how many more changed pairs to judge (the method: :mod:`shadoweval.stats.net_harm`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from shadoweval.stats.inputs import FloatArray, InvalidDataError
from shadoweval.stats.net_harm.strata import IntArray
from shadoweval.stats.net_harm.stratified import (
    StratifiedMean,
    fewest_more,
    stratified_mean,
    z_value,
)

__all__ = [
    "BETTER",
    "NOT_REACHABLE",
    "TIE",
    "WORSE",
    "BoolArray",
    "NetHarmEstimate",
    "StratumEstimate",
    "estimate_net_harm",
]

BoolArray = npt.NDArray[np.bool_]

NOT_REACHABLE = -1
"""What :meth:`NetHarmEstimate.judged_needed` returns when judging more of the unit's
changed pairs cannot bring the upper bound below the margin: the estimate is at or above
the margin, or even with every changed pair judged the traffic's variance (``σ²/n``)
keeps the bound above it (the unit needs more pairs, not more judgements)."""

WORSE, TIE, BETTER = 1.0, 0.0, -1.0
"""The quality values of a pair: the candidate's answer worse, a tie, better."""

_QUALITY_SUPPORT = (-1.0, 0.0, 1.0)
_SHARE_SUPPORT = (0.0, 1.0)


@dataclass(frozen=True)
class StratumEstimate:
    """One changed stratum of a unit.

    Attributes:
        stratum: the stratum code.
        name: its name for reasons (``None`` when the caller gave none).
        size: ``N_h``, the changed pairs in it.
        judged: ``n_h``, those with a quality.
        worse, ties, better: the judged pairs by outcome.
        weight: ``w_h = N_h / n``.
        mean: ``ȳ_h``, the judged pairs' mean quality (NaN when ``judged == 0``).
        sample_variance: ``s_h²`` with ddof 1 (NaN when ``judged < 2``).
        variance: ``v_h``, the within-stratum variance used
            (:mod:`shadoweval.stats.net_harm`: 1 at ``n_h = 1``, else ``max(s_h², pseudo-count
            variance)`` capped at 1; NaN when ``judged == 0``).
    """

    stratum: int
    name: str | None
    size: int
    judged: int
    worse: int
    ties: int
    better: int
    weight: float
    mean: float
    sample_variance: float
    variance: float


@dataclass(frozen=True)
class _Stratum:
    """What the projection of :meth:`NetHarmEstimate.judged_needed` needs per stratum."""

    size: int
    judged: int
    mean: float
    variance: float


@dataclass(frozen=True)
class NetHarmEstimate:
    """The net harm of one analysis unit: counts, estimate, spread, strata.

    The method: :mod:`shadoweval.stats.net_harm`.

    Attributes:
        n: pairs of the unit.
        changed: pairs changed beyond the noise.
        judged: changed pairs with a quality (the estimator's sample).
        better, worse, ties: the judged changed pairs by outcome.
        judged_unchanged: unchanged pairs that carry a quality; counted as ties anyway.
        estimate: Δ̂ = P̂(worse) − P̂(better) over all ``n`` pairs (0 with no changed pair).
        se: its standard error over the traffic (decides).
        se_finite: the phase-2 standard error alone, Cochran's eq. 5.6 for these pairs.
        worse_share, better_share: the same estimator on ``1{worse}``, ``1{better}``.
        strata: the changed strata, by code.
        unjudged_strata: codes of changed strata with no judged pair.
        unknown: the widening of each bound for the unjudged strata (their total weight).
    """

    n: int
    changed: int
    judged: int
    better: int
    worse: int
    ties: int
    judged_unchanged: int
    estimate: float
    se: float
    se_finite: float
    worse_share: StratifiedMean
    better_share: StratifiedMean
    strata: tuple[StratumEstimate, ...]
    unjudged_strata: tuple[int, ...]
    unknown: float
    _projection: tuple[_Stratum, ...] = dataclasses.field(default=(), repr=False)

    @property
    def p_worse(self) -> float:
        """P̂(candidate worse) over all pairs."""
        return self.worse_share.estimate

    @property
    def p_better(self) -> float:
        """P̂(candidate better) over all pairs."""
        return self.better_share.estimate

    def bounds(self, level_one_sided: float) -> tuple[float, float]:
        """The unclipped interval ``Δ̂ ∓ unknown ∓ z_{1−a}·se`` at one-sided level ``a``.

        Raises:
            ValueError: ``level_one_sided`` outside (0, 0.5).
        """
        z = z_value(level_one_sided)
        half = self.unknown + z * self.se
        return self.estimate - half, self.estimate + half

    def interval(self, level_one_sided: float) -> tuple[float, float]:
        """The interval at one-sided level ``a`` on each side, clipped to [−1, 1] for
        display (net harm lies in [−1, 1]; for a margin in (0, 1) the clipped and unclipped
        bounds give the same decisions).

        Raises:
            ValueError: ``level_one_sided`` outside (0, 0.5).
        """
        low, high = self.bounds(level_one_sided)
        return max(-1.0, low), min(1.0, high)

    def p_harm(self) -> float:
        """One-sided p-value of H0: Δ ≤ 0 against net harm > 0 (normal).

        ``1 − Φ((Δ̂ − unknown)/se)``: the unjudged strata at their most favourable value.
        1.0 when ``se`` is 0 (no changed pair) and the estimate is not above 0.
        """
        lead = self.estimate - self.unknown
        if self.se == 0.0:
            return 0.0 if lead > 0.0 else 1.0
        return float(special.ndtr(-lead / self.se))

    def p_noninferior(self, margin: float) -> float:
        """One-sided p-value of H0: Δ ≥ margin (non-inferiority not shown) against Δ < margin.

        ``Φ((Δ̂ + unknown − margin)/se)``; 0 or 1 when ``se`` is 0.
        """
        lead = self.estimate + self.unknown - margin
        if self.se == 0.0:
            return 0.0 if lead < 0.0 else 1.0
        return float(special.ndtr(lead / self.se))

    def upper_bound_after(self, more: int, level_one_sided: float) -> float:
        """The upper bound at one-sided level ``a`` if ``more`` more changed pairs were judged.

        The ``more`` pairs are allocated over the changed strata proportionally to their
        sizes ``N_h`` (each stratum's judged count ``t_h = clip(λ·N_h, n_h, N_h)``, ``λ``
        such that ``Σ t_h = judged + more``); every stratum keeps its current mean and
        within variance, an unjudged stratum that gets pairs enters at mean 0 and variance
        1 (the largest); one still below a whole pair keeps its worst-case widening.

        Raises:
            ValueError: ``more < 0`` or ``level_one_sided`` outside (0, 0.5).
        """
        if more < 0:
            raise ValueError(f"more must be >= 0, got {more}")
        z = z_value(level_one_sided)
        rows = self._projection
        if not rows:
            return self.estimate
        sizes = np.array([r.size for r in rows], dtype=np.float64)
        have = np.array([r.judged for r in rows], dtype=np.float64)
        target = min(float(sizes.sum()), float(have.sum()) + more)
        lo, hi = 0.0, 1.0
        for _ in range(60):
            lam = (lo + hi) / 2.0
            if float(np.clip(lam * sizes, have, sizes).sum()) < target:
                lo = lam
            else:
                hi = lam
        planned = np.clip(hi * sizes, have, sizes)
        n = self.n
        estimate = 0.0
        unknown = 0.0
        phase2 = 0.0
        parts: list[tuple[float, float, float]] = []
        for row, t in zip(rows, planned, strict=True):
            w = row.size / n
            if t < 1.0:
                unknown += w
                parts.append((w, math.nan, math.nan))
                continue
            mean = row.mean if row.judged else 0.0
            v = row.variance if row.judged else 1.0
            estimate += w * mean
            phase2 += w * w * (1.0 - t / row.size) * v / t
            parts.append((w, mean, v))
        sigma2 = (1.0 - float(sizes.sum()) / n) * estimate * estimate
        for w, mean, v in parts:
            sigma2 += w * 4.0 if math.isnan(mean) else w * (v + (mean - estimate) ** 2)
        sigma2 = min(1.0, sigma2)
        return estimate + unknown + z * math.sqrt(sigma2 / n + phase2)

    def judged_needed(self, margin: float, level_one_sided: float, *, min_judged: int = 0) -> int:
        """How many more changed pairs to judge for the upper bound to fall below ``margin``.

        The smallest ``more`` with :meth:`upper_bound_after` ``< margin`` (proportional
        allocation, the current estimate and per-stratum variances; found by bisection),
        and at least ``min_judged − judged`` and one per unjudged changed stratum (a unit
        passes only with every changed stratum judged). 0 with no changed pair, or when
        the bound is already below the margin, ``min_judged`` is met and every stratum is
        judged.

        Returns:
            The count, or :data:`NOT_REACHABLE` (−1) when the estimate is at or above the
            margin, or when even every changed pair judged would leave the bound at or
            above it.

        Raises:
            ValueError: ``level_one_sided`` outside (0, 0.5).
        """
        if self.changed == 0:
            return 0
        floor = max(0, min_judged - self.judged, len(self.unjudged_strata))
        if self.estimate >= margin:
            return NOT_REACHABLE
        more = fewest_more(
            lambda k: self.upper_bound_after(k, level_one_sided),
            self.changed - self.judged,
            margin,
        )
        return NOT_REACHABLE if more < 0 else max(more, floor)


def _column(values: npt.ArrayLike, name: str, dtype: type) -> npt.NDArray[np.generic]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise InvalidDataError(f"{name} must be 1-D, got shape {array.shape}", name=name)
    if dtype is bool and array.dtype != np.bool_:
        raise InvalidDataError(f"{name} must be booleans, got dtype {array.dtype}", name=name)
    if dtype is int and not np.issubdtype(array.dtype, np.integer):
        raise InvalidDataError(f"{name} must be integers, got dtype {array.dtype}", name=name)
    return array


def _validated(
    quality: FloatArray, changed: BoolArray, stratum: IntArray
) -> tuple[FloatArray, BoolArray, IntArray]:
    """The three columns of :func:`estimate_net_harm` as 1-D float, bool and int64 arrays.

    Raises:
        InvalidDataError: as :func:`estimate_net_harm` says.
    """
    q = np.asarray(quality, dtype=np.float64)
    if q.ndim != 1:
        raise InvalidDataError(f"quality must be 1-D, got shape {q.shape}", name="quality")
    c = _column(changed, "changed", bool).astype(np.bool_)
    s = _column(stratum, "stratum", int).astype(np.int64)
    if not q.shape == c.shape == s.shape:
        raise InvalidDataError(
            f"quality, changed and stratum differ in shape: {q.shape}, {c.shape}, {s.shape}",
            name="quality",
        )
    known = ~np.isnan(q)
    bad = int(np.count_nonzero(known & (q != WORSE) & (q != TIE) & (q != BETTER)))
    if bad:
        raise InvalidDataError(
            f"quality: {bad} values other than -1, 0, +1 or NaN", name="quality", count=bad
        )
    negative = int(np.count_nonzero(c & (s < 0)))
    if negative:
        raise InvalidDataError(
            f"stratum: {negative} changed pairs have a negative stratum",
            name="stratum",
            count=negative,
        )
    return q, c, s


def estimate_net_harm(
    quality: FloatArray,
    changed: BoolArray,
    stratum: IntArray,
    *,
    names: Mapping[int, str] | None = None,
) -> NetHarmEstimate:
    """The stratified net harm of one analysis unit (the method: :mod:`shadoweval.stats.net_harm`).

    Args:
        quality: per pair, +1 the candidate worse, −1 better, 0 a tie, NaN not judged;
            shape ``(n,)``. Read only on changed pairs (unchanged pairs are ties).
        changed: per pair, changed beyond the noise (:mod:`shadoweval.stats.change`), booleans.
        stratum: per pair, the changed pair's stratum code (≥ 0; any integers, e.g.
            :func:`divergence_strata` or :func:`pooled_strata`); ignored on unchanged
            pairs (−1 there by convention).
        names: optional stratum names for reasons, by code.

    Returns:
        The :class:`NetHarmEstimate`. With no pairs, or no changed pair, the estimate is 0
        with standard error 0.

    Raises:
        InvalidDataError: arrays of different lengths or not 1-D, ``changed`` not
            boolean, ``stratum`` not integer, a quality other than −1, 0, +1 or NaN, or
            a changed pair with a negative stratum.
    """
    q, c, s = _validated(quality, changed, stratum)
    known = ~np.isnan(q)
    n = int(q.size)
    judged_unchanged = int(np.count_nonzero(~c & known))
    codes, inverse = np.unique(s[c], return_inverse=True)
    if codes.size == 0:
        zero = StratifiedMean(0.0, 0.0, 0.0, 0.0)
        return NetHarmEstimate(
            n, 0, 0, 0, 0, 0, judged_unchanged, 0.0, 0.0, 0.0, zero, zero, (), (), 0.0
        )
    h = codes.size
    qc = q[c]
    size = np.bincount(inverse, minlength=h).astype(np.float64)
    better, ties, worse = (
        np.bincount(inverse, weights=(qc == value).astype(np.float64), minlength=h)
        for value in (BETTER, TIE, WORSE)
    )
    net, spread = stratified_mean(
        n, size, np.column_stack([better, ties, worse]), np.asarray(_QUALITY_SUPPORT)
    )
    shares = np.asarray(_SHARE_SUPPORT)
    worse_share, _ = stratified_mean(n, size, np.column_stack([better + ties, worse]), shares)
    better_share, _ = stratified_mean(n, size, np.column_stack([worse + ties, better]), shares)
    judged = better + ties + worse
    strata = tuple(
        StratumEstimate(
            stratum=int(codes[i]),
            name=None if names is None else names.get(int(codes[i])),
            size=int(size[i]),
            judged=int(judged[i]),
            worse=int(worse[i]),
            ties=int(ties[i]),
            better=int(better[i]),
            weight=float(size[i]) / n,
            mean=float(spread.mean[i]),
            sample_variance=float(spread.sample_variance[i]),
            variance=float(spread.variance[i]),
        )
        for i in range(h)
    )
    return NetHarmEstimate(
        n=n,
        changed=int(size.sum()),
        judged=int(judged.sum()),
        better=int(better.sum()),
        worse=int(worse.sum()),
        ties=int(ties.sum()),
        judged_unchanged=judged_unchanged,
        estimate=net.estimate,
        se=net.se,
        se_finite=net.se_finite,
        worse_share=worse_share,
        better_share=better_share,
        strata=strata,
        unjudged_strata=tuple(r.stratum for r in strata if r.judged == 0),
        unknown=net.unknown,
        _projection=tuple(_Stratum(r.size, r.judged, r.mean, r.variance) for r in strata),
    )
