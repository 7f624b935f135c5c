"""pairs_frame: PairScore records to the gate's table."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from shadoweval.records import FormatFlags, PairScore, SidePair, ToolCallFlags
from stats.frame import PAIRS_COLUMNS, format_ok, pairs_frame
from stats.policy import GatePolicy, parse_policy

T0 = datetime(2024, 6, 1, tzinfo=UTC)


def score(i: int, **fields: object) -> PairScore:
    values: dict[str, object] = {
        "run_id": "r",
        "exchange_id": f"ex{i:03d}",
        "task_type": "chat",
        "captured_at": T0 + timedelta(seconds=i),
    }
    values.update(fields)
    return PairScore.model_validate(values)


def flags(strict: bool, fenced: bool, extracted: bool, schema: bool | None = None) -> FormatFlags:
    return FormatFlags(
        strict=strict, fence_stripped=fenced, extracted=extracted, schema_valid=schema
    )


def test_columns_dtypes_and_order() -> None:
    scores = [
        score(2, similarity=0.9, e2e_ms=SidePair(baseline=100.0, candidate=120.0)),
        score(0, candidate_error=True, latency_baseline_source="baseline_repeat"),
        score(1, baseline_empty=True, output_tokens=SidePair(baseline=3, candidate=None)),
    ]
    df = pairs_frame(scores, GatePolicy())
    assert list(df.columns) == list(PAIRS_COLUMNS)
    assert list(df["exchange_id"]) == ["ex000", "ex001", "ex002"]
    assert list(df.index) == [0, 1, 2]
    assert str(df["captured_at"].dtype) == "datetime64[ns, UTC]"
    assert df["candidate_fail"].tolist() == [True, False, False]
    assert df["baseline_fail"].tolist() == [False, True, False]
    assert math.isnan(df["similarity"].iloc[0])
    assert df.loc[2, "similarity"] == 0.9
    assert df.loc[2, "candidate_e2e_ms"] == 120.0
    assert math.isnan(df["baseline_ttft_ms"].iloc[2])
    assert df.loc[0, "latency_baseline_source"] == "baseline_repeat"
    assert df.loc[1, "baseline_output_tokens"] == 3.0
    for column, dtype in PAIRS_COLUMNS.items():
        assert str(df[column].dtype) == dtype, column


def test_empty_input_gives_typed_empty_frame() -> None:
    df = pairs_frame([], GatePolicy())
    assert df.empty
    assert list(df.columns) == list(PAIRS_COLUMNS)
    assert str(df["similarity"].dtype) == "float64"


def test_ties_in_capture_time_are_ordered_by_exchange_id() -> None:
    same = T0
    df = pairs_frame(
        [score(5, captured_at=same), score(3, captured_at=same), score(4, captured_at=same)],
        GatePolicy(),
    )
    assert list(df["exchange_id"]) == ["ex003", "ex004", "ex005"]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # rule 1: an errored side fails the format when one was expected
        (
            {
                "format_expected": True,
                "errored": True,
                "empty": False,
                "flags": None,
                "tools": None,
            },
            0.0,
        ),
        # no format expected, errored: not applicable
        (
            {
                "format_expected": False,
                "errored": True,
                "empty": False,
                "flags": None,
                "tools": None,
            },
            math.nan,
        ),
        # rule 2: tool calls are judged by their schema validity
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": True,
                "flags": None,
                "tools": ToolCallFlags(calls=2, arguments_parse=True, schema_valid=True),
            },
            1.0,
        ),
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(True, True, True),
                "tools": ToolCallFlags(calls=1, arguments_parse=True, schema_valid=False),
            },
            0.0,
        ),
        # rule 3: empty output to a structured request
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": True,
                "flags": None,
                "tools": None,
            },
            0.0,
        ),
        # rule 4: the success flag and schema validity
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(False, True, True),
                "tools": None,
            },
            1.0,
        ),
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(False, False, True),
                "tools": None,
            },
            0.0,
        ),
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(True, True, True, False),
                "tools": None,
            },
            0.0,
        ),
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(True, True, True, None),
                "tools": None,
            },
            1.0,
        ),
        # zero tool calls fall through to the format flags
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": flags(True, True, True),
                "tools": ToolCallFlags(calls=0, arguments_parse=True, schema_valid=False),
            },
            1.0,
        ),
        # rule 5: not scored
        (
            {
                "format_expected": True,
                "errored": False,
                "empty": False,
                "flags": None,
                "tools": None,
            },
            math.nan,
        ),
    ],
)
def test_format_ok_rules(kwargs: dict[str, object], expected: float) -> None:
    got = format_ok(success_flag="fence_stripped", **kwargs)  # type: ignore[arg-type]
    assert got == expected or (math.isnan(got) and math.isnan(expected))


def test_success_flag_follows_the_task_type_override() -> None:
    policy = parse_policy(
        {"task_types": {"extraction": {"format_parse": {"success_flag": "strict"}}}}
    )
    fenced_only = flags(False, True, True)
    df = pairs_frame(
        [
            score(
                0,
                task_type="extraction",
                format_expected=True,
                baseline_format=fenced_only,
                candidate_format=fenced_only,
            ),
            score(
                1,
                task_type="chat",
                format_expected=True,
                baseline_format=fenced_only,
                candidate_format=fenced_only,
            ),
        ],
        policy,
    )
    assert df["candidate_format_ok"].tolist() == [0.0, 1.0]


def test_captured_at_is_utc() -> None:
    df = pairs_frame([score(0)], GatePolicy())
    assert df.loc[0, "captured_at"] == pd.Timestamp(T0)


def test_infrastructure_errors_are_not_model_failures() -> None:
    scores = [
        score(0, candidate_error=True, candidate_infra_error=True),  # timeout / 502
        score(1, candidate_error=True),  # HTTP 400: the model's serving config rejected it
        score(2, candidate_empty=True),
        score(3, baseline_error=True, baseline_infra_error=True),  # live request cancelled
        score(4),
    ]
    df = pairs_frame(scores, GatePolicy())
    assert df["candidate_infra_error"].tolist() == [True, False, False, False, False]
    assert df["baseline_infra_error"].tolist() == [False, False, False, True, False]
    assert df["candidate_fail"].tolist() == [False, True, True, False, False]
    assert df["baseline_fail"].tolist() == [False, False, False, False, False]
    assert str(df["candidate_infra_error"].dtype) == "bool"


def test_infrastructure_error_is_not_a_format_failure() -> None:
    common = {"format_expected": True, "empty": False, "flags": None, "tools": None}
    assert math.isnan(
        format_ok(errored=True, infra_error=True, success_flag="strict", **common)  # type: ignore[arg-type]
    )
    assert format_ok(errored=True, infra_error=False, success_flag="strict", **common) == 0.0  # type: ignore[arg-type]
    df = pairs_frame(
        [score(0, format_expected=True, candidate_error=True, candidate_infra_error=True)],
        GatePolicy(),
    )
    assert math.isnan(df["candidate_format_ok"].iloc[0])
