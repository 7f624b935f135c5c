"""pairs_frame: PairScore records to the gate's table."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from shadoweval.records import (
    FormatFlags,
    HarmKind,
    JudgementSource,
    PairJudgement,
    PairScore,
    QualityOutcome,
    SidePair,
    ToolCallFlags,
    ToolChange,
)
from shadoweval.stats.frame import (
    BASELINE_HARM_COLUMNS,
    CANDIDATE_HARM_COLUMNS,
    PAIRS_COLUMNS,
    QUALITY_VALUES,
    TOOL_CHANGE_COLUMNS,
    format_ok,
    harm_column,
    pairs_frame,
    tool_change_column,
)
from shadoweval.stats.policy import GatePolicy, parse_policy

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


# ------------------------------------------------------------------ direction columns


def test_harm_flags_per_side_and_detector() -> None:
    scores = [
        score(0, candidate_harms=(HarmKind.DEGENERATION, HarmKind.REFUSAL)),
        score(1, baseline_harms=(HarmKind.TEMPLATE_MARKERS,)),
        score(2),
    ]
    df = pairs_frame(scores, GatePolicy())
    assert len(BASELINE_HARM_COLUMNS) == len(CANDIDATE_HARM_COLUMNS) == len(HarmKind)
    assert df[harm_column("candidate", HarmKind.DEGENERATION)].tolist() == [True, False, False]
    assert df[harm_column("candidate", HarmKind.REFUSAL)].tolist() == [True, False, False]
    assert df[harm_column("baseline", HarmKind.TEMPLATE_MARKERS)].tolist() == [False, True, False]
    assert not df[harm_column("baseline", HarmKind.DEGENERATION)].any()
    for column in (*BASELINE_HARM_COLUMNS, *CANDIDATE_HARM_COLUMNS, *TOOL_CHANGE_COLUMNS):
        assert str(df[column].dtype) == "bool", column


def test_runaway_length_includes_the_policy_length_ratio() -> None:
    # The baseline's hashtag loop: 12,000 characters against the candidate's 300, and no
    # finish_reason=length flag from compare; the candidate's 2,500 against 1,000 is
    # under the 4x ratio; 1,500 against 100 is under min_runaway_chars.
    scores = [
        score(0, output_chars=SidePair(baseline=12_000, candidate=300)),
        score(1, output_chars=SidePair(baseline=1_000, candidate=2_500)),
        score(2, output_chars=SidePair(baseline=100, candidate=1_500)),
        score(3, candidate_harms=(HarmKind.RUNAWAY_LENGTH,)),  # cut by max_tokens
        score(4, output_chars=SidePair(baseline=None, candidate=9_000)),  # unknown: no ratio
    ]
    df = pairs_frame(scores, GatePolicy())
    base = df[harm_column("baseline", HarmKind.RUNAWAY_LENGTH)].tolist()
    cand = df[harm_column("candidate", HarmKind.RUNAWAY_LENGTH)].tolist()
    assert base == [True, False, False, False, False]
    assert cand == [False, False, False, True, False]
    assert df["baseline_output_chars"].iloc[0] == 12_000.0
    assert math.isnan(df["baseline_output_chars"].iloc[4])
    # A per-task-type ratio of 2 makes the 2,500-character answer runaway.
    tight = parse_policy(
        {"task_types": {"chat": {"harm": {"length_ratio_max": 2, "min_runaway_chars": 2000}}}}
    )
    df = pairs_frame(scores, tight)
    assert df[harm_column("candidate", HarmKind.RUNAWAY_LENGTH)].tolist()[1] is True


def test_tool_text_answer_and_tool_changes() -> None:
    called = ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True)
    text = ToolCallFlags(calls=0, arguments_parse=True, schema_valid=True)
    scores = [
        score(
            0,
            baseline_tools=called,
            candidate_tools=text,
            tool_changes=(ToolChange.TEXT_INSTEAD_OF_CALL,),
        ),
        score(
            1,
            baseline_tools=text,
            candidate_tools=called,
            tool_changes=(ToolChange.CALL_INSTEAD_OF_TEXT,),
        ),
        score(
            2,
            baseline_tools=called,
            candidate_tools=called,
            tool_changes=(ToolChange.ORDER_CHANGED,),
        ),
        score(3, baseline_tools=called, candidate_tools=text, candidate_empty=True),
        score(4),  # no tools offered
    ]
    df = pairs_frame(scores, GatePolicy())
    base = df["baseline_tool_text"].tolist()
    cand = df["candidate_tool_text"].tolist()
    assert base[:4] == [0.0, 1.0, 0.0, 0.0]
    assert cand[:3] == [1.0, 0.0, 0.0]
    assert math.isnan(cand[3])  # an empty answer is no text answer (it is a failure)
    assert math.isnan(base[4])
    assert math.isnan(cand[4])
    assert df[tool_change_column(ToolChange.TEXT_INSTEAD_OF_CALL)].tolist() == [
        True,
        False,
        False,
        False,
        False,
    ]
    assert df["tool_order_changed"].tolist() == [False, False, True, False, False]


def test_sampled_noise_identical_and_quality() -> None:
    scores = [
        score(0, sampled=True, noise_identical=True),
        score(1, sampled=False, noise_identical=False),
        score(2),
        score(3),
        score(4),
    ]

    def judged(i: int, outcome: QualityOutcome | None, source: JudgementSource) -> PairJudgement:
        return PairJudgement(
            run_id="r",
            exchange_id=f"ex{i:03d}",
            task_type="chat",
            source=source,
            outcome=outcome,
            error=None if outcome else "judge call failed",
        )

    judgements = {
        "ex000": judged(0, QualityOutcome.CANDIDATE_WORSE, JudgementSource.JUDGE),
        "ex001": judged(1, QualityOutcome.CANDIDATE_BETTER, JudgementSource.HUMAN),
        "ex002": judged(2, QualityOutcome.TIE, JudgementSource.REFERENCE),
        "ex003": judged(3, None, JudgementSource.JUDGE),
    }
    df = pairs_frame(scores, GatePolicy(), judgements)
    assert df["sampled"].tolist()[:2] == [1.0, 0.0]
    assert math.isnan(df["sampled"].iloc[2])
    assert df["noise_identical"].tolist()[:2] == [1.0, 0.0]
    assert math.isnan(df["noise_identical"].iloc[2])
    assert df["quality"].tolist()[:3] == [1.0, -1.0, 0.0]
    assert math.isnan(df["quality"].iloc[3])  # a failed judgement is no quality
    assert math.isnan(df["quality"].iloc[4])
    assert df["quality_source"].tolist() == ["judge", "human", "reference", "failed", ""]
    assert QUALITY_VALUES[QualityOutcome.CANDIDATE_WORSE] == 1.0
    # Without judgements nothing is judged.
    assert pairs_frame(scores, GatePolicy())["quality"].isna().all()
