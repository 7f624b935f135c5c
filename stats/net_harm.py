"""The direction of a change: net harm from judged pairs, stratified by divergence.

Every real upgrade changes answers; the gate asks whether the candidate is at least as
good. Per analysis unit (a task type, or the pooled pairs) with ``n`` pairs, each pair has
a **quality** ``y_i``: +1 the candidate's answer is worse, −1 better, 0 a tie (from a
judge, an analyst or a reference checker: :mod:`shadoweval.stats.judgements`). The **net harm** is

    Δ = P(candidate worse) − P(candidate better) = E[y]

over *all* pairs of the traffic. A pair whose answers did not change beyond the noise
(:mod:`shadoweval.stats.change`) is a tie by definition (``y = 0``, never judged; a judgement of
such a pair is counted in :attr:`NetHarmEstimate.judged_unchanged` and not read). The
changed pairs fall into strata ``h`` by divergence (:func:`divergence_strata`); a random
sample of each stratum is judged (the judge budget), so the estimator is **stratified**:

    Δ̂ = Σ_h w_h·ȳ_h,   w_h = N_h / n,

``N_h`` the changed pairs of stratum h, ``n_h`` the judged ones, ``ȳ_h`` their mean
quality (Cochran 1977, *Sampling Techniques*, 3rd ed., ch. 5, eq. 5.1). The judge budget
samples each task type apart, so the pooled unit stratifies by task type × divergence
stratum (:func:`pooled_strata`): its estimate is the traffic-weighted sum of the task
types' estimates.

**Variance: two phases.** The gate's question is about the traffic, not only about the
``n`` captured pairs: the pairs are a random sample of the traffic (phase 1, which also
classifies them into unchanged and changed strata) and the judged pairs a stratified
random subsample of the changed ones (phase 2): *double sampling for stratification*
(Neyman 1938, "Contribution to the theory of sampling human populations", JASA
33:101–116; Cochran 1977 §12.2–12.3; Rao 1973, Biometrika 60:125–133). By the law of total
variance, to first order,

    Var(Δ̂) = σ²/n + Σ_h w_h²·(1 − n_h/N_h)·S_h²/n_h,

the first term the phase-1 sampling of pairs from the traffic (σ² the variance of ``y``
over the traffic), the second the phase-2 subsampling within each stratum with its
finite population correction — Cochran's eq. 5.6 for the ``n`` captured pairs. The
estimate uses ``s_h²`` for ``S_h²`` and ``σ̂² = Σ_h w_h·(v_h + (ȳ_h − Δ̂)²) + w_0·Δ̂²``
(within plus between strata, the unchanged pairs ``w_0`` all at 0), capped at 1, the
largest variance of a value in [−1, 1]. :attr:`NetHarmEstimate.se` is this standard error
and decides; :attr:`NetHarmEstimate.se_finite` is the phase-2 term alone (Cochran 5.6:
the uncertainty about these ``n`` pairs only), reported. The finite-population variance
alone is 0 once every changed pair is judged: a unit of 200 pairs with 20 changed, all
judged, one worse and 19 ties would "prove" harm at any level; with the traffic's variance
its one-sided p is 0.27 (McNemar's mid-p on the same counts: 0.25). In simulation
(tests/stats/test_net_harm.py) the finite-population interval covers the traffic's net
harm in 0% of such fully judged units, the two-phase one in 96%.

**Small strata.** The within-stratum variance ``v_h`` used for a stratum with judged
pairs is:

* ``n_h = 1``: 1, the largest variance of a value in [−1, 1] (``s_h²`` is undefined);
* ``n_h ≥ 2``: ``max(s_h², s̃_h²)`` (``s_h²`` with ddof 1), capped at 1, where ``s̃_h²``
  is the variance of the stratum's judged outcomes after adding one pseudo-observation of
  each possible outcome (−1, 0, +1) — the three-outcome analogue of the pseudo-counts of
  Agresti & Caffo (2000, "Simple and effective confidence intervals for proportions and
  differences of proportions result from adding two successes and two failures", The
  American Statistician 54:280–288). Ten judged pairs all "better" have ``s_h² = 0`` but
  ``s̃_h² = 0.331``, so they do not give a zero-width interval.

**Unjudged strata.** A changed stratum with ``N_h > 0`` and no judged pair has an unknown
mean in [−1, 1]: the estimate takes the midpoint 0 and every bound is widened by ``w_h``
on its side (worst-case bounds; Manski 2003, *Partial Identification of Probability
Distributions*), so the interval stays valid; such a unit never passes
(:func:`net_harm_check`).

**Shares.** ``P(worse)`` and ``P(better)`` are the same estimator on the indicators
``1{y = +1}`` and ``1{y = −1}`` (values in [0, 1]: variance 1/4 at ``n_h = 1``,
pseudo-counts of 0 and 1, midpoint 1/2 and half-width 1/2 for an unjudged stratum).

**Intervals and sequential validity.** The interval at a one-sided level ``a`` is
``Δ̂ ± z_{1−a}·se`` (normal approximation; widened as above). The gate reads it at the
look's spent level ``levels.alpha_k`` (:class:`~shadoweval.stats.looks.LookLevels`): ``Σ_k α_k ≤ α``
over all looks, so by the union bound the probability that the interval of *any* look
misses Δ on a side is at most α, under any dependence between the looks — the argument
that makes the quantile-ratio checks valid (docs/gate.md) and the one that holds here
although judgements keep arriving between looks. A look re-evaluated because its pairs'
judgements changed is one more test: :func:`judgement_levels` splits the look's levels
over its evaluations, and the caller passes those levels here. PASS when the
upper bound is below the margin (non-inferiority at α_k), FAIL when the lower bound lies
wholly above it; the one-sided p-value of "net harm > 0" (:meth:`NetHarmEstimate.p_harm`)
joins the gate's rollback Holm family at ``alpha_RB_k``.

**Assumption.** Within a stratum the judged pairs are a random sample of its changed pairs
(the judge's budget draws them at random). Labels that analysts chose to give, or a
reference checker covering every pair, are read the same way; a human who labels only the
suspicious pairs of a stratum biases its mean.

Test vectors: tests/stats/test_net_harm.py, against an independent implementation
(tests/stats/reference/net_harm_reference.py), a hand-computed example and simulations
of unbiasedness and coverage.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from shadoweval.records import POOLED, Check, CheckOutcome
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import NetHarmPolicy

__all__ = [
    "NET_HARM_METRIC",
    "NET_HARM_STATISTIC",
    "NOT_REACHABLE",
    "NetHarmEstimate",
    "StratifiedMean",
    "StratumEstimate",
    "divergence_strata",
    "estimate_net_harm",
    "judgement_levels",
    "net_harm_check",
    "pooled_strata",
    "stratum_label",
    "stratum_names",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

NET_HARM_METRIC = "net_harm"
"""The metric name of the net-harm check."""
NET_HARM_STATISTIC = "stratified_net_harm_z"
"""The net-harm check's method: stratified two-phase estimator, normal interval at α_k."""
NOT_REACHABLE = -1
"""What :meth:`NetHarmEstimate.judged_needed` returns when judging more of the unit's
changed pairs cannot bring the upper bound below the margin: the estimate is at or above
the margin, or even with every changed pair judged the traffic's variance (``σ²/n``)
keeps the bound above it (the unit needs more pairs, not more judgements)."""

WORSE, TIE, BETTER = 1.0, 0.0, -1.0
"""The quality values of a pair: the candidate's answer worse, a tie, better."""

_QUALITY_SUPPORT = (-1.0, 0.0, 1.0)
_SHARE_SUPPORT = (0.0, 1.0)


# --------------------------------------------------------------------------- strata


def divergence_strata(divergence: FloatArray, edges: Sequence[float]) -> IntArray:
    """The divergence stratum of each pair, by ``D = 1 − similarity``.

    Strata are ``0`` for ``D < e_1``, ``i`` for ``e_i ≤ D < e_{i+1}``, ``len(edges)`` for
    ``D ≥ e_last``; a NaN divergence (no similarity: an error or tool change) is stratum
    ``len(edges) + 1``. With the default edges (0.1, 0.2, 0.35): D 0.05 → 0, 0.1 → 1,
    0.3 → 2, 0.9 → 3, NaN → 4.

    Args:
        divergence: ``D`` per pair, shape ``(n,)``; finite or NaN.
        edges: strictly increasing stratum edges (``net_harm.strata_edges``).

    Returns:
        int64 stratum indexes, shape ``(n,)``.

    Raises:
        InvalidDataError: an infinite divergence, or a divergence array that is not 1-D.
        ValueError: edges not strictly increasing or not finite.
    """
    d = np.asarray(divergence, dtype=np.float64)
    if d.ndim != 1:
        raise InvalidDataError(f"divergence must be 1-D, got shape {d.shape}", name="divergence")
    bounds = np.asarray(tuple(edges), dtype=np.float64)
    if not np.all(np.isfinite(bounds)) or np.any(np.diff(bounds) <= 0):
        raise ValueError(f"strata edges must be finite and strictly increasing, got {edges}")
    infinite = int(np.count_nonzero(np.isinf(d)))
    if infinite:
        raise InvalidDataError(
            f"divergence: {infinite} infinite values", name="divergence", count=infinite
        )
    strata = np.searchsorted(bounds, d, side="right").astype(np.int64)
    strata[np.isnan(d)] = bounds.size + 1
    return strata


def stratum_label(index: int, edges: Sequence[float]) -> str:
    """The name of divergence stratum ``index`` (:func:`divergence_strata`): ``D < 0.1``,
    ``D 0.1-0.2``, ``D >= 0.35``, ``no similarity``.

    Raises:
        ValueError: ``index`` outside ``0 … len(edges) + 1``.
    """
    e = [f"{x:g}" for x in edges]
    if not 0 <= index <= len(e) + 1:
        raise ValueError(f"stratum index {index} outside 0..{len(e) + 1}")
    if index == len(e) + 1:
        return "no similarity"
    if not e:
        return "all D"
    if index == 0:
        return f"D < {e[0]}"
    if index == len(e):
        return f"D >= {e[-1]}"
    return f"D {e[index - 1]}-{e[index]}"


def stratum_names(edges: Sequence[float]) -> dict[int, str]:
    """Every divergence stratum's :func:`stratum_label`, by index."""
    return {i: stratum_label(i, edges) for i in range(len(edges) + 2)}


def pooled_strata(
    group: Sequence[str] | npt.NDArray[np.object_],
    stratum: IntArray,
    edges: Sequence[float],
) -> tuple[IntArray, dict[int, str]]:
    """Strata of the pooled unit: task type × divergence stratum.

    The judge budget samples each task type separately, so the sampling fraction of a
    divergence stratum differs between task types; pooling them into one stratum would
    over-weight the task types judged more densely. The pooled estimate therefore
    stratifies by task type and divergence stratum (each task type's strata keep their
    own weights), which makes it the traffic-weighted sum of the task types' estimates.

    Args:
        group: the task type of each pair, shape ``(n,)``.
        stratum: each pair's divergence stratum (−1 unchanged), shape ``(n,)``.
        edges: the strata edges of :func:`divergence_strata` (the same for every task type
            of the unit; strata ``0 … len(edges) + 1``).

    Returns:
        The combined stratum codes (−1 where ``stratum`` is −1) and their names
        (``"koala: D 0.1-0.2"``).

    Raises:
        InvalidDataError: the arrays differ in length, or a stratum above
            ``len(edges) + 1``.
    """
    groups = np.asarray(group, dtype=object)
    strata = np.asarray(stratum, dtype=np.int64)
    if groups.shape != strata.shape:
        raise InvalidDataError(
            f"group and stratum differ in shape: {groups.shape} vs {strata.shape}",
            name="stratum",
        )
    width = len(edges) + 2
    too_large = int(np.count_nonzero(strata >= width))
    if too_large:
        raise InvalidDataError(
            f"stratum: {too_large} values above {width - 1} (edges {tuple(edges)})",
            name="stratum",
            count=too_large,
        )
    labels, group_code = np.unique(groups.astype(str), return_inverse=True)
    codes = np.where(strata >= 0, group_code.reshape(strata.shape) * width + strata, -1)
    stratum_text = stratum_names(edges)
    names = {
        int(code): f"{labels[int(code) // width]}: {stratum_text[int(code) % width]}"
        for code in np.unique(codes[codes >= 0])
    }
    codes = codes.astype(np.int64)
    return codes, names


# --------------------------------------------------------------------------- estimator


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
        variance: ``v_h``, the within-stratum variance used (module docstring: 1 at
            ``n_h = 1``, else ``max(s_h², pseudo-count variance)`` capped at 1; NaN when
            ``judged == 0``).
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
class StratifiedMean:
    """A stratified two-phase estimate of a mean over all pairs (module docstring).

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
        z = _z(level_one_sided)
        half = self.unknown + z * self.se
        return self.estimate - half, self.estimate + half


def _z(level_one_sided: float) -> float:
    if not 0.0 < level_one_sided < 0.5:
        raise ValueError(f"level_one_sided must be in (0, 0.5), got {level_one_sided}")
    return float(special.ndtri(1.0 - level_one_sided))


@dataclass(frozen=True)
class _Stratum:
    """What the projection of :meth:`NetHarmEstimate.judged_needed` needs per stratum."""

    size: int
    judged: int
    mean: float
    variance: float


@dataclass(frozen=True)
class _Spread:
    """Per-stratum means and variances of one variable, arrays of shape ``(H,)``."""

    mean: FloatArray  # NaN where nothing is judged
    sample_variance: FloatArray  # ddof 1; NaN below 2 judged
    variance: FloatArray  # the within variance used; NaN where nothing is judged


def _spread(counts: FloatArray, support: FloatArray) -> _Spread:
    """Means and within variances from the counts of each support value per stratum.

    ``counts`` has shape ``(H, K)``: stratum h's judged pairs with value ``support[j]``.
    The variance used is the largest variance over the support at one judged pair, else
    ``max(s², s̃²)`` capped at it, ``s̃²`` the variance after one pseudo-observation of
    each support value (module docstring).
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
    return _Spread(np.where(k > 0, mean, np.nan), sample, used)


def _stratified(
    n: int, size: FloatArray, counts: FloatArray, support: FloatArray
) -> tuple[StratifiedMean, _Spread]:
    """The two-phase stratified mean over ``n`` pairs (0 on every unchanged pair).

    ``size`` holds ``N_h`` per changed stratum, ``counts`` the judged pairs per support
    value (:func:`_spread`).
    """
    low, high = float(support.min()), float(support.max())
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    top = half * half
    spread = _spread(counts, support)
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


@dataclass(frozen=True)
class NetHarmEstimate:
    """The net harm of one analysis unit: counts, estimate, spread, strata (module docstring).

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
        z = _z(level_one_sided)
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
        z = _z(level_one_sided)
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
        room = self.changed - self.judged
        if self.upper_bound_after(room, level_one_sided) >= margin:
            return NOT_REACHABLE
        if self.upper_bound_after(0, level_one_sided) < margin:
            return floor
        lo, hi = 0, room  # upper(lo) >= margin > upper(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.upper_bound_after(mid, level_one_sided) < margin:
                hi = mid
            else:
                lo = mid
        return max(hi, floor)


def _column(values: npt.ArrayLike, name: str, dtype: type) -> npt.NDArray[np.generic]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise InvalidDataError(f"{name} must be 1-D, got shape {array.shape}", name=name)
    if dtype is bool and array.dtype != np.bool_:
        raise InvalidDataError(f"{name} must be booleans, got dtype {array.dtype}", name=name)
    if dtype is int and not np.issubdtype(array.dtype, np.integer):
        raise InvalidDataError(f"{name} must be integers, got dtype {array.dtype}", name=name)
    return array


def estimate_net_harm(
    quality: FloatArray,
    changed: BoolArray,
    stratum: IntArray,
    *,
    names: Mapping[int, str] | None = None,
) -> NetHarmEstimate:
    """The stratified net harm of one analysis unit (module docstring for the method).

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
    net, spread = _stratified(
        n, size, np.column_stack([better, ties, worse]), np.asarray(_QUALITY_SUPPORT)
    )
    shares = np.asarray(_SHARE_SUPPORT)
    worse_share, _ = _stratified(n, size, np.column_stack([better + ties, worse]), shares)
    better_share, _ = _stratified(n, size, np.column_stack([worse + ties, better]), shares)
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


# --------------------------------------------------------------------------- the check


def judgement_levels(levels: LookLevels, judgement_look: int) -> LookLevels:
    """The net-harm levels of the ``judgement_look``-th evaluation of one look.

    Judgements keep arriving after a checkpoint's pairs are fixed, so one look can be
    evaluated several times with different judgements
    (:attr:`~shadoweval.records.Verdict.judgement_look`), each a new test of net harm on
    more judged pairs. The look's levels ``α_k`` and ``α_RB,k`` are therefore split over
    its evaluations: the j-th gets ``6/(π²j²)`` of them (``Σ_j 6/(π²j²) = 1``), so the
    union bound over looks and their re-evaluations still totals at most α (the first
    evaluation reads 0.608·α_k, the second 0.152·α_k, the tenth 0.0061·α_k).
    ``judgement_look`` 0 (no judgement history) counts as the first. Only the net-harm
    check needs this: the other checks read the look's fixed pairs, the same test each time.

    Raises:
        ValueError: ``judgement_look`` < 0.
    """
    if judgement_look < 0:
        raise ValueError(f"judgement_look must be >= 0, got {judgement_look}")
    share = 6.0 / (math.pi**2 * max(1, judgement_look) ** 2)
    return dataclasses.replace(
        levels, alpha_k=levels.alpha_k * share, alpha_harm_k=levels.alpha_harm_k * share
    )


def _unit(task_type: str) -> str:
    return "the pooled pairs" if task_type == POOLED else f"`{task_type}`"


def _sources_text(sources: Mapping[str, int]) -> str:
    order = ["judge", "human", "reference"]
    keys = order + sorted(k for k in sources if k not in order)
    parts = [f"{k} {int(sources.get(k, 0))}" for k in keys if k in order or sources.get(k, 0)]
    return ", ".join(parts)


def _share(name: str, share: StratifiedMean) -> str:
    """``P(worse) 12.0%``; with unjudged strata the worst-case range of the share, not
    its midpoint (``P(worse) 0.0% to 70.0% (unjudged strata)``)."""
    from shadoweval.stats.checks.reasons import fmt_pct

    if share.unknown <= 0.0:
        return f"{name} {fmt_pct(share.estimate)}"
    low = max(0.0, share.estimate - share.unknown)
    high = min(1.0, share.estimate + share.unknown)
    return f"{name} {fmt_pct(low)} to {fmt_pct(high)} (unjudged strata)"


def net_harm_check(
    estimate: NetHarmEstimate,
    *,
    task_type: str,
    block: NetHarmPolicy,
    levels: LookLevels,
    sources: Mapping[str, int],
    alpha: float | None = None,
    power: float | None = None,
) -> tuple[Check, float | None]:
    """The ``net_harm`` check of one unit and its one-sided harm p-value.

    Read at the look's spent level ``levels.alpha_k`` (module docstring: union bound over
    looks; :func:`judgement_levels` for a re-evaluated look):

    * no pair: INCONCLUSIVE; no changed pair: PASS, estimate 0 ("no pair changed beyond
      the noise: N pairs, all ties");
    * no judged changed pair: INCONCLUSIVE, "judge K more changed pairs in …";
    * FAIL when the lower bound lies wholly above ``block.margin`` (whatever the counts);
    * fewer than ``block.min_judged`` judged changed pairs (or, in a unit with fewer
      changed pairs than that, not every changed pair judged), or a changed stratum without a
      judged pair: INCONCLUSIVE, the reason led by "judge K more changed pairs in …" (K
      from :meth:`NetHarmEstimate.judged_needed` at ``alpha_k``) naming the strata;
    * PASS when the upper bound is below the margin; else INCONCLUSIVE
      ("non-inferiority not shown yet").

    Every reason gives better / tie / worse among the judged changed pairs, the sources'
    counts, P(worse) and P(better), the net harm with its interval and margin, and the
    unchanged pairs counted as ties. The check's ``p_value`` is the non-inferiority
    p-value (H0: Δ ≥ margin, :meth:`NetHarmEstimate.p_noninferior`); its interval is
    clipped to [−1, 1].

    Args:
        estimate: the unit's :func:`estimate_net_harm` (stratum names from ``names``,
            else :func:`stratum_label` of ``block.strata_edges`` where the code is one).
        task_type: the unit (a task type or ``POOLED``).
        block: the unit's ``net_harm`` policy (margin, critical, min_judged, edges).
        levels: the look's levels.
        sources: judged changed pairs per source (``judge``, ``human``, ``reference``;
            others such as ``failed`` are shown when non-zero).
        alpha, power: accepted for the gate's common call; the minimum is
            ``block.min_judged``, not a power calculation, so they are not read.

    Returns:
        The :class:`~shadoweval.records.Check` and the one-sided p-value of H0: Δ ≤ 0
        (:meth:`NetHarmEstimate.p_harm`) for the gate's rollback Holm family at
        ``levels.alpha_harm_k``; ``None`` when there is nothing to test (no pair, no
        changed pair, or no judged changed pair).
    """
    del alpha, power
    # Imported here: shadoweval.stats.checks (its package __init__ and the check modules) may import
    # shadoweval.stats.change, which imports this module; a top-level import would be circular.
    from shadoweval.stats.checks.reasons import CheckNumbers, fmt_g, fmt_p, fmt_pp, make_check

    e = estimate
    margin = block.margin
    alpha_k = levels.alpha_k
    statistic = f"{NET_HARM_STATISTIC}; {levels.describe()}"
    unit = _unit(task_type)

    def check(
        outcome: CheckOutcome, reason: str, numbers: CheckNumbers, p: float | None
    ) -> tuple[Check, float | None]:
        made = make_check(
            NET_HARM_METRIC,
            task_type,
            statistic,
            margin,
            outcome,
            reason,
            numbers,
            critical=block.critical,
        )
        return made, p

    if e.n == 0:
        return check(CheckOutcome.INCONCLUSIVE, "no pairs; cannot judge", CheckNumbers(), None)
    if e.changed == 0:
        note = (
            f" (judgements of {e.judged_unchanged} unchanged pairs not read)"
            if e.judged_unchanged
            else ""
        )
        return check(
            CheckOutcome.PASS,
            f"no pair changed beyond the noise: {e.n} pairs, all ties{note}",
            CheckNumbers(0.0, 0.0, 0.0, e.n, None),
            None,
        )

    def name(row: StratumEstimate) -> str:
        if row.name is not None:
            return row.name
        if 0 <= row.stratum <= len(block.strata_edges) + 1:
            return stratum_label(row.stratum, block.strata_edges)
        return f"stratum {row.stratum}"

    low, high = e.bounds(alpha_k)
    shown_low, shown_high = e.interval(alpha_k)
    unchanged = e.n - e.changed
    counts = (
        f"{e.judged} of {e.changed} changed pairs judged ({_sources_text(sources)}): "
        f"{e.better} better, {e.ties} tie, {e.worse} worse"
    )
    tail = f"; {unchanged} unchanged pairs counted as ties"
    if e.judged_unchanged:
        tail += f" (their {e.judged_unchanged} judgements not read)"
    unjudged = [r for r in e.strata if r.judged == 0]
    missing = ", ".join(f"{name(r)} ({r.size} changed)" for r in unjudged)
    # A unit with fewer changed pairs than min_judged needs them all judged (a census of
    # its changed pairs), not more pairs than it has.
    needed = min(block.min_judged, e.changed)
    short = max(0, needed - e.judged)

    def more() -> tuple[str, str]:
        """("judge K more changed pairs in …" or "", why judging alone cannot pass or "")."""
        k = e.judged_needed(margin, alpha_k, min_judged=needed)
        if k != NOT_REACHABLE:
            return (f"judge {k} more changed pairs in {unit}" if k > 0 else ""), ""
        floor = max(short, len(unjudged))
        judge = f"judge {floor} more changed pairs in {unit}" if floor else ""
        if e.estimate >= margin:
            return judge, (
                f"the net harm estimate {fmt_pp(e.estimate)} is not below the margin "
                f"{fmt_pp(margin)}: judging more pairs cannot make it pass"
            )
        if e.judged == 0:
            # No judged pair: no spread to extrapolate from; judging decides.
            return judge, ""
        return judge, (
            f"even with all {e.changed} changed pairs judged the upper bound would not clear "
            f"the margin {fmt_pp(margin)} at this spread: the unit needs more pairs"
        )

    def joined(*parts: str) -> str:
        return "; ".join(p for p in parts if p)

    if e.judged == 0:
        judge, unreachable = more()
        return check(
            CheckOutcome.INCONCLUSIVE,
            joined(
                f"{judge or f'judge changed pairs in {unit}'}: none of the {e.changed} "
                f"changed pairs is judged ({missing})",
                unreachable,
                f"sources {_sources_text(sources)}{tail}",
            ),
            CheckNumbers(None, None, None, e.n, None),
            None,
        )

    p_harm = e.p_harm()
    label = f"interval at alpha_k {fmt_g(alpha_k)} per side (look {levels.look})"
    net = (
        f"net harm {fmt_pp(e.estimate)}, {label} {fmt_pp(shown_low)} to {fmt_pp(shown_high)}, "
        f"margin {fmt_pp(margin)}"
    )
    shares = (
        f"{_share('P(worse)', e.worse_share)}, {_share('P(better)', e.better_share)} over all "
        f"{e.n} pairs; one-sided p of net harm > 0: {fmt_p(p_harm)}"
    )
    if unjudged:
        net += f" (widened for {len(unjudged)} unjudged strata)"
    numbers = CheckNumbers(e.estimate, shown_low, shown_high, e.n, e.p_noninferior(margin))
    body = f"{net}; {counts}; {shares}{tail}"
    if low > margin:
        return check(
            CheckOutcome.FAIL,
            f"net harm worse than the margin: {net}: the interval lies wholly above the "
            f"margin; {counts}; {shares}{tail}",
            numbers,
            p_harm,
        )
    if short or unjudged:
        judge, unreachable = more()
        why = []
        if short:
            why.append(
                f"{e.judged} < min_judged {block.min_judged}"
                if needed == block.min_judged
                else f"{e.judged} of its {e.changed} changed pairs judged; all are needed "
                f"below min_judged {block.min_judged}"
            )
        if unjudged:
            why.append(f"no judged pair in {missing}")
        return check(
            CheckOutcome.INCONCLUSIVE,
            joined(
                f"{judge or f'judge more changed pairs in {unit}'} ({'; '.join(why)})",
                unreachable,
                body,
            ),
            numbers,
            p_harm,
        )
    if high < margin:
        return check(
            CheckOutcome.PASS,
            f"non-inferior: {body} (on >= min_judged {block.min_judged})"
            if needed == block.min_judged
            else f"non-inferior: {body} (all {e.changed} changed pairs judged: fewer than "
            f"min_judged {block.min_judged} changed)",
            numbers,
            p_harm,
        )
    judge, unreachable = more()
    return check(
        CheckOutcome.INCONCLUSIVE,
        f"non-inferiority not shown yet: {joined(judge, unreachable, body)}",
        numbers,
        p_harm,
    )
