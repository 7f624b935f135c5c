"""Latency quantiles: numpy-linear point quantiles, order-statistic ranks, ratio intervals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shadoweval.errors import InsufficientDataError
from stats.inputs import InvalidDataError
from stats.quantiles import (
    order_statistic_ranks,
    quantile_ci,
    quantile_ratio_ci,
    sample_quantile,
)

LLMPERF_RUNS = ["anyscale_13b", "bedrock_70b", "lepton_7b", "together_13b"]
METRICS = ["ttft_s", "end_to_end_latency_s", "inter_token_latency_s"]


@pytest.mark.parametrize("run", LLMPERF_RUNS)
def test_point_quantiles_match_llmperf_summaries(shared_data: Path, run: str) -> None:
    """The llmperf summaries are linear quantiles over the successful requests (an oracle)."""
    base = shared_data / "llmperf_leaderboard"
    summary = json.loads((base / "summary" / f"{run}.json").read_text(encoding="utf-8"))
    records = json.loads((base / "individual" / f"{run}.json").read_text(encoding="utf-8"))
    ok = [r for r in records if r["error_code"] is None and r["error_msg"] == ""]
    assert ok
    for metric in METRICS:
        values = [r[metric] for r in ok]
        for p in (25, 50, 75, 90, 95, 99):
            expected = summary[f"results_{metric}_quantiles_p{p}"]
            assert sample_quantile(values, p / 100) == pytest.approx(expected, rel=1e-12), (
                metric,
                p,
            )


def test_t19_order_statistic_ranks() -> None:
    r = order_statistic_ranks(1000, 0.99, 0.95)
    assert (r.lower_rank, r.upper_rank) == (983, 997)
    assert r.coverage == pytest.approx(0.9761, rel=5e-4)


def test_quantile_ci_reads_order_statistics() -> None:
    x = np.arange(1, 1001, dtype=float)[::-1]  # order statistic k equals k
    ci = quantile_ci(x, 0.99)
    assert (ci.low, ci.high) == (983.0, 997.0)
    assert ci.estimate == pytest.approx(np.quantile(x, 0.99))
    small = quantile_ci([1.0, 2.0, 3.0], 0.5, 0.99)  # ranks 0 and n + 1: unbounded
    assert (small.ranks.lower_rank, small.ranks.upper_rank) == (0, 4)
    assert (small.low, small.high) == (-np.inf, np.inf)


def test_ratio_interval_is_reproducible_and_covers_one_in_aa() -> None:
    rng = np.random.default_rng(1)
    a = rng.lognormal(6.0, 0.5, 800)
    b = rng.lognormal(6.0, 0.5, 800)
    r1 = quantile_ratio_ci(a, b, 0.95, rng=20240601)
    r2 = quantile_ratio_ci(a, b, 0.95, rng=np.random.default_rng(20240601))
    assert r1 == r2
    assert r1.ci_low < 1.0 < r1.ci_high
    assert r1.estimate == pytest.approx(np.quantile(a, 0.95) / np.quantile(b, 0.95))
    assert r1.ci_low <= r1.estimate <= r1.ci_high


def test_ratio_interval_detects_a_slow_tail() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(6.0, 0.4, 2000)
    cand = rng.lognormal(6.0, 0.4, 2000)
    cand = np.where(cand > np.quantile(cand, 0.85), cand * 1.3, cand)
    p95 = quantile_ratio_ci(cand, base, 0.95, rng=0)
    p50 = quantile_ratio_ci(cand, base, 0.50, rng=0)
    assert p95.ci_low > 1.1
    assert p50.ci_low < 1.0 < p50.ci_high


def test_ratio_coverage_is_at_least_nominal() -> None:
    """Unpaired Poisson bootstrap on A/A data: coverage near or above 95% (conservative)."""
    rng = np.random.default_rng(4)
    hits = 0
    trials = 200
    for _ in range(trials):
        a = rng.lognormal(5.0, 0.6, 300)
        b = rng.lognormal(5.0, 0.6, 300)
        r = quantile_ratio_ci(a, b, 0.5, replicates=1000, rng=rng)
        hits += r.ci_low <= 1.0 <= r.ci_high
    assert hits / trials >= 0.92


def test_ratio_rejects_bad_values() -> None:
    with pytest.raises(InvalidDataError, match="NaN"):
        quantile_ratio_ci([1.0, float("nan")], [1.0, 2.0], 0.5)
    with pytest.raises(InvalidDataError, match="<= 0"):
        quantile_ratio_ci([1.0, 2.0], [0.0, 2.0], 0.5)
    with pytest.raises(InsufficientDataError):
        quantile_ratio_ci([], [1.0], 0.5)
    with pytest.raises(InvalidDataError):
        quantile_ratio_ci([1.0], [1.0], 1.0)
    with pytest.raises(InvalidDataError):
        sample_quantile([1.0], 1.5)
