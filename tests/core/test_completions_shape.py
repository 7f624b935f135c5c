"""The legacy /v1/completions shape (choices[].text) reassembles like chat completions."""

from __future__ import annotations

import json

import pytest

from shadoweval.llm_protocol import ChatStreamAssembler, parse_completion_body
from shadoweval.records import FinishReason, UsageSource


def event(payload: object) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


def piece(text: str, finish: str | None = None, index: int = 0) -> dict[str, object]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "gpt-3.5-turbo-instruct",
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}],
    }


STREAM = [
    (10, event(piece("Grüße "))),
    (20, event(piece("日本"))),
    (30, event(piece(""))),  # an empty piece carries no token
    (40, event(piece("語", finish="length"))),
    (
        50,
        event(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            }
        ),
    ),
    (51, b"data: [DONE]\n\n"),
]


def test_streamed_completions_text_usage_and_timings() -> None:
    asm = ChatStreamAssembler(start_ns=0)
    for t_ms, data in STREAM:
        asm.feed(data, now_ns=t_ms * 1_000_000)
    result = asm.finish(now_ns=51_000_000)
    assert result.text == "Grüße 日本語"
    assert result.finish_reason_raw == "length"
    assert result.model == "gpt-3.5-turbo-instruct"
    assert result.usage.completion_tokens == 3
    assert result.usage.usage_source is UsageSource.REPORTED
    assert (result.ttfb_ms, result.ttft_ms, result.e2e_ms) == (10.0, 10.0, 40.0)
    assert result.itl_ms == (10.0, 20.0)
    assert result.timings().tpot_ms == pytest.approx(15.0)
    assert result.to_response_record(200).finish_reason is FinishReason.LENGTH


def test_streamed_completions_split_at_every_byte() -> None:
    data = b"".join(d for _, d in STREAM)
    asm = ChatStreamAssembler(start_ns=0)
    for i in range(len(data)):
        asm.feed(data[i : i + 1], now_ns=i)
    assert asm.finish(now_ns=len(data)).text == "Grüße 日本語"


def test_non_streamed_completions_body() -> None:
    body = json.dumps(
        {
            "id": "cmpl-2",
            "object": "text_completion",
            "model": "davinci-002",
            "choices": [
                {"index": 1, "text": "second", "finish_reason": "stop"},
                {"index": 0, "text": "first answer", "finish_reason": "stop"},
            ],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
        }
    ).encode()
    result = parse_completion_body(body, ttfb_ms=5.0, e2e_ms=9.0)
    assert result.text == "first answer"
    assert result.choices_count == 2
    assert result.finish_reason_raw == "stop"
    assert result.tool_calls == ()
    assert (result.ttfb_ms, result.ttft_ms, result.e2e_ms) == (5.0, None, 9.0)


def test_empty_completions_text_is_empty_not_missing() -> None:
    body = json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}).encode()
    assert parse_completion_body(body).text == ""


def test_chat_shapes_are_unchanged() -> None:
    body = json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    ).encode()
    assert parse_completion_body(body).text == "hi"
    null_content = json.dumps(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": None}}]}
    ).encode()
    assert parse_completion_body(null_content).text is None


@pytest.mark.parametrize(
    ("usage", "prompt", "completion", "source"),
    [
        ({"prompt_tokens": -1, "completion_tokens": 3, "total_tokens": 2}, None, 3, "reported"),
        ({"prompt_tokens": -1, "completion_tokens": -1}, None, None, "missing"),
        ({"prompt_tokens": 4, "completion_tokens": 2**64 - 1}, 4, None, "reported"),
    ],
)
def test_a_server_reporting_impossible_token_counts_does_not_make_the_record_invalid(
    usage: dict[str, int], prompt: int | None, completion: int | None, source: str
) -> None:
    """Usage refuses negative counts (issue 13); what a server reports is read leniently:
    an impossible count is not reported, and the answer is still captured."""
    body = json.dumps(
        {"choices": [{"index": 0, "message": {"content": "hi"}}], "usage": usage}
    ).encode()
    result = parse_completion_body(body)
    assert result.text == "hi"
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (prompt, completion)
    assert result.usage.usage_source == UsageSource(source)
