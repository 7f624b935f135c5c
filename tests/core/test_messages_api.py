"""The Anthropic Messages API reader (``shadoweval.llm_protocol.messages_api``) against the
real ``anthropic`` SDK's parsers on the bytes mock-llm sends (``tests/fixtures/messages_api``),
and on hand-written events for what the mock does not send (thinking, errors, cut streams)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from shadoweval.llm_protocol.assembler import AssembledResponse
from shadoweval.llm_protocol.dialects import dialect_for
from shadoweval.llm_protocol.finish_reason import normalize_finish_reason
from shadoweval.llm_protocol.messages_api import MessagesStreamAssembler, parse_messages_body
from shadoweval.records import FailureCause, FinishReason, UsageSource
from tests.fixtures.messages_api.mock_recording import FIXTURES, HERE, record

STREAMS = ("text-stream.sse", "tool-stream.sse")


def read_stream(data: bytes, step: int | None = None) -> AssembledResponse:
    """``data`` fed one event per read (``step``: in reads of that many bytes), each read
    one clock tick (a microsecond) after the one before."""
    asm = MessagesStreamAssembler(start_ns=0, clock=iter(range(1000, 10**12, 1000)).__next__)
    if step is None:
        pieces = [event + b"\n\n" for event in data.split(b"\n\n") if event]
    else:
        pieces = [data[i : i + step] for i in range(0, len(data), step)]
    for piece in pieces:
        asm.feed(piece)
    return asm.finish()


def sdk_client(body: bytes, content_type: str) -> anthropic.Anthropic:
    """The real SDK, answered by ``body`` through an httpx transport (the seam)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        return httpx2.Response(200, content=body, headers={"content-type": content_type})

    http = httpx2.Client(transport=httpx2.MockTransport(answer))
    return anthropic.Anthropic(api_key="k", base_url="http://mock", http_client=http)


def assert_same(result: AssembledResponse, message: Any) -> None:
    """Our reading equals the SDK's final message: text, tool calls, stop reason, usage."""
    texts = [b.text for b in message.content if b.type == "text"]
    uses = [b for b in message.content if b.type == "tool_use"]
    assert (result.text or "") == "".join(texts)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        (b.id, b.name, b.input) for b in uses
    ]
    assert result.finish_reason_raw == message.stop_reason
    assert result.usage.prompt_tokens == message.usage.input_tokens
    assert result.usage.completion_tokens == message.usage.output_tokens
    assert result.model == message.model


@pytest.mark.parametrize("name", STREAMS)
def test_the_sdk_stream_parsers_accept_the_mock_stream_and_agree(name: str) -> None:
    data = (HERE / name).read_bytes()
    result = read_stream(data)
    assert result.done_seen
    assert result.finish_seen
    assert result.interruption() is None
    assert result.decode_errors == 0
    assert result.error_message is None
    assert result.usage.usage_source is UsageSource.REPORTED
    kwargs: Any = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "q"}]}
    with sdk_client(data, "text/event-stream").messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert_same(result, final)
    events = list(sdk_client(data, "text/event-stream").messages.create(**kwargs, stream=True))
    assert next(e.type for e in events) == "message_start"
    assert events[-1].type == "message_stop"
    # where the reads fall does not matter
    timing: dict[str, Any] = {"ttfb_ms": None, "ttft_ms": None, "e2e_ms": None}
    timing.update(itl_ms=(), ttfc_ms=None)
    assert replace(read_stream(data, step=7), **timing) == replace(result, **timing)


@pytest.mark.parametrize("name", ["text-message.json", "tool-message.json"])
def test_the_sdk_reads_the_mock_message_as_we_do(name: str) -> None:
    data = (HERE / name).read_bytes()
    result = parse_messages_body(data, ttfb_ms=1.0, e2e_ms=2.0)
    kwargs: Any = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "q"}]}
    message = sdk_client(data, "application/json").messages.create(**kwargs)
    assert_same(result, message)
    assert result.ttfc_ms == 2.0
    assert result.ttft_ms is None


def test_streamed_and_whole_answers_say_the_same() -> None:
    for stream, whole in (
        ("text-stream.sse", "text-message.json"),
        ("tool-stream.sse", "tool-message.json"),
    ):
        a = read_stream((HERE / stream).read_bytes())
        b = parse_messages_body((HERE / whole).read_bytes())
        assert a.text == b.text
        assert [(c.name, json.loads(c.arguments)) for c in a.tool_calls] == [
            (c.name, json.loads(c.arguments)) for c in b.tool_calls
        ]
        assert (a.finish_reason_raw, a.usage) == (b.finish_reason_raw, b.usage)


def test_the_fixtures_are_what_the_mock_sends_now(shared_data: Path) -> None:
    recorded = record(shared_data)
    for name in FIXTURES:
        assert recorded[name] == (HERE / name).read_bytes(), (
            f"{name} differs: rewrite with python -m tests.fixtures.messages_api.mock_recording"
        )


def test_the_route_reads_as_the_messages_dialect() -> None:
    assert dialect_for("/v1/messages/").name == "anthropic-messages"
    assert dialect_for("/v1/messages?beta=true").parse_body is parse_messages_body


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
        for e in events
    )


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 5},
    },
}  # fmt: skip


def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, kind: str, **fields: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


THINKING = (
    start(0, {"type": "thinking", "thinking": ""}),
    delta(0, "thinking_delta", thinking="Let me "),
    delta(0, "thinking_delta", thinking="think."),
    delta(0, "signature_delta", signature="abc"),
    stop(0),
    start(1, {"type": "text", "text": ""}),
    delta(1, "text_delta", text="Hi."),
    stop(1),
    start(2, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}),
    stop(2),
)
END = (
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
)


def test_thinking_ping_usage_and_a_tool_without_arguments() -> None:
    data = sse(START, {"type": "ping"}, *THINKING, *END)
    result = read_stream(data)
    assert result.reasoning_text == "Let me think."
    assert result.text == "Hi."
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("toolu_1", "now", "{}")]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (12, 9)
    assert (result.usage.total_tokens, result.usage.cached_tokens) == (21, 5)
    assert result.finish_reason_raw == "tool_use"
    # TTFT: the first thinking delta; TTFC: the first visible one (the text)
    assert result.ttft_ms is not None
    assert result.ttfc_ms is not None
    assert result.ttfc_ms > result.ttft_ms
    assert len(result.itl_ms) == 3  # 2 thinking, 1 text, 1 tool start = 4 token events
    with sdk_client(data, "text/event-stream").messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "q"}]
    ) as stream:
        final = stream.get_final_message()
    assert_same(result, final)
    assert final.content[0].type == "thinking"
    assert final.content[0].thinking == "Let me think."


def test_an_error_event_is_the_streams_error() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    result = read_stream(sse(START, error))
    assert result.error_message == "overloaded_error: Overloaded"
    assert result.interruption() is None  # an error, not an interruption


def test_a_cut_stream_is_interrupted() -> None:
    cut = read_stream(sse(START, *THINKING[:7]))
    interruption = cut.interruption()
    assert interruption is not None
    # content, no stop reason, no message_stop: Anthropic names its context window as a
    # stop reason, so this cut is the server's or the connection's, never the context length
    assert interruption.cause is FailureCause.INTERRUPTED
    assert "without message_stop" in interruption.detail
    without_stop = read_stream(sse(START, *THINKING, END[1]))
    assert without_stop.done_seen
    assert not without_stop.finish_seen
    assert without_stop.interruption() is not None
    assert read_stream(sse(START, *THINKING, *END)).interruption() is None


def test_undecodable_events_are_counted_never_fatal() -> None:
    result = read_stream(b"event: x\ndata: {not json\n\n" + sse(START, *THINKING, *END))
    assert result.decode_errors == 1
    assert result.text == "Hi."


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("end_turn", FinishReason.STOP),
        ("stop_sequence", FinishReason.STOP),
        ("max_tokens", FinishReason.LENGTH),
        ("model_context_window_exceeded", FinishReason.LENGTH),
        ("tool_use", FinishReason.TOOL_CALLS),
        ("refusal", FinishReason.CONTENT_FILTER),
        ("pause_turn", FinishReason.UNKNOWN),
    ],
)
def test_stop_reasons_normalize(raw: str, normalized: FinishReason) -> None:
    assert normalize_finish_reason(raw) is normalized


def test_a_body_that_is_no_message_names_why() -> None:
    from shadoweval.errors import RecordDecodeError

    with pytest.raises(RecordDecodeError, match="content is NoneType"):
        parse_messages_body(b'{"type": "error", "error": {"type": "x", "message": "y"}}')
    with pytest.raises(RecordDecodeError, match="not JSON"):
        parse_messages_body(b"{cut")
