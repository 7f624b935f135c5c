"""Report-only statistics: Mann–Whitney with pinned methods, HL shift, CLES."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError
from shadoweval.stats.report_only import cles, hodges_lehmann_shift, mann_whitney

TIED_X = [1, 2, 2, 3, 3, 3]
TIED_Y = [2, 3, 3, 4, 4, 5]


def test_pitfall_4_ties_switch_exact_to_permutation() -> None:
    asymptotic = mann_whitney(TIED_X, TIED_Y, alternative="two-sided", method="asymptotic")
    assert asymptotic.p_value == pytest.approx(0.0784, abs=5e-5)
    exact = mann_whitney(TIED_X, TIED_Y, alternative="two-sided", method="exact")
    assert exact.method == "permutation"
    assert exact.ties
    assert exact.p_value == pytest.approx(0.1082, abs=5e-5)
    permutation = mann_whitney(TIED_X, TIED_Y, alternative="two-sided", method="permutation")
    assert permutation.p_value == exact.p_value
    assert exact.u == asymptotic.u == 7.0


def test_exact_without_ties_stays_exact() -> None:
    report = mann_whitney([1.5, 2.5, 9.0], [0.1, 0.2], alternative="greater", method="exact")
    assert report.method == "exact"
    assert not report.ties
    assert report.u == 6.0
    assert report.p_value == pytest.approx(0.1, rel=1e-12)  # 1 / C(5, 2)


def test_large_permutation_is_seeded() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 60)
    y = rng.integers(1, 6, 60)
    first = mann_whitney(x, y, alternative="less", method="permutation", n_resamples=999, seed=4)
    again = mann_whitney(x, y, alternative="less", method="permutation", n_resamples=999, seed=4)
    assert first == again
    assert 0.0 < first.p_value <= 1.0


def test_constant_data_gives_p_one() -> None:
    for method in ("exact", "asymptotic", "permutation"):
        report = mann_whitney([3, 3], [3, 3, 3], alternative="two-sided", method=method)
        assert (report.u, report.p_value) == (3.0, 1.0)


def test_mann_whitney_validation() -> None:
    with pytest.raises(InvalidDataError, match="method"):
        mann_whitney([1], [2], alternative="two-sided", method="auto")  # type: ignore[arg-type]
    with pytest.raises(InvalidDataError, match="alternative"):
        mann_whitney([1], [2], alternative="both", method="exact")  # type: ignore[arg-type]
    with pytest.raises(InvalidDataError, match="NaN"):
        mann_whitney([1, math.nan], [2], alternative="two-sided", method="exact")
    with pytest.raises(InsufficientDataError):
        mann_whitney([], [2], alternative="two-sided", method="exact")


def test_hodges_lehmann_is_median_of_differences() -> None:
    assert hodges_lehmann_shift([1, 2, 3], [0]) == 2.0
    rng = np.random.default_rng(1)
    x, y = rng.normal(1.0, 1.0, 37), rng.normal(0.0, 1.0, 23)
    brute = float(np.median([a - b for a in x for b in y]))
    assert hodges_lehmann_shift(x, y) == pytest.approx(brute, rel=1e-12)
    assert hodges_lehmann_shift(y, x) == pytest.approx(-brute, rel=1e-12)


def test_hodges_lehmann_subsamples_deterministically_above_the_cap() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(0.5, 1.0, 3000), rng.normal(0.0, 1.0, 2000)
    exact = hodges_lehmann_shift(x, y)
    capped = hodges_lehmann_shift(x, y, max_pairs=100_000)
    assert capped == hodges_lehmann_shift(x, y, max_pairs=100_000)
    assert capped == pytest.approx(exact, abs=0.02)
    # A small sample is kept whole when the cap allows it.
    assert hodges_lehmann_shift(x, [0.0, 1.0], max_pairs=1000) == pytest.approx(
        hodges_lehmann_shift(x, [0.0, 1.0]), abs=0.05
    )
    with pytest.raises(InvalidDataError, match="max_pairs"):
        hodges_lehmann_shift(x, y, max_pairs=0)


def test_cles() -> None:
    assert cles([1, 2, 3], [0]) == 1.0
    assert cles([1], [1]) == 0.5
    assert cles(TIED_X, TIED_Y) == pytest.approx(7 / 36, rel=1e-12)
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 6, 40), rng.integers(0, 6, 30)
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y])
    assert cles(x, y) == pytest.approx(float(brute), rel=1e-12)
    assert cles(x, y) + cles(y, x) == pytest.approx(1.0, rel=1e-12)
    report = mann_whitney(x, y, alternative="two-sided", method="asymptotic")
    assert cles(x, y) == pytest.approx(report.u / (40 * 30), rel=1e-12)
