"""Exact unconditional tests of two independent proportions with a non-zero margin (small arms).

The Farrington–Manning score test of :mod:`shadoweval.stats.canary.two_arm` refers its z statistic
to the normal distribution; with few expected events in an arm (rare errors at a 1 %
step: 3 errors expected among 300 candidate requests) that approximation is poor and
can be anti-conservative. Here the same statistic is referred to its exact distribution
under the two independent binomials, maximised over the nuisance parameter:

    p = sup_{p_b on the null boundary} P_{p_b + δ0, p_b}( Z ≤ z_obs )      (non-inferiority)
    p = sup_{p_b on the null boundary} P_{p_b + δ0, p_b}( Z ≥ z_obs )      (excess)

with ``Z`` the Farrington–Manning score z for ``H0: p_c − p_b = δ0`` (ties with z_obs
count as extreme), the boundary ``p_c = p_b + δ0``, ``p_b ∈ [max(0, −δ0), min(1, 1 − δ0)]``.
This is the exact unconditional test of Chan, "Exact tests of equivalence and efficacy
with a non-zero lower bound for comparative studies" (Stat Med 17:1403–1413, 1998), as
discussed by Röhmel & Mansmann, "Unconditional non-asymptotic one-sided tests for
independent binomial proportions when the interest lies in showing non-inferiority
and/or superiority" (Biometrical Journal 41:149–170, 1999): the maximum over the whole
null region is attained on its boundary when the rejection region is Barnard-convex
(monotone in each count), which the tests check against a brute-force maximum over the
whole region (tests/stats/reference/exact_unconditional.py). At δ0 = 0 the statistic is
the pooled z and the test is Barnard's (``scipy.stats.barnard_exact(pooled=True)``).

Computation: the rejection region of each candidate count ``x_c`` is a tail in ``x_b``
(z decreases in x_b), so its edge ``t(x_c)`` is found by bisection with
:func:`shadoweval.stats.canary.two_arm.score_statistic`; then
``P(Z ≤ z_obs) = Σ_{x_c} Bin(x_c; n_c, p_c) · P(X_b ≥ t(x_c))`` (binomial pmfs from
``scipy.special.gammaln``) on a grid of 1001 boundary points, refined around the
maximum with 201 more between its neighbours. A grid maximum can miss the true
supremum between points by a little (the tail probability is smooth in p_b; against
the brute-force reference the difference is below 1e-4 in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import special

from shadoweval.stats.canary.two_arm import _restricted_mle, score_statistic
from shadoweval.stats.inputs import InvalidDataError, check_alpha, count

__all__ = [
    "EXACT_BELOW_EXPECTED",
    "ExactUnconditionalResult",
    "exact_unconditional_test",
    "smallest_expected_count",
]

EXACT_BELOW_EXPECTED = 5.0
"""Use the exact test when an arm's smallest expected cell count under H0 is below this
(the usual rule for the normal approximation of a binomial count)."""

_TIE = 1e-9
"""Tolerance on z for counting a table as at least as extreme as the observed one."""


@dataclass(frozen=True, slots=True)
class ExactUnconditionalResult:
    """Result of :func:`exact_unconditional_test`.

    Attributes:
        p_value: the exact unconditional p-value (sup over the boundary grid).
        statistic: the observed Farrington–Manning z.
        nuisance_at_max: the baseline rate p_b on the boundary where the tail was largest.
        margin: δ0.
        alternative: ``smaller`` (non-inferiority: H1 p_c − p_b < δ0) or ``larger``
            (excess: H1 p_c − p_b > δ0).
        alpha: the level.
        rejected: ``p_value <= alpha``.
        grid_points: boundary points evaluated.
    """

    p_value: float
    statistic: float
    nuisance_at_max: float
    margin: float
    alternative: Literal["smaller", "larger"]
    alpha: float
    rejected: bool
    grid_points: int


def smallest_expected_count(x_c: int, n_c: int, x_b: int, n_b: int, margin: float) -> float:
    """Smallest expected cell count (events or non-events, either arm) under H0.

    ``min(n_c·p̃_c, n_c·(1 − p̃_c), n_b·p̃_b, n_b·(1 − p̃_b))`` with ``(p̃_c, p̃_b)`` the
    maximum-likelihood rates restricted to ``p_c − p_b = margin`` (Farrington & Manning
    1990). Below :data:`EXACT_BELOW_EXPECTED` the score test's normal approximation is
    poor and :func:`exact_unconditional_test` is used.
    """
    q_c, q_b = _restricted_mle(x_c, n_c, x_b, n_b, margin)
    return min(n_c * q_c, n_c * (1.0 - q_c), n_b * q_b, n_b * (1.0 - q_b))


def _edges(
    n_c: int, n_b: int, margin: float, z_obs: float, alternative: Literal["smaller", "larger"]
) -> npt.NDArray[np.int64]:
    """Per candidate count x_c: smallest x_b with z ≤ z_obs (``smaller``; n_b + 1 if none)
    or largest x_b with z ≥ z_obs (``larger``; −1 if none); z is non-increasing in x_b."""
    out = np.empty(n_c + 1, dtype=np.int64)
    for x_c in range(n_c + 1):

        def extreme(x_b: int, x_c: int = x_c) -> bool:
            z = score_statistic(x_c, n_c, x_b, n_b, margin)
            return z <= z_obs + _TIE if alternative == "smaller" else z >= z_obs - _TIE

        if alternative == "smaller":
            lo, hi = 0, n_b + 1  # first extreme x_b in [lo, hi]
            while lo < hi:
                mid = (lo + hi) // 2
                if extreme(mid):
                    hi = mid
                else:
                    lo = mid + 1
            out[x_c] = lo
        else:
            lo, hi = -1, n_b  # last extreme x_b in [lo, hi]
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if extreme(mid):
                    lo = mid
                else:
                    hi = mid - 1
            out[x_c] = lo
    return out


def _log_pmf(n: int, p: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log Binomial(k; n, p) for k = 0..n (columns) and each p (rows), from ``gammaln``,
    ``xlogy`` and ``xlog1py`` (exact at p = 0 and p = 1)."""
    k = np.arange(n + 1, dtype=float)
    log_comb = special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)
    out: npt.NDArray[np.float64] = (
        log_comb[None, :] + special.xlogy(k[None, :], p) + special.xlog1py(n - k[None, :], -p)
    )
    return out


def _tails(
    grid: npt.NDArray[np.float64],
    n_c: int,
    n_b: int,
    margin: float,
    edges: npt.NDArray[np.int64],
    alternative: Literal["smaller", "larger"],
) -> npt.NDArray[np.float64]:
    """The tail probability at each boundary point: ``Σ_{x_c} Bin(x_c; n_c, p_b + δ0) ·
    P(X_b beyond edge(x_c))``, the X_b tails from cumulative sums of the pmf (summed from
    the small end, so tiny tails keep their precision)."""
    out = np.empty(grid.size)
    chunk = max(1, 1_000_000 // (max(n_c, n_b) + 1))
    for start in range(0, grid.size, chunk):
        p_b = grid[start : start + chunk, None]
        p_c = np.clip(p_b + margin, 0.0, 1.0)
        pmf_c = np.exp(_log_pmf(n_c, p_c))
        pmf_b = np.exp(_log_pmf(n_b, p_b))
        if alternative == "smaller":
            # P(X_b >= t) for t = 0..n_b + 1 (the last: 0)
            tail = np.concatenate(
                [np.cumsum(pmf_b[:, ::-1], axis=1)[:, ::-1], np.zeros((p_b.shape[0], 1))], axis=1
            )
            part = tail[:, edges]
        else:
            # P(X_b <= s) for s = -1..n_b (the first: 0)
            tail = np.concatenate([np.zeros((p_b.shape[0], 1)), np.cumsum(pmf_b, axis=1)], axis=1)
            part = tail[:, edges + 1]
        out[start : start + chunk] = np.sum(pmf_c * part, axis=1)
    return out


def exact_unconditional_test(
    x_c: int,
    n_c: int,
    x_b: int,
    n_b: int,
    margin: float,
    alternative: Literal["smaller", "larger"],
    alpha: float = 0.05,
    *,
    grid_points: int = 1001,
) -> ExactUnconditionalResult:
    """Exact unconditional test of ``p_c − p_b`` against a margin (Chan 1998; module note).

    Args:
        x_c, n_c: candidate events and trials (``0 ≤ x_c ≤ n_c``, ``n_c ≥ 1``).
        x_b, n_b: baseline events and trials.
        margin: δ0 in (−1, 1).
        alternative: ``smaller`` — H1 ``p_c − p_b < δ0`` (non-inferiority, promote);
            ``larger`` — H1 ``p_c − p_b > δ0`` (excess, rollback).
        alpha: one-sided level in (0, 0.5).
        grid_points: boundary points of the first grid (≥ 11), before refinement.

    Returns:
        The result; ``p_value`` in [0, 1].

    Raises:
        InvalidDataError: bad counts, margin, alternative, alpha or grid size (named).

    Cost: ``O(n_c · log n_b)`` score evaluations plus ``O(grid · n_c)`` binomial terms.
    """
    x_c, n_c, x_b, n_b = (
        count(v, k) for v, k in ((x_c, "x_c"), (n_c, "n_c"), (x_b, "x_b"), (n_b, "n_b"))
    )
    for x, n, xn, nn in ((x_c, n_c, "x_c", "n_c"), (x_b, n_b, "x_b", "n_b")):
        if n < 1:
            raise InvalidDataError(f"{nn} must be >= 1, got {n}", name=nn)
        if x > n:
            raise InvalidDataError(f"{xn} must be <= {nn} ({n}), got {x}", name=xn)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not -1 < margin < 1:
        raise InvalidDataError(f"margin must be in (-1, 1), got {margin!r}", name="margin")
    if alternative not in ("smaller", "larger"):
        raise InvalidDataError(
            f"alternative must be 'smaller' or 'larger', got {alternative!r}", name="alternative"
        )
    alpha = check_alpha(alpha, upper=0.5)
    if isinstance(grid_points, bool) or not isinstance(grid_points, int) or grid_points < 11:
        raise InvalidDataError(f"grid_points must be an integer >= 11, got {grid_points!r}")
    margin = float(margin)
    z_obs = score_statistic(x_c, n_c, x_b, n_b, margin)
    edges = _edges(n_c, n_b, margin, z_obs, alternative)
    lo, hi = max(0.0, -margin), min(1.0, 1.0 - margin)
    grid = np.linspace(lo, hi, grid_points)
    tails = _tails(grid, n_c, n_b, margin, edges, alternative)
    best = int(np.argmax(tails))
    fine = np.linspace(grid[max(best - 1, 0)], grid[min(best + 1, grid.size - 1)], 201)
    fine_tails = _tails(fine, n_c, n_b, margin, edges, alternative)
    if float(fine_tails.max()) > float(tails[best]):
        p, at = float(fine_tails.max()), float(fine[int(np.argmax(fine_tails))])
    else:
        p, at = float(tails[best]), float(grid[best])
    p = min(max(p, 0.0), 1.0)
    return ExactUnconditionalResult(
        p_value=p,
        statistic=z_obs,
        nuisance_at_max=at,
        margin=margin,
        alternative=alternative,
        alpha=alpha,
        rejected=p <= alpha,
        grid_points=grid.size + fine.size,
    )
