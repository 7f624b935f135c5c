"""Token-cost ratio by linearisation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from stats.cost import token_ratio
from stats.inputs import InsufficientDataError, InvalidDataError


def _tokens(n: int, factor: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    baseline = np.round(rng.lognormal(5.0, 0.8, n))
    candidate = np.round(baseline * factor * rng.lognormal(0.0, 0.2, n))
    return candidate, baseline


def test_matches_one_sample_t_test_on_e() -> None:
    c, b = _tokens(500, 1.1, 1)
    result = token_ratio(c, b, k=1.2, alpha=0.025)
    e = c - 1.2 * b
    reference = scipy_stats.ttest_1samp(e, 0.0, alternative="less")
    assert result.p_value == pytest.approx(float(reference.pvalue), rel=1e-10)
    assert result.e_mean == pytest.approx(float(e.mean()), rel=1e-12)
    assert result.e_se == pytest.approx(float(e.std(ddof=1) / math.sqrt(500)), rel=1e-12)
    assert result.ratio == pytest.approx(float(c.sum() / b.sum()), rel=1e-12)
    assert result.ci_low < result.ratio < result.ci_high
    assert result.n == 500


def test_decisions() -> None:
    c, b = _tokens(2000, 1.0, 2)
    cheap = token_ratio(c, b, k=1.2, alpha=0.025)
    assert cheap.p_value < 1e-6
    assert cheap.ci_high < 1.2
    c, b = _tokens(2000, 1.5, 3)
    verbose = token_ratio(c, b, k=1.2, alpha=0.025)
    assert verbose.p_value > 0.999
    assert verbose.ci_low > 1.2


def test_delta_method_interval_covers() -> None:
    covered = 0
    for seed in range(300):
        c, b = _tokens(400, 1.1, 100 + seed)
        r = token_ratio(c, b, k=1.2, alpha=0.025)  # 95% two-sided interval
        covered += r.ci_low <= 1.1 * math.exp(0.02) <= r.ci_high  # E[lognormal(0, 0.2)]
    assert covered / 300 == pytest.approx(0.95, abs=0.04)


def test_degenerate_counts_warn() -> None:
    with pytest.warns(DegenerateDataWarning, match="no variance"):
        result = token_ratio([10, 10, 10], [10, 10, 10], k=1.2, alpha=0.025)
    assert (result.ratio, result.ci_low, result.ci_high) == (1.0, 1.0, 1.0)
    assert result.p_value == 0.0
    assert result.degenerate


@pytest.mark.parametrize(
    ("c", "b", "kwargs", "error", "match"),
    [
        ([1, -2], [1, 2], {}, InvalidDataError, "candidate tokens: 1 of 2 values are negative"),
        ([1, 2], [1, math.nan], {}, InvalidDataError, "baseline tokens"),
        ([1, 2], [0, 0], {}, InvalidDataError, "sum to 0"),
        ([1, 2, 3], [1, 2], {}, InvalidDataError, "differ in length"),
        ([1], [1], {}, InsufficientDataError, "at least 2"),
        ([1, 2], [1, 2], {"k": 0.0}, InvalidDataError, "ratio margin k"),
        ([1, 2], [1, 2], {"alpha": 0.5}, InvalidDataError, "alpha"),
    ],
)
def test_validation(
    c: list[float],
    b: list[float],
    kwargs: dict[str, float],
    error: type[Exception],
    match: str,
) -> None:
    arguments = {"k": 1.2, "alpha": 0.025} | kwargs
    with pytest.raises(error, match=match):
        token_ratio(c, b, **arguments)
