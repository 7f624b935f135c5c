"""The Responses API reader on the stream shapes the end-to-end tests do not reach: a cut
stream, an ``incomplete`` answer, a ``failed`` one, an ``error`` event, reasoning deltas."""

from __future__ import annotations

from typing import Any

import orjson

from shadoweval.llm_protocol.dialects import dialect_for
from shadoweval.llm_protocol.finish_reason import normalize_finish_reason
from shadoweval.llm_protocol.interruption import FailureCause
from shadoweval.llm_protocol.responses_api import ResponsesStreamAssembler, parse_responses_body
from shadoweval.records import FinishReason


def sse(*events: dict[str, Any]) -> bytes:
    """Events as the Responses API sends them (``event:`` + ``data:``, no ``[DONE]``)."""
    return b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in events
    )


def read(body: bytes) -> Any:
    asm = ResponsesStreamAssembler(start_ns=0, clock=lambda: 1_000_000)
    for i in range(0, len(body), 7):  # pieces that split events anywhere
        asm.feed(body[i : i + 7], now_ns=1_000_000 + i)
    return asm.finish(now_ns=9_000_000)


RESPONSE = {"id": "resp_1", "object": "response", "model": "m", "status": "in_progress"}
CREATED = {"type": "response.created", "sequence_number": 0, "response": RESPONSE}
ADDED = {
    "type": "response.output_item.added",
    "sequence_number": 1,
    "output_index": 0,
    "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
}
DELTAS = [
    {
        "type": "response.output_text.delta",
        "sequence_number": 2 + i,
        "output_index": 0,
        "content_index": 0,
        "delta": piece,
    }
    for i, piece in enumerate(["Rome ", "is ", "the ", "capital."])
]
USAGE = {
    "input_tokens": 9,
    "output_tokens": 4,
    "total_tokens": 13,
    "output_tokens_details": {"reasoning_tokens": 0},
}


def terminal(kind: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "sequence_number": 9,
        "response": {**RESPONSE, "status": status, "usage": USAGE, **extra},
    }


def test_a_completed_stream_is_an_answer() -> None:
    result = read(sse(CREATED, ADDED, *DELTAS, terminal("response.completed", "completed")))
    assert result.text == "Rome is the capital."
    assert result.interruption() is None
    assert normalize_finish_reason(result.finish_reason_raw) is FinishReason.STOP
    assert result.usage.completion_tokens == 4


def test_a_cut_stream_is_the_servers_interruption_never_the_context_length() -> None:
    cut = read(sse(CREATED, ADDED, *DELTAS))  # content, then the body ends: no terminal event
    interruption = cut.interruption()
    assert interruption is not None
    assert interruption.cause is FailureCause.INTERRUPTED
    assert "without response.completed" in interruption.detail
    empty = read(sse(CREATED))
    assert empty.interruption() is not None
    assert empty.interruption().cause is FailureCause.INTERRUPTED


def test_incomplete_at_max_output_tokens_is_length_not_a_cut() -> None:
    body = sse(
        CREATED,
        ADDED,
        *DELTAS,
        terminal(
            "response.incomplete",
            "incomplete",
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    result = read(body)
    assert result.interruption() is None
    assert normalize_finish_reason(result.finish_reason_raw) is FinishReason.LENGTH


def test_an_error_event_and_a_failed_response_are_errors() -> None:
    error = {"type": "error", "sequence_number": 3, "code": "server_error", "message": "boom"}
    result = read(sse(CREATED, ADDED, error))
    assert result.error_message is not None
    assert "boom" in result.error_message
    assert result.interruption() is None
    failed = read(
        sse(
            CREATED,
            terminal("response.failed", "failed", error={"code": "server_error", "message": "x"}),
        )
    )
    assert failed.error_message is not None


def test_reasoning_is_kept_apart_from_the_answer() -> None:
    reasoning = {
        "type": "response.reasoning_summary_text.delta",
        "sequence_number": 1,
        "output_index": 0,
        "summary_index": 0,
        "delta": "thinking about capitals",
    }
    result = read(
        sse(CREATED, reasoning, ADDED, *DELTAS, terminal("response.completed", "completed"))
    )
    assert result.text == "Rome is the capital."
    assert result.reasoning_text == "thinking about capitals"


def test_a_whole_body_reads_as_the_stream_does() -> None:
    body = orjson.dumps(
        {
            **RESPONSE,
            "status": "completed",
            "usage": USAGE,
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Rome is the capital."}],
                },
                {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
            ],
        }
    )
    whole = parse_responses_body(body, ttfb_ms=1.0, e2e_ms=2.0)
    assert whole.text == "Rome is the capital."
    assert [c.name for c in whole.tool_calls] == ["f"]
    assert normalize_finish_reason(whole.finish_reason_raw) is FinishReason.TOOL_CALLS
    assert dialect_for("/v1/responses/").name == "openai-responses"
