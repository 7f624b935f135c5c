"""Noise-floor linearisation and the split-sample tail check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError
from shadoweval.stats.noise_floor import noise_floor_values, tail_rate_split
from tests.stats.reference.means import mean_noninferiority


def test_values_are_the_linearisation() -> None:
    d_cand = np.array([0.10, 0.20, 0.00, 1.50])
    d_noise = np.array([0.08, 0.10, 0.00, 1.00])
    e = noise_floor_values(d_cand, d_noise, 0.25)
    np.testing.assert_allclose(e, d_cand - 1.25 * d_noise, rtol=0, atol=1e-15)
    np.testing.assert_allclose(noise_floor_values(d_cand, d_noise, 0.0), d_cand - d_noise)


def test_mean_test_on_e_is_the_ratio_test() -> None:
    # E[D_cand] < (1 + r)·E[D_noise] + δ_abs  ⟺  E[e] < δ_abs.
    rng = np.random.default_rng(5)
    d_noise = rng.beta(2, 20, 4000)  # mean ≈ 0.091
    similar = np.clip(d_noise * rng.lognormal(0.0, 0.3, 4000), 0, 2)  # ≈ noise level
    worse = np.clip(d_noise * 2.0, 0, 2)  # twice the noise
    ok = mean_noninferiority(noise_floor_values(similar, d_noise, 0.25), 0.01)
    bad = mean_noninferiority(noise_floor_values(worse, d_noise, 0.25), 0.01)
    assert ok.pvalue < 1e-6
    assert bad.pvalue > 0.99


def test_float_rounding_of_similarity_is_tolerated() -> None:
    e = noise_floor_values([-1e-7, 2.0 + 1e-7], [0.0, 0.0], 0.25)
    np.testing.assert_array_equal(e, [0.0, 2.0])


@pytest.mark.parametrize(
    ("d_cand", "d_noise", "r", "error", "match"),
    [
        ([0.1, math.nan], [0.1, 0.1], 0.25, InvalidDataError, "candidate divergence: 1 of 2"),
        ([0.1, 0.1], [math.inf, 0.1], 0.25, InvalidDataError, "noise divergence"),
        ([0.1, 0.1], [0.1], 0.25, InvalidDataError, "same exchanges"),
        ([0.1, -0.5], [0.1, 0.1], 0.25, InvalidDataError, r"outside \[0, 2\]"),
        ([0.1, 0.1], [0.1, 0.1], -0.1, InvalidDataError, "relative margin r"),
        ([0.1, 0.1], [0.1, 0.1], math.nan, InvalidDataError, "relative margin r"),
        ([], [], 0.25, InsufficientDataError, "at least 1"),
    ],
)
def test_noise_floor_validation(
    d_cand: list[float], d_noise: list[float], r: float, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        noise_floor_values(d_cand, d_noise, r)


def test_tail_rates_without_a_difference() -> None:
    rng = np.random.default_rng(11)
    d_noise = rng.beta(2, 20, 20_000)
    d_cand = rng.beta(2, 20, 20_000)
    report = tail_rate_split(d_cand, d_noise, quantile=0.95, seed=3)
    assert (report.n_fit, report.n_eval) == (10_000, 10_000)
    assert report.noise_rate == pytest.approx(0.05, abs=0.01)
    assert report.cand_rate == pytest.approx(0.05, abs=0.01)
    assert report.p_value > 0.001
    assert report == tail_rate_split(d_cand, d_noise, quantile=0.95, seed=3)  # reproducible


def test_tail_rates_find_rare_catastrophes() -> None:
    rng = np.random.default_rng(12)
    d_noise = rng.beta(2, 20, 4000)
    d_cand = d_noise.copy()
    d_cand[rng.random(4000) < 0.03] = 1.0  # 3% of answers wholly different
    report = tail_rate_split(d_cand, d_noise, quantile=0.95)
    assert report.cand_rate > report.noise_rate + 0.02
    assert report.cand_only > 0
    assert report.noise_only == 0
    assert report.p_value < 1e-6


def test_threshold_is_fitted_on_the_other_half() -> None:
    # Pitfall 9: evaluated on its own fitting sample the noise exceedance is 1 − q by
    # construction; on the held-out half it is a fair estimate.
    d = np.arange(100, dtype=float) / 100.0
    report = tail_rate_split(d, d, quantile=0.9, seed=0)
    assert report.n_fit + report.n_eval == 100
    assert report.cand_rate == report.noise_rate
    assert report.p_value == 1.0


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"quantile": 1.0}, InvalidDataError, "quantile"),
        ({"seed": -1}, InvalidDataError, "seed"),
    ],
)
def test_tail_rate_validation(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        tail_rate_split([0.1, 0.2], [0.1, 0.2], **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InsufficientDataError):
        tail_rate_split([0.1], [0.1])
