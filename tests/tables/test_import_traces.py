"""Trace presets: OpenTelemetry GenAI spans, Langfuse generations, LiteLLM payloads.

The fixtures in ``fixtures/traces/`` are hand-written in each format, after the format's
own documentation (OTel semantic conventions ``docs/gen-ai``, the Langfuse public API,
LiteLLM's ``StandardLoggingPayload``); none is a copy of ``/work/shared/data``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from shadoweval.records import FinishReason, ToolCall
from shadoweval.tables import LoadResult, RecordedRow, load_recorded_rows
from shadoweval.tables.traces.otel import any_value, attributes

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def load(preset: str, name: str) -> LoadResult:
    return load_recorded_rows(FIXTURES / name, preset=preset)


def by_key(result: LoadResult) -> dict[str, RecordedRow]:
    return {row.key: row for row in result.rows}


# --------------------------------------------------------------------- OTLP values


def test_otlp_any_values_decode_to_plain_python() -> None:
    pairs = [
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "i", "value": {"intValue": "42"}},
        {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}},
        {
            "key": "kv",
            "value": {"kvlistValue": {"values": [{"key": "k", "value": {"intValue": 1}}]}},
        },
        {"key": "empty", "value": {}},
    ]
    assert attributes(pairs) == {
        "s": "x",
        "i": 42,
        "d": 0.5,
        "b": True,
        "a": ["stop"],
        "kv": {"k": 1},
        "empty": None,
    }
    assert any_value("plain") == "plain"  # a non-conforming exporter's bare value


# ------------------------------------------------------ otel_genai: content events


def test_otel_events_convention_maps_prompt_answer_usage_and_timing() -> None:
    result = load("otel_genai", "otel_events.json")
    assert result.rows_read == 5
    rows = by_key(result)
    row = rows["eee19b7ec3c1b174"]
    assert row.messages == [
        {"role": "system", "content": "You are a concise support agent."},
        {
            "role": "user",
            "content": "My key sk-proj-Zx81Qw7Lm2Np4Rt6Vy9Bc3Df5Gh8Jk1 stopped working, "
            "can you reset it?",
        },
    ]
    assert row.output_text == "I cannot reset keys; rotate it in the dashboard."
    assert row.model == "gpt-4o-mini"
    assert row.response_model == "gpt-4o-mini-2024-07-18"
    assert (row.prompt_tokens, row.completion_tokens) == (31, 12)
    assert row.finish_reason == "stop"
    assert row.latency_ms == 842.5  # endTimeUnixNano - startTimeUnixNano, exactly
    assert row.ttft_ms is None  # a span records no first token
    assert row.captured_at is not None
    assert row.captured_at.timestamp() == 1733220000.0
    assert row.request_fields == {"temperature": 0.2, "max_tokens": 256}
    assert row.session_id == "conv-8841"
    assert row.untagged
    assert row.task_type == "default"
    assert row.route == "/v1/chat/completions"


def test_otel_choice_event_with_tool_calls_becomes_the_answers_tool_calls() -> None:
    row = by_key(load("otel_genai", "otel_events.json"))["eee19b7ec3c1b175"]
    assert row.output_text is None
    assert row.tool_calls == (
        ToolCall(
            index=0,
            id="call_VSPygqKTWdrhaFErNvMV18Yl",
            name="get_weather",
            arguments='{"location":"Paris"}',
        ),
    )
    assert row.finish_reason == "tool_calls"


def test_otel_spans_that_are_not_imported_are_kept_with_a_reason() -> None:
    result = load("otel_genai", "otel_events.json")
    assert result.rejected_by_reason() == {"not_chat_span": 1, "no_content": 1, "failed_call": 1}
    by_span = {r.raw["spanId"]: r for r in result.rejected}
    assert by_span["eee19b7ec3c1b173"].reason == "not_chat_span"  # the HTTP server span
    # a chat span recorded without content (capture of content off): rejected, not empty
    no_content = by_span["eee19b7ec3c1b176"]
    assert no_content.reason == "no_content"
    assert "content capture was off" in no_content.detail
    assert by_span["eee19b7ec3c1b177"].reason == "failed_call"
    assert "RateLimitError" in by_span["eee19b7ec3c1b177"].detail


def test_otel_message_events_without_bodies_are_no_content(tmp_path: Path) -> None:
    """Content capture off: the instrumentation still emits the events, with no content."""
    span = {
        "spanId": "00f067aa0ba902b7",
        "name": "chat gpt-4o-mini",
        "startTimeUnixNano": "1733220000000000000",
        "endTimeUnixNano": "1733220000500000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o-mini"}},
        ],
        "events": [
            {"name": "gen_ai.user.message", "attributes": []},
            {"name": "gen_ai.choice", "attributes": [
                {"key": "index", "value": {"intValue": "0"}},
                {"key": "finish_reason", "value": {"stringValue": "stop"}},
            ]},
        ],
    }  # fmt: skip
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    path = tmp_path / "spans.json"
    path.write_bytes(orjson.dumps(export))
    result = load_recorded_rows(path, preset="otel_genai")
    assert result.rows == []
    assert [r.reason for r in result.rejected] == ["no_content"]


# ------------------------------------- otel_genai: gen_ai.input/output.messages


def test_otel_messages_convention_with_system_instructions_tools_and_tool_results() -> None:
    result = load("otel_genai", "otel_messages.jsonl")
    row = by_key(result)["b7ad6b7169203331"]
    assert row.messages == [
        {"role": "system", "content": "You are a travel assistant."},
        {"role": "user", "content": "Weather in Paris? Reply to ops@example.com"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_VSPygqKTWdrhaFErNvMV18Yl",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_VSPygqKTWdrhaFErNvMV18Yl", "content": "rainy, 57°F"},
    ]
    assert row.output_text == "It is rainy and 57°F in Paris."
    assert row.finish_reason == "stop"
    assert row.tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}},
                    "required": ["location"],
                },
            },
        }
    ]
    assert row.request_fields == {"temperature": 0.0, "seed": 7}
    assert row.latency_ms == 1250.0
    assert row.session_id == "sess-42"  # session.id when there is no gen_ai.conversation.id


def test_otel_output_tool_call_part_and_semconv_finish_reason() -> None:
    row = by_key(load("otel_genai", "otel_messages.jsonl"))["b7ad6b7169203332"]
    assert row.output_text is None
    assert [(c.id, c.name, orjson.loads(c.arguments)) for c in row.tool_calls] == [
        ("call_b2", "book_hotel", {"city": "Paris", "nights": 2})
    ]
    assert row.finish_reason == "tool_calls"  # the convention's "tool_call"
    assert row.session_id == "sess-42"


def test_otel_content_events_in_an_otlp_logs_export_join_their_span() -> None:
    row = by_key(load("otel_genai", "otel_messages.jsonl"))["b7ad6b7169203335"]
    assert row.route == "/v1/completions"  # gen_ai.operation.name text_completion
    assert row.messages == [{"role": "user", "content": "Say hello in French:"}]
    assert row.output_text == " Bonjour !"
    assert row.finish_reason == "stop"
    assert row.request_fields == {"max_tokens": 32}


def test_otel_unreplayable_parts_other_operations_and_bad_lines_are_rejected() -> None:
    result = load("otel_genai", "otel_messages.jsonl")
    assert result.rejected_by_reason() == {
        "unsupported_part": 1,
        "not_chat_span": 1,
        "invalid_json": 1,
    }
    bad = next(r for r in result.rejected if r.reason == "invalid_json")
    assert bad.location.endswith("otel_messages.jsonl:3")
    assert bad.raw["value"].startswith('{"resourceSpans"')  # the line is kept
    image = next(r for r in result.rejected if r.reason == "unsupported_part")
    assert "'uri'" in image.detail
    assert len(result.rows) == 3


def test_a_document_that_is_not_an_otlp_export_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text('{"name": "not otlp"}\n[]\n', encoding="utf-8")
    result = load_recorded_rows(path, preset="otel_genai")
    assert [r.reason for r in result.rejected] == ["not_otlp", "not_otlp"]
    assert result.rows == []


# ------------------------------------------------------------------------ langfuse


def test_langfuse_generation_with_ttft_usage_and_model_parameters() -> None:
    result = load("langfuse", "langfuse_observations.json")
    row = by_key(result)["obs-7f3a2c1e-0001"]
    assert row.messages[0] == {
        "role": "system",
        "content": "Summarize the customer's message in one sentence.",
    }
    assert row.output_text == "The customer reports that order #5521 arrived broken."
    assert row.model == "gpt-4o-2024-08-06"
    assert (row.latency_ms, row.ttft_ms) == (2400.0, 380.0)  # completionStartTime → TTFT
    assert (row.prompt_tokens, row.completion_tokens) == (48, 12)
    # Langfuse's "inf" for an unset max_tokens is left out; "0.9" is read as a number
    assert row.request_fields == {"temperature": 0.7, "top_p": 0.9}
    assert row.metadata is not None
    assert row.metadata["task_type"] == "summarization"


def test_langfuse_other_observations_failures_and_empty_inputs_are_rejected() -> None:
    result = load("langfuse", "langfuse_observations.json")
    assert {r.raw["id"]: r.reason for r in result.rejected} == {
        "obs-7f3a2c1e-0002": "not_generation",
        "obs-7f3a2c1e-0003": "failed_call",
        "obs-7f3a2c1e-0004": "no_content",
    }


def test_langfuse_trace_export_gives_its_session_to_its_generations() -> None:
    result = load("langfuse", "langfuse_trace.json")
    row = by_key(result)["obs-88e1-gen-1"]
    assert row.session_id == "chat-session-1207"
    assert row.metadata == {"task_type": "tool_use"}  # the trace's, the observation has none
    assert row.tools is not None
    assert row.tools[0]["function"]["name"] == "get_weather"
    assert row.tool_calls[0].name == "get_weather"
    assert row.output_text is None
    assert row.request_fields == {"temperature": 0.0, "max_tokens": 200, "tool_choice": "auto"}
    assert (row.latency_ms, row.ttft_ms) == (800.0, 550.0)
    assert result.rejected_by_reason() == {"not_generation": 1}  # the TOOL observation


# ------------------------------------------------------------------------- litellm


def test_litellm_payloads_map_model_group_stream_ttft_and_cache_hits() -> None:
    result = load("litellm", "litellm.jsonl")
    rows = by_key(result)
    streamed = rows["chatcmpl-A1"]
    assert streamed.model == "gpt-4o-mini"  # model_group: what the client asked for
    assert streamed.response_model == "gpt-4o-mini-2024-07-18"
    assert streamed.latency_ms == pytest.approx(1500.0)
    assert streamed.ttft_ms == pytest.approx(360.0)  # completionStartTime, streamed only
    assert streamed.request_fields == {"temperature": 0.3, "max_tokens": 300}
    assert streamed.session_id == "sess-litellm-1"
    assert streamed.metadata == {"session_id": "sess-litellm-1", "task_type": "support_chat"}
    not_streamed = rows["chatcmpl-A2"]
    assert not_streamed.ttft_ms is None  # completionStartTime = endTime when not streamed
    assert not_streamed.tool_calls[0].name == "lookup_order"
    assert not_streamed.tools is not None
    assert not_streamed.finish_reason == "tool_calls"
    assert rows["chatcmpl-A3"].cache_hit
    completion = rows["chatcmpl-T1"]
    assert completion.route == "/v1/completions"
    assert completion.output_text == " ¡Hola!"


def test_litellm_failures_other_calls_and_bad_lines_are_rejected() -> None:
    result = load("litellm", "litellm.jsonl")
    assert result.rows_read == 7
    assert {r.location.rsplit(":", 1)[-1]: r.reason for r in result.rejected} == {
        "4": "failed_call",
        "5": "invalid_json",
        "6": "not_chat_call",
    }


def test_trace_presets_take_no_prompts_table() -> None:
    from shadoweval.errors import TableMappingError

    with pytest.raises(TableMappingError, match="does not take a prompts table"):
        load_recorded_rows(FIXTURES / "litellm.jsonl", preset="litellm", prompts=FIXTURES)


def test_a_directory_of_exports_is_read_file_by_file(tmp_path: Path) -> None:
    for name in ("otel_events.json", "otel_messages.jsonl"):
        (tmp_path / name).write_bytes((FIXTURES / name).read_bytes())
    result = load_recorded_rows(tmp_path, preset="otel_genai")
    assert len(result.files) == 2
    assert len(result.rows) == 5
    assert len(result.rejected) == 6


def test_finish_reason_of_trace_rows_normalizes() -> None:
    from shadoweval.llm_protocol import normalize_finish_reason

    row = load("otel_genai", "otel_events.json").rows[0]
    assert normalize_finish_reason(row.finish_reason) is FinishReason.STOP


def test_otel_span_events_with_the_body_as_json_in_gen_ai_event_content(tmp_path: Path) -> None:
    """The form of instrumentations that put the whole event body in one attribute."""

    def event(name: str, body: dict[str, object]) -> dict[str, object]:
        content = {"stringValue": orjson.dumps(body).decode()}
        return {"name": name, "attributes": [{"key": "gen_ai.event.content", "value": content}]}

    span = {
        "spanId": "00f067aa0ba902b8",
        "name": "chat gpt-4o",
        "startTimeUnixNano": 1733220000000000000,
        "endTimeUnixNano": 1733220000250000000,
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
        ],
        "events": [
            event("gen_ai.user.message", {"role": "user", "content": "2+2?"}),
            event("gen_ai.choice", {"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": "4"}}),
        ],
    }  # fmt: skip
    path = tmp_path / "spans.json.gz"
    path.write_bytes(
        gzip.compress(orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    )
    (row,) = load_recorded_rows(path, preset="otel_genai").rows
    assert row.messages == [{"role": "user", "content": "2+2?"}]
    assert row.output_text == "4"
    assert row.latency_ms == 250.0  # numeric nanoseconds accepted too


def test_langfuse_end_before_start_is_rejected_naming_the_field(tmp_path: Path) -> None:
    record = {
        "id": "obs-1",
        "type": "GENERATION",
        "startTime": "2024-12-03T09:15:02.000Z",
        "endTime": "2024-12-03T09:15:01.000Z",
        "input": "hi",
        "output": "hello",
    }
    path = tmp_path / "observations.jsonl"
    path.write_bytes(orjson.dumps(record) + b"\n")
    (rejected,) = load_recorded_rows(path, preset="langfuse").rejected
    assert rejected.reason == "bad_timing"
    assert "endTime" in rejected.detail


def test_malformed_otlp_structure_is_reported_not_dropped(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    lines = [
        {"resourceSpans": "oops"},
        {"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]},
        {"resourceLogs": [{"scopeLogs": 3}]},
    ]
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    result = load_recorded_rows(path, preset="otel_genai")
    assert result.rows == []
    assert [r.reason for r in result.rejected] == ["not_otlp", "not_otlp", "not_otlp"]


_MUTATIONS: list[object] = [None, 1, -3, 2.5, "x", "", "[1", [], {}, [1], {"a": 1}, True]


def _paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*path, i))
    return out


@pytest.mark.parametrize(
    ("preset", "name"),
    [
        ("otel_genai", "otel_events.json"),
        ("langfuse", "langfuse_observations.json"),
        ("litellm", "litellm.jsonl"),
    ],
)
def test_any_malformed_record_is_a_row_or_a_rejection_never_a_crash(
    preset: str, name: str, tmp_path: Path
) -> None:
    """Seeded mutations of the fixtures: a value anywhere replaced by one of another type."""
    import copy
    import random

    text = (FIXTURES / name).read_bytes()
    if name.endswith(".jsonl"):
        base: list[object] = [
            orjson.loads(line) for line in text.splitlines() if line.strip()[-1:] == b"}"
        ]
    else:
        base = [orjson.loads(text)]
    rng = random.Random(7)
    for attempt in range(150):
        documents = copy.deepcopy(base)
        target = rng.randrange(len(documents))
        path = rng.choice(_paths(documents[target]))
        if path:
            parent: object = documents[target]
            for step in path[:-1]:
                parent = parent[step]  # type: ignore[index]
            parent[path[-1]] = copy.deepcopy(rng.choice(_MUTATIONS))  # type: ignore[index]
        file = tmp_path / f"mutated{attempt}.jsonl"
        file.write_bytes(b"\n".join(orjson.dumps(d) for d in documents))
        result = load_recorded_rows(file, preset=preset)
        assert "unprocessable" not in result.rejected_by_reason(), (path, result.rejected)


@pytest.mark.parametrize(
    ("value", "hit"),
    [(True, True), ("True", True), ("false", False), (None, False), (1, False)],
)
def test_litellm_spend_log_cache_hit_text_counts(tmp_path: Path, value: object, hit: bool) -> None:
    """``LiteLLM_SpendLogs`` stores ``cache_hit`` as text: "True" is a hit (its
    millisecond latency must stay out of the latency checks)."""
    line = orjson.loads((FIXTURES / "litellm.jsonl").read_text().splitlines()[0])
    line["cache_hit"] = value
    path = tmp_path / "one.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    (row,) = load("litellm", str(path)).rows
    assert row.cache_hit is hit
