"""Latency quantiles: numpy-linear point quantiles, order-statistic ranks; the reference
exact paired bootstrap (tests/stats/reference/paired_bootstrap.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats as scipy_stats

import tests.stats.reference.paired_bootstrap as quantiles
from shadoweval.errors import InsufficientDataError
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.quantiles import order_statistic_ranks, quantile_ci, sample_quantile
from tests.stats.reference.paired_bootstrap import paired_quantile_ratio_ci

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


def test_sample_quantile_rejects_q_outside_the_unit_interval() -> None:
    with pytest.raises(InvalidDataError):
        sample_quantile([1.0], 1.5)


# ------------------------------------------------------------------ paired Poisson bootstrap


def correlated_pairs(seed: int, n: int = 200) -> tuple[npt.NDArray[np.float64], ...]:
    """Candidate = baseline × 1.3 ± 5% (uniform), heavy-tailed baseline (lognormal σ = 1)."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(np.log(500.0), 1.0, n)
    cand = base * 1.3 * rng.uniform(0.95, 1.05, n)
    return cand, base


def test_paired_interval_of_identical_draws_is_one() -> None:
    rng = np.random.default_rng(3)
    ttft = rng.lognormal(5.0, 1.0, 500)
    for q in (0.5, 0.95):
        r = paired_quantile_ratio_ci(ttft.copy(), ttft, q, rng=1)
        assert (r.ci_low, r.estimate, r.ci_high) == (1.0, 1.0, 1.0)
    # ties inside each arm too
    tied = np.repeat([100.0, 200.0, 300.0], 50)
    r = paired_quantile_ratio_ci(tied, tied.copy(), 0.5, rng=2)
    assert (r.ci_low, r.ci_high) == (1.0, 1.0)


def test_paired_interval_is_reproducible() -> None:
    cand, base = correlated_pairs(5)
    r1 = paired_quantile_ratio_ci(cand, base, 0.95, rng=20240601)
    r2 = paired_quantile_ratio_ci(cand, base, 0.95, rng=np.random.default_rng(20240601))
    assert r1 == r2
    assert (r1.n_candidate, r1.n_baseline, r1.replicates) == (200, 200, 2000)


@pytest.mark.parametrize("q", [0.5, 0.95])
def test_paired_coverage_in_aa_simulation(q: float) -> None:
    """A/A pairs (a shared per-request latency, independent noise per arm): ≥ 90% coverage."""
    rng = np.random.default_rng(41)
    trials, hits = 200, 0
    for _ in range(trials):
        request = rng.normal(5.0, 0.8, 200)
        a = np.exp(request + rng.normal(0.0, 0.2, 200))
        b = np.exp(request + rng.normal(0.0, 0.2, 200))
        r = paired_quantile_ratio_ci(a, b, q, confidence=0.95, replicates=500, rng=rng)
        hits += r.ci_low <= 1.0 <= r.ci_high
    assert hits / trials >= 0.9


def _naive_paired_ranks(
    cand: npt.NDArray[np.float64],
    base: npt.NDArray[np.float64],
    q: float,
    replicates: int,
    rng: np.random.Generator,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The definition: all n weights per replicate, full cumulative weights."""
    order_c, order_b = np.argsort(cand, kind="stable"), np.argsort(base, kind="stable")
    weights = rng.poisson(1.0, size=(replicates, cand.size)).astype(float)
    weights = weights[weights.sum(axis=1) > 0]
    target = q * weights.sum(axis=1)
    rank_c = (np.cumsum(weights[:, order_c], axis=1) < target[:, None]).sum(axis=1)
    rank_b = (np.cumsum(weights[:, order_b], axis=1) < target[:, None]).sum(axis=1)
    return rank_c, rank_b


@pytest.mark.parametrize(
    ("window_sd", "pad"),
    [(quantiles._WINDOW_SD, quantiles._WINDOW_PAD), (1.0, 2), (0.2, 0)],
    ids=["default-window", "narrow-window", "fallback-almost-always"],
)
def test_windowed_bootstrap_has_the_naive_distribution(
    monkeypatch: pytest.MonkeyPatch, window_sd: float, pad: int
) -> None:
    """The window shortcut (and its exact fallback) reproduces the joint rank law."""
    monkeypatch.setattr(quantiles, "_WINDOW_SD", window_sd)
    monkeypatch.setattr(quantiles, "_WINDOW_PAD", pad)
    rng = np.random.default_rng(8)
    n, q, reps = 40, 0.5, 20_000
    request = rng.normal(size=n)
    cand = np.exp(request + 0.4 * rng.normal(size=n))
    base = np.exp(request + 0.4 * rng.normal(size=n))
    plan = quantiles._paired_plan(cand, base, q)
    if window_sd < 1:
        assert plan.hi - plan.lo < 10  # most replicates take the fallback
    fast_c, fast_b = quantiles._paired_ranks(plan, reps, np.random.default_rng(1))
    slow_c, slow_b = _naive_paired_ranks(cand, base, q, reps, np.random.default_rng(2))
    fast = np.bincount(fast_c * n + fast_b, minlength=n * n)
    slow = np.bincount(slow_c * n + slow_b, minlength=n * n)
    # pool sparse cells, then a chi-square test of homogeneity
    order = np.argsort(fast + slow)
    keep = (fast + slow)[order] >= 20
    table = np.vstack(
        [
            np.append(fast[order][keep], fast[order][~keep].sum()),
            np.append(slow[order][keep], slow[order][~keep].sum()),
        ]
    )
    assert scipy_stats.chi2_contingency(table).pvalue > 1e-3
    assert abs(fast_c.mean() - slow_c.mean()) < 0.15
    assert abs(fast_b.std() - slow_b.std()) < 0.15


def test_paired_bootstrap_of_100k_pairs_is_fast() -> None:
    """n = 100,000 pairs × 2,000 replicates, at p50 (the widest window): well under 10 s."""
    cand, base = correlated_pairs(6, n=100_000)
    start = time.perf_counter()
    r = paired_quantile_ratio_ci(cand, base, 0.5, replicates=2000, rng=0)
    elapsed = time.perf_counter() - start
    # a bound on a hang, not a speed check (about 0.4 s here; speed belongs to benchmarks/)
    assert elapsed < 60.0, elapsed
    assert 1.29 < r.ci_low < r.ci_high < 1.31


def test_paired_bootstrap_of_tiny_samples() -> None:
    # n = 1: a replicate with total weight 0 (probability 1/e) is redrawn, never used.
    r = paired_quantile_ratio_ci([2.0], [1.0], 0.5, replicates=200, rng=0)
    assert (r.ci_low, r.estimate, r.ci_high) == (2.0, 2.0, 2.0)
    r = paired_quantile_ratio_ci([2.0, 6.0], [1.0, 2.0], 0.5, replicates=500, rng=0)
    assert (r.ci_low, r.ci_high) == (2.0, 3.0)


def test_paired_rejects_bad_values() -> None:
    with pytest.raises(InvalidDataError, match="differ in length"):
        paired_quantile_ratio_ci([1.0, 2.0], [1.0], 0.5)
    with pytest.raises(InvalidDataError, match="NaN"):
        paired_quantile_ratio_ci([1.0, float("nan")], [1.0, 2.0], 0.5)
    with pytest.raises(InvalidDataError, match="<= 0"):
        paired_quantile_ratio_ci([1.0, 2.0], [0.0, 2.0], 0.5)
    with pytest.raises(InsufficientDataError):
        paired_quantile_ratio_ci([], [], 0.5)
    with pytest.raises(InvalidDataError):
        paired_quantile_ratio_ci([1.0], [1.0], 0.0)
    with pytest.raises(InvalidDataError, match="replicates"):
        paired_quantile_ratio_ci([1.0], [1.0], 0.5, replicates=0)
