"""Serial dependence of co-timed latency pairs (issue 29 item 2): pairs in flight together
share the host's momentary load, so consecutive pairs' ratios are correlated and the
interval of independent pairs is too narrow. With the replay order known
(``candidate_sent_at``) the latency interval is widened by the Newey–West factor of the
ratio's influence series; without it, unchanged."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from shadoweval.records import Check, Coverage, PairScore
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import parse_policy
from shadoweval.stats.quantiles import (
    newey_west_factor,
    newey_west_lags,
    paired_quantile_ratios_rf,
)

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
E2E_ONLY = parse_policy({"latency": {"metrics": ["e2e_ms"]}})
T0 = datetime(2024, 6, 1, tzinfo=UTC)


def test_lags_follow_the_newey_west_rule() -> None:
    assert [newey_west_lags(n) for n in (0, 1, 2, 30, 100, 200, 272, 273, 2000)] == [
        0, 0, 1, 3, 4, 4, 4, 5, 7,
    ]  # fmt: skip


def test_the_factor_of_independent_constant_and_ar1_series() -> None:
    rng = np.random.default_rng(5)
    assert newey_west_factor(np.ones(50), 4) == 1.0
    assert newey_west_factor(rng.normal(size=50), 0) == 1.0
    assert 1.0 <= newey_west_factor(rng.normal(size=2000), 7) < 1.2
    # AR(1) with φ = 0.5: long-run / plain variance (1 + φ)/(1 − φ) = 3, Bartlett-truncated
    # at 7 lags: 1 + 2·Σ (1 − l/8)·0.5^l ≈ 2.5.
    ar = np.zeros(20000)
    noise = rng.normal(size=ar.size)
    for i in range(1, ar.size):
        ar[i] = 0.5 * ar[i - 1] + noise[i]
    assert newey_west_factor(ar, 7) == pytest.approx(2.5, abs=0.15)
    # A negatively correlated series never narrows the interval.
    assert newey_west_factor(np.tile([1.0, -1.0], 100), 4) == 1.0


def aa_pairs(rng: np.random.Generator, n: int, phi: float) -> tuple[np.ndarray, np.ndarray]:
    """An A/A: the same request cost on both sides, and a load that moves slowly over the
    replay order (AR(1) with ``phi``) and hits the two sides differently."""
    cost = rng.lognormal(np.log(20.0), 0.3, n)
    load = np.zeros(n)
    shocks = rng.normal(0.0, 0.15, n)
    for i in range(1, n):
        load[i] = phi * load[i - 1] + shocks[i]
    noise = rng.normal(0.0, 0.05, (2, n))
    return cost * np.exp(load + noise[0]), cost * np.exp(noise[1])


def test_widening_restores_coverage_of_serially_dependent_pairs() -> None:
    rng = np.random.default_rng(11)
    runs = 300
    covered = {False: 0, True: 0}
    for _ in range(runs):
        cand, base = aa_pairs(rng, 200, 0.5)
        for ordered in (False, True):
            [r] = paired_quantile_ratios_rf(cand, base, [0.5], alpha=0.025, ordered=ordered)
            covered[ordered] += r.ci_low <= 1.0 <= r.ci_high
            assert (r.serial_lags, r.serial_factor >= 1.0) == ((4, True) if ordered else (0, True))
    # Seeded: 277 of 300 (92.3%) as independent pairs, 289 (96.3%) widened.
    assert covered[False] / runs < 0.94
    assert covered[True] / runs >= 0.95


def test_identical_arms_stay_exactly_one_when_ordered() -> None:
    values = np.random.default_rng(3).lognormal(3.0, 0.5, 300)
    [r] = paired_quantile_ratios_rf(values, values.copy(), [0.5], ordered=True)
    assert (r.estimate, r.ci_low, r.ci_high) == (1.0, 1.0, 1.0)


def _p50(scores: list[PairScore], coverage_for: CoverageFor) -> Check:
    frame = pairs_frame(scores, E2E_ONLY)
    verdict = evaluate_gate(
        frame,
        E2E_ONLY,
        run_id="run-serial",
        coverage=coverage_for(len(frame)),
        decided_at=datetime(2024, 6, 2, tzinfo=UTC),
    )
    [check] = [
        c for c in verdict.checks if c.task_type == "chat" and c.metric == "latency_e2e_ms_p50"
    ]
    return check


def test_the_gate_widens_only_when_the_replay_order_is_known(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = simulate({"chat": {"n": 300, "base_error": 0.0, "cand_error": 0.0}}, seed=4)
    # Serially dependent ratios: the candidate's latency drifts in runs of ten pairs.
    drift = np.repeat(np.random.default_rng(8).normal(0.0, 0.2, 30), 10)
    slowed = []
    for s, d in zip(scores, drift, strict=True):
        candidate = s.e2e_ms.candidate
        assert candidate is not None
        e2e = s.e2e_ms.model_copy(update={"candidate": candidate * float(np.exp(d))})
        slowed.append(s.model_copy(update={"e2e_ms": e2e}))
    # Sent in the reverse of capture order: the check must follow the send times.
    ordered = [
        s.model_copy(update={"candidate_sent_at": T0 + timedelta(seconds=len(slowed) - i)})
        for i, s in enumerate(slowed)
    ]
    unknown = _p50(slowed, coverage_for)
    known = _p50(ordered, coverage_for)
    assert "Newey–West" not in unknown.reason
    assert "for serial dependence in replay order (Newey–West, 5 lags)" in known.reason
    assert known.estimate == unknown.estimate
    widths = [(c.ci_high or math.nan) - (c.ci_low or math.nan) for c in (known, unknown)]
    assert widths[0] > 1.2 * widths[1]
    # One pair without its send time: the order is unknown, the interval as before.
    partly = [*ordered[:-1], slowed[-1]]
    assert _p50(partly, coverage_for).ci_high == unknown.ci_high
