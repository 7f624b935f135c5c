"""Explicit mappings, file formats, rejected rows."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from pydantic import ValidationError

from shadoweval.errors import RecordDecodeError, TableMappingError
from shadoweval.records import ToolCall
from shadoweval.tables import (
    TableMapping,
    detect_format,
    load_recorded_rows,
    prompt_key,
    read_table,
)

RECORDS: list[dict[str, Any]] = [
    {
        "rid": "r1",
        "prompt": "Say hi",
        "answer": "Hi there!",
        "task": "chat",
        "model": "m-1",
        "lat_s": 1.25,
        "pt": 5,
        "ct": 3,
    },
    {
        "rid": "r2",
        "prompt": "  leading spaces and NA",
        "answer": "None",
        "task": "qa",
        "model": "m-1",
        "lat_s": 0.5,
        "pt": 7,
        "ct": 1,
    },
    {
        "rid": "007",
        "prompt": "Third",
        "answer": "NA",
        "task": "qa",
        "model": "m-1",
        "lat_s": None,
        "pt": None,
        "ct": None,
    },
]

MAPPING = TableMapping(
    prompt_col="prompt",
    output_col="answer",
    task_type_col="task",
    model_col="model",
    id_col="rid",
    latency_col="lat_s",
    latency_unit="s",
    prompt_tokens_col="pt",
    completion_tokens_col="ct",
)


def _write(tmp_path: Path, fmt: str, records: list[dict[str, Any]]) -> Path:
    frame = pd.DataFrame(records)
    if fmt == "csv":
        path = tmp_path / "t.csv"
        frame.to_csv(path, index=False)
    elif fmt == "parquet":
        path = tmp_path / "t.parquet"
        frame.to_parquet(path, index=False)
    elif fmt == "jsonl":
        path = tmp_path / "t.jsonl"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    elif fmt == "json-lines-named-json":
        path = tmp_path / "t.json"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    elif fmt == "json":
        path = tmp_path / "t.json"
        path.write_bytes(orjson.dumps(records, option=orjson.OPT_INDENT_2))
    elif fmt == "jsonl.gz":
        path = tmp_path / "t.jsonl.gz"
        path.write_bytes(gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in records)))
    else:
        raise AssertionError(fmt)
    return path


@pytest.mark.parametrize(
    "fmt", ["csv", "parquet", "jsonl", "json", "json-lines-named-json", "jsonl.gz"]
)
def test_every_format_gives_the_same_rows(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path, fmt, RECORDS)
    result = load_recorded_rows(path, MAPPING)
    assert result.rejected == []
    assert [r.key for r in result.rows] == ["r1", "r2", "007"]
    assert [r.output_text for r in result.rows] == ["Hi there!", "None", "NA"]
    assert result.rows[1].messages == [{"role": "user", "content": "  leading spaces and NA"}]
    assert [r.task_type for r in result.rows] == ["chat", "qa", "qa"]
    assert [r.latency_ms for r in result.rows] == [1250.0, 500.0, None]
    assert [r.prompt_tokens for r in result.rows] == [5, 7, None]
    assert [r.completion_tokens for r in result.rows] == [3, 1, None]
    assert [r.location for r in result.rows] == [f"{path}#{i}" for i in range(3)]
    assert {r.model for r in result.rows} == {"m-1"}


def test_format_detection(tmp_path: Path) -> None:
    assert detect_format(_write(tmp_path, "json-lines-named-json", RECORDS)) == "jsonl"
    assert detect_format(_write(tmp_path, "json", RECORDS)) == "json"
    assert detect_format(_write(tmp_path, "parquet", RECORDS)) == "parquet"
    odd = tmp_path / "table.data"
    odd.write_bytes((tmp_path / "t.parquet").read_bytes())
    assert detect_format(odd) == "parquet"
    assert len(read_table(odd)) == 3


def test_missing_column_names_column_file_and_existing_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "csv", RECORDS)
    mapping = MAPPING.model_copy(update={"output_col": "response"})
    with pytest.raises(TableMappingError) as info:
        load_recorded_rows(path, mapping)
    message = str(info.value)
    assert "'response'" in message
    assert str(path) in message
    assert "output_col" in message
    for column in ("rid", "prompt", "answer", "task"):
        assert column in message


def test_bad_rows_are_rejected_with_location_and_reason(tmp_path: Path) -> None:
    records = [
        dict(RECORDS[0]),
        {**RECORDS[1], "answer": None},
        {**RECORDS[0], "rid": "r3", "lat_s": "fast"},
        {**RECORDS[0], "rid": "r4", "prompt": None},
        {**RECORDS[0], "rid": "r5", "ct": 2.5},
        {**RECORDS[0], "rid": "r6", "task": None},
    ]
    path = _write(tmp_path, "jsonl", records)
    result = load_recorded_rows(path, MAPPING)
    assert [r.key for r in result.rows] == ["r1"]
    assert [(r.location, r.reason) for r in result.rejected] == [
        (f"{path}#1", "missing_output"),
        (f"{path}#2", "bad_number"),
        (f"{path}#3", "missing_prompt"),
        (f"{path}#4", "bad_number"),
        (f"{path}#5", "missing_task_type"),
    ]
    assert result.rejected[0].raw["rid"] == "r2"
    assert "'answer'" in result.rejected[0].detail
    assert result.rows_read == 6
    assert result.rejected_by_reason() == {
        "missing_output": 1,
        "bad_number": 2,
        "missing_prompt": 1,
        "missing_task_type": 1,
    }


def test_constants_fill_labels_and_keys_default_to_prompt_hash(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [{"q": "a"}, {"q": "b"}, {"q": "a"}]
    path = _write(tmp_path, "json", records)
    mapping = TableMapping(prompt_col="q", output_col="q", task_type="echo", model="m")
    rows = load_recorded_rows(path, mapping).rows
    assert {r.task_type for r in rows} == {"echo"}
    assert {r.model for r in rows} == {"m"}
    key_a = "p-" + prompt_key([{"role": "user", "content": "a"}])[:16]
    assert [r.key for r in rows] == [key_a, rows[1].key, key_a + "~2"]
    assert load_recorded_rows(path, mapping).renamed_keys == 1  # counted, not silent


def test_messages_system_openai_tool_calls_and_tools_in_csv(tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
    ]
    records: list[dict[str, Any]] = [
        {
            "msgs": orjson.dumps([{"role": "user", "content": "Weather in Paris?"}]).decode(),
            "sys": "You are terse.",
            "out": orjson.dumps(calls).decode(),
            "tools": orjson.dumps(tools).decode(),
            "finish": "tool_calls",
        },
        {
            "msgs": orjson.dumps([{"role": "user", "content": "Hello"}]).decode(),
            "sys": None,
            "out": "[not json at all",
            "tools": None,
            "finish": "stop",
        },
    ]
    path = _write(tmp_path, "csv", records)
    mapping = TableMapping(
        messages_col="msgs",
        system_col="sys",
        output_col="out",
        output_format="openai",
        tools_col="tools",
        finish_reason_col="finish",
        model="m",
    )
    first, second = load_recorded_rows(path, mapping).rows
    assert first.messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert first.tools == tools
    assert first.output_text is None
    assert first.tool_calls == (
        ToolCall(index=0, id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
    )
    assert first.finish_reason == "tool_calls"
    assert second.messages == [{"role": "user", "content": "Hello"}]
    assert second.output_text == "[not json at all"
    assert second.tool_calls == ()
    assert second.tools is None


def test_parquet_nested_columns(tmp_path: Path) -> None:
    records = [
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "2+2?"},
            ],
            "result": [{"add": '{"a": 2, "b": 2}'}],
            "functions": [
                {
                    "name": "math.add",
                    "description": "Add.",
                    "parameters": {
                        "type": "dict",
                        "properties": {"a": {"type": "float"}, "b": {"type": "float"}},
                        "required": ["a", "b"],
                    },
                }
            ],
        }
    ]
    path = tmp_path / "nested.parquet"
    pd.DataFrame(records).to_parquet(path)
    mapping = TableMapping(
        messages_col="messages",
        output_col="result",
        output_format="bfcl",
        tools_col="functions",
        tools_format="bfcl",
        model="m",
    )
    [row] = load_recorded_rows(path, mapping).rows
    assert row.messages == records[0]["messages"]
    assert row.tool_calls == (ToolCall(index=0, name="add", arguments='{"a": 2, "b": 2}'),)
    assert row.tools is not None
    function = row.tools[0]["function"]
    assert function["name"] == "math_add"
    assert function["parameters"]["properties"]["a"] == {"type": "number"}
    assert function["parameters"]["type"] == "object"


def test_directory_of_tables(tmp_path: Path) -> None:
    _write(tmp_path, "csv", RECORDS[:2])
    _write(tmp_path, "jsonl", RECORDS[2:])
    (tmp_path / "notes.txt").write_text("not a table")
    result = load_recorded_rows(tmp_path, MAPPING)
    assert [r.key for r in result.rows] == ["r1", "r2", "007"]
    assert len(result.files) == 2


def test_mapping_validation() -> None:
    with pytest.raises(ValidationError, match="exactly one of prompt_col"):
        TableMapping(output_col="o")
    with pytest.raises(ValidationError, match="exactly one of prompt_col"):
        TableMapping(prompt_col="p", messages_col="m", output_col="o")
    with pytest.raises(ValidationError, match="latency_unit"):
        TableMapping(prompt_col="p", output_col="o", latency_col="lat")
    with pytest.raises(ValidationError, match="extra"):
        TableMapping(prompt_col="p", output_col="o", prompt_column="x")  # type: ignore[call-arg]


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / "nope.csv")
    broken = tmp_path / "broken.json"
    broken.write_text("[{]")
    with pytest.raises(RecordDecodeError) as info:
        read_table(broken)
    assert info.value.reason == "unreadable_table"
    assert info.value.location == str(broken)


def test_capture_time_column_iso_epoch_and_bad_values(tmp_path: Path) -> None:
    """``captured_at_col``: ISO 8601 with an offset or epoch seconds → UTC; a timestamp
    without a timezone or an unreadable value is a rejected row naming the column."""
    from datetime import UTC, datetime

    records: list[dict[str, Any]] = [
        {"q": "a", "at": "2026-11-30T08:00:00Z"},
        {"q": "b", "at": "2026-11-30T10:30:00+01:00"},
        {"q": "c", "at": 1_764_489_600},
        {"q": "d", "at": "2026-11-30T08:00:00"},
        {"q": "e", "at": "yesterday"},
        {"q": "f", "at": None},
    ]
    path = _write(tmp_path, "jsonl", records)
    mapping = TableMapping(prompt_col="q", output_col="q", model="m", captured_at_col="at")
    result = load_recorded_rows(path, mapping)
    assert [r.captured_at for r in result.rows] == [
        datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
        datetime(2026, 11, 30, 9, 30, tzinfo=UTC),
        datetime(2025, 11, 30, 8, 0, tzinfo=UTC),
        None,
    ]
    assert [(r.location, r.reason) for r in result.rejected] == [
        (f"{path}#3", "bad_timestamp"),
        (f"{path}#4", "bad_timestamp"),
    ]
    assert "'at'" in result.rejected[0].detail
    assert "no timezone" in result.rejected[0].detail
    assert "'yesterday'" in result.rejected[1].detail
