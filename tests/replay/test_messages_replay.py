"""Replaying a captured Messages API request (``/v1/messages``): as Messages, or translated
to chat completions for an OpenAI-compatible candidate (``replay.candidate_translate``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from shadoweval.compare.request_view import request_view
from shadoweval.config import ReplaySettings
from shadoweval.llm_protocol.messages_request import ANTHROPIC_VERSION, messages_to_chat
from shadoweval.records import Exchange, ModelIdentity, RequestRecord, utc_now
from shadoweval.replay.rewrite import (
    DEFAULT_REPLAY_ROUTES,
    ReplayRequest,
    SkipReplay,
    build_replay_request,
)

TRANSLATE = {"/v1/messages": "/v1/chat/completions"}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
BODY: dict[str, Any] = {
    "model": "claude-live",
    "max_tokens": 256,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "call the tool", "signature": "s"},
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ],
    "tools": TOOLS,
    "tool_choice": {"type": "any"},
    "temperature": 0.2,
    "top_k": 40,
    "stop_sequences": ["\n\nHuman:"],
    "metadata": {"user_id": "u-123"},
    "stream": True,
}


def exchange(body: dict[str, Any], path: str = "/v1/messages") -> Exchange:
    return Exchange(
        exchange_id="ex-1",
        captured_at=utc_now(),
        route=path,
        request=RequestRecord(path=path, body=orjson.dumps(body).decode()),
        baseline_model=ModelIdentity(name="claude-live"),
    )


def test_a_messages_request_is_replayed_as_messages_with_anthropic_credentials() -> None:
    assert "/v1/messages" in DEFAULT_REPLAY_ROUTES
    request = build_replay_request(exchange(BODY), model="claude-next", api_key="sk-ant-shadow")
    assert isinstance(request, ReplayRequest)
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-shadow"
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in request.headers
    sent = orjson.loads(request.body)
    assert sent == BODY | {"model": "claude-next"}  # nothing added (no stream_options)
    assert request.pinned_params == {
        "temperature": 0.2, "top_k": 40, "max_tokens": 256, "stop_sequences": ["\n\nHuman:"]
    }  # fmt: skip
    assert request.missing_params == ("top_p", "thinking")


def test_without_max_tokens_it_is_skipped_naming_the_field() -> None:
    body = {k: v for k, v in BODY.items() if k != "max_tokens"}
    skip = build_replay_request(exchange(body))
    assert isinstance(skip, SkipReplay)
    assert skip.reason == "request is not a Messages API request: max_tokens: Field required"


def test_translated_to_chat_completions_for_an_openai_candidate() -> None:
    request = build_replay_request(exchange(BODY), api_key="sk-shadow", translate=TRANSLATE)
    assert isinstance(request, ReplayRequest)
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-shadow"
    assert "x-api-key" not in request.headers
    sent = orjson.loads(request.body)
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city.",
                "parameters": TOOLS[0]["input_schema"],
            },
        }
    ]
    assert sent["tool_choice"] == "required"
    assert sent["stop"] == ["\n\nHuman:"]
    assert (sent["max_tokens"], sent["temperature"], sent["stream"]) == (256, 0.2, True)
    assert sent["stream_options"] == {"include_usage": True}
    for dropped in ("top_k", "metadata", "thinking", "stop_sequences", "system"):
        assert dropped not in sent
    # every loss is named, never silent
    losses = [m for m in request.missing_params if ":" in m]
    assert "top_k: no chat-completions field, dropped" in losses
    assert "metadata: no chat-completions field, dropped" in losses
    assert "system[0].cache_control: prompt-caching hint dropped" in losses
    assert "messages[1].content[0].type: thinking block of an earlier turn dropped" in losses


def test_an_untranslatable_request_is_skipped_naming_field_and_value() -> None:
    body = dict(BODY)
    body["messages"] = [
        {
            "role": "user",
            "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}],
        }
    ]
    skip = build_replay_request(exchange(body), translate=TRANSLATE)
    assert isinstance(skip, SkipReplay)
    assert skip.reason.startswith(
        "untranslatable for /v1/chat/completions: messages[0].content[0].type: 'image'"
    )
    server_tool = dict(BODY, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    skip = build_replay_request(exchange(server_tool), translate=TRANSLATE)
    assert isinstance(skip, SkipReplay)
    assert "tools[0].type: 'web_search_20250305'" in skip.reason
    # without the setting, the same request is replayed as Messages
    assert isinstance(build_replay_request(exchange(body)), ReplayRequest)


def test_tool_choice_forms() -> None:
    for choice, expected in (
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ):
        assert messages_to_chat(BODY | {"tool_choice": choice}).body["tool_choice"] == expected
    parallel = {"type": "auto", "disable_parallel_tool_use": True}
    assert messages_to_chat(BODY | {"tool_choice": parallel}).body["parallel_tool_calls"] is False


def test_the_setting_names_an_unknown_translation() -> None:
    with pytest.raises(ValueError, match=r"/v1/messages=/v1/responses is not a known translation"):
        ReplaySettings(candidate_translate={"/v1/messages": "/v1/responses"})
    with pytest.raises(ValueError, match="'x' is not FROM=TO"):
        ReplaySettings(candidate_translate=["x"])
    assert (
        ReplaySettings(
            candidate_translate=["/v1/messages=/v1/chat/completions"]
        ).candidate_translate
        == TRANSLATE
    )


def test_the_request_view_reads_a_messages_request() -> None:
    view = request_view(exchange(BODY))
    assert [t.function.name for t in view.tools] == ["get_weather"]
    assert view.tools[0].function.parameters == TOOLS[0]["input_schema"]
    assert view.prompt == "And tomorrow?"
    assert view.max_tokens == 256
    assert view.sampled is True
    assert view.stream is True
    assert request_view(exchange(BODY | {"temperature": 0})).sampled is False
