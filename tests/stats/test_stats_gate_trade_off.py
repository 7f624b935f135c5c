"""Cost against quality (issue 29, item 5): a cost guardrail alone never rolls back a
candidate whose quality is significantly better, unless the policy says cost decides."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from shadoweval.errors import ConfigError
from shadoweval.records import (
    CheckOutcome,
    Coverage,
    Decision,
    PairJudgement,
    PairScore,
    QualityOutcome,
    Verdict,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy, parse_policy, policy_hash

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Judge = Callable[..., dict[str, PairJudgement]]
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)
LONGER = {"n": 300, "cand_token_factor": 1.5, "similarity_mean": 0.8}
"""Every answer changed (D ≈ 0.2 > 0.1) and 50% longer: output tokens ×1.5 > 1.2."""


def _gate(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    judgements: dict[str, PairJudgement] | None,
    policy: GatePolicy | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    frame = pairs_frame(scores, policy, judgements)
    return evaluate_gate(
        frame, policy, run_id="run-cost", coverage=coverage_for(len(frame)), decided_at=DECIDED
    )


def _check(v: Verdict, metric: str, task_type: str = "chat") -> CheckOutcome:
    [check] = [c for c in v.checks if c.metric == metric and c.task_type == task_type]
    return check.outcome


def test_better_but_longer_holds_and_states_the_trade_off(
    simulate: Simulate, coverage_for: CoverageFor, ties: Judge
) -> None:
    scores = simulate({"chat": LONGER, "qa": LONGER})
    v = _gate(scores, coverage_for, ties(scores, QualityOutcome.CANDIDATE_BETTER))
    assert _check(v, "output_tokens") == CheckOutcome.FAIL
    assert _check(v, "net_harm") == CheckOutcome.PASS
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith(
        "trade-off: quality better in 2 task types (`chat`, `qa`) (net harm significantly "
        "below 0), output_tokens x1.5"
    )
    assert "cost.decides false" in v.reasons[0]
    assert any(r.startswith("pooled, output_tokens:") for r in v.reasons[1:])


def test_cost_decides_when_the_policy_says_so(
    simulate: Simulate, coverage_for: CoverageFor, ties: Judge
) -> None:
    scores = simulate({"chat": LONGER})
    policy = parse_policy({"cost": {"decides": True}})
    v = _gate(scores, coverage_for, ties(scores, QualityOutcome.CANDIDATE_BETTER), policy)
    assert v.decision == Decision.ROLLBACK
    assert not any(r.startswith("trade-off") for r in v.reasons)


@pytest.mark.parametrize("outcome", [None, QualityOutcome.TIE])
def test_longer_without_a_quality_gain_still_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor, ties: Judge, outcome: QualityOutcome | None
) -> None:
    scores = simulate({"chat": LONGER})
    judgements = None if outcome is None else ties(scores, outcome)
    v = _gate(scores, coverage_for, judgements)
    assert v.decision == Decision.ROLLBACK
    assert "output_tokens" in v.reasons[0]


def test_cost_policy_is_validated_and_keeps_old_hashes() -> None:
    assert policy_hash(parse_policy({"cost": {"decides": False}})) == policy_hash(GatePolicy())
    assert policy_hash(parse_policy({"cost": {"decides": True}})) != policy_hash(GatePolicy())
    with pytest.raises(ConfigError, match=r"cost\.decides = 'yes': must be true or false"):
        parse_policy({"cost": {"decides": "yes"}})
    with pytest.raises(ConfigError, match=r"cost\.decide = True: unknown field"):
        parse_policy({"cost": {"decide": True}})
