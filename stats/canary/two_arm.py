"""Two independent arms: the candidate's and the baseline's proportions.

In a live canary each request is answered by **one** version, so checks compare two
independent binomial samples (not pairs, as the shadow gate does). Three pieces:

* :func:`proportion_noninferiority` — promote check: is the candidate's rate of a bad
  event (errors, refusals, judge-failures) no more than ``margin`` above the baseline's?
  Farrington–Manning score test (Farrington & Manning, "Test statistics and sample size
  formulae for comparative binomial trials with null hypothesis of non-zero risk
  difference or non-unity relative risk", Stat Med 9:1447–1454, 1990) with the
  Miettinen–Nurminen score interval (Miettinen & Nurminen, "Comparative analysis of two
  rates", Stat Med 4:213–226, 1985). Computed here from the published closed-form
  restricted MLE, **not** with statsmodels: statsmodels 0.15.0
  ``test_proportions_2indep(method="score", compare="diff")`` returns a restricted MLE
  that does not solve the score equation when ``value != 0`` (56/70 vs 48/80 at
  δ = 0.338: its p̃ = (0.802, 0.464), the likelihood maximum is (0.851, 0.513)), so its
  non-inferiority p-values and score intervals are off (MN 95% for that table: ours
  0.0528 to 0.3382, Newcombe 1998's published values; statsmodels 0.0526 to 0.3440).
* :func:`proportion_excess` — rollback check: is the candidate's rate more than
  ``max_increase`` above the baseline's?
* :func:`conditional_binomial_evalue` — always-valid rollback on rare events: given
  ``m`` events in total, does the candidate arm hold more than its traffic share π0?

These are fixed-n tests except the e-value; polling them repeatedly needs
:func:`shadoweval.stats.sequential.look_alpha` levels.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

from scipy import optimize, special
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError, check_alpha, count

__all__ = [
    "TwoProportionResult",
    "conditional_binomial_evalue",
    "mn_interval",
    "proportion_excess",
    "proportion_noninferiority",
    "score_statistic",
]


@dataclass(frozen=True)
class TwoProportionResult:
    """Result of :func:`proportion_noninferiority` or :func:`proportion_excess`.

    Attributes:
        estimate: ``p_c − p_b`` (observed rates).
        low: lower end of the Miettinen–Nurminen interval at two-sided level ``2·alpha``
            (so each end is a one-sided ``1 − alpha`` bound).
        high: upper end of that interval.
        p_value: one-sided Farrington–Manning score p-value.
        statistic: the score z statistic.
        margin: the null boundary δ0 (``margin`` or ``max_increase``).
        alpha: the one-sided level.
        x_candidate, n_candidate, x_baseline, n_baseline: the counts.
        kind: ``noninferiority`` (H1: diff < margin) or ``excess`` (H1: diff > margin).
        rejected: ``p_value <= alpha`` (``passed`` for non-inferiority, ``breach`` for excess).
    """

    estimate: float
    low: float
    high: float
    p_value: float
    statistic: float
    margin: float
    alpha: float
    x_candidate: int
    n_candidate: int
    x_baseline: int
    n_baseline: int
    kind: Literal["noninferiority", "excess"]
    rejected: bool

    @property
    def passed(self) -> bool:
        """Non-inferiority shown (only meaningful for ``kind == "noninferiority"``)."""
        return self.kind == "noninferiority" and self.rejected

    @property
    def breach(self) -> bool:
        """Excess shown (only meaningful for ``kind == "excess"``)."""
        return self.kind == "excess" and self.rejected

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (NaN/inf → ``None``), with ``passed`` and ``breach``."""
        out: dict[str, object] = {
            key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in asdict(self).items()
        }
        out["passed"] = self.passed
        out["breach"] = self.breach
        return out


def _number(value: float, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidDataError(f"{name} must be a number, got {value!r}", name=name)
    value = float(value)
    if not low < value < high:
        raise InvalidDataError(f"{name} must be in ({low:g}, {high:g}), got {value}", name=name)
    return value


def _counts(x_c: int, n_c: int, x_b: int, n_b: int) -> tuple[int, int, int, int]:
    x_c, n_c = count(x_c, "x_c"), count(n_c, "n_c")
    x_b, n_b = count(x_b, "x_b"), count(n_b, "n_b")
    for x, n, xn, nn in ((x_c, n_c, "x_c", "n_c"), (x_b, n_b, "x_b", "n_b")):
        if n < 1:
            raise InvalidDataError(f"{nn} must be >= 1, got {n}", name=nn)
        if x > n:
            raise InvalidDataError(f"{xn} must be <= {nn} ({n}), got {x}", name=xn)
    return x_c, n_c, x_b, n_b


def _restricted_mle(x1: int, n1: int, x2: int, n2: int, delta: float) -> tuple[float, float]:
    """MLE (p̃1, p̃2) under p1 − p2 = δ: Farrington & Manning (1990) closed-form cubic root."""
    theta = n2 / n1
    p1, p2 = x1 / n1, x2 / n2
    a = 1.0 + theta
    b = -(1.0 + theta + p1 + theta * p2 + delta * (theta + 2.0))
    c = delta * delta + delta * (2.0 * p1 + theta + 1.0) + p1 + theta * p2
    d = -p1 * delta * (1.0 + delta)
    v = b**3 / (27.0 * a**3) - b * c / (6.0 * a * a) + d / (2.0 * a)
    u2 = b * b / (9.0 * a * a) - c / (3.0 * a)
    if u2 <= 0.0:
        q1 = -b / (3.0 * a)
    else:
        u = math.copysign(math.sqrt(u2), v) if v != 0.0 else math.sqrt(u2)
        w = (math.pi + math.acos(max(-1.0, min(1.0, v / u**3)))) / 3.0
        q1 = 2.0 * u * math.cos(w) - b / (3.0 * a)
    q1 = min(max(q1, max(0.0, delta)), min(1.0, 1.0 + delta))
    return q1, min(max(q1 - delta, 0.0), 1.0)


def score_statistic(
    x1: int, n1: int, x2: int, n2: int, delta: float, *, miettinen_nurminen: bool = False
) -> float:
    """Score z for H0 p1 − p2 = δ: Farrington–Manning, or with MN's N/(N−1) variance factor."""
    q1, q2 = _restricted_mle(x1, n1, x2, n2, delta)
    var = q1 * (1.0 - q1) / n1 + q2 * (1.0 - q2) / n2
    if miettinen_nurminen:
        var *= (n1 + n2) / (n1 + n2 - 1)
    num = x1 / n1 - x2 / n2 - delta
    if var <= 0.0:
        return 0.0 if num == 0.0 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def mn_interval(x1: int, n1: int, x2: int, n2: int, level_alpha: float) -> tuple[float, float]:
    """Two-sided ``1 − level_alpha`` Miettinen–Nurminen interval for p1 − p2 (score inversion)."""
    crit = float(scipy_stats.norm.ppf(1.0 - level_alpha / 2.0))
    d_hat = x1 / n1 - x2 / n2
    lo_end, hi_end = -1.0 + 1e-12, 1.0 - 1e-12

    def f(d: float) -> float:
        return score_statistic(x1, n1, x2, n2, d, miettinen_nurminen=True)

    if d_hat <= lo_end or f(lo_end) <= crit:
        low = -1.0
    else:
        low = optimize.brentq(lambda d: f(d) - crit, lo_end, d_hat, xtol=1e-13)
    if d_hat >= hi_end or f(hi_end) >= -crit:
        high = 1.0
    else:
        high = optimize.brentq(lambda d: f(d) + crit, d_hat, hi_end, xtol=1e-13)
    return float(low), float(high)


def _two_proportions(
    x_c: int,
    n_c: int,
    x_b: int,
    n_b: int,
    margin: float,
    alpha: float,
    alternative: Literal["smaller", "larger"],
    kind: Literal["noninferiority", "excess"],
) -> TwoProportionResult:
    x_c, n_c, x_b, n_b = _counts(x_c, n_c, x_b, n_b)
    margin = _number(margin, "margin" if kind == "noninferiority" else "max_increase", -1, 1)
    alpha = check_alpha(alpha, upper=0.5)
    z = score_statistic(x_c, n_c, x_b, n_b, margin)
    p = float(scipy_stats.norm.cdf(z) if alternative == "smaller" else scipy_stats.norm.sf(z))
    low, high = mn_interval(x_c, n_c, x_b, n_b, 2 * alpha)
    return TwoProportionResult(
        estimate=x_c / n_c - x_b / n_b,
        low=low,
        high=high,
        p_value=p,
        statistic=z,
        margin=margin,
        alpha=alpha,
        x_candidate=x_c,
        n_candidate=n_c,
        x_baseline=x_b,
        n_baseline=n_b,
        kind=kind,
        rejected=bool(p <= alpha),
    )


def proportion_noninferiority(
    x_c: int, n_c: int, x_b: int, n_b: int, margin: float, alpha: float = 0.05
) -> TwoProportionResult:
    """Non-inferiority of the candidate's bad-event rate: H0 p_c − p_b ≥ margin.

    H1: ``p_c − p_b < margin``. Farrington–Manning score test (1990): the z statistic
    ``(p̂_c − p̂_b − δ0) / sqrt(p̃_c(1−p̃_c)/n_c + p̃_b(1−p̃_b)/n_b)`` with ``p̃`` the
    maximum-likelihood rates restricted to ``p_c − p_b = δ0`` (closed-form cubic root,
    Farrington & Manning 1990; see the module note on statsmodels). The interval is
    Miettinen–Nurminen (1985; the same score with the variance scaled by N/(N−1),
    inverted by root finding) at two-sided level
    ``2·alpha``, so ``high`` is the one-sided ``1 − alpha`` upper bound. Because of that
    N/(N−1) factor ``high < margin`` and ``passed`` can disagree in the last digits at the
    boundary; ``passed`` is decided by the p-value only.

    Args:
        x_c, n_c: candidate bad events and requests (``0 ≤ x_c ≤ n_c``, ``n_c ≥ 1``).
        x_b, n_b: baseline bad events and requests.
        margin: the tolerated increase δ0 in (−1, 1), e.g. 0.01 for one point.
        alpha: one-sided level in (0, 0.5).

    Raises:
        InvalidDataError: bad counts, margin or alpha (the message names the argument).
    """
    return _two_proportions(x_c, n_c, x_b, n_b, margin, alpha, "smaller", "noninferiority")


def proportion_excess(
    x_c: int, n_c: int, x_b: int, n_b: int, max_increase: float, alpha: float = 0.05
) -> TwoProportionResult:
    """Excess of the candidate's bad-event rate: H1 p_c − p_b > max_increase.

    The mirror of :func:`proportion_noninferiority` (Farrington–Manning score test,
    ``alternative="larger"``; Miettinen–Nurminen interval at level ``2·alpha``, ``low``
    the one-sided lower bound); ``breach = p_value <= alpha``.

    Raises:
        InvalidDataError: bad counts, max_increase or alpha (names the argument).
    """
    return _two_proportions(x_c, n_c, x_b, n_b, max_increase, alpha, "larger", "excess")


def conditional_binomial_evalue(k_candidate: int, k_total: int, null_share: float) -> float:
    """Always-valid e-value that the candidate arm holds more of the events than its share.

    Conditional on ``m = k_total`` events (e.g. critical harms) in both arms together,
    the number ``k`` in the candidate arm is Binomial(m, θ) with θ = π0 = the candidate's
    traffic share when the two arms have equal event rates (θ ≤ π0 when the candidate is
    no worse). Mixture over θ uniform on (π0, 1] (a Beta(1,1) truncated to (π0, 1])::

        E = ∫_{π0}^1 θ^k (1−θ)^(m−k) dθ / ((1−π0) · π0^k (1−π0)^(m−k))
          = B(k+1, m−k+1) · I_{1−π0}(m−k+1, k+1) / ((1−π0) · π0^k (1−π0)^(m−k)).

    For each θ' > π0 the likelihood ratio's one-step expectation under θ is
    ``θθ'/π0 + (1−θ)(1−θ')/(1−π0)``, increasing in θ and equal to 1 at θ = π0, so the
    mixture is a nonnegative supermartingale under H0: θ ≤ π0 and ``p = min(1, 1/E)``
    is valid at every look (Ville's inequality). At π0 = ½ it is
    :func:`shadoweval.stats.sequential.sequential_mcnemar` with ``side="greater"`` (c = k,
    b = m − k). Computed in log space (``betaln``, ``betainc``).

    Args:
        k_candidate: events in the candidate arm, ``0 ≤ k ≤ k_total``.
        k_total: events in both arms.
        null_share: the candidate's share π0 of traffic, in (0, 1).

    Returns:
        E ≥ 0 (``inf`` on overflow).

    Raises:
        InvalidDataError: bad counts or share (names the argument).
    """
    k = count(k_candidate, "k_candidate")
    m = count(k_total, "k_total")
    if k > m:
        raise InvalidDataError(f"k_candidate must be <= k_total ({m}), got {k}", name="k_candidate")
    pi0 = _number(null_share, "null_share", 0.0, 1.0)
    tail = float(special.betainc(m - k + 1, k + 1, 1.0 - pi0))
    if tail <= 0.0:
        return 0.0
    log_e = (
        float(special.betaln(k + 1, m - k + 1))
        + math.log(tail)
        - math.log1p(-pi0)
        - k * math.log(pi0)
        - (m - k) * math.log1p(-pi0)
    )
    return math.exp(log_e) if log_e < 700.0 else math.inf
