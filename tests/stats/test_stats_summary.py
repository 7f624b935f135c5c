"""The per-task-type summary describes the same pairs the gate decides on."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest

from shadoweval.records import POOLED, CheckOutcome, PairScore
from shadoweval.stats import evaluate_gate, pairs_frame
from shadoweval.stats.policy import parse_policy
from shadoweval.stats.summary import SUMMARY_COLUMNS, task_type_summary


def test_summary_rows_numbers_and_worst_outcome(simulate, coverage_for):
    scores = simulate(
        {
            "chat": {"n": 300, "similarity_mean": 0.9},
            "json": {"n": 300, "format_expected": True, "cand_format_extra_fail": 0.2},
        }
    )
    policy = parse_policy({"version": 1})
    pairs = pairs_frame(scores, policy)
    verdict = evaluate_gate(pairs, policy, run_id="run-test", coverage=coverage_for(len(pairs)))
    summary = task_type_summary(pairs, verdict)

    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    assert list(summary["task_type"]) == ["chat", "json", POOLED]
    chat = summary.iloc[0]
    chat_pairs = pairs[pairs["task_type"] == "chat"]
    assert chat["n"] == 300
    assert chat["similarity_mean"] == pytest.approx(chat_pairs["similarity"].mean())
    assert chat["candidate_fail_rate"] == pytest.approx(chat_pairs["candidate_fail"].mean())
    ok = ~(chat_pairs["baseline_fail"] | chat_pairs["candidate_fail"])
    expected_p50 = np.quantile(chat_pairs.loc[ok, "candidate_e2e_ms"], 0.5) / np.quantile(
        chat_pairs.loc[ok, "baseline_e2e_ms"], 0.5
    )
    assert chat["e2e_p50_ratio"] == pytest.approx(expected_p50)
    assert chat["format_n"] == 0
    assert math.isnan(chat["baseline_format_ok_rate"])

    json_row = summary.iloc[1]
    assert json_row["format_n"] > 250
    assert json_row["candidate_format_ok_rate"] < json_row["baseline_format_ok_rate"] - 0.1
    # the worst check of the task type with the planted format drop is a failure
    assert json_row["outcome"] == CheckOutcome.FAIL.value
    assert summary.iloc[2]["n"] == 600


def test_summary_of_no_pairs_has_only_a_pooled_row_with_nan():
    policy = parse_policy({"version": 1})
    summary = task_type_summary(pairs_frame([], policy))
    assert list(summary["task_type"]) == [POOLED]
    assert summary.iloc[0]["n"] == 0
    assert math.isnan(summary.iloc[0]["similarity_mean"])
    assert summary.iloc[0]["outcome"] == ""


def test_ttft_is_checked_only_where_requests_streamed(simulate, coverage_for):
    from shadoweval.stats import evaluate_gate as gate

    scores = simulate(
        {
            "streamed": {"n": 300},
            "batch": {"n": 300, "streamed": False},
        }
    )
    policy = parse_policy({"version": 1})
    pairs = pairs_frame(scores, policy)
    verdict = gate(pairs, policy, run_id="run-test", coverage=coverage_for(len(pairs)))
    metrics = {(c.task_type, c.metric) for c in verdict.checks}
    assert ("streamed", "latency_ttft_ms_p50") in metrics
    assert ("batch", "latency_e2e_ms_p50") in metrics
    assert ("batch", "latency_ttft_ms_p50") not in metrics
    pooled = [
        c for c in verdict.checks if c.task_type == POOLED and c.metric == "latency_ttft_ms_p50"
    ]
    assert pooled[0].n <= 300  # only the streamed pairs


def test_summary_keeps_infrastructure_errors_apart(simulate, coverage_for):
    scores = simulate(
        {"chat": {"n": 400, "cand_infra": 0.25, "cand_error": 0.0, "base_error": 0.0}}
    )
    pairs = pairs_frame(scores, parse_policy({"version": 1}))
    summary = task_type_summary(pairs)
    chat = summary.iloc[0]
    infra = pairs["candidate_infra_error"] | pairs["baseline_infra_error"]
    assert chat["n"] == 400
    assert chat["candidate_infra_error_rate"] == pytest.approx(
        pairs["candidate_infra_error"].mean()
    )
    assert 0.15 < chat["candidate_infra_error_rate"] < 0.35
    assert chat["baseline_infra_error_rate"] == 0.0
    # infrastructure errors are not model failures, and fail rates are over the other pairs
    assert chat["candidate_fail_rate"] == 0.0
    assert chat["similarity_mean"] == pytest.approx(pairs.loc[~infra, "similarity"].mean())


def test_summary_of_an_unreachable_candidate():
    t0 = datetime(2024, 6, 1, tzinfo=UTC)
    scores = [
        PairScore(
            run_id="r",
            exchange_id=f"e{i}",
            task_type="chat",
            captured_at=t0,
            candidate_error=True,
            candidate_infra_error=True,
        )
        for i in range(5)
    ]
    pairs = pairs_frame(scores, parse_policy({"version": 1}))
    pooled = task_type_summary(pairs).iloc[-1]
    assert pooled["candidate_infra_error_rate"] == 1.0
    assert math.isnan(pooled["candidate_fail_rate"])  # no pair to judge the model on
    assert math.isnan(pooled["e2e_p50_ratio"])


def test_report_only_statistics_and_noise_floor(simulate):
    from shadoweval.stats.report_only import cles, hodges_lehmann_shift, mann_whitney

    scores = simulate(
        {"chat": {"n": 400, "cand_latency_factor": 1.5, "noise_similarity_mean": 0.8}}
    )
    pairs = pairs_frame(scores, parse_policy({"version": 1}))
    chat = task_type_summary(pairs).iloc[0]
    ok = ~(pairs["baseline_fail"] | pairs["candidate_fail"])
    used = pairs.loc[ok, ["candidate_e2e_ms", "baseline_e2e_ms"]].dropna()
    cand, base = used["candidate_e2e_ms"], used["baseline_e2e_ms"]
    expected = mann_whitney(cand, base, alternative="two-sided", method="asymptotic")
    assert chat["e2e_mann_whitney_p"] == pytest.approx(expected.p_value)
    assert chat["e2e_mann_whitney_p"] < 1e-6
    assert chat["e2e_hodges_lehmann_ms"] == pytest.approx(hodges_lehmann_shift(cand, base))
    assert chat["e2e_hodges_lehmann_ms"] > 200
    assert chat["e2e_cles"] == pytest.approx(cles(cand, base))
    assert 0.6 < chat["e2e_cles"] < 1.0
    assert chat["noise_similarity_mean"] == pytest.approx(pairs["noise_similarity"].mean())
    no_noise = task_type_summary(pairs_frame(simulate({"chat": {"n": 50}}), parse_policy({})))
    assert math.isnan(no_noise.iloc[0]["noise_similarity_mean"])
