"""The resampling-free paired quantile-ratio interval (paired_quantile_ratios_rf)."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError
from shadoweval.stats.quantiles import paired_quantile_ratios_rf
from tests.stats.reference.paired_bootstrap import paired_quantile_ratio_ci


def _bootstrap_se(cand: np.ndarray, base: np.ndarray, q: float) -> float:
    """SE of the log ratio from the exact paired Poisson bootstrap (68.27% percentiles)."""
    r = paired_quantile_ratio_ci(cand, base, q, confidence=0.6827, replicates=4000, rng=1)
    return (math.log(r.ci_high) - math.log(r.ci_low)) / 2.0


@pytest.mark.parametrize("q", [0.5, 0.95])
@pytest.mark.parametrize(
    "scenario", ["paired noise 0.1", "paired noise 0.5", "slow tail", "independent"]
)
def test_standard_error_matches_the_paired_bootstrap(scenario: str, q: float) -> None:
    rng = np.random.default_rng(7)
    n = 1000
    base = rng.lognormal(6.0, 0.5, n)
    if scenario == "paired noise 0.1":
        cand = base * rng.lognormal(0.0, 0.1, n)
    elif scenario == "paired noise 0.5":
        cand = base * rng.lognormal(0.0, 0.5, n)
    elif scenario == "slow tail":
        cand = base * rng.lognormal(0.0, 0.1, n) * np.where(base > np.quantile(base, 0.85), 1.3, 1)
    else:
        cand = rng.lognormal(6.0, 0.5, n)
    [r] = paired_quantile_ratios_rf(cand, base, [q], alpha=0.025)
    ratio = r.se_log / _bootstrap_se(cand, base, q)
    assert 0.8 < ratio < 1.35, (scenario, q, r.se_log, ratio)
    assert r.paired
    assert r.replicates == 0
    assert r.ci_low < r.estimate < r.ci_high
    assert r.estimate == pytest.approx(np.quantile(cand, q) / np.quantile(base, q))


def test_identical_arms_give_exactly_one() -> None:
    base = np.random.default_rng(1).lognormal(5.0, 1.0, 300)
    for r in paired_quantile_ratios_rf(base, base.copy(), [0.5, 0.95, 0.99]):
        assert (r.ci_low, r.estimate, r.ci_high) == (1.0, 1.0, 1.0)
        assert r.correlation == 1.0


def test_coverage_in_an_aa_simulation() -> None:
    """95% two-sided (α = 0.025 per side): misses at most ~2.5% per side (log-normal arms)."""
    rng = np.random.default_rng(5)
    reps, n = 400, 300
    true95 = math.exp(1.6449 * (math.sqrt(0.25 + 0.01) - 0.5))
    misses = np.zeros((2, 2))
    for _ in range(reps):
        base = rng.lognormal(6.0, 0.5, n)
        cand = base * rng.lognormal(0.0, 0.1, n)
        p50, p95 = paired_quantile_ratios_rf(cand, base, [0.5, 0.95], alpha=0.025)
        for row, (r, true) in enumerate(((p50, 1.0), (p95, true95))):
            misses[row] += (r.ci_high < true, r.ci_low > true)
    assert (misses / reps <= 0.045).all(), misses / reps


def test_levels_per_quantile_and_width() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(6.0, 0.5, 2000)
    cand = base * rng.lognormal(0.0, 0.2, 2000)
    wide, narrow = paired_quantile_ratios_rf(cand, base, [0.5, 0.5], alpha=[0.001, 0.1])
    assert wide.ci_high - wide.ci_low > narrow.ci_high - narrow.ci_low
    assert wide.confidence == pytest.approx(0.998)
    assert wide.se_log == narrow.se_log


def test_a_million_pairs_at_three_quantiles_is_fast() -> None:
    rng = np.random.default_rng(3)
    base = rng.lognormal(6.0, 0.5, 1_000_000)
    cand = base * rng.lognormal(0.0, 0.1, 1_000_000)
    start = time.perf_counter()
    results = paired_quantile_ratios_rf(cand, base, [0.5, 0.95, 0.99], alpha=1e-4)
    # a bound on a hang, not a speed check (under 0.1 s here; speed belongs to benchmarks/)
    assert time.perf_counter() - start < 60.0
    for r, z in zip(results, (0.0, 1.6449, 2.3263), strict=True):
        true = math.exp(z * (math.sqrt(0.25 + 0.01) - 0.5))
        assert r.ci_low < true < r.ci_high
        assert r.ci_high - r.ci_low < 0.02


def test_tiny_samples_and_bad_inputs() -> None:
    [r] = paired_quantile_ratios_rf([2.0], [1.0], [0.5])
    assert r.estimate == 2.0
    with pytest.raises(InsufficientDataError):
        paired_quantile_ratios_rf([], [], [0.5])
    with pytest.raises(InvalidDataError, match="differ in length"):
        paired_quantile_ratios_rf([1.0, 2.0], [1.0], [0.5])
    with pytest.raises(InvalidDataError, match="<= 0"):
        paired_quantile_ratios_rf([1.0, 0.0], [1.0, 1.0], [0.5])
    with pytest.raises(InvalidDataError, match="NaN"):
        paired_quantile_ratios_rf([1.0, float("nan")], [1.0, 1.0], [0.5])
    with pytest.raises(InvalidDataError, match="q must be"):
        paired_quantile_ratios_rf([1.0, 2.0], [1.0, 2.0], [1.0])
    with pytest.raises(InvalidDataError, match="alpha"):
        paired_quantile_ratios_rf([1.0, 2.0], [1.0, 2.0], [0.5], alpha=0.5)
    with pytest.raises(InvalidDataError, match="2 alpha values for 1"):
        paired_quantile_ratios_rf([1.0, 2.0], [1.0, 2.0], [0.5], alpha=[0.1, 0.1])
