"""Tests for paired binary outcomes: McNemar (harm) and Tango's score test (non-inferiority).

Both arms are judged on the same requests, so each pair falls in a 2×2 table whose rows
are the first arm (baseline) succeeding / failing and whose columns are the second arm
(candidate) succeeding / failing::

                      second ok   second fails
        first ok         n11         n12 (= b)
        first fails      n21 (= c)   n22

Only the discordant counts ``b = n12`` (only the second arm fails) and ``c = n21`` (only
the first arm fails) carry information about a difference. The paired difference of
failure proportions is ``δ = (n12 − n21) / N = P(second fails) − P(first fails)``.

Sources: McNemar (1947); Fagerland, Lydersen & Laake, "The McNemar test for binary
matched-pairs data: mid-p and asymptotic are better than exact conditional", BMC Medical
Research Methodology 13:91 (2013); Tango, "Equivalence test and confidence interval for
the difference in proportions for the paired-sample design", Statistics in Medicine
17:891–908 (1998), with the parametrisation of the R package ``contingencytables``
(Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency Tables", 2017, ch. 8).
Test vectors T1, T3, T4, T6, T7, T8, T13 of gate-statistics.md §4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from scipy import optimize
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError, count

__all__ = [
    "Alternative",
    "McNemarMethod",
    "McNemarResult",
    "TangoInterval",
    "TangoTestResult",
    "mcnemar",
    "tango_score_ci",
    "tango_score_test",
]

Alternative = Literal["two-sided", "greater", "less"]
"""``greater``: the second arm fails more (b > c in expectation); ``less``: it fails less."""

McNemarMethod = Literal["exact", "midp", "asymptotic", "asymptotic_cc"]
"""Exact conditional binomial, mid-p, asymptotic χ²/z without or with continuity correction."""


@dataclass(frozen=True)
class McNemarResult:
    """Result of :func:`mcnemar`.

    Attributes:
        statistic: for ``exact``/``midp`` the count the binomial is evaluated at
            (``min(b, c)`` two-sided, ``b`` one-sided); for the asymptotic methods the
            χ² statistic (two-sided, 1 degree of freedom) or the z statistic (one-sided).
        pvalue: the p-value, in [0, 1]; exactly 1 when ``b + c == 0``.
        b: pairs where only the second arm fails.
        c: pairs where only the first arm fails.
        method: the method used.
        alternative: the alternative hypothesis.
    """

    statistic: float
    pvalue: float
    b: int
    c: int
    method: McNemarMethod
    alternative: Alternative


def mcnemar(
    b: int,
    c: int,
    *,
    method: McNemarMethod = "midp",
    alternative: Alternative = "two-sided",
) -> McNemarResult:
    """McNemar's test for paired binary outcomes from the discordant counts.

    Under H0 (both arms fail equally often) ``b ~ Binomial(b + c, 1/2)`` given ``b + c``.

    * ``exact``: two-sided ``min(1, 2·F(min(b, c)))``; one-sided ``P(X ≥ b)`` (greater)
      or ``P(X ≤ b)`` (less), ``X ~ Bin(b + c, 1/2)``.
    * ``midp`` (Fagerland et al. 2013, recommended): the exact p-value minus half the
      point probability of the observed table; two-sided ``2·F(min(b, c)) − f(min(b, c))``.
    * ``asymptotic``: ``χ² = (b − c)² / (b + c)`` two-sided, ``z = (b − c)/√(b + c)``
      one-sided; ``asymptotic_cc`` subtracts 1 from ``|b − c|`` (two-sided) or shifts
      ``b − c`` by 1 towards 0 (one-sided).

    With no discordant pairs (``b + c == 0``) there is no evidence either way and the
    p-value is 1 for every method (statsmodels' asymptotic version returns χ² = inf and
    p = 0 there, gate-statistics.md pitfall 2).

    Args:
        b: pairs where only the second arm (candidate) fails, ≥ 0.
        c: pairs where only the first arm (baseline) fails, ≥ 0.
        method: see above.
        alternative: ``two-sided``, ``greater`` (the second arm fails more) or ``less``.

    Raises:
        InvalidDataError: a count is negative or not an integer, or an unknown
            method or alternative.
    """
    b = count(b, "b")
    c = count(c, "c")
    if alternative not in ("two-sided", "greater", "less"):
        raise InvalidDataError(f"unknown alternative {alternative!r}")
    if method not in ("exact", "midp", "asymptotic", "asymptotic_cc"):
        raise InvalidDataError(f"unknown McNemar method {method!r}")
    n = b + c
    if n == 0:
        return McNemarResult(0.0, 1.0, b, c, method, alternative)

    if method in ("exact", "midp"):
        half_point = 0.5 * float(scipy_stats.binom.pmf(b, n, 0.5)) if method == "midp" else 0.0
        if alternative == "two-sided":
            k = min(b, c)
            point = float(scipy_stats.binom.pmf(k, n, 0.5)) if method == "midp" else 0.0
            p = 2.0 * float(scipy_stats.binom.cdf(k, n, 0.5)) - point
            return McNemarResult(float(k), min(1.0, p), b, c, method, alternative)
        if alternative == "greater":
            p = float(scipy_stats.binom.sf(b - 1, n, 0.5)) - half_point
        else:
            p = float(scipy_stats.binom.cdf(b, n, 0.5)) - half_point
        return McNemarResult(float(b), min(1.0, max(0.0, p)), b, c, method, alternative)

    correction = 1.0 if method == "asymptotic_cc" else 0.0
    if alternative == "two-sided":
        chi2 = max(abs(b - c) - correction, 0.0) ** 2 / n
        return McNemarResult(chi2, float(scipy_stats.chi2.sf(chi2, 1)), b, c, method, alternative)
    if alternative == "greater":
        z = (b - c - correction) / math.sqrt(n)
        return McNemarResult(z, float(scipy_stats.norm.sf(z)), b, c, method, alternative)
    z = (b - c + correction) / math.sqrt(n)
    return McNemarResult(z, float(scipy_stats.norm.cdf(z)), b, c, method, alternative)


# ------------------------------------------------------------------ Tango


@dataclass(frozen=True)
class TangoTestResult:
    """Result of :func:`tango_score_test`.

    Attributes:
        statistic: the score statistic Z.
        pvalue: the p-value for the chosen alternative.
        estimate: ``δ̂ = (n12 − n21) / N``.
        delta0: the difference under H0.
        n12: pairs where only the second arm fails.
        n21: pairs where only the first arm fails.
        n: all pairs N.
        alternative: ``greater`` (H1: δ > δ0), ``less`` (H1: δ < δ0) or ``two-sided``.
    """

    statistic: float
    pvalue: float
    estimate: float
    delta0: float
    n12: int
    n21: int
    n: int
    alternative: Alternative


@dataclass(frozen=True)
class TangoInterval:
    """Tango's asymptotic score confidence interval for δ (see :func:`tango_score_ci`).

    Attributes:
        low: lower limit, ≥ −1.
        high: upper limit, ≤ 1.
        estimate: ``δ̂ = (n12 − n21) / N``.
        confidence: two-sided confidence level.
    """

    low: float
    high: float
    estimate: float
    confidence: float


def _check_table(n12: int, n21: int, n: int) -> tuple[int, int, int]:
    n12 = count(n12, "n12")
    n21 = count(n21, "n21")
    n = count(n, "n")
    if n == 0:
        raise InvalidDataError("Tango score test needs at least one pair (n = 0)")
    if n12 + n21 > n:
        raise InvalidDataError(f"discordant pairs n12 + n21 = {n12 + n21} exceed n = {n}")
    return n12, n21, n


def _restricted_p21(n12: int, n21: int, n: int, delta0: float) -> float:
    """Restricted MLE of p21 under H0: δ = δ0 (Tango 1998; gate-statistics.md §1.4)."""
    a = 2.0 * n
    b = -n12 - n21 + (2.0 * n - n12 + n21) * delta0
    c = -n21 * delta0 * (1.0 - delta0)
    disc = max(b * b - 4.0 * a * c, 0.0)
    return (math.sqrt(disc) - b) / (2.0 * a)


def _score_z(n12: int, n21: int, n: int, delta0: float) -> float:
    """Tango's Z(δ0) = (n12 − n21 − Nδ0) / √(N(2p̃21 + δ0(1 − δ0)))."""
    numerator = n12 - n21 - n * delta0
    variance = n * (2.0 * _restricted_p21(n12, n21, n, delta0) + delta0 * (1.0 - delta0))
    if variance <= 0.0:
        # Only at δ0 = 0 with no discordant pairs (or at δ0 = ±1): 0/0 is taken as 0,
        # the limit of Z as δ0 → 0.
        if numerator == 0:
            return 0.0
        return math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def tango_score_test(
    n12: int,
    n21: int,
    n: int,
    delta0: float,
    *,
    alternative: Alternative = "two-sided",
) -> TangoTestResult:
    """Tango's (1998) score test of H0: δ = δ0 for the paired difference of proportions.

    ``δ = (n12 − n21) / N``, the second arm's failure rate minus the first's (see the
    module docstring). For non-inferiority of the second arm with margin ``m > 0``
    (H0: δ ≥ m), call with ``delta0=m, alternative="less"``. The statistic stays finite
    with zero discordant pairs (T7), unlike Wald's.

    Args:
        n12: pairs where only the second arm fails.
        n21: pairs where only the first arm fails.
        n: all pairs (concordant included), ≥ 1.
        delta0: δ under H0, in (−1, 1).
        alternative: ``greater`` (H1: δ > δ0), ``less`` (H1: δ < δ0), ``two-sided``.

    Raises:
        InvalidDataError: counts negative or inconsistent, ``n == 0``, δ0 outside (−1, 1).
    """
    n12, n21, n = _check_table(n12, n21, n)
    if not -1.0 < delta0 < 1.0 or math.isnan(delta0):
        raise InvalidDataError(f"delta0 must be in (-1, 1), got {delta0}")
    z = _score_z(n12, n21, n, float(delta0))
    if alternative == "greater":
        p = float(scipy_stats.norm.sf(z))
    elif alternative == "less":
        p = float(scipy_stats.norm.cdf(z))
    elif alternative == "two-sided":
        p = float(min(1.0, 2.0 * scipy_stats.norm.sf(abs(z))))
    else:
        raise InvalidDataError(f"unknown alternative {alternative!r}")
    return TangoTestResult(z, p, (n12 - n21) / n, float(delta0), n12, n21, n, alternative)


_EDGE = 1e-9


def _invert(n12: int, n21: int, n: int, target: float) -> float:
    """The δ0 in (−1, 1) where Z(δ0) = target; Z decreases in δ0."""
    lo, hi = -1.0 + _EDGE, 1.0 - _EDGE

    def f(delta0: float) -> float:
        return _score_z(n12, n21, n, delta0) - target

    f_lo, f_hi = f(lo), f(hi)
    if f_lo <= 0.0:
        return -1.0
    if f_hi >= 0.0:
        return 1.0
    return float(optimize.brentq(f, lo, hi, xtol=1e-12, rtol=1e-12, maxiter=500))


def tango_score_ci(n12: int, n21: int, n: int, *, confidence: float = 0.95) -> TangoInterval:
    """Tango's asymptotic score confidence interval for δ = (n12 − n21)/N.

    The limits solve ``Z(δ0) = ±z_{1−(1−confidence)/2}`` with :func:`scipy.optimize.brentq`
    on (−1, 1) (parametrisation of ``contingencytables::Tango_asymptotic_score_CI_paired_2x2``);
    a limit is exactly ±1 when δ̂ is ±1. T6: n12 = 3, n21 = 0, N = 3 gives (−0.1230, 1).

    Raises:
        InvalidDataError: counts negative or inconsistent, ``n == 0``, confidence not in (0, 1).
    """
    n12, n21, n = _check_table(n12, n21, n)
    if not 0.0 < confidence < 1.0:
        raise InvalidDataError(f"confidence must be in (0, 1), got {confidence}")
    z = float(scipy_stats.norm.ppf(1.0 - (1.0 - confidence) / 2.0))
    estimate = (n12 - n21) / n
    low = -1.0 if estimate == -1.0 else _invert(n12, n21, n, z)
    high = 1.0 if estimate == 1.0 else _invert(n12, n21, n, -z)
    return TangoInterval(low, high, estimate, float(confidence))
