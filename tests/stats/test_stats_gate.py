"""The gate's decision paths on simulated runs (seeded; see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import POOLED, CheckOutcome, Coverage, Decision, PairScore, Verdict
from stats.checks import UNEQUAL_LOAD
from stats.frame import pairs_frame
from stats.gate import evaluate_gate
from stats.inputs import InvalidDataError
from stats.policy import GatePolicy, parse_policy, policy_hash

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
AA = {"chat": {"n": 400}, "extract": {"n": 400, "format_expected": True}}


def run_gate(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    policy: GatePolicy | None = None,
    coverage: Coverage | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    frame = pairs_frame(scores, policy)
    return evaluate_gate(
        frame,
        policy,
        run_id="run-test",
        coverage=coverage or coverage_for(len(frame)),
        decided_at=DECIDED,
    )


def checks_of(verdict: Verdict, task_type: str, metric: str) -> CheckOutcome:
    [check] = [c for c in verdict.checks if c.task_type == task_type and c.metric == metric]
    return check.outcome


def test_no_data_holds(coverage_for: CoverageFor) -> None:
    v = run_gate([], coverage_for)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("no data")
    assert v.checks == ()
    assert v.policy_hash == policy_hash(GatePolicy())


def test_clean_aa_run_promotes(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate(AA), coverage_for)
    assert v.decision == Decision.PROMOTE, v.reasons
    assert all(c.outcome == CheckOutcome.PASS for c in v.checks)
    assert v.reasons[0].startswith("all 20 blocking checks passed")
    metrics = {c.metric for c in v.checks}
    assert metrics == {
        "error_rate",
        "format_parse",
        "similarity",
        "latency_e2e_ms_p50",
        "latency_e2e_ms_p95",
        "latency_ttft_ms_p50",
        "latency_ttft_ms_p95",
    }
    assert {c.task_type for c in v.checks} == {POOLED, "chat", "extract"}
    # format_parse only where a format was expected
    assert not [c for c in v.checks if c.task_type == "chat" and c.metric == "format_parse"]
    by_metric = {c.metric: c for c in v.checks if c.task_type == POOLED}
    assert by_metric["error_rate"].statistic == "tango_score_ni+mcnemar_midp"
    assert by_metric["error_rate"].critical
    assert by_metric["format_parse"].critical
    assert by_metric["similarity"].statistic == "ttest_1samp_ni"
    assert not by_metric["similarity"].critical
    assert by_metric["latency_e2e_ms_p95"].statistic == "poisson_bootstrap_quantile_ratio"
    assert by_metric["latency_e2e_ms_p95"].margin == 1.5
    assert by_metric["error_rate"].n == 800
    for check in v.checks:
        assert check.ci_low is not None
        assert check.ci_high is not None
        assert check.ci_low <= check.estimate <= check.ci_high  # type: ignore[operator]
    assert (v.run_id, v.decided_at, v.look) == ("run-test", DECIDED, 1)


def test_verdict_is_reproducible(simulate: Simulate, coverage_for: CoverageFor) -> None:
    scores = simulate(AA)
    assert run_gate(scores, coverage_for) == run_gate(list(reversed(scores)), coverage_for)


def test_nan_similarity_holds(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 400, "nan_similarity": 2}}), coverage_for)
    assert v.decision == Decision.HOLD
    assert "similarity" in v.reasons[0]
    assert "NaN" in v.reasons[0]
    assert checks_of(v, "chat", "similarity") == CheckOutcome.INCONCLUSIVE


def test_all_candidate_errors_roll_back(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "cand_error": 1.0}}), coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert "error_rate: significant harm" in v.reasons[0]
    assert checks_of(v, POOLED, "error_rate") == CheckOutcome.FAIL


def test_harm_p_value_underflowing_to_zero_still_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 0.5 ** 1500 underflows to 0.0: a p-value of exactly 0 is the strongest evidence.
    v = run_gate(
        simulate({"chat": {"n": 1500, "cand_error": 1.0, "base_error": 0.0}}), coverage_for
    )
    assert v.decision == Decision.ROLLBACK
    assert checks_of(v, "chat", "error_rate") == CheckOutcome.FAIL
    assert "significant harm" in v.reasons[0]
    assert "McNemar mid-p 0," in v.reasons[0]


def test_all_errors_on_both_sides_hold(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "cand_error": 1.0, "base_error": 1.0}}), coverage_for)
    assert v.decision == Decision.HOLD
    assert any("baseline failed" in r and "all 300 pairs" in r for r in v.reasons)
    assert any("no pairs with a similarity" in r for r in v.reasons)
    assert any("no latency pairs" in r for r in v.reasons)


def test_format_drop_in_one_task_type_blocks(simulate: Simulate, coverage_for: CoverageFor) -> None:
    specs = {
        "chat": {"n": 400},
        "extract": {"n": 400, "format_expected": True, "cand_format_extra_fail": 0.12},
    }
    v = run_gate(simulate(specs), coverage_for)
    assert v.decision != Decision.PROMOTE
    assert v.decision == Decision.ROLLBACK
    assert checks_of(v, "extract", "format_parse") == CheckOutcome.FAIL
    assert any("task type 'extract', format_parse" in r for r in v.reasons)
    assert checks_of(v, "chat", "error_rate") == CheckOutcome.PASS


def test_slower_p95_blocks(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # The top 15% of candidate latencies are 30% slower. The default p95 limit (1.5) accepts
    # a +30% p95 by design, so this policy sets the limit at 1.2.
    policy = parse_policy({"latency": {"p95_ratio_max": 1.2}})
    v = run_gate(simulate({"chat": {"n": 1000, "cand_tail_factor": 1.3}}), coverage_for, policy)
    assert v.decision != Decision.PROMOTE
    assert checks_of(v, "chat", "latency_e2e_ms_p95") != CheckOutcome.PASS
    assert checks_of(v, POOLED, "latency_e2e_ms_p95") != CheckOutcome.PASS
    assert checks_of(v, POOLED, "latency_e2e_ms_p50") == CheckOutcome.PASS
    assert any("latency_e2e_ms_p95" in r for r in v.reasons[:2])


def test_six_new_errors_in_200_block(simulate: Simulate, coverage_for: CoverageFor) -> None:
    scores = simulate({"chat": {"n": 200, "base_error": 0.0, "cand_error": 0.0}})
    broken = {5, 40, 77, 120, 150, 199}
    scores = [
        s.model_copy(update={"candidate_error": True, "similarity": None}) if i in broken else s
        for i, s in enumerate(scores)
    ]
    v = run_gate(scores, coverage_for)
    assert v.decision != Decision.PROMOTE
    # One task type: the pooled test is the same hypothesis and shares its Holm-adjusted
    # p-value, so the family has one member and mid-p = 0.5**6 / 2 = 0.0078 <= 0.01.
    assert v.decision == Decision.ROLLBACK
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == "error_rate"]
    assert check.outcome == CheckOutcome.FAIL
    assert check.estimate == pytest.approx(0.03)
    assert "6 pairs fail only on the candidate vs 0 only on the baseline" in check.reason
    assert "McNemar mid-p 0.0078" in check.reason


def test_six_new_errors_spread_over_task_types_hold(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    clean = {"n": 100, "base_error": 0.0, "cand_error": 0.0}
    scores = simulate({"a": clean, "b": clean})
    broken = {5, 40, 77, 120, 150, 199}
    scores = [
        s.model_copy(update={"candidate_error": True, "similarity": None}) if i in broken else s
        for i, s in enumerate(scores)
    ]
    v = run_gate(scores, coverage_for)
    # Three harm tests (pooled, a, b): Holm lifts the pooled 0.0078 above 0.01.
    assert v.decision == Decision.HOLD
    assert checks_of(v, POOLED, "error_rate") == CheckOutcome.INCONCLUSIVE


def test_too_few_pairs_in_a_blocking_task_type_holds(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {"n": 400}, "rare": {"n": 30}}), coverage_for)  # 7% share
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("task type 'rare'")
    assert "too few pairs: 30 < min_pairs 50" in v.reasons[0]
    assert all("'rare'" in r for r in v.reasons)


def test_small_task_type_does_not_block(simulate: Simulate, coverage_for: CoverageFor) -> None:
    specs = {**AA, "tiny": {"n": 20}}  # 20 / 820 < 5%
    v = run_gate(simulate(specs), coverage_for)
    assert v.decision == Decision.PROMOTE, v.reasons
    assert any("task type 'tiny' has less than min_traffic_share" in r for r in v.reasons)
    assert checks_of(v, "tiny", "error_rate") == CheckOutcome.INCONCLUSIVE


def test_harm_in_a_small_task_type_still_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    specs = {**AA, "tiny": {"n": 25, "cand_error": 1.0, "base_error": 0.0}}
    v = run_gate(simulate(specs), coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert any(r.startswith("task type 'tiny', error_rate: significant harm") for r in v.reasons)


def test_low_coverage_holds(simulate: Simulate) -> None:
    scores = simulate(AA)
    coverage = Coverage(
        captured=1600, replayed=900, paired=800, errored=100, warmup=0, skipped=700, share=0.5
    )
    v = run_gate(scores, lambda n: coverage, coverage=coverage)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("invalid run: replay coverage 50.0%")
    assert "min_coverage 90%" in v.reasons[0]


def test_low_coverage_still_rolls_back_on_harm(simulate: Simulate) -> None:
    scores = simulate({"chat": {"n": 300, "cand_error": 0.5}})
    coverage = Coverage(
        captured=600, replayed=300, paired=300, errored=0, warmup=0, skipped=300, share=0.5
    )
    v = run_gate(scores, lambda n: coverage, coverage=coverage)
    assert v.decision == Decision.ROLLBACK
    assert "significant harm" in v.reasons[0]
    assert any("invalid run" in r for r in v.reasons)


def test_similarity_beyond_the_limit_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "similarity_mean": 0.4}}), coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert checks_of(v, "chat", "similarity") == CheckOutcome.FAIL
    assert "diverge more than allowed" in v.reasons[0]


def test_live_baseline_latency_is_flagged_as_unequal_load(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "latency_source": "live"}}), coverage_for)
    latency = [c for c in v.checks if c.metric.startswith("latency_")]
    assert latency
    assert all(UNEQUAL_LOAD in c.reason for c in latency)
    assert any(UNEQUAL_LOAD in r for r in v.reasons)


def test_no_latency_pairs_never_pass(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "latency_source": "missing"}}), coverage_for)
    assert v.decision == Decision.HOLD
    latency = [c for c in v.checks if c.metric.startswith("latency_")]
    assert latency
    assert all(c.outcome == CheckOutcome.INCONCLUSIVE for c in latency)
    assert all(c.reason.startswith("no latency pairs") for c in latency)


def test_warmup_replays_are_excluded(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "extra": {"candidate_warmup": True}}}), coverage_for)
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == "latency_e2e_ms_p50"]
    assert check.outcome == CheckOutcome.INCONCLUSIVE
    assert "warm-up" in check.reason


def test_p95_needs_min_pairs_p95(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = parse_policy({"min_pairs_per_task_type": 20, "min_pairs_pooled": 20})
    v = run_gate(simulate({"chat": {"n": 80}}), coverage_for, policy)
    [p95] = [c for c in v.checks if c.task_type == "chat" and c.metric == "latency_e2e_ms_p95"]
    assert p95.outcome == CheckOutcome.INCONCLUSIVE
    assert "min_pairs_p95 100" in p95.reason
    assert v.decision == Decision.HOLD


def test_nan_error_flags_hold(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate(AA), policy)
    frame["candidate_fail"] = frame["candidate_fail"].astype(object)
    frame.loc[3, "candidate_fail"] = np.nan
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    assert any("missing (NaN)" in r for r in v.reasons)


def test_infinite_latency_holds(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate(AA), policy)
    frame.loc[frame["candidate_e2e_ms"].first_valid_index(), "candidate_e2e_ms"] = np.inf
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    assert checks_of(v, POOLED, "latency_e2e_ms_p50") == CheckOutcome.INCONCLUSIVE
    assert any("invalid latencies" in r and "NaN or infinite" in r for r in v.reasons)


def test_similarity_out_of_range_holds(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate(AA), policy)
    frame.loc[frame["similarity"].first_valid_index(), "similarity"] = 1.7
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    assert any("outside [-1, 1]" in r for r in v.reasons)


def test_duplicated_pairs_hold(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate(AA), policy)
    frame = pd.concat([frame, frame.iloc[:5]], ignore_index=True)
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("invalid data: 5 exchanges")


def test_captured_task_type_without_pairs_holds(simulate: Simulate) -> None:
    scores = simulate(AA)
    coverage = Coverage(
        captured=900,
        replayed=900,
        paired=800,
        errored=0,
        warmup=0,
        skipped=0,
        share=0.95,
        per_task_type={"chat": 400, "extract": 400, "code": 100},
    )
    v = run_gate(scores, lambda n: coverage, coverage=coverage)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("task type 'code', error_rate: no pairs")


def test_bad_inputs_raise(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate({"chat": {"n": 10}}), policy)
    with pytest.raises(InvalidDataError, match="lacks columns: similarity"):
        evaluate_gate(
            frame.drop(columns=["similarity"]), policy, run_id="r", coverage=coverage_for(10)
        )
    with pytest.raises(InvalidDataError, match="look"):
        evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(10), look=0)


def test_look_and_default_time(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate({"chat": {"n": 10}}), policy)
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(10), look=3)
    assert v.look == 3
    assert v.decided_at.tzinfo is not None
