"""A request too long for both sides is the traffic's, not the candidate's context (issue 29).

The real llama.cpp run (docs/real-data.md) sends one prompt of 2,261 tokens against an
``n_ctx`` of 2,048 on the live server and on the candidate alike: both fail it. The verdict
said "raise the candidate's context length" for it; the line now says the baseline failed
the same request, and only a failure the baseline does not share asks the candidate to
change.
"""

from __future__ import annotations

import pandas as pd

from shadoweval.records import CONTEXT_LENGTH_WORDS
from shadoweval.stats.gate.causes import failure_cause_lines
from shadoweval.stats.policy import GatePolicy
from tests.stats.conftest import full_coverage


def pairs(context: list[bool], baseline_fail: list[bool]) -> pd.DataFrame:
    n = len(context)
    return pd.DataFrame(
        {
            "candidate_context_length": context,
            "baseline_fail": baseline_fail,
            "baseline_infra_error": [False] * n,
            "candidate_interrupted": [False] * n,
            "baseline_interrupted": [False] * n,
        }
    )


def line(frame: pd.DataFrame) -> str:
    coverage = full_coverage(len(frame))
    [found] = [
        x
        for x in failure_cause_lines(frame, GatePolicy(), coverage)
        if x.startswith(CONTEXT_LENGTH_WORDS)
    ]
    return found


def test_a_request_too_long_for_both_sides_asks_nothing_of_the_candidate() -> None:
    said = line(pairs([True, False, False], [True, False, False]))
    assert "1 of 3 candidate requests failed at the candidate's context window" in said
    assert "1 of them failed on the baseline too" in said
    assert "nothing to change on the candidate" in said
    assert "raise the candidate's context length" not in said


def test_a_failure_only_the_candidate_has_asks_to_raise_its_context() -> None:
    said = line(pairs([True, True, True, False], [True, False, False, False]))
    assert "3 of 4 candidate requests" in said
    assert "1 of them failed on the baseline too" in said
    assert "raise the candidate's context length (e.g. llama.cpp n_ctx)" in said
    said = line(pairs([True, False], [False, False]))
    assert "failed on the baseline too" not in said
