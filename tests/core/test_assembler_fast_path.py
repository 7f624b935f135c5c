"""The assembler's plain-chunk fast path gives exactly what the pydantic model path gives.

The reference run turns on debug logging of the protocol models, which sends every chunk
through ``ChatCompletionChunk`` (the fast path is off while unknown fields are logged).
"""

from __future__ import annotations

import logging

import orjson
import pytest

from shadoweval.llm_protocol import ChatStreamAssembler
from shadoweval.llm_protocol.assembler import AssembledResponse

CHUNKS: list[object] = [
    {
        "id": "a",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "a",
        "model": "m",
        "system_fingerprint": "fp",
        "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
    },
    {"id": "a", "choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
    {"id": "a", "choices": [{"index": 0, "delta": {"reasoning": "vllm style"}}]},
    {"id": "a", "choices": [{"index": 1, "delta": {"content": "other choice"}}]},
    {"id": "a", "choices": [{"index": "0", "delta": {"content": "lax index"}}]},
    {"id": "a", "choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "p"}]}}]},
    {
        "id": "a",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"x"'},
                        }
                    ]
                },
            }
        ],
    },
    {"id": "a", "choices": [{"index": 0, "text": "legacy"}]},
    {"id": 7, "choices": [{"index": 0, "delta": {"content": "bad id"}}]},
    {"id": "a", "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
    {
        "id": "a",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    },
    {"id": "a", "choices": [{"index": 0, "delta": None}]},
    ["not", "a", "dict"],
    {"error": {"message": "boom"}},
]


def _assemble() -> AssembledResponse:
    asm = ChatStreamAssembler(start_ns=0)
    for i, chunk in enumerate(CHUNKS):
        asm.feed(b"data: " + orjson.dumps(chunk) + b"\n\n", 1000 * (i + 1))
    asm.feed(b"data: [DONE]\n\n", 10**6)
    return asm.finish(2 * 10**6)


def test_fast_path_matches_the_model_path(caplog: pytest.LogCaptureFixture) -> None:
    fast = _assemble()
    with caplog.at_level(logging.DEBUG, logger="shadoweval.llm_protocol.models"):
        reference = _assemble()
    assert fast == reference
    assert fast.timings() == reference.timings()
    assert fast.text is not None
    assert "Hel" in fast.text
