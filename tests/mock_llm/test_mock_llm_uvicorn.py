"""mock-llm under a real uvicorn server, called with the official ``openai`` client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency, create_app
from shadoweval.tables import RecordedRow


@pytest.fixture
def server_url(alpaca_rows: list[RecordedRow], bfcl_rows: list[RecordedRow]) -> Iterator[str]:
    app = create_app(
        [*alpaca_rows, *bfcl_rows],
        latency=FixedLatency(ttft_ms=100, itl_ms=10),
        faults=FaultConfig(),
        seed=0,
        model_name="gpt-4o-mock",
        time_scale=0.5,
    )
    with BackgroundServer(app, start_timeout_s=60.0, thread_name="mock-llm") as server:
        yield f"{server.url}/v1"


def test_openai_client_against_uvicorn(
    server_url: str, alpaca_rows: list[RecordedRow], bfcl_rows: list[RecordedRow]
) -> None:
    with openai.OpenAI(base_url=server_url, api_key="not-a-secret", max_retries=0) as client:
        assert [m.id for m in client.models.list()] == ["gpt-4o-mock"]

        text_row = next(r for r in alpaca_rows if 20 <= len((r.output_text or "").split()) <= 60)
        text_messages: Any = text_row.messages
        completion = client.chat.completions.create(
            model="gpt-4o-mock",
            messages=text_messages,
        )
        assert completion.choices[0].message.content == text_row.output_text
        assert completion.choices[0].finish_reason == "stop"
        assert completion.usage is not None
        assert completion.usage.completion_tokens > 0

        started = time.perf_counter()
        first_content_at = None
        parts: list[str] = []
        usage_chunks = 0
        stream = client.chat.completions.create(
            model="gpt-4o-mock",
            messages=text_messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if not chunk.choices:
                usage_chunks += 1
                assert chunk.usage is not None
                continue
            content = chunk.choices[0].delta.content
            if content:
                first_content_at = first_content_at or time.perf_counter() - started
                parts.append(content)
        assert "".join(parts) == text_row.output_text
        assert usage_chunks == 1
        assert first_content_at is not None
        assert first_content_at >= 0.045  # TTFT 100 ms x time scale 0.5

        tool_row = next(r for r in bfcl_rows if len(r.tool_calls) >= 2)
        tool_messages: Any = tool_row.messages
        tools: Any = tool_row.tools
        completion = client.chat.completions.create(
            model="gpt-4o-mock",
            messages=tool_messages,
            tools=tools,
        )
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "tool_calls"
        assert message.tool_calls is not None
        assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [  # type: ignore[union-attr]
            (c.name, c.arguments) for c in tool_row.tool_calls
        ]
        assert completion.usage is not None
        assert completion.usage.prompt_tokens == tool_row.prompt_tokens

        calls: dict[int, dict[str, str]] = {}
        stream = client.chat.completions.create(
            model="gpt-4o-mock",
            messages=tool_messages,
            tools=tools,
            stream=True,
        )
        finish = None
        for chunk in stream:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                    if delta.function and delta.function.name:
                        call["name"] = delta.function.name
                    if delta.function and delta.function.arguments:
                        call["arguments"] += delta.function.arguments
        assert finish == "tool_calls"
        assert [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)] == [
            (c.name, c.arguments) for c in tool_row.tool_calls
        ]

        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(
                model="gpt-4o-mock", messages=[{"role": "user", "content": "never recorded"}]
            )
        assert info.value.code == "prompt_not_recorded"
