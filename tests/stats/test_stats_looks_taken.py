"""Alpha is spent at the looks the gate actually took (issue 29, item 5).

A batch imported at once and gated once is one look: it gets the α its checkpoint's
cumulative spending allots, not the sliver of "look 4" of a stream polled at every
checkpoint; a polled stream still pays for every look it took. The looks taken are kept in
the verdict, so the next poll (and anyone re-computing the levels) knows them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from shadoweval.records import Coverage, Decision, PairScore, Verdict
from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.looks import look_levels
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)
SIX_OVER_PI2 = 6 / math.pi**2


def _cumulative(alpha: float, k: int) -> float:
    """The uncapped cumulative spending at checkpoint k: α·(6/π²)·Σ_{i≤k} 1/i²."""
    return alpha * SIX_OVER_PI2 * sum(1 / i**2 for i in range(1, k + 1))


def test_first_look_at_a_late_checkpoint_gets_the_cumulative_level() -> None:
    policy = GatePolicy()
    once = look_levels(policy, 4, previous_look=0)
    assert once.alpha_k == pytest.approx(_cumulative(0.025, 4))  # 0.855·α
    assert once.alpha_harm_k == pytest.approx(_cumulative(0.01, 4))
    assert once.alpha_mix_k == pytest.approx(_cumulative(0.001, 4))
    assert once.skipped
    assert once.previous_n == 0
    # After a look at 200 pairs, the look at 1,600 spends checkpoints 2..4.
    after_first = look_levels(policy, 4, previous_look=1)
    assert after_first.alpha_k == pytest.approx(_cumulative(0.025, 4) - _cumulative(0.025, 1))
    assert after_first.previous_n == 200
    # Every checkpoint looked at (the default): the per-checkpoint level as before.
    every = look_levels(policy, 4)
    assert every.alpha_k == pytest.approx(0.025 * SIX_OVER_PI2 / 16)
    assert not every.skipped
    with pytest.raises(ValueError, match="previous_look"):
        look_levels(policy, 4, previous_look=4)


def test_capped_batch_at_the_cap_gets_the_whole_level() -> None:
    policy = parse_policy({"sequential": {"n_max": 1700}})
    levels = look_levels(policy, 5, previous_look=0)  # 200, 400, 800, 1600, 1700
    assert levels.final
    assert levels.n_k == 1700
    assert levels.alpha_k == pytest.approx(0.025)
    assert levels.alpha_harm_k == pytest.approx(0.01)
    # The looks taken telescope: however they fall, their levels sum to α(t_last).
    taken = [(0, 2), (2, 3), (3, 5)]
    total = sum(look_levels(policy, k, previous_look=j).alpha_k for j, k in taken)
    assert total == pytest.approx(0.025)


def _eight_new_errors(simulate: Simulate, n: int, first_broken: int) -> list[PairScore]:
    scores = simulate({"chat": {"n": n, "base_error": 0.0, "cand_error": 0.0}})
    broken = {first_broken + 150 * i for i in range(8)}
    return [
        s.model_copy(update={"candidate_error": True, "similarity": None}) if i in broken else s
        for i, s in enumerate(scores)
    ]


def _poll(scores: list[PairScore], n: int, previous: Verdict | None) -> Verdict:
    policy = GatePolicy()
    frame = pairs_frame(scores[:n], policy)
    coverage = Coverage(captured=n, replayed=n, paired=n, errored=0, warmup=0, skipped=0, share=1.0)
    return evaluate_poll(
        frame, policy, run_id="run-looks", coverage=coverage, decided_at=DECIDED, previous=previous
    )


def _error_check(v: Verdict) -> str:
    [check] = [c for c in v.checks if c.task_type == "chat" and c.metric == "error_rate"]
    return check.reason


def test_a_batch_gated_once_is_judged_at_the_full_level(simulate: Simulate) -> None:
    # 8 pairs failing only on the candidate among 1,600: McNemar mid-p 0.5**8/2 = 0.00195.
    # Gated once, the look at checkpoint 4 spends 0.855·alpha_harm = 0.00865: ROLLBACK.
    # (Before: "look 4" at 0.038·alpha_harm = 0.00038, a HOLD although the gate looked once.)
    scores = _eight_new_errors(simulate, 1700, 210)
    v = _poll(scores, 1700, None)
    assert v.look == 4
    assert v.looks_taken == (4,)
    assert v.decision == Decision.ROLLBACK
    assert "<= alpha_RB_k 0.00865 at look 4" in _error_check(v)
    assert "alpha spent since 0 pairs (the run's first look)" in v.reasons[-1]


def test_a_stream_polled_at_every_checkpoint_pays_for_its_looks(simulate: Simulate) -> None:
    scores = _eight_new_errors(simulate, 1700, 210)
    previous: Verdict | None = None
    for n in (200, 400, 800, 1700):
        previous = _poll(scores, n, previous)
    assert previous is not None
    assert previous.looks_taken == (1, 2, 3, 4)
    # The fourth look of a polled stream is tested at 0.038·alpha_harm, as before.
    assert previous.decision == Decision.HOLD
    assert "> alpha_RB_k 0.00038" in _error_check(previous)
    assert "alpha spent since" not in previous.reasons[-1]


def test_checkpoints_not_looked_at_leave_their_level_to_the_next_look(
    simulate: Simulate,
) -> None:
    scores = _eight_new_errors(simulate, 1700, 210)
    first = _poll(scores, 250, None)  # one look at 200 pairs
    assert first.looks_taken == (1,)
    second = _poll(scores, 1700, first)
    assert second.looks_taken == (1, 4)
    # alpha_RB spent: (6/π²)·(1/4 + 1/9 + 1/16)·0.01 = 0.00258 ≥ mid-p 0.00195.
    assert second.decision == Decision.ROLLBACK
    assert "alpha_RB_k 0.00258 at look 4" in _error_check(second)
    assert "alpha spent since the previous look taken, at 200 pairs" in second.reasons[-1]
    # A poll of the same checkpoint with the same judgements returns the stored verdict.
    assert _poll(scores, 1750, second) is second


def test_a_verdict_stored_before_looks_were_kept_counts_every_checkpoint(
    simulate: Simulate,
) -> None:
    scores = _eight_new_errors(simulate, 1700, 210)
    first = _poll(scores, 800, None)
    legacy = first.model_copy(update={"looks_taken": ()})
    assert legacy.looks_so_far() == (1, 2, 3)
    later = _poll(scores, 1700, legacy)
    assert later.looks_taken == (1, 2, 3, 4)
    assert "> alpha_RB_k 0.00038" in _error_check(later)


def test_looks_taken_is_checked(simulate: Simulate, coverage_for: CoverageFor) -> None:
    scores = simulate({"chat": {"n": 400}})
    frame = pairs_frame(scores, GatePolicy())
    for bad in ((1, 3), (2, 2), (), (0, 2)):
        with pytest.raises(InvalidDataError, match="looks_taken"):
            evaluate_gate(
                frame,
                GatePolicy(),
                run_id="r",
                coverage=coverage_for(400),
                look=2,
                looks_taken=bad,
            )
    v = evaluate_gate(
        frame, GatePolicy(), run_id="r", coverage=coverage_for(400), look=2, looks_taken=(2,)
    )
    assert v.looks_taken == (2,)
    assert any(
        c.statistic.endswith(
            f"look 2: alpha_k {_cumulative(0.025, 2):.3g}, alpha_RB_k {_cumulative(0.01, 2):.3g}"
        )
        for c in v.checks
    )
