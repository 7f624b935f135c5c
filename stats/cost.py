"""Token cost: is the candidate's mean output length within ``k`` times the baseline's?

A ratio margin ``E[c]/E[b] < k`` (e.g. k = 1.2: at most 20% more output tokens) is tested
through the linearisation of gate-statistics.md §1.6: with ``e_i = c_i − k·b_i`` per
paired request, ``E[e] < 0 ⟺ E[c] < k·E[b]``, so the ratio test becomes a one-sample
test of a mean, with no delta method or Fieller interval in the decision. The ratio
itself is reported with a delta-method interval.

Token counts are heavy-tailed; the t test on e is asymptotic (CLT) and the gate should
apply it only from its minimum number of pairs. For repeated polling use
:func:`stats.sequential.confidence_sequence` on the same ``e`` (``side="upper"``, null 0).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from stats.inputs import InvalidDataError, finite_1d

__all__ = ["TokenRatioResult", "token_ratio"]


@dataclass(frozen=True)
class TokenRatioResult:
    """Result of :func:`token_ratio`.

    Attributes:
        ratio: ``Σc / Σb``, the ratio of mean output tokens (candidate / baseline).
        ci_low: lower limit of the two-sided (1 − 2α) delta-method interval of the ratio.
        ci_high: upper limit; ``ci_high < k`` is the one-sided (1 − α) bound below k.
        e_mean: mean of ``e_i = c_i − k·b_i`` (tokens).
        e_se: standard error of ``e_mean``, ``sd(e)/√n`` (tokens).
        p_value: one-sided p-value of H0: E[e] ≥ 0 (ratio ≥ k) against H1: ratio < k.
        n: number of pairs.
        k: the ratio margin tested.
        alpha: the one-sided level of the interval.
        degenerate: true when ``e`` or the ratio residuals had no variance.
    """

    ratio: float
    ci_low: float
    ci_high: float
    e_mean: float
    e_se: float
    p_value: float
    n: int
    k: float = math.nan
    alpha: float = math.nan
    degenerate: bool = False


def token_ratio(
    candidate: npt.ArrayLike, baseline: npt.ArrayLike, *, k: float, alpha: float
) -> TokenRatioResult:
    """Test H0: ``E[c] ≥ k·E[b]`` against H1: ``E[c] < k·E[b]`` on paired token counts.

    * Test: ``e_i = c_i − k·b_i``; one-sided one-sample t test of H0: ``E[e] ≥ 0``
      (:func:`scipy.stats.t`, n − 1 degrees of freedom; gate-statistics.md §1.6, §2.2).
    * Ratio: ``R = Σc/Σb`` with the delta-method standard error
      ``se(R) = sd(c − R·b) / (√n · b̄)`` (the linearisation of a ratio of means,
      e.g. Cochran, *Sampling Techniques*, 3rd ed., §6.4) and the interval
      ``R ± t_{1−α, n−1}·se(R)``. The test uses ``sd(c − k·b)``, the interval
      ``sd(c − R·b)``, so ``ci_high < k`` and ``p_value < α`` agree closely but not
      exactly; the gate decides on ``p_value``.

    Args:
        candidate: candidate output tokens per request, shape ``(n,)``, n ≥ 2, ≥ 0.
        baseline: baseline output tokens for the same requests, shape ``(n,)``, ≥ 0,
            with a positive sum.
        k: the ratio margin, > 0 (default policy 1.2).
        alpha: one-sided level in (0, 0.5).

    Warns:
        DegenerateDataWarning: ``e`` has no variance (decided on the exact mean: p = 0
            when it is < 0, else 1) or the ratio residuals have none (zero-width interval).

    Raises:
        InvalidDataError: a count is NaN, infinite or negative; lengths differ; the
            baseline sums to 0; k not > 0; alpha outside (0, 0.5).
        InsufficientDataError: fewer than 2 pairs.
    """
    if isinstance(k, bool) or not (math.isfinite(k) and k > 0.0):
        raise InvalidDataError(f"ratio margin k must be finite and > 0, got {k!r}", name="k")
    if not 0.0 < alpha < 0.5:
        raise InvalidDataError(f"alpha must be in (0, 0.5), got {alpha}", name="alpha")
    c = finite_1d(candidate, "candidate tokens", min_size=2)
    b = finite_1d(baseline, "baseline tokens", min_size=2)
    if c.size != b.size:
        raise InvalidDataError(
            f"paired token counts differ in length: {c.size} candidate vs {b.size} baseline"
        )
    for name, values in (("candidate tokens", c), ("baseline tokens", b)):
        negative = int(np.count_nonzero(values < 0.0))
        if negative:
            raise InvalidDataError(
                f"{name}: {negative} of {values.size} values are negative", name=name
            )
    if float(np.sum(b)) <= 0.0:
        raise InvalidDataError("baseline tokens sum to 0: the ratio is undefined")
    n = int(c.size)
    df = n - 1
    e = c - k * b
    e_mean = float(np.mean(e))
    e_se = float(np.std(e, ddof=1)) / math.sqrt(n)
    ratio = float(np.sum(c) / np.sum(b))
    ratio_se = float(np.std(c - ratio * b, ddof=1)) / (math.sqrt(n) * float(np.mean(b)))
    degenerate = e_se == 0.0 or ratio_se == 0.0
    if degenerate:
        warnings.warn(
            f"token counts on {n} pairs have no variance in c - k*b or c - R*b; "
            "decided on the exact values",
            DegenerateDataWarning,
            stacklevel=2,
        )
    if e_se == 0.0:
        p = 0.0 if e_mean < 0.0 else 1.0
    else:
        p = float(scipy_stats.t.cdf(e_mean / e_se, df))
    t_crit = float(scipy_stats.t.ppf(1.0 - alpha, df))
    return TokenRatioResult(
        ratio=ratio,
        ci_low=ratio - t_crit * ratio_se,
        ci_high=ratio + t_crit * ratio_se,
        e_mean=e_mean,
        e_se=e_se,
        p_value=p,
        n=n,
        k=float(k),
        alpha=float(alpha),
        degenerate=degenerate,
    )
