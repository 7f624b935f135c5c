"""Combining the two orders: agreement decides, disagreement is a tie, failure is kept."""

from __future__ import annotations

import pytest

from shadoweval.judge import combine_votes
from shadoweval.records import JudgeVote, QualityOutcome


def vote(order: str, preferred: str | None, error: str | None = None) -> JudgeVote:
    return JudgeVote.model_validate(
        {"order": order, "preferred": preferred, "rationale": f"{order} says {preferred}",
         "error": error}
    )  # fmt: skip


@pytest.mark.parametrize(
    ("first", "second", "outcome", "bias"),
    [
        ("candidate", "candidate", QualityOutcome.CANDIDATE_BETTER, False),
        ("baseline", "baseline", QualityOutcome.CANDIDATE_WORSE, False),
        ("tie", "tie", QualityOutcome.TIE, False),
        ("candidate", "baseline", QualityOutcome.TIE, True),  # always-A judge... reversed
        ("baseline", "candidate", QualityOutcome.TIE, True),  # an always-A judge
        ("candidate", "tie", QualityOutcome.TIE, True),
        ("tie", "baseline", QualityOutcome.TIE, True),
    ],
)
def test_outcome_table(first: str, second: str, outcome: QualityOutcome, bias: bool) -> None:
    result, rationale, error = combine_votes(
        vote("baseline_first", first), vote("candidate_first", second)
    )
    assert result is outcome
    assert error is None
    assert rationale.startswith("orders disagree (position bias)") is bias
    assert f"[baseline shown first] baseline_first says {first}" in rationale
    assert f"[candidate shown first] candidate_first says {second}" in rationale


def test_a_failed_vote_fails_the_pair_and_names_the_order() -> None:
    result, _, error = combine_votes(
        vote("baseline_first", "candidate"), vote("candidate_first", None, "timeout: 5 s")
    )
    assert result is None
    assert error == "candidate_first vote failed: timeout: 5 s"


def test_votes_must_come_in_order() -> None:
    with pytest.raises(ValueError, match="baseline_first vote then the candidate_first"):
        combine_votes(vote("candidate_first", "tie"), vote("baseline_first", "tie"))
