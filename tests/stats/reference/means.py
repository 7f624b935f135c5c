"""Reference: the fixed-n one-sided non-inferiority t test of a mean against a margin.

Test code only: the gate judges means with sequential intervals
(:mod:`shadoweval.stats.checks.sequential_interval`); the tests use this fixed-n test to check the
noise-floor linearisation (:func:`shadoweval.stats.noise_floor.noise_floor_values`). For output
divergence ``D = 1 − cosine similarity`` (lower is better) the candidate is non-inferior
when ``E[D] < margin``. The test is the one-sample t test of
H0: μ ≥ margin against H1: μ < margin (:func:`scipy.stats.ttest_1samp` with
``alternative="less"``), gate-statistics.md §1.6 and §2.2.

Zero-variance data (every value equal) makes the t statistic undefined; it is decided on
the exact value instead and a :class:`~shadoweval.errors.DegenerateDataWarning` is emitted
(Kayenta likewise treats identical arrays as a special case). NaN or infinite values are
rejected, never dropped.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from shadoweval.stats.inputs import InvalidDataError, finite_1d

__all__ = ["MeanNonInferiorityResult", "mean_noninferiority"]


@dataclass(frozen=True)
class MeanNonInferiorityResult:
    """Result of :func:`mean_noninferiority`, on the values' own scale.

    Attributes:
        estimate: the sample mean.
        upper_bound: one-sided (1 − α) upper confidence bound of the mean.
        ci_low: lower limit of the two-sided (1 − 2α) interval.
        ci_high: upper limit of the two-sided (1 − 2α) interval (equals ``upper_bound``).
        pvalue: one-sided p-value of H0: mean ≥ margin.
        n: number of values.
        margin: the non-inferiority margin tested against.
        alpha: the one-sided level.
        std: sample standard deviation (ddof = 1).
        degenerate: true when the data had no usable variance (decided on the exact value).
    """

    estimate: float
    upper_bound: float
    ci_low: float
    ci_high: float
    pvalue: float
    n: int
    margin: float
    alpha: float
    std: float
    degenerate: bool


def mean_noninferiority(
    values: npt.ArrayLike, margin: float, *, alpha: float = 0.025
) -> MeanNonInferiorityResult:
    """Test H0: E[X] ≥ ``margin`` against H1: E[X] < ``margin`` with a one-sided t test.

    Args:
        values: the observations, shape ``(n,)``, n ≥ 2, all finite.
        margin: the absolute non-inferiority margin (same unit as ``values``).
        alpha: one-sided level in (0, 0.5); the reported two-sided interval is at 1 − 2α.

    Returns:
        The estimate, the one-sided upper bound, the two-sided interval and the p-value.
        With zero variance: estimate, bounds = the common value; p-value 0 if it is below
        the margin, else 1; ``degenerate`` true.

    Warns:
        DegenerateDataWarning: all values are equal, or scipy reported precision loss
            because the values are nearly identical.

    Raises:
        InvalidDataError: a value is NaN or infinite, the margin is not finite, or alpha
            is outside (0, 0.5).
        InsufficientDataError: fewer than 2 values.
    """
    if not math.isfinite(margin):
        raise InvalidDataError(f"margin must be finite, got {margin}")
    if not 0.0 < alpha < 0.5:
        raise InvalidDataError(f"alpha must be in (0, 0.5), got {alpha}")
    x = finite_1d(values, "values", min_size=2)
    n = int(x.size)
    mean = float(np.mean(x))
    if np.all(x == x[0]):
        value = float(x[0])
        warnings.warn(
            f"all {n} values equal {value:.6g} (no variance); decided on the exact value",
            DegenerateDataWarning,
            stacklevel=2,
        )
        return MeanNonInferiorityResult(
            estimate=value,
            upper_bound=value,
            ci_low=value,
            ci_high=value,
            pvalue=0.0 if value < margin else 1.0,
            n=n,
            margin=float(margin),
            alpha=float(alpha),
            std=0.0,
            degenerate=True,
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one_sided = scipy_stats.ttest_1samp(x, popmean=margin, alternative="less")
        upper = float(one_sided.confidence_interval(confidence_level=1.0 - alpha).high)
        two_sided = scipy_stats.ttest_1samp(x, popmean=margin, alternative="two-sided")
        interval = two_sided.confidence_interval(confidence_level=1.0 - 2.0 * alpha)
    precision = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    for message in dict.fromkeys(precision):
        warnings.warn(message, DegenerateDataWarning, stacklevel=2)
    for other in caught:
        if not issubclass(other.category, RuntimeWarning):
            warnings.warn(other.message, other.category, stacklevel=2)
    return MeanNonInferiorityResult(
        estimate=mean,
        upper_bound=upper,
        ci_low=float(interval.low),
        ci_high=float(interval.high),
        pvalue=float(one_sided.pvalue),
        n=n,
        margin=float(margin),
        alpha=float(alpha),
        std=float(np.std(x, ddof=1)),
        degenerate=bool(precision),
    )
