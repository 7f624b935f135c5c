"""Latency under equal conditions (issue 29 item 2): the gate's latency checks are gated
only on pairs co-timed with the baseline replica; against the live or recorded baseline
they are report-only (never ROLLBACK, never blocking PROMOTE), and the reason says why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from shadoweval.records import (
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    PairJudgement,
    PairScore,
    Verdict,
)
from shadoweval.stats.checks import LATENCY_NOT_CO_TIMED, LATENCY_REPORT_ONLY
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Ties = Callable[[list[PairScore]], dict[str, PairJudgement]]
E2E_ONLY = parse_policy({"latency": {"metrics": ["e2e_ms"]}})
CLEAN = {"n": 300, "base_error": 0.0, "cand_error": 0.0}
SLOW = {**CLEAN, "cand_latency_factor": 3.0}


def run_gate(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    policy: GatePolicy = E2E_ONLY,
    judgements: Mapping[str, PairJudgement] | None = None,
) -> Verdict:
    frame = pairs_frame(scores, policy, judgements)
    return evaluate_gate(
        frame,
        policy,
        run_id="run-co-timed",
        coverage=coverage_for(len(frame)),
        decided_at=datetime(2024, 6, 2, tzinfo=UTC),
    )


def p50(verdict: Verdict, task_type: str = "chat") -> Check:
    [found] = [
        c for c in verdict.checks if c.task_type == task_type and c.metric == "latency_e2e_ms_p50"
    ]
    return found


def renamed(scores: list[PairScore], prefix: str) -> list[PairScore]:
    return [s.model_copy(update={"exchange_id": f"{prefix}{i}"}) for i, s in enumerate(scores)]


def test_co_timed_pairs_are_the_gated_control(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    co_timed = simulate({"chat": {**CLEAN, "latency_source": "co_timed"}}, seed=1)
    repeat = renamed(
        simulate({"chat": {**CLEAN, "latency_source": "baseline_repeat"}}, seed=2), "r"
    )
    live = renamed(simulate({"chat": {**CLEAN, "latency_source": "live"}}, seed=3), "l")
    check = p50(run_gate(co_timed + repeat + live, coverage_for))
    assert check.n == 300
    assert check.outcome == CheckOutcome.PASS
    assert "co-timed with the baseline replica" in check.reason
    assert "600 not co-timed with the baseline replica (co-timed pairs used)" in check.reason
    assert LATENCY_REPORT_ONLY not in check.reason


def test_a_slower_candidate_co_timed_with_the_replica_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {**SLOW, "latency_source": "co_timed"}}), coverage_for)
    assert p50(v).outcome == CheckOutcome.FAIL
    assert v.decision == Decision.ROLLBACK


def test_against_the_live_or_recorded_baseline_latency_is_report_only(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    for source in ("live", "recorded"):
        scores = simulate({"chat": {**SLOW, "n": 1500, "latency_source": source}})
        v = run_gate(scores, coverage_for, judgements=ties(scores))
        check = p50(v)
        # Three times slower, wholly beyond the limit: said, but never acted on.
        assert check.outcome == CheckOutcome.INCONCLUSIVE, source
        assert check.reason.startswith(LATENCY_REPORT_ONLY), check.reason
        assert "slower than allowed" in check.reason
        assert (
            "latency compared with the live/recorded baseline, not timed under the same "
            "conditions as the candidate: report only; add a baseline replica "
            "(--baseline-repeat-url) for a gated latency check"
        ) in check.reason
        assert v.decision == Decision.PROMOTE, v.reasons
        assert any(LATENCY_REPORT_ONLY in r and "slower than allowed" in r for r in v.reasons)


def test_replica_replays_not_sent_together_are_report_only_too(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run_gate(simulate({"chat": {**SLOW, "latency_source": "baseline_repeat"}}), coverage_for)
    check = p50(v)
    assert check.outcome == CheckOutcome.INCONCLUSIVE
    assert LATENCY_NOT_CO_TIMED in check.reason
    assert v.decision != Decision.ROLLBACK


def test_too_few_co_timed_pairs_leave_latency_report_only(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    co_timed = simulate({"chat": {**SLOW, "n": 20, "latency_source": "co_timed"}}, seed=1)
    live = renamed(simulate({"chat": {**SLOW, "latency_source": "live"}}, seed=2), "l")
    v = run_gate(co_timed + live, coverage_for)
    check = p50(v)
    assert check.outcome == CheckOutcome.INCONCLUSIVE
    assert "only 20 pairs co-timed with the baseline replica (< min_pairs 50)" in check.reason
    assert "raise --baseline-repeat-share" in check.reason
    assert check.n == 320
    assert v.decision != Decision.ROLLBACK


def test_a_unit_of_co_timed_pairs_only_is_gated_however_small(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 40 pairs (< min_pairs 50), every one co-timed: no other control to fall back on.
    v = run_gate(simulate({"chat": {**SLOW, "n": 40, "latency_source": "co_timed"}}), coverage_for)
    check = p50(v)
    assert check.outcome == CheckOutcome.FAIL
    assert LATENCY_REPORT_ONLY not in check.reason
