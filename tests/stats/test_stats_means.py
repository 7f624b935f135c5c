"""One-sided t test of a mean against an absolute non-inferiority margin."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning, InsufficientDataError
from shadoweval.stats.inputs import InvalidDataError
from tests.stats.reference.means import mean_noninferiority


def test_matches_scipy_one_sided_t_test() -> None:
    x = np.random.default_rng(5).normal(0.30, 0.1, 120)
    r = mean_noninferiority(x, 0.35, alpha=0.025)
    ref = scipy_stats.ttest_1samp(x, 0.35, alternative="less")
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-12)
    assert r.estimate == pytest.approx(x.mean())
    se = x.std(ddof=1) / np.sqrt(x.size)
    t = scipy_stats.t.ppf(0.975, x.size - 1)
    assert r.upper_bound == pytest.approx(x.mean() + t * se, rel=1e-10)
    assert r.ci_low == pytest.approx(x.mean() - t * se, rel=1e-10)
    assert r.ci_high == pytest.approx(x.mean() + t * se, rel=1e-10)
    assert r.n == 120
    assert not r.degenerate
    # The test and the bound agree: p < α ⇔ upper bound < margin.
    assert (r.pvalue < 0.025) == (r.upper_bound < 0.35)


@pytest.mark.parametrize(("value", "p"), [(0.1, 0.0), (0.35, 1.0), (0.5, 1.0)])
def test_zero_variance_decides_on_the_exact_value(value: float, p: float) -> None:
    with pytest.warns(DegenerateDataWarning, match="no variance"):
        r = mean_noninferiority([value] * 30, 0.35)
    assert r.degenerate
    assert (r.estimate, r.ci_low, r.ci_high, r.upper_bound, r.std) == (
        value,
        value,
        value,
        value,
        0,
    )
    assert r.pvalue == p


def test_nearly_constant_data_warns() -> None:
    x = np.full(50, 0.3)
    x[0] = np.nextafter(0.3, 1.0)
    with pytest.warns(DegenerateDataWarning):
        r = mean_noninferiority(x, 0.35)
    assert r.degenerate
    assert r.pvalue < 0.025


def test_nan_is_rejected() -> None:
    with pytest.raises(InvalidDataError, match="1 of 3 values are NaN"):
        mean_noninferiority([0.1, float("nan"), 0.2], 0.35)


def test_too_few_values() -> None:
    with pytest.raises(InsufficientDataError):
        mean_noninferiority([0.1], 0.35)


def test_bad_arguments() -> None:
    with pytest.raises(InvalidDataError):
        mean_noninferiority([0.1, 0.2], float("nan"))
    with pytest.raises(InvalidDataError):
        mean_noninferiority([0.1, 0.2], 0.3, alpha=0.5)
