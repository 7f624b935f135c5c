"""Independent two-proportion score statistics, from the published formulas.

Farrington & Manning (Stat Med 1990) and Miettinen & Nurminen (Stat Med 1985): for
H0 ``p1 − p2 = δ``, the restricted MLE (p̃1, p̃2 = p̃1 − δ) maximises the binomial
log-likelihood on that line; here found by root finding (``scipy.optimize.brentq`` on
the score in p̃2), not by the closed-form cubic statsmodels uses. Then::

    z = (p̂1 − p̂2 − δ) / sqrt(V),  V = p̃1(1−p̃1)/n1 + p̃2(1−p̃2)/n2

(Farrington–Manning) and V · N/(N−1), N = n1 + n2 (Miettinen–Nurminen). The MN
interval collects the δ with ``|z_MN(δ)| ≤ z_{1−α/2}``, its ends found by brentq.
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as scipy_stats

_EPS = 1e-12


def restricted_mle(x1: int, n1: int, x2: int, n2: int, delta: float) -> tuple[float, float]:
    """(p̃1, p̃2) maximising the likelihood subject to p1 − p2 = δ."""
    lo, hi = max(0.0, -delta) + _EPS, min(1.0, 1.0 - delta) - _EPS

    def score(p2: float) -> float:
        p1 = p2 + delta
        return x1 / p1 - (n1 - x1) / (1 - p1) + x2 / p2 - (n2 - x2) / (1 - p2)

    s_lo, s_hi = score(lo), score(hi)
    if s_lo <= 0:
        p2 = lo
    elif s_hi >= 0:
        p2 = hi
    else:
        p2 = optimize.brentq(score, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    return p2 + delta, p2


def score_z(x1: int, n1: int, x2: int, n2: int, delta: float, *, mn: bool) -> float:
    """Score z statistic; ``mn`` applies Miettinen–Nurminen's N/(N−1)."""
    p1, p2 = restricted_mle(x1, n1, x2, n2, delta)
    p1, p2 = min(max(p1, 0.0), 1.0), min(max(p2, 0.0), 1.0)
    var = max(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2, 1e-300)
    if mn:
        n = n1 + n2
        var *= n / (n - 1)
    return (x1 / n1 - x2 / n2 - delta) / math.sqrt(var)


def fm_pvalue(x1: int, n1: int, x2: int, n2: int, delta: float, alternative: str) -> float:
    """One-sided Farrington–Manning p-value (``smaller``: H1 diff < δ)."""
    z = score_z(x1, n1, x2, n2, delta, mn=False)
    return float(scipy_stats.norm.cdf(z) if alternative == "smaller" else scipy_stats.norm.sf(z))


def mn_interval(x1: int, n1: int, x2: int, n2: int, alpha: float) -> tuple[float, float]:
    """Two-sided 1 − α Miettinen–Nurminen interval for p1 − p2."""
    crit = scipy_stats.norm.ppf(1 - alpha / 2)
    d_hat = x1 / n1 - x2 / n2

    def f(d: float) -> float:
        return score_z(x1, n1, x2, n2, d, mn=True)

    a, b = -1 + 1e-9, 1 - 1e-9
    low = a if f(a) <= crit else optimize.brentq(lambda d: f(d) - crit, a, d_hat, xtol=1e-13)
    high = b if f(b) >= -crit else optimize.brentq(lambda d: f(d) + crit, d_hat, b, xtol=1e-13)
    return low, high
