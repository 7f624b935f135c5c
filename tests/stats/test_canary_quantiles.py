"""Two independent arms' latency quantiles: the ratio bound and the absolute limit."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.canary.quantiles import (
    lower_quantile_bound,
    quantile_above_limit,
    quantile_ratio_interval,
    upper_quantile_bound,
)
from shadoweval.stats.inputs import InvalidDataError
from tests.stats.reference import order_statistics as ref

CASES = [
    (20, 0.5, 0.025),
    (71, 0.95, 0.025),
    (72, 0.95, 0.025),
    (100, 0.95, 0.025),
    (200, 0.5, 0.01),
    (298, 0.99, 0.05),
    (299, 0.99, 0.05),
    (400, 0.9, 0.0076),
]


@pytest.mark.parametrize(("n", "q", "a"), CASES)
def test_ranks_match_exact_binomial_reference(n: int, q: float, a: float) -> None:
    values = np.arange(1.0, n + 1.0)  # x_(i) = i, so the bound is the rank
    upper = upper_quantile_bound(values, q, a)
    lower = lower_quantile_bound(values, q, a)
    u = ref.upper_rank(n, Fraction(q), Fraction(a))
    low = ref.lower_rank(n, Fraction(q), Fraction(a))
    assert upper == (math.inf if u is None else float(u))
    assert lower == (-math.inf if low is None else float(low))


def test_smallest_samples_for_a_bound() -> None:
    # Upper bound: q = 0.95 at 0.025 needs 0.95^n <= 0.025, n >= 72. Lower bound: needs
    # (1 - q)^n < a: q = 0.5 at 0.025 needs n >= 6, q = 0.99 at 0.05 only n >= 1.
    assert not math.isfinite(upper_quantile_bound(np.arange(71.0), 0.95, 0.025))
    assert math.isfinite(upper_quantile_bound(np.arange(72.0), 0.95, 0.025))
    assert not quantile_above_limit(np.full(5, 9e9), 0.5, 1.0, 0.025).enough
    r = quantile_above_limit(np.full(6, 9e9), 0.5, 1.0, 0.025)
    assert r.enough
    assert r.above
    assert r.low == 9e9
    one = quantile_above_limit([70000.0], 0.99, 60000.0, 0.05)
    assert one.enough
    assert one.above


def test_ratio_estimate_and_bound_by_hand() -> None:
    cand = np.arange(1.0, 201.0) * 1.5
    base = np.arange(1.0, 201.0)
    r = quantile_ratio_interval(cand, base, 0.9, 0.05)
    # Ranks at a = 0.025, n = 200, q = 0.9: upper F^-1(0.975) + 1, lower F^-1(0.025).
    u = int(scipy_stats.binom.ppf(0.975, 200, 0.9)) + 1
    low = int(scipy_stats.binom.ppf(0.025, 200, 0.9))
    assert (u, low) == (189, 171)
    assert r.enough
    assert r.estimate == pytest.approx(1.5)
    assert r.candidate_upper_ms == pytest.approx(1.5 * u)
    assert r.baseline_lower_ms == pytest.approx(float(low))
    assert r.high == pytest.approx(1.5 * u / low)
    assert r.below(1.7)
    assert not r.below(1.6)
    assert r.to_json()["enough"] is True


def test_not_enough_is_neither_pass_nor_fail() -> None:
    r = quantile_ratio_interval([100.0] * 10, [100.0] * 500, 0.95, 0.05)
    assert not r.enough
    assert not r.below(100.0)
    assert r.high == math.inf
    assert r.to_json()["high"] is None
    empty = quantile_ratio_interval([], [], 0.5, 0.05)
    assert not empty.enough
    assert math.isnan(empty.estimate)
    assert empty.to_json()["estimate"] is None


def test_bad_input_names_the_field() -> None:
    with pytest.raises(InvalidDataError, match="candidate_ms"):
        quantile_ratio_interval([1.0, math.nan], [1.0], 0.5, 0.05)
    with pytest.raises(InvalidDataError, match="baseline_ms"):
        quantile_ratio_interval([1.0], [-1.0], 0.5, 0.05)
    with pytest.raises(InvalidDataError, match="q must be"):
        quantile_ratio_interval([1.0], [1.0], 1.0, 0.05)
    with pytest.raises(InvalidDataError, match="alpha"):
        quantile_above_limit([1.0], 0.5, 10.0, 0.6)
    with pytest.raises(InvalidDataError, match="limit_ms"):
        quantile_above_limit([1.0], 0.5, 0.0, 0.05)


def test_ratio_upper_bound_coverage_simulation() -> None:
    # Lognormal latencies, true q-quantile ratio known; the one-sided bound must cover it
    # in >= 1 - alpha of the samples (seeded; binomial noise allowance 3 sd).
    rng = np.random.default_rng(20261203)
    alpha, q, reps = 0.05, 0.95, 2000
    z = scipy_stats.norm.ppf(q)
    mu_c, s_c, mu_b, s_b = math.log(900.0), 0.6, math.log(800.0), 0.5
    true_ratio = math.exp(mu_c + s_c * z) / math.exp(mu_b + s_b * z)
    covered = 0
    for _ in range(reps):
        c = rng.lognormal(mu_c, s_c, 300)
        b = rng.lognormal(mu_b, s_b, 900)
        covered += quantile_ratio_interval(c, b, q, alpha).high >= true_ratio
    rate = covered / reps
    assert rate >= 1 - alpha - 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert rate < 1.0  # a real bound, not infinite


def test_limit_false_breach_rate_at_the_boundary() -> None:
    # H0 boundary: the true 0.99-quantile equals the limit exactly.
    rng = np.random.default_rng(7)
    alpha, q, reps = 0.05, 0.99, 3000
    limit = float(scipy_stats.expon.ppf(q, scale=1000.0))
    above = sum(
        quantile_above_limit(rng.exponential(1000.0, 600), q, limit, alpha).above
        for _ in range(reps)
    )
    assert above / reps <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)


def test_ties_keep_the_bound_conservative() -> None:
    # Discrete latencies (10 ms buckets): ties make the bound conservative, never invalid.
    rng = np.random.default_rng(11)
    alpha, q, reps = 0.1, 0.9, 1500
    values = np.arange(0.0, 500.0, 10.0)
    probs = np.exp(-values / 100.0)
    probs /= probs.sum()
    cdf = np.cumsum(probs)
    true_q = values[np.searchsorted(cdf, q)]
    covered = sum(
        upper_quantile_bound(np.sort(rng.choice(values, 150, p=probs)), q, alpha) >= true_q
        for _ in range(reps)
    )
    assert covered / reps >= 1 - alpha
