"""The SSE reader reassembles chat-completion streams exactly, whatever the read sizes."""

from __future__ import annotations

import itertools
import json

import pytest

from shadoweval.llm_protocol import ChatStreamAssembler, SSEDecoder, parse_completion_body
from shadoweval.llm_protocol.assembler import AssembledResponse
from shadoweval.records import FinishReason, TimingSource, UsageSource


def sse(*payloads: object, done: bool = True, sep: str = "\n\n") -> bytes:
    parts = [
        "data: " + (p if isinstance(p, str) else json.dumps(p, ensure_ascii=False)) + sep
        for p in payloads
    ]
    if done:
        parts.append("data: [DONE]" + sep)
    return "".join(parts).encode("utf-8")


def chunk(
    delta: dict[str, object] | None = None,
    finish: str | None = None,
    index: int = 0,
    **extra: object,
) -> dict[str, object]:
    choice: dict[str, object] = {"index": index, "delta": delta or {}}
    if finish is not None:
        choice["finish_reason"] = finish
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
        **extra,
    }


ROLE_ONLY = chunk({"role": "assistant", "content": ""})
USAGE_ONLY = {
    "id": "chatcmpl-1",
    "choices": [],
    "usage": {
        "prompt_tokens": 7,
        "completion_tokens": 5,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
    },
}

STREAM_TEXT = sse(
    ROLE_ONLY,
    chunk({"content": "Grüße "}),
    chunk({"content": "日本語 "}),
    chunk({"content": "🙂 emoji"}),
    chunk({}, finish="stop"),
    USAGE_ONLY,
)
STREAM_TOOLS = sse(
    ROLE_ONLY,
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": ""},
                }
            ]
        }
    ),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": '{"tz": '},
                }
            ]
        }
    ),
    chunk(
        {"tool_calls": [{"index": 0, "id": None, "function": {"arguments": '{"city": "Zürich"'}}]}
    ),
    chunk({"tool_calls": [{"index": 1, "id": None, "function": {"arguments": '"CET"}'}}]}),
    chunk({"tool_calls": [{"index": 0, "id": None, "function": {"arguments": "}"}}]}),
    chunk({}, finish="tool_calls"),
    USAGE_ONLY,
)


def assemble_split(raw: bytes, cuts: list[int]) -> AssembledResponse:
    ticks = itertools.count(1)
    asm = ChatStreamAssembler(start_ns=0, clock=lambda: next(ticks) * 1_000_000)
    prev = 0
    for cut in [*cuts, len(raw)]:
        asm.feed(raw[prev:cut])
        prev = cut
    return asm.finish()


def check_text(r: AssembledResponse) -> None:
    assert r.text == "Grüße 日本語 🙂 emoji"
    assert "\ufffd" not in r.text
    assert r.finish_reason_raw == "stop"
    assert r.usage.completion_tokens == 5
    assert r.usage.cached_tokens == 4
    assert r.usage.usage_source is UsageSource.REPORTED
    assert r.done_seen
    assert r.decode_errors == 0


def check_tools(r: AssembledResponse) -> None:
    assert [(t.index, t.id, t.name, t.arguments) for t in r.tool_calls] == [
        (0, "call_a", "get_weather", '{"city": "Zürich"}'),
        (1, "call_b", "get_time", '{"tz": "CET"}'),
    ]
    assert r.finish_reason_raw == "tool_calls"
    assert r.text == ""


@pytest.mark.parametrize(("raw", "check"), [(STREAM_TEXT, check_text), (STREAM_TOOLS, check_tools)])
def test_every_single_byte_boundary(raw, check):
    for cut in range(1, len(raw)):
        check(assemble_split(raw, [cut]))


@pytest.mark.parametrize(("raw", "check"), [(STREAM_TEXT, check_text), (STREAM_TOOLS, check_tools)])
def test_one_byte_reads(raw, check):
    check(assemble_split(raw, list(range(1, len(raw)))))


def test_crlf_and_cr_line_endings_split_anywhere():
    for sep in ("\r\n\r\n", "\r\r"):
        raw = sse(
            ROLE_ONLY,
            chunk({"content": "Grüße 日本語 🙂 emoji"}),
            chunk({}, finish="stop"),
            USAGE_ONLY,
            sep=sep,
        )
        for cut in range(1, len(raw)):
            r = assemble_split(raw, [cut])
            assert r.text == "Grüße 日本語 🙂 emoji"
            assert r.done_seen


def test_role_only_first_chunk_does_not_set_ttft_and_usage_chunk_does_not_set_e2e():
    events = [
        ROLE_ONLY,
        chunk({"content": "a"}),
        chunk({"content": "b"}),
        chunk({}, finish="stop"),
        USAGE_ONLY,
    ]
    asm = ChatStreamAssembler(start_ns=0)
    for i, ev in enumerate(events):  # event i arrives at (i+1) * 100 ms
        asm.feed(sse(ev, done=False), now_ns=(i + 1) * 100_000_000)
    asm.feed(b"data: [DONE]\n\n", now_ns=900_000_000)
    r = asm.finish(now_ns=900_000_000)
    assert r.ttfb_ms == pytest.approx(100.0)
    assert r.ttft_ms == pytest.approx(200.0)
    assert r.e2e_ms == pytest.approx(300.0)
    assert r.itl_ms == pytest.approx((100.0,))
    t = r.timings()
    assert t.source is TimingSource.MEASURED
    assert t.tpot_ms == pytest.approx((300.0 - 200.0) / (5 - 1))


def test_reasoning_token_counts_as_first_token():
    asm = ChatStreamAssembler(start_ns=0)
    asm.feed(sse(ROLE_ONLY, done=False), now_ns=10_000_000)
    asm.feed(sse(chunk({"reasoning_content": "think"}), done=False), now_ns=20_000_000)
    asm.feed(sse(chunk({"content": "answer"}), chunk({}, finish="stop")), now_ns=30_000_000)
    r = asm.finish()
    assert r.ttft_ms == pytest.approx(20.0)
    assert r.reasoning_text == "think"
    assert r.text == "answer"


def test_cumulative_usage_takes_last_value_never_sum():
    events = [
        chunk(
            {"content": "a"},
            usage={"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        ),
        chunk(
            {"content": "b"},
            usage={"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        ),
        chunk(
            {},
            finish="length",
            usage={
                "prompt_tokens": 10,
                "completion_tokens": 3,
                "total_tokens": 13,
                "prompt_tokens_details": {"cached_tokens": 900},
            },
        ),
    ]
    r = assemble_split(sse(*events), [])
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (10, 3, 13)
    assert r.usage.cached_tokens == 900
    assert r.to_response_record(200).finish_reason is FinishReason.LENGTH


def test_usage_missing_is_missing_not_zero():
    r = assemble_split(sse(chunk({"content": "hi"}), chunk({}, finish="stop")), [])
    assert r.usage.usage_source is UsageSource.MISSING
    assert r.usage.completion_tokens is None
    assert r.timings().tpot_ms is None


def test_comments_pings_and_undecodable_events_are_counted_not_fatal():
    raw = (
        b": ping\n\n"
        + sse(chunk({"content": "x"}), done=False)
        + b"data: {not json\n\n: keep-alive\n\n"
        + sse(chunk({}, finish="stop"))
    )
    r = assemble_split(raw, [3, 17, 40])
    assert r.text == "x"
    assert r.comments == 2
    assert r.decode_errors == 1
    assert r.done_seen


@pytest.mark.parametrize(
    ("raw_reason", "normalized"),
    [
        ("eos_token", FinishReason.STOP),
        ("", FinishReason.UNKNOWN),
        (None, FinishReason.UNKNOWN),
        ("length", FinishReason.LENGTH),
        ("abort", FinishReason.ABORT),
        ("content_filter", FinishReason.CONTENT_FILTER),
        ("something_new", FinishReason.UNKNOWN),
    ],
)
def test_finish_reason_raw_and_normalized(raw_reason, normalized):
    last = (
        chunk({"content": "tail"}, finish=raw_reason)
        if raw_reason is not None
        else chunk({"content": "tail"})
    )
    r = assemble_split(sse(chunk({"content": "x"}), last), [])
    rec = r.to_response_record(200)
    assert rec.finish_reason_raw == raw_reason
    assert rec.finish_reason is normalized
    assert rec.text == "xtail"  # last token and finish_reason in the same chunk


def test_tool_fragments_without_index_attach_to_the_right_call():
    events = [
        chunk(
            {
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
                ]
            }
        ),
        chunk({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        chunk(
            {
                "tool_calls": [
                    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}
                ]
            }
        ),
        chunk({}, finish="tool_calls"),
    ]
    r = assemble_split(sse(*events), [])
    assert [(t.name, t.arguments) for t in r.tool_calls] == [("f", '{"a": 1}'), ("g", "{}")]


def test_multiple_choices_report_choice_zero():
    raw = sse(
        chunk({"content": "zero"}, index=0),
        chunk({"content": "one"}, index=1),
        chunk({}, finish="stop", index=0),
        chunk({}, finish="length", index=1),
    )
    r = assemble_split(raw, [])
    assert r.text == "zero"
    assert r.choices_count == 2
    assert r.finish_reason_raw == "stop"


def test_error_event_mid_stream_is_kept():
    raw = sse(
        chunk({"content": "partial"}),
        {"error": {"message": "overloaded", "type": "server_error"}},
        done=False,
    )
    r = assemble_split(raw, [])
    assert r.text == "partial"
    assert r.error_message == "overloaded"
    assert not r.done_seen


def test_stream_without_final_blank_line_is_flushed():
    r = assemble_split(b"data: " + json.dumps(chunk({"content": "end"})).encode(), [])
    assert r.text == "end"


def test_genuinely_invalid_utf8_is_replaced_not_fatal():
    d = SSEDecoder()
    events = d.feed(b"data: ab\xff\xfecd\n\n")
    assert events[0].data == "ab\ufffd\ufffdcd"


def test_sse_multiline_data_and_fields():
    d = SSEDecoder()
    events = d.feed(b"event: message\nid: 7\nretry: 1500\ndata: line1\ndata:line2\n\n")
    assert len(events) == 1
    assert events[0].data == "line1\nline2"
    assert (events[0].event, events[0].id, events[0].retry_ms) == ("message", "7", 1500)


def test_non_streamed_body():
    body = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": "m",
            "vendor_field": {"kept": True},
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": '{"q": 1}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                    "stop_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()
    r = parse_completion_body(body, ttfb_ms=5.0, e2e_ms=9.0)
    assert r.tool_calls[0].arguments == '{"q": 1}'
    assert r.text == ""
    assert r.ttft_ms is None
    assert r.e2e_ms == 9.0
    assert not r.streamed


def test_an_error_field_is_kept_apart_from_data_and_split_anywhere():
    """llama.cpp's llama-server sends a stream error as an ``error:`` field (not
    ``data:``); it is kept on the event, whatever the read boundaries."""
    raw = b'data: {"a": 1}\n\nerror: {"code": 400, "message": "too long"}\n\ndata: [DONE]\n\n'
    for cut in range(1, len(raw)):
        dec = SSEDecoder()
        events = dec.feed(raw[:cut]) + dec.feed(raw[cut:]) + dec.close()
        assert [(e.data, e.error) for e in events] == [
            ('{"a": 1}', None),
            ("", '{"code": 400, "message": "too long"}'),
            ("[DONE]", None),
        ]
    asm = ChatStreamAssembler(start_ns=0)
    asm.feed(raw, now_ns=1)
    assert asm.finish(now_ns=2).error_message == "too long"


def test_tool_fragments_without_index_repeating_their_id_stay_one_call():
    """A server that repeats the call id (and name) on every fragment but sends no index:
    one call, the name kept once, the arguments joined."""
    events = [
        chunk(
            {
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": part}}
                ]
            }
        )
        for part in ('{"a"', ": 1", "}")
    ]
    r = assemble_split(sse(*events, chunk({}, finish="tool_calls")), [])
    assert [(t.id, t.name, t.arguments) for t in r.tool_calls] == [("c1", "f", '{"a": 1}')]
