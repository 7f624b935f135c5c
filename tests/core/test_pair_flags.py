"""Pair flags: stable bits, mask round trips, and each flag's rule on real PairScores."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from shadoweval.errors import InvalidDataError
from shadoweval.pair_flags import (
    PAIR_FLAG_BITS,
    PairFlag,
    flags_from_mask,
    flags_mask,
    format_ok,
    format_ok_pair,
    pair_flags,
)
from shadoweval.records import FinishReason, FormatFlags, PairScore, ToolCallFlags
from shadoweval.stats.frame import format_ok as gate_format_ok

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
PARSES = FormatFlags(strict=False, fence_stripped=True, extracted=True)
FAILS = FormatFlags(strict=False, fence_stripped=False, extracted=True)
SCHEMA_BROKEN = FormatFlags(strict=True, fence_stripped=True, extracted=True, schema_valid=False)


def score(**fields: object) -> PairScore:
    """A clean pair (similar, both answered, stop/stop) with ``fields`` changed."""
    base: dict[str, object] = {
        "run_id": "r",
        "exchange_id": "e",
        "task_type": "chat",
        "captured_at": T0,
        "similarity": 0.9,
        "baseline_finish_reason": FinishReason.STOP,
        "candidate_finish_reason": FinishReason.STOP,
    }
    base.update(fields)
    return PairScore.model_validate(base)


def test_bits_are_stable_powers_of_two() -> None:
    # Stored data depends on these numbers: changing one needs a migration.
    assert {flag.value: bit for flag, bit in PAIR_FLAG_BITS.items()} == {
        "candidate_error": 1,
        "baseline_error": 2,
        "candidate_infra_error": 4,
        "baseline_infra_error": 8,
        "candidate_empty": 16,
        "baseline_empty": 32,
        "format_regression": 64,
        "format_fixed": 128,
        "template_leak": 256,
        "finish_reason_changed": 512,
        "below_noise_floor": 1024,
        "no_similarity": 2048,
        "candidate_harm": 4096,
        "baseline_harm": 8192,
        "tool_changed": 16384,
        "cache_hit": 32768,
    }


def test_mask_round_trips_every_subset() -> None:
    members = list(PairFlag)
    for size in range(len(members) + 1):
        for subset in itertools.combinations(members, size):
            mask = flags_mask(subset)
            assert flags_from_mask(mask) == subset
    assert flags_mask([]) == 0
    assert flags_mask([PairFlag.TEMPLATE_LEAK, "template_leak"]) == 256


def test_unknown_flag_and_bad_mask_are_named() -> None:
    with pytest.raises(InvalidDataError, match="unknown pair flag 'leaky'"):
        flags_mask(["leaky"])
    with pytest.raises(InvalidDataError, match="65536"):
        flags_from_mask(65536)
    with pytest.raises(InvalidDataError, match="-1"):
        flags_from_mask(-1)


def test_clean_pair_has_no_flags() -> None:
    assert pair_flags(score()) == ()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"candidate_error": True, "similarity": None}, ("candidate_error", "no_similarity")),
        ({"baseline_error": True, "similarity": None}, ("baseline_error", "no_similarity")),
        (
            {
                "candidate_error": True,
                "candidate_infra_error": True,
                "similarity": None,
            },
            ("candidate_error", "candidate_infra_error", "no_similarity"),
        ),
        (
            {"baseline_error": True, "baseline_infra_error": True, "similarity": None},
            ("baseline_error", "baseline_infra_error", "no_similarity"),
        ),
        ({"candidate_empty": True, "similarity": 0.0}, ("candidate_empty",)),
        ({"baseline_empty": True, "similarity": 0.0}, ("baseline_empty",)),
        ({"template_leaks": ("<|im_start|>",)}, ("template_leak",)),
        ({"candidate_finish_reason": FinishReason.LENGTH}, ("finish_reason_changed",)),
        ({"noise_similarity": 0.95}, ("below_noise_floor",)),
        ({"noise_similarity": 0.9}, ()),  # equal is not below
        ({"noise_similarity": 0.5}, ()),
        ({"similarity": None}, ("no_similarity",)),
        ({"baseline_cache_hit": True}, ("cache_hit",)),
        ({"candidate_cache_hit": True}, ("cache_hit",)),
        ({"baseline_cache_hit": True, "candidate_cache_hit": True}, ("cache_hit",)),
    ],
)
def test_each_rule(fields: dict[str, object], expected: tuple[str, ...]) -> None:
    assert pair_flags(score(**fields)) == tuple(PairFlag(v) for v in expected)


def test_finish_reason_change_needs_both_sides_answered() -> None:
    errored = score(
        candidate_error=True,
        similarity=None,
        candidate_finish_reason=FinishReason.UNKNOWN,
    )
    assert PairFlag.FINISH_REASON_CHANGED not in pair_flags(errored)


def test_an_unknown_finish_reason_is_not_a_change() -> None:
    # An imported baseline records no finish reason: unknown -> stop is not a change.
    imported = score(baseline_finish_reason=FinishReason.UNKNOWN)
    assert PairFlag.FINISH_REASON_CHANGED not in pair_flags(imported)
    cut = score(candidate_finish_reason=FinishReason.UNKNOWN)
    assert PairFlag.FINISH_REASON_CHANGED not in pair_flags(cut)


def test_flags_come_in_enum_order() -> None:
    flags = pair_flags(
        score(
            similarity=None,
            candidate_error=True,
            baseline_empty=True,
            template_leaks=("[INST]",),
        )
    )
    assert flags == tuple(sorted(flags, key=list(PairFlag).index))
    assert flags == (
        PairFlag.CANDIDATE_ERROR,
        PairFlag.BASELINE_EMPTY,
        PairFlag.TEMPLATE_LEAK,
        PairFlag.NO_SIMILARITY,
    )


def test_format_regression_and_fix() -> None:
    regressed = score(format_expected=True, baseline_format=PARSES, candidate_format=FAILS)
    fixed = score(format_expected=True, baseline_format=FAILS, candidate_format=PARSES)
    both_fail = score(format_expected=True, baseline_format=FAILS, candidate_format=FAILS)
    assert pair_flags(regressed) == (PairFlag.FORMAT_REGRESSION,)
    assert pair_flags(fixed) == (PairFlag.FORMAT_FIXED,)
    assert pair_flags(both_fail) == ()
    # Not expected: no format flag whatever the parses say.
    assert pair_flags(score(baseline_format=PARSES, candidate_format=FAILS)) == ()


def test_format_regression_by_schema_tool_calls_and_empty_answer() -> None:
    schema_broken = FormatFlags(
        strict=True, fence_stripped=True, extracted=True, schema_valid=False
    )
    assert pair_flags(
        score(format_expected=True, baseline_format=PARSES, candidate_format=schema_broken)
    ) == (PairFlag.FORMAT_REGRESSION,)
    bad_tools = ToolCallFlags(calls=1, arguments_parse=True, schema_valid=False)
    good_tools = ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True)
    assert pair_flags(
        score(format_expected=True, baseline_tools=good_tools, candidate_tools=bad_tools)
    ) == (PairFlag.FORMAT_REGRESSION,)
    empty = score(
        format_expected=True, baseline_format=PARSES, candidate_empty=True, similarity=0.0
    )
    assert pair_flags(empty) == (PairFlag.CANDIDATE_EMPTY, PairFlag.FORMAT_REGRESSION)


def test_infrastructure_error_is_not_a_format_regression() -> None:
    infra = score(
        format_expected=True,
        baseline_format=PARSES,
        candidate_error=True,
        candidate_infra_error=True,
        similarity=None,
    )
    assert PairFlag.FORMAT_REGRESSION not in pair_flags(infra)
    model_error = score(
        format_expected=True, baseline_format=PARSES, candidate_error=True, similarity=None
    )
    assert PairFlag.FORMAT_REGRESSION in pair_flags(model_error)


def test_the_flags_use_the_gates_format_rule() -> None:
    """One rule: the gate's frame imports it from the core (no copy to drift)."""
    assert gate_format_ok is format_ok


def test_format_ok_pair_is_format_ok_of_each_side() -> None:
    """``format_ok_pair`` reads each side's own fields (the flags and the gate's frame use it)."""
    pair = score(
        format_expected=True,
        baseline_format=PARSES,
        candidate_format=FAILS,
        candidate_tools=ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True),
        baseline_infra_error=False,
    )
    assert format_ok_pair(pair) == (1.0, 1.0)  # the candidate's valid tool call wins
    assert format_ok_pair(score(format_expected=True, candidate_format=FAILS))[1] == 0.0
    strict = format_ok_pair(score(format_expected=True, baseline_format=PARSES), "strict")
    assert strict[0] == 0.0
