"""Report-only statistics: Mann–Whitney, Hodges–Lehmann shift, common-language effect size.

These describe a difference between two samples but never gate it: Mann–Whitney tests
``P(X > Y)``, not a rate or a quantile, so it misses sparse error increases, variance
blow-ups and tail shifts (gate-statistics.md pitfall 6; Kayenta issues #426, #780,
spinnaker #6278). They appear in reports next to the gate's own checks, as Kayenta's
NetflixACAJudge shows them.

scipy's ``mannwhitneyu`` changed its defaults across versions and ``method="exact"``
ignores ties (scipy issues #17821, #26115; pitfall 4 and 5), so :func:`mann_whitney`
always takes an explicit ``method`` and ``alternative`` and switches tied data from
``exact`` to a permutation test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import FloatArray, InvalidDataError, finite_1d

__all__ = ["MannWhitneyReport", "cles", "hodges_lehmann_shift", "mann_whitney"]

MWAlternative = Literal["two-sided", "less", "greater"]
MWMethod = Literal["exact", "asymptotic", "permutation"]


@dataclass(frozen=True)
class MannWhitneyReport:
    """Result of :func:`mann_whitney`.

    Attributes:
        u: the U statistic of ``x``: ``#(x_i > y_j) + ½·#(x_i = y_j)``, in [0, n_x·n_y].
        p_value: the p-value for ``alternative``.
        method: the method actually used (``exact`` becomes ``permutation`` with ties).
        alternative: ``two-sided``, ``less`` (x tends to be smaller) or ``greater``.
        n_x: size of x.
        n_y: size of y.
        ties: true when the pooled sample has tied values.
    """

    u: float
    p_value: float
    method: MWMethod
    alternative: MWAlternative
    n_x: int = 0
    n_y: int = 0
    ties: bool = False


def mann_whitney(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    alternative: MWAlternative,
    method: MWMethod,
    n_resamples: int = 9999,
    seed: int = 0,
) -> MannWhitneyReport:
    """Mann–Whitney U test of x against y with a pinned method (report only).

    * ``exact``: the exact null distribution of U (:func:`scipy.stats.mannwhitneyu`,
      ``method="exact"``), valid only without ties; **with ties it is replaced by
      ``permutation``** (scipy's exact ignores ties: [1,2,2,3,3,3] vs [2,3,3,4,4,5]
      gives asymptotic 0.0784, permutation 0.1082, gate-statistics.md pitfall 4).
    * ``asymptotic``: normal approximation with tie-corrected variance and continuity
      correction (R ``wilcox.test(exact=FALSE, correct=TRUE)``).
    * ``permutation``: :class:`scipy.stats.PermutationMethod` with ``n_resamples``
      random permutations seeded by ``seed``; when the number of distinct
      permutations is at most ``n_resamples`` the permutation distribution is exact.
      Costs O(n_resamples·(n_x + n_y)·log(n_x + n_y)): use ``asymptotic`` for large
      samples.

    All values equal: U = n_x·n_y/2 and p = 1 (no scipy call; scipy would return NaN).
    T9 (Hollander & Wolfe via R ``wilcox.test``): U = 35, p = 0.1272 (greater, exact);
    T11: U = 17, exact 0.1111, asymptotic 0.1113 (two-sided).

    Args:
        x: first sample, shape ``(n_x,)``, finite.
        y: second sample, shape ``(n_y,)``, finite.
        alternative: ``two-sided``, ``less`` or ``greater`` (for x relative to y).
        method: ``exact``, ``asymptotic`` or ``permutation``.
        n_resamples: permutations for ``permutation``, ≥ 1.
        seed: seed of the permutations (reproducible p-values).

    Raises:
        InvalidDataError: a value is NaN/infinite, unknown alternative or method,
            n_resamples < 1, seed negative.
        InsufficientDataError: an empty sample.
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise InvalidDataError(f"unknown alternative {alternative!r}", name="alternative")
    if method not in ("exact", "asymptotic", "permutation"):
        raise InvalidDataError(f"unknown Mann-Whitney method {method!r}", name="method")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise InvalidDataError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidDataError(f"seed must be a non-negative integer, got {seed!r}", name="seed")
    a = finite_1d(x, "x")
    b = finite_1d(y, "y")
    pooled = np.concatenate([a, b])
    ties = bool(np.unique(pooled).size < pooled.size)
    used: MWMethod = "permutation" if method == "exact" and ties else method
    if np.all(pooled == pooled[0]):
        return MannWhitneyReport(
            a.size * b.size / 2.0, 1.0, used, alternative, a.size, b.size, ties
        )
    scipy_method: object = used
    if used == "permutation":
        scipy_method = scipy_stats.PermutationMethod(
            n_resamples=n_resamples, rng=np.random.default_rng(int(seed))
        )
    result = scipy_stats.mannwhitneyu(
        a, b, alternative=alternative, method=scipy_method, use_continuity=True
    )
    p = min(1.0, float(result.pvalue))
    return MannWhitneyReport(
        float(result.statistic), p, used, alternative, int(a.size), int(b.size), ties
    )


def _thin(sorted_values: FloatArray, size: int) -> FloatArray:
    """``size`` evenly spaced order statistics (mid-ranks of equal blocks) of a sorted array."""
    if size >= sorted_values.size:
        return sorted_values
    ranks = ((np.arange(size) + 0.5) * sorted_values.size / size).astype(np.int64)
    return sorted_values[ranks]


def hodges_lehmann_shift(
    x: npt.ArrayLike, y: npt.ArrayLike, *, max_pairs: int = 4_000_000
) -> float:
    """Hodges–Lehmann shift estimate: the median of all pairwise differences ``x_i − y_j``.

    The estimator that accompanies the Mann–Whitney test (Hodges & Lehmann, Ann. Math.
    Statist. 34:598–611, 1963; R ``wilcox.test(conf.int=TRUE)``'s "difference in
    location", Kayenta's HL estimate).

    Memory: the exact estimate materialises ``n_x·n_y`` float64 differences (8 bytes
    each; the default cap of 4·10⁶ pairs is 32 MB). Above ``max_pairs`` both samples
    are thinned **deterministically** to evenly spaced order statistics (the smaller
    sample is kept whole when the cap allows) so that at most ``max_pairs``
    differences are formed; the estimate is then approximate, with an error of the
    order of the spacing between the retained quantiles, and repeated calls agree.

    Args:
        x: first sample, shape ``(n_x,)``, finite.
        y: second sample, shape ``(n_y,)``, finite.
        max_pairs: most differences formed, ≥ 1.

    Returns:
        The median of ``x_i − y_j`` (x's unit); positive when x tends to be larger.

    Raises:
        InvalidDataError: a value is NaN/infinite, max_pairs < 1.
        InsufficientDataError: an empty sample.
    """
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1:
        raise InvalidDataError(f"max_pairs must be a positive integer, got {max_pairs!r}")
    a = np.sort(finite_1d(x, "x"))
    b = np.sort(finite_1d(y, "y"))
    if a.size * b.size > max_pairs:
        small, large = sorted((a.size, b.size))
        if small * small <= max_pairs:  # keep the smaller sample whole
            keep_small, keep_large = small, max_pairs // small
        else:
            scale = math.sqrt(max_pairs / (a.size * b.size))
            keep_small, keep_large = max(1, int(small * scale)), max(1, int(large * scale))
        size_a, size_b = (keep_small, keep_large) if a.size <= b.size else (keep_large, keep_small)
        a, b = _thin(a, size_a), _thin(b, size_b)
    return float(np.median(np.subtract.outer(a, b)))


def cles(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Common-language effect size ``P(X > Y) + ½·P(X = Y)`` (Vargha–Delaney A).

    Computed exactly from mid-ranks in O((n_x + n_y)·log(n_x + n_y)) time and O(n)
    memory: ``A = U_x / (n_x·n_y)`` with ``U_x = R_x − n_x(n_x + 1)/2`` (McGraw & Wong,
    Psychol. Bull. 111:361, 1992; Vargha & Delaney, J. Educ. Behav. Stat. 25:101, 2000).
    0.5 means no tendency either way.

    Raises:
        InvalidDataError: a value is NaN/infinite.
        InsufficientDataError: an empty sample.
    """
    a = finite_1d(x, "x")
    b = finite_1d(y, "y")
    ranks = scipy_stats.rankdata(np.concatenate([a, b]))
    u = float(np.sum(ranks[: a.size])) - a.size * (a.size + 1) / 2.0
    return u / (a.size * b.size)
