"""Cause attribution (issue 29 item 9): the evidence of the tokenizer, the chat template,
the token budget and the sampling defaults, read off the gate's pairs table."""

from __future__ import annotations

import pytest

from shadoweval.errors import ConfigError
from shadoweval.pair_facts import PairFacts
from shadoweval.records import POOLED, FinishReason, HarmKind, PairScore
from shadoweval.stats.checks import PairArrays
from shadoweval.stats.frame import pairs_frame, pairs_frame_from_facts
from shadoweval.stats.gate.attribution import (
    SAMPLING,
    TEMPLATE,
    TOKEN_BUDGET,
    UnitCauses,
    attribute_causes,
)
from shadoweval.stats.policy import CausesPolicy, GatePolicy, parse_policy, policy_hash
from tests.stats.test_change import score


def _causes(scores: list[PairScore], policy: CausesPolicy | None = None) -> dict[str, UnitCauses]:
    frame = pairs_frame(scores, GatePolicy())
    # The packed facts give the same cause columns as the records.
    from_facts = pairs_frame_from_facts(PairFacts.of_scores(scores), GatePolicy())
    for column in ("prompt_token_ratio", "baseline_finish_length", "candidate_finish_length"):
        assert from_facts[column].equals(frame[column]), column
    found = attribute_causes([(POOLED, PairArrays.from_frame(frame))], policy or CausesPolicy())
    return found


def test_same_weights_other_sampling_names_the_sampling_defaults() -> None:
    greedy = [score(i, similarity=1.0, sampled=False) for i in range(20)]
    sampled = [score(100 + i, similarity=0.7, sampled=True) for i in range(20)]
    [found] = _causes(greedy + sampled).values()
    [cause] = found.causes
    assert cause.name == SAMPLING
    assert cause.evidence == (
        "answers identical to the baseline's on 20 of 20 temperature-0 requests but on 0 of "
        "20 sampled ones",
    )
    # Different on temperature 0 as well: the weights, not the sampling.
    other = [score(i, similarity=0.7, sampled=False) for i in range(20)]
    assert _causes(other + sampled) == {}


def test_answers_cut_by_the_token_budget_name_it() -> None:
    cut = [score(i, similarity=0.8, candidate_finish_reason=FinishReason.LENGTH) for i in range(6)]
    rest = [score(10 + i, similarity=0.99) for i in range(14)]
    [found] = _causes(cut + rest).values()
    assert found.likely() == (
        "likely the token budget (max_tokens or the context length) (finish_reason length on "
        "6 of 20 answers vs 0 of the baseline's)"
    )
    # The baseline cut as often: no shift.
    both = [
        score(
            i,
            similarity=0.8,
            candidate_finish_reason=FinishReason.LENGTH,
            baseline_finish_reason=FinishReason.LENGTH,
        )
        for i in range(6)
    ]
    assert _causes(both + rest) == {}


def test_marker_leaks_and_prompt_tokens_name_the_template() -> None:
    leaks = [
        score(
            i, similarity=0.5, prompt_token_ratio=1.61, candidate_harms=(HarmKind.TEMPLATE_MARKERS,)
        )
        for i in range(4)
    ]
    rest = [score(10 + i, similarity=0.9, prompt_token_ratio=1.61) for i in range(16)]
    [found] = _causes(leaks + rest).values()
    [cause] = found.causes
    assert cause.name == TEMPLATE
    assert cause.describe() == (
        "the chat template (prompt tokens ×1.61 on identical requests, 4 marker leaks)"
    )
    # Too few pairs with a ratio, or a ratio within the limit: nothing.
    assert _causes(rest[:9]) == {}
    assert _causes([score(i, similarity=0.9, prompt_token_ratio=1.1) for i in range(20)]) == {}
    assert _causes(leaks + rest, CausesPolicy(enabled=False)) == {}


def test_the_causes_block_is_validated_and_left_out_of_the_hash_at_its_defaults() -> None:
    assert policy_hash(parse_policy({"causes": {}})) == policy_hash(GatePolicy())
    assert policy_hash(parse_policy({"causes": {"min_pairs": 20}})) != policy_hash(GatePolicy())
    with pytest.raises(ConfigError, match=r"causes\.prompt_token_ratio_max = 0\.9"):
        parse_policy({"causes": {"prompt_token_ratio_max": 0.9}})
    with pytest.raises(ConfigError, match="must be below greedy_identical_share"):
        parse_policy({"causes": {"sampled_identical_share_max": 0.95}})
    assert TOKEN_BUDGET.startswith("the token budget")
