"""The gate's decision paths on simulated runs (seeded; see conftest.py).

These tests call :func:`shadoweval.stats.gate.evaluate_gate` directly: it judges exactly the given
pairs as look 1 (or the given look) of the default schedule, so its levels are the first
look's spent levels (α_1 = 0.61·α for Tango, quantile ratios and the harm family; 95%
confidence sequences tuned at N* = 3454 for the mean-type metrics). Polling — checkpoints,
prefixes, the sample cap — is tested in test_stats_checkpoints.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    HarmKind,
    PairJudgement,
    PairScore,
    Verdict,
)
from shadoweval.stats.checks import (
    BINARY_STATISTIC,
    COST_STATISTIC,
    LATENCY_NOT_CO_TIMED,
    LATENCY_STATISTIC,
    NO_NOISE_FLOOR,
    SIMILARITY_STATISTIC,
    PairArrays,
    latency_checks,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.looks import look_levels
from shadoweval.stats.policy import GatePolicy, parse_policy, policy_hash

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Ties = Callable[[list[PairScore]], dict[str, PairJudgement]]
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
AA = {"chat": {"n": 1500}, "extract": {"n": 1500, "format_expected": True}}
"""An A/A run large enough to PROMOTE at look 1 under the default policy."""


def run_gate(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    policy: GatePolicy | None = None,
    coverage: Coverage | None = None,
    judgements: Mapping[str, PairJudgement] | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    frame = pairs_frame(scores, policy, judgements)
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


def test_clean_aa_run_promotes(simulate: Simulate, coverage_for: CoverageFor, ties: Ties) -> None:
    scores = simulate(AA)
    v = run_gate(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.PROMOTE, v.reasons
    assert all(c.outcome == CheckOutcome.PASS for c in v.checks), [
        c for c in v.checks if c.outcome != CheckOutcome.PASS
    ]
    # 3 groups (pooled, chat, extract) × 17 blocking metrics (infra, error, 7 harm
    # detectors, net harm, 6 latency: p50/p95 of e2e, TTFT, TTFC, tokens), plus
    # format_parse in pooled and extract; no
    # p99 below 5,000 latency pairs; similarity is reported, not blocking (change.mode
    # judge), and no request offered tools (no tool_text_answer).
    assert v.reasons[0].startswith("all 53 blocking checks passed")
    assert (
        "pairs changed beyond the noise, and net harm passed in every blocking unit"
        in (v.reasons[0])
    )
    assert v.reasons[1] == (
        "observation window: the pairs span 50.0 h of capture time "
        "(observation.min_window_hours 24)"
    )
    metrics = {c.metric for c in v.checks}
    assert metrics == {
        "error_rate",
        "infra_error_rate",
        "format_parse",
        *(f"harm_{kind.value}" for kind in HarmKind),
        "net_harm",
        "similarity",
        "latency_e2e_ms_p50",
        "latency_e2e_ms_p95",
        "latency_ttft_ms_p50",
        "latency_ttft_ms_p95",
        "latency_ttfc_ms_p50",
        "latency_ttfc_ms_p95",
        "output_tokens",
    }
    assert {c.task_type for c in v.checks} == {POOLED, "chat", "extract"}
    # format_parse only where a format was expected
    assert not [c for c in v.checks if c.task_type == "chat" and c.metric == "format_parse"]
    by_metric = {c.metric: c for c in v.checks if c.task_type == POOLED}
    assert by_metric["error_rate"].statistic.startswith(BINARY_STATISTIC)
    assert by_metric["error_rate"].critical
    assert by_metric["format_parse"].critical
    assert by_metric["infra_error_rate"].statistic.startswith(BINARY_STATISTIC)
    assert not by_metric["infra_error_rate"].critical
    assert by_metric["infra_error_rate"].margin == 0.02
    assert by_metric["similarity"].statistic.startswith(SIMILARITY_STATISTIC)
    assert NO_NOISE_FLOOR in by_metric["similarity"].reason
    assert not by_metric["similarity"].critical
    assert by_metric["latency_e2e_ms_p95"].statistic.startswith(LATENCY_STATISTIC)
    assert by_metric["latency_e2e_ms_p95"].margin == 1.2
    assert by_metric["output_tokens"].statistic.startswith(COST_STATISTIC)
    assert by_metric["output_tokens"].margin == 1.2
    assert by_metric["error_rate"].n == 3000
    # Every check records its look and the look's spent levels (net harm: its share of
    # them, shadoweval.stats.net_harm.judgement_levels).
    for check in v.checks:
        levels = "alpha_k 0.00924" if check.metric == "net_harm" else "alpha_k 0.0152"
        assert f"look 1: {levels}" in check.statistic, check.statistic
        assert check.ci_low is not None
        assert check.ci_high is not None
        assert check.ci_low <= check.estimate <= check.ci_high  # type: ignore[operator]
    assert (v.run_id, v.decided_at, v.look) == ("run-test", DECIDED, 1)
    assert v.reasons[-1].startswith("sequential: look 1 on the first 3000 pairs")


def test_verdict_is_reproducible(simulate: Simulate, coverage_for: CoverageFor, ties: Ties) -> None:
    scores = simulate(AA)
    judged = ties(scores)
    assert run_gate(scores, coverage_for, judgements=judged) == run_gate(
        list(reversed(scores)), coverage_for, judgements=judged
    )


def test_nan_similarity_holds(simulate: Simulate, coverage_for: CoverageFor) -> None:
    v = run_gate(simulate({"chat": {"n": 1500, "nan_similarity": 2}}), coverage_for)
    assert v.decision == Decision.HOLD
    assert "similarity" in v.reasons[0]
    assert "NaN" in v.reasons[0]
    assert checks_of(v, "chat", "similarity") == CheckOutcome.INCONCLUSIVE


def test_all_candidate_errors_roll_back(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # Model errors (e.g. HTTP 400 rejections), not infrastructure errors.
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
    # The similarity check is reported, not blocking, in change.mode judge: its reason.
    [similarity] = [c for c in v.checks if c.task_type == "chat" and c.metric == "similarity"]
    assert similarity.outcome == CheckOutcome.INCONCLUSIVE
    assert "no pairs with a similarity" in similarity.reason
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
    assert checks_of(v, "chat", "error_rate") != CheckOutcome.FAIL


def test_slower_p95_blocks(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # The top 15% of candidate latencies are 30% slower: p95 ratio 1.3 > the default 1.2.
    v = run_gate(simulate({"chat": {"n": 1000, "cand_tail_factor": 1.3}}), coverage_for)
    assert v.decision != Decision.PROMOTE
    assert checks_of(v, "chat", "latency_e2e_ms_p95") != CheckOutcome.PASS
    assert checks_of(v, POOLED, "latency_e2e_ms_p95") != CheckOutcome.PASS
    assert checks_of(v, POOLED, "latency_e2e_ms_p50") != CheckOutcome.FAIL
    assert any("latency_e2e_ms_p95" in r for r in v.reasons[:2])


def _broken(scores: list[PairScore], broken: set[int]) -> list[PairScore]:
    return [
        s.model_copy(update={"candidate_error": True, "similarity": None}) if i in broken else s
        for i, s in enumerate(scores)
    ]


def test_six_new_errors_in_200_hold(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # Changed with the sequential gate: under repeated polling the first look spends only
    # 0.61 of alpha_harm (0.0061), so mid-p = 0.5**6 / 2 = 0.0078 is not a rollback yet —
    # but it is never a promote, and the reason says how far the harm test is.
    scores = _broken(
        simulate({"chat": {"n": 200, "base_error": 0.0, "cand_error": 0.0}}),
        {5, 40, 77, 120, 150, 199},
    )
    v = run_gate(scores, coverage_for)
    assert v.decision == Decision.HOLD
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == "error_rate"]
    assert check.outcome == CheckOutcome.INCONCLUSIVE
    assert check.estimate == pytest.approx(0.03)
    assert "6 pairs fail only on the candidate vs 0 only on the baseline" in check.reason
    assert "McNemar mid-p 0.0078" in check.reason
    assert "> alpha_RB_k 0.00608" in check.reason


def test_eight_new_errors_in_200_roll_back(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # One task type: the pooled test is the same hypothesis and shares its Holm-adjusted
    # p-value, so the family has one member: mid-p = 0.5**8 / 2 = 0.00195 <= 0.00608.
    scores = _broken(
        simulate({"chat": {"n": 200, "base_error": 0.0, "cand_error": 0.0}}),
        {5, 40, 77, 120, 150, 170, 185, 199},
    )
    v = run_gate(scores, coverage_for)
    assert v.decision == Decision.ROLLBACK
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == "error_rate"]
    assert check.outcome == CheckOutcome.FAIL
    assert "McNemar mid-p 0.002, Holm-adjusted 0.002 <= alpha_RB_k 0.00608 at look 1" in (
        check.reason
    )
    assert "sequential McNemar p" in check.reason


def test_six_new_errors_spread_over_task_types_hold(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    clean = {"n": 100, "base_error": 0.0, "cand_error": 0.0}
    scores = _broken(simulate({"a": clean, "b": clean}), {5, 40, 77, 120, 150, 199})
    v = run_gate(scores, coverage_for)
    # Three harm tests (pooled, a, b): Holm lifts the pooled 0.0078 to 0.023.
    assert v.decision == Decision.HOLD
    assert checks_of(v, POOLED, "error_rate") == CheckOutcome.INCONCLUSIVE


def test_too_few_pairs_in_a_blocking_task_type_holds(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": {"n": 1500}, "rare": {"n": 120}})  # 7% share
    v = run_gate(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.HOLD
    # First how many pairs PROMOTE needs (issue 29 item 6), then the open checks.
    assert v.reasons[0].startswith("PROMOTE needs about 1,019 pairs per task type (now 120")
    assert v.reasons[1].startswith("task type 'rare'")
    # The power calculation at the observed discordance asks for more than the floor of 50.
    # (Reasons order: data problems, then unmet margins, then "too few pairs".)
    [few] = [r for r in v.reasons if r.startswith("task type 'rare', error_rate")]
    assert "too few pairs: 120 < min pairs" in few
    assert "(power 80% at the observed discordance" in few
    assert all("'rare'" in r for r in v.reasons[1:-2])
    assert v.reasons[-2].startswith("coverage:")  # what was evaluated, then the context
    assert v.reasons[-1].startswith("sequential:")


def test_small_task_type_does_not_block(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    specs = {**AA, "tiny": {"n": 20}}  # 20 / 820 < 5%
    scores = simulate(specs)
    v = run_gate(scores, coverage_for, judgements=ties(scores))
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
        captured=600, replayed=300, paired=300, errored=150, warmup=0, skipped=300, share=0.5
    )
    v = run_gate(scores, lambda n: coverage, coverage=coverage)
    assert v.decision == Decision.ROLLBACK
    assert "significant harm" in v.reasons[0]
    assert any("invalid run" in r for r in v.reasons)
    # Errored replays are counted, never silently dropped.
    assert "counted, not dropped: 150 errored and 0 warm-up replays, 300 skipped" in (v.reasons[-1])


NO_CHANGE = parse_policy({"change": {"mode": "no_change"}})
"""change.mode no_change: the similarity check is a guardrail (a change fails it)."""


def test_similarity_beyond_the_limit_rolls_back_in_no_change_mode(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = simulate({"chat": {"n": 300, "similarity_mean": 0.4}})
    v = run_gate(scores, coverage_for, NO_CHANGE)
    assert v.decision == Decision.ROLLBACK
    assert checks_of(v, "chat", "similarity") == CheckOutcome.FAIL
    assert "diverge more than allowed" in v.reasons[0]
    # The same answers in change.mode judge (the default): a change is not a harm. The
    # similarity check reports the changed share and never fails; the direction is for
    # the net-harm check, which asks for judgements.
    v = run_gate(scores, coverage_for)
    assert v.decision == Decision.HOLD
    [similarity] = [c for c in v.checks if c.task_type == "chat" and c.metric == "similarity"]
    assert similarity.outcome == CheckOutcome.INCONCLUSIVE
    assert similarity.reason.startswith("changed beyond the noise: ")
    assert "report only (change.mode judge)" in similarity.reason
    assert "answers changed beyond the noise" in similarity.reason
    assert not any(", similarity:" in r for r in v.reasons)
    assert v.reasons[0].startswith("pooled, net_harm: judge 30 more changed pairs")


def test_live_baseline_latency_is_report_only(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {"n": 300, "latency_source": "live"}}), coverage_for)
    latency = [c for c in v.checks if c.metric.startswith("latency_")]
    assert latency
    assert all(LATENCY_NOT_CO_TIMED in c.reason for c in latency)
    assert any(LATENCY_NOT_CO_TIMED in r for r in v.reasons)


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
        captured=3200,
        replayed=3200,
        paired=3000,
        errored=0,
        warmup=0,
        skipped=0,
        share=0.9375,
        per_task_type={"chat": 1500, "extract": 1500, "code": 200},
    )
    v = run_gate(scores, lambda n: coverage, coverage=coverage)
    assert v.decision == Decision.HOLD
    # Validity first: the task type with no replays, and the task mix it distorts.
    assert v.reasons[0].startswith(
        "invalid run: task type 'code' has replay coverage 0.0% (0 paired of 200 captured)"
    )
    assert any("task mix differs" in r and "task type 'code'" in r for r in v.reasons)
    # Its checks cannot judge for want of pairs: one line, after the quality signals.
    [empty] = [r for r in v.reasons if r.startswith("no pairs to judge in task type 'code': ")]
    assert "no pairs: infra_error_rate, error_rate" in empty


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


# ------------------------------------------------------------ infrastructure errors


def _candidate_failed(score: PairScore, *, infra: bool) -> PairScore:
    """The candidate side of ``score`` errored: no answer, no latency, no similarity."""
    return score.model_copy(
        update={
            "candidate_error": True,
            "candidate_infra_error": infra,
            "similarity": None,
            "e2e_ms": score.e2e_ms.model_copy(update={"candidate": None}),
            "ttft_ms": score.ttft_ms.model_copy(update={"candidate": None}),
        }
    )


def _quality_checks(v: Verdict) -> list[Check]:
    return [c for c in v.checks if c.metric != "infra_error_rate"]


def test_unreachable_candidate_holds_naming_infrastructure(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # Every candidate request failed to connect: nothing says anything about the model.
    v = run_gate(simulate({"chat": {"n": 300, "cand_infra": 1.0}}), coverage_for)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("infrastructure: the candidate's serving infrastructure failed")
    assert "HOLD, never ROLLBACK" in v.reasons[0]
    assert "quality could not be judged" in v.reasons[0]
    infra = [c for c in v.checks if c.metric == "infra_error_rate"]
    assert {c.task_type for c in infra} == {POOLED, "chat"}
    assert all(c.outcome == CheckOutcome.FAIL and not c.critical for c in infra)
    assert all("serving infrastructure failed" in c.reason for c in infra)
    # Every quality check saw no pairs and says why.
    for check in _quality_checks(v):
        assert check.outcome == CheckOutcome.INCONCLUSIVE, check
        assert "300 pairs with an infrastructure error" in check.reason or (
            "300 with an infrastructure error" in check.reason
        ), check.reason
    [error_rate] = [c for c in v.checks if c.task_type == POOLED and c.metric == "error_rate"]
    assert error_rate.n == 0


@pytest.mark.parametrize("rate", [0.2, 0.3])
def test_partial_infrastructure_errors_hold_never_roll_back(
    simulate: Simulate, coverage_for: CoverageFor, rate: float
) -> None:
    # 20% HTTP 500s or 30% HTML 502 pages from the candidate's proxy.
    v = run_gate(simulate({"chat": {"n": 400, "cand_infra": rate}}), coverage_for)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("infrastructure:")
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.FAIL
    assert checks_of(v, POOLED, "error_rate") != CheckOutcome.FAIL
    frame = pairs_frame(simulate({"chat": {"n": 400, "cand_infra": rate}}), GatePolicy())
    n_infra = int(frame["candidate_infra_error"].sum())
    assert not frame["candidate_fail"][frame["candidate_infra_error"]].any()
    [error_rate] = [c for c in v.checks if c.task_type == "chat" and c.metric == "error_rate"]
    assert error_rate.n == 400 - n_infra  # the infrastructure pairs are left out ...
    assert f"{n_infra} pairs with an infrastructure error" in error_rate.reason  # ... and counted
    [similarity] = [c for c in v.checks if c.task_type == "chat" and c.metric == "similarity"]
    assert f"{n_infra} pairs with an infrastructure error" in similarity.reason
    [p50] = [c for c in v.checks if c.task_type == "chat" and c.metric == "latency_e2e_ms_p50"]
    assert f"{n_infra} with an infrastructure error" in p50.reason


@pytest.mark.parametrize("infra", [True, False])
@pytest.mark.parametrize("count", [6, 8])
def test_new_errors_in_200_never_promote(
    simulate: Simulate, coverage_for: CoverageFor, infra: bool, count: int
) -> None:
    scores = simulate({"chat": {"n": 200, "base_error": 0.0, "cand_error": 0.0}})
    broken = set(range(5, 200, 200 // count))
    assert len(broken) == count
    scores = [_candidate_failed(s, infra=infra) if i in broken else s for i, s in enumerate(scores)]
    v = run_gate(scores, coverage_for)
    assert v.decision != Decision.PROMOTE
    metric = "infra_error_rate" if infra else "error_rate"
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == metric]
    assert check.estimate == pytest.approx(count / 200)
    if count == 6:
        # mid-p 0.0078 > alpha_RB_k 0.00608 at look 1: not yet significant, never a pass.
        assert v.decision == Decision.HOLD
        assert check.outcome == CheckOutcome.INCONCLUSIVE
        assert "McNemar mid-p 0.0078" in check.reason
    elif infra:
        # Timeouts: the infrastructure check fails (McNemar mid-p 0.002), which holds.
        assert v.decision == Decision.HOLD
        assert v.reasons[0].startswith("infrastructure:")
        assert check.outcome == CheckOutcome.FAIL
        assert checks_of(v, "chat", "error_rate") != CheckOutcome.FAIL
    else:
        # HTTP 400 rejections (a smaller context window): the model's failure, rolled back.
        assert v.decision == Decision.ROLLBACK
        assert check.outcome == CheckOutcome.FAIL
        assert checks_of(v, "chat", "infra_error_rate") != CheckOutcome.FAIL


def test_empty_answers_rising_to_ten_percent_roll_back(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    specs = {"chat": {"n": 300, "base_error": 0.0, "cand_error": 0.0, "cand_empty": 0.1}}
    v = run_gate(simulate(specs), coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert v.reasons[0].startswith("pooled, error_rate: significant harm")
    assert checks_of(v, "chat", "error_rate") == CheckOutcome.FAIL
    assert checks_of(v, "chat", "infra_error_rate") != CheckOutcome.FAIL


def test_critical_harm_on_answered_pairs_still_rolls_back_beside_infrastructure(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 30% timeouts and, on the pairs that were answered, 15% empty answers: the empty
    # answers are the model's, judged on pairs both sides answered.
    specs = {"chat": {"n": 400, "base_error": 0.0, "cand_infra": 0.3, "cand_empty": 0.15}}
    v = run_gate(simulate(specs), coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert "error_rate: significant harm" in v.reasons[0]
    assert any(r.startswith("infrastructure:") for r in v.reasons)
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.FAIL


def test_other_failures_beside_an_infrastructure_failure_hold(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # A slow candidate on a failing server: latency measured there is not the model's.
    specs = {"chat": {"n": 600, "cand_infra": 0.3, "cand_latency_factor": 2.0}}
    v = run_gate(simulate(specs), coverage_for)
    assert checks_of(v, POOLED, "latency_e2e_ms_p50") == CheckOutcome.FAIL
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("infrastructure:")
    assert any("latency_e2e_ms_p50: slower than allowed" in r for r in v.reasons)
    # without the infrastructure failure the same latency rolls back
    v = run_gate(simulate({"chat": {"n": 600, "cand_latency_factor": 2.0}}), coverage_for)
    assert v.decision == Decision.ROLLBACK


def test_baseline_infrastructure_errors_do_not_count_against_the_candidate(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    # Live requests that timed out upstream: those pairs are left out, the candidate passes.
    scores = simulate({"chat": {"n": 2500, "base_infra": 0.04}})
    v = run_gate(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.PROMOTE, v.reasons
    [infra] = [c for c in v.checks if c.task_type == POOLED and c.metric == "infra_error_rate"]
    assert infra.outcome == CheckOutcome.PASS
    assert infra.estimate is not None
    assert infra.estimate < 0


def test_infra_error_rate_margin_is_its_own(simulate: Simulate, coverage_for: CoverageFor) -> None:
    # 1.5% timeouts on both sides, 2000 pairs: non-inferior at a 5-point infrastructure
    # margin, not shown at a 0.5-point one; error_rate's margin does not move it.
    spec = {
        "n": 2000,
        "base_error": 0.0,
        "cand_error": 0.0,
        "base_infra": 0.015,
        "cand_infra": 0.015,
    }
    scores = simulate({"chat": spec})
    loose = parse_policy({"infra_error_rate": {"margin": 0.05}, "error_rate": {"margin": 0.005}})
    strict = parse_policy({"infra_error_rate": {"margin": 0.005}, "error_rate": {"margin": 0.05}})
    v = run_gate(scores, coverage_for, loose)
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.PASS
    [check] = [c for c in v.checks if c.task_type == POOLED and c.metric == "infra_error_rate"]
    assert check.margin == 0.05
    v = run_gate(scores, coverage_for, strict)
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.INCONCLUSIVE
    assert v.decision == Decision.HOLD
    # At a 0.5-point margin the power calculation asks for far more than 2000 pairs.
    assert any("infra_error_rate: too few pairs: 2000 < min pairs" in r for r in v.reasons)


def test_significant_infrastructure_harm_fails_whatever_the_margin(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 1.5% candidate timeouts against none: within a 5-point margin, but a significant
    # increase (McNemar) — the candidate's serving is worse, so HOLD.
    spec = {"n": 2000, "base_error": 0.0, "cand_error": 0.0, "cand_infra": 0.015}
    policy = parse_policy({"infra_error_rate": {"margin": 0.05}})
    v = run_gate(simulate({"chat": spec}), coverage_for, policy)
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.FAIL
    assert v.decision == Decision.HOLD


def test_missing_infrastructure_flags_hold(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate(AA), policy)
    frame["candidate_infra_error"] = frame["candidate_infra_error"].astype(object)
    frame.loc[3, "candidate_infra_error"] = np.nan
    v = evaluate_gate(frame, policy, run_id="r", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    assert checks_of(v, POOLED, "infra_error_rate") == CheckOutcome.INCONCLUSIVE
    assert any("infra_error_rate" in r and "missing (NaN)" in r for r in v.reasons)


# ------------------------------------------------------------------ paired latency


def test_latency_is_tested_paired(simulate: Simulate) -> None:
    """Candidate = baseline × 1.3 ± 5%, heavy-tailed baseline (σ = 1), n = 200: FAIL at 1.2."""
    policy = parse_policy({"latency": {"p50_ratio_max": 1.2, "metrics": ["e2e_ms"]}})
    frame = pairs_frame(simulate({"chat": {"n": 200, "base_error": 0, "cand_error": 0}}), policy)
    rng = np.random.default_rng(11)
    base = rng.lognormal(np.log(800.0), 1.0, len(frame))
    frame["baseline_e2e_ms"] = base
    frame["candidate_e2e_ms"] = base * 1.3 * rng.uniform(0.95, 1.05, len(frame))
    [p50, _] = latency_checks(
        PairArrays.from_frame(frame),
        task_type="chat",
        block=policy.latency,
        min_pairs=50,
        levels=look_levels(policy, 1),
    )
    assert p50.outcome == CheckOutcome.FAIL
    assert p50.ci_low is not None
    assert p50.ci_low > 1.2
    assert "paired CI" in p50.reason
    assert "resampling-free, alpha_k 0.0152 per side at look 1" in p50.reason


def test_identical_ttft_passes_with_a_point_interval(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # Candidate TTFT equals baseline TTFT pair by pair: every replicate ratio is exactly 1.
    v = run_gate(simulate({"chat": {"n": 300, "latency_noise": 0.0}}), coverage_for)
    for metric in ("latency_ttft_ms_p50", "latency_ttft_ms_p95"):
        [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == metric]
        assert check.outcome == CheckOutcome.PASS
        assert (check.ci_low, check.estimate, check.ci_high) == (1.0, 1.0, 1.0)
