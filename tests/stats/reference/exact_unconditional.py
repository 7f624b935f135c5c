"""Brute-force exact unconditional p-values: every table, every nuisance point, no shortcut.

For H0 ``p1 − p2 = δ`` (one-sided), the statistic is the Farrington–Manning z computed
with the root-finding restricted MLE of :mod:`tests.stats.reference.two_proportions`
(independent of the closed form); the p-value is the largest, over a grid of the null
region, of the total probability of all tables at least as extreme as the observed one
(explicit double sum over ``(x1, x2)``, no monotonicity assumed). ``region="boundary"``
uses the line ``p1 = p2 + δ``; ``region="whole"`` a 2-D grid of the whole null
(``p1 − p2 ≥ δ`` for ``smaller``, ``≤ δ`` for ``larger``), to check that the supremum is
on the boundary (Röhmel & Mansmann 1999). Only for small n (cost O(n1·n2·grid)).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

from tests.stats.reference.two_proportions import restricted_mle


def fm_z(x1: int, n1: int, x2: int, n2: int, delta: float) -> float:
    """Farrington–Manning z from the root-finding restricted MLE."""
    q1, q2 = restricted_mle(x1, n1, x2, n2, delta)
    var = q1 * (1 - q1) / n1 + q2 * (1 - q2) / n2
    num = x1 / n1 - x2 / n2 - delta
    if var <= 1e-15:
        return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def z_table(n1: int, n2: int, delta: float) -> np.ndarray:
    """z for every table, shape (n1 + 1, n2 + 1)."""
    return np.array([[fm_z(a, n1, b, n2, delta) for b in range(n2 + 1)] for a in range(n1 + 1)])


def exact_pvalue(
    x1: int,
    n1: int,
    x2: int,
    n2: int,
    delta: float,
    alternative: str,
    *,
    region: str = "boundary",
    points: int = 2001,
) -> float:
    """Sup over the null grid of P(tables at least as extreme as the observed one)."""
    z = z_table(n1, n2, delta)
    z_obs = z[x1, x2]
    extreme = z <= z_obs + 1e-7 if alternative == "smaller" else z >= z_obs - 1e-7
    if region == "boundary":
        p2 = np.linspace(max(0.0, -delta), min(1.0, 1.0 - delta), points)
        pairs = [(b + delta, b) for b in p2]
    else:
        axis = np.linspace(0.0, 1.0, points)
        pairs = [
            (a, b)
            for a in axis
            for b in axis
            if (a - b >= delta - 1e-12 if alternative == "smaller" else a - b <= delta + 1e-12)
        ]
    best = 0.0
    a_range, b_range = np.arange(n1 + 1), np.arange(n2 + 1)
    for p1, p2_ in pairs:
        joint = np.outer(
            scipy_stats.binom.pmf(a_range, n1, min(max(p1, 0.0), 1.0)),
            scipy_stats.binom.pmf(b_range, n2, min(max(p2_, 0.0), 1.0)),
        )
        best = max(best, float(joint[extreme].sum()))
    return best
