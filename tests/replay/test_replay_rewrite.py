"""build_replay_request: allow-list, pinned sampling, credentials never forwarded, usage opt-in."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from shadoweval.llm_protocol import COMPLETION_SAMPLING_PARAMS, SAMPLING_PARAMS
from shadoweval.records import Exchange, RequestRecord, ResponseRecord, ToolCall
from shadoweval.replay.conversations import ResponsesConversations
from shadoweval.replay.rewrite import (
    DEFAULT_REPLAY_ROUTES,
    NOT_REPLAYED,
    SHADOW_MARKER_HEADER,
    ReplayRequest,
    SkipReplay,
    build_replay_request,
)
from tests.replay.conftest import chat_body, make_exchange

SECRET_HEADERS = (
    ("authorization", "Bearer sk-live-CLIENT-SECRET-1234"),
    ("cookie", "session=COOKIE-SECRET-5678; theme=dark"),
    ("x-api-key", "APIKEY-SECRET-9012"),
    ("api-key", "AZURE-SECRET-3456"),
    ("x-forwarded-for", "203.0.113.9"),
    ("host", "live-model.internal:8000"),
)


def _request(result: ReplayRequest | SkipReplay) -> ReplayRequest:
    assert isinstance(result, ReplayRequest), result
    return result


def _body(result: ReplayRequest | SkipReplay) -> dict[str, Any]:
    parsed: dict[str, Any] = orjson.loads(_request(result).body)
    return parsed


# ------------------------------------------------------------------ allow-list, skips


@pytest.mark.parametrize("path", ["/v1/files", "/v1/fine_tuning/jobs", "/v1/embeddings"])
def test_route_outside_allow_list_is_skipped_with_reason(path: str) -> None:
    exchange = make_exchange(chat_body(), path=path)
    result = build_replay_request(exchange)
    assert result == SkipReplay(exchange.exchange_id, f"route not replayable: {path}")


def _answered(exchange: Exchange, response_id: str, text: str, *calls: ToolCall) -> Exchange:
    response = ResponseRecord(status_code=200, text=text, tool_calls=calls, response_id=response_id)
    return exchange.model_copy(update={"response": response})


def test_responses_api_is_replayed_unstored_with_sampling_pinned() -> None:
    assert "/v1/responses" in DEFAULT_REPLAY_ROUTES
    assert "/v1/responses" not in NOT_REPLAYED
    body = {"model": "m", "input": "Say hi.", "temperature": 0, "stream": True, "store": True}
    request = _request(build_replay_request(make_exchange(body, path="/v1/responses"), model="c"))
    sent = orjson.loads(request.body)
    assert (request.path, request.stream) == ("/v1/responses", True)
    assert sent == {
        "model": "c",
        "input": "Say hi.",
        "temperature": 0,
        "stream": True,
        "store": False,
    }
    assert "stream_options" not in sent  # a Responses stream reports usage unasked
    assert request.pinned_params == {"temperature": 0, "store": False}
    assert "max_output_tokens" in request.missing_params


def test_previous_response_id_is_rebuilt_from_the_captured_turn_or_skipped_with_its_reason() -> (
    None
):
    index = ResponsesConversations(max_turns=2)
    first = _answered(
        make_exchange({"model": "m", "input": "Weather in Paris?"}, path="/v1/responses"),
        "resp_1",
        "",
        ToolCall(index=0, id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
    )
    second_body = {
        "model": "m",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
    }
    second = _answered(make_exchange(second_body, path="/v1/responses"), "resp_2", "Sunny.")
    unknown = make_exchange({"input": "x", "previous_response_id": "resp_9"}, path="/v1/responses")
    assert build_replay_request(second) == SkipReplay(
        second.exchange_id, ResponsesConversations().missing_reason("resp_1")
    )
    for exchange in (first, second):
        index.observe(exchange)
    sent = orjson.loads(_request(build_replay_request(second, conversations=index)).body)
    assert "previous_response_id" not in sent
    assert sent["input"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    # resp_2's conversation holds resp_1's rebuilt one: a third turn gets all of it
    assert index.items_before("resp_2") == [
        *sent["input"],
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
    ]
    skipped = build_replay_request(unknown, conversations=index)
    assert isinstance(skipped, SkipReplay)
    assert skipped.reason.startswith(
        "previous_response_id resp_9: the earlier turn was not captured"
    )
    # Beyond the bound the oldest turn is dropped, and the reason says so (never a wrong context).
    index.observe(_answered(make_exchange({"input": "y"}, path="/v1/responses"), "resp_3", "z"))
    dropped = build_replay_request(second, conversations=index)
    assert isinstance(dropped, SkipReplay)
    assert "1 older turns were dropped (the replay keeps the last 2)" in dropped.reason


def test_allow_list_is_configurable_and_exact() -> None:
    exchange = make_exchange({"model": "m", "prompt": "Say hi."}, path="/v1/completions")
    assert _request(build_replay_request(exchange)).path == "/v1/completions"
    only_chat = frozenset({"/v1/chat/completions"})
    assert isinstance(build_replay_request(exchange, routes=only_chat), SkipReplay)
    # Exact paths: a prefix does not match.
    extra = make_exchange(chat_body(), path="/v1/chat/completions/extra")
    assert isinstance(build_replay_request(extra), SkipReplay)
    # The query is not part of the route and is never sent to a shadow (a captured query
    # may hold masked credentials).
    queried = make_exchange(chat_body(), path="/v1/chat/completions?api_key=[REDACTED:x]")
    assert _request(build_replay_request(queried)).path == "/v1/chat/completions"


@pytest.mark.parametrize("path", ["/v1/chat/completions/", "/v1/chat/completions//?x=1"])
def test_trailing_slash_is_the_route_and_the_replay_goes_to_the_route(path: str) -> None:
    exchange = make_exchange(chat_body(), path=path)
    assert _request(build_replay_request(exchange)).path == "/v1/chat/completions"


# ------------------------------------------------------------------ legacy completions


def test_legacy_completion_is_replayed_with_its_prompt_and_pinned_params() -> None:
    body = {"model": "live", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 0.2}
    request = _request(build_replay_request(make_exchange(body, path="/v1/completions")))
    assert request.path == "/v1/completions"
    assert not request.stream
    assert orjson.loads(request.body) == body
    assert request.pinned_params == {"temperature": 0.2, "max_tokens": 16}
    assert "max_completion_tokens" not in request.missing_params  # not a completions field
    assert set(request.missing_params) == set(COMPLETION_SAMPLING_PARAMS) - {
        "temperature",
        "max_tokens",
    }


def test_streamed_legacy_completion_asks_for_usage() -> None:
    body = {"model": "live", "prompt": ["a", "b"], "stream": True}
    request = _request(
        build_replay_request(make_exchange(body, path="/v1/completions"), model="cand")
    )
    sent = orjson.loads(request.body)
    assert request.stream
    assert request.headers["accept"] == "text/event-stream"
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "cand"
    assert sent["prompt"] == ["a", "b"]


def test_completion_without_a_prompt_is_skipped_naming_the_field() -> None:
    exchange = make_exchange(chat_body(), path="/v1/completions")
    result = build_replay_request(exchange)
    assert isinstance(result, SkipReplay)
    assert result.reason.startswith("request is not a legacy completion: prompt:")


@pytest.mark.parametrize(
    "raw", ["this is not json", "[1, 2, 3]", '"a string"', "", '{"messages": ']
)
def test_non_json_object_body_is_skipped(raw: str) -> None:
    result = build_replay_request(make_exchange(raw))
    assert isinstance(result, SkipReplay)
    assert result.reason == "request body is not a JSON object"


def test_json_that_is_not_a_chat_request_is_skipped_naming_the_field() -> None:
    result = build_replay_request(make_exchange({"model": "m", "prompt": "hi"}))
    assert isinstance(result, SkipReplay)
    assert result.reason.startswith("request is not a chat completion: messages:")


def test_oversized_body_is_skipped_as_size_never_dropped() -> None:
    exchange = make_exchange(chat_body("x" * 5000))
    size = len(exchange.request.body_bytes())
    result = build_replay_request(exchange, max_body_bytes=1000)
    assert result == SkipReplay(exchange.exchange_id, f"size: request body {size} bytes > 1000")
    assert isinstance(build_replay_request(exchange, max_body_bytes=size), ReplayRequest)


def test_base64_body_is_decoded_before_replay() -> None:
    body = chat_body("Grüße 🙂")
    exchange = make_exchange(body).model_copy(
        update={
            "request": RequestRecord(
                body=base64.b64encode(orjson.dumps(body)).decode(), body_encoding="base64"
            )
        }
    )
    assert _body(build_replay_request(exchange))["messages"] == body["messages"]


# ------------------------------------------------------------------ sampling parameters


def test_sampling_params_pinned_exactly_and_missing_listed_not_invented() -> None:
    sampling: dict[str, Any] = {
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 42,
        "stop": ["\n\n", "END"],
    }
    exchange = make_exchange(chat_body(**sampling, top_k=40, logit_bias={"50256": -100}))
    request = _request(build_replay_request(exchange))
    assert request.pinned_params == {**sampling, "top_k": 40, "logit_bias": {"50256": -100}}
    assert set(request.missing_params) == set(SAMPLING_PARAMS) - set(request.pinned_params)
    assert request.missing_params == tuple(
        p for p in SAMPLING_PARAMS if p not in request.pinned_params
    )
    body = orjson.loads(request.body)
    for name, value in request.pinned_params.items():
        assert body[name] == value
    for name in request.missing_params:
        assert name not in body, f"{name} was invented"


def test_request_without_sampling_params_lists_all_missing_and_sends_none() -> None:
    request = _request(build_replay_request(make_exchange(chat_body())))
    assert request.pinned_params == {}
    assert request.missing_params == SAMPLING_PARAMS
    assert set(orjson.loads(request.body)) == {"model", "messages"}


def test_explicit_null_sampling_param_is_missing_not_pinned() -> None:
    request = _request(build_replay_request(make_exchange(chat_body(temperature=None))))
    assert "temperature" in request.missing_params
    assert "temperature" not in request.pinned_params


def test_zero_temperature_is_pinned_not_treated_as_unset() -> None:
    request = _request(build_replay_request(make_exchange(chat_body(temperature=0, seed=0))))
    assert request.pinned_params == {"temperature": 0, "seed": 0}
    assert orjson.loads(request.body)["temperature"] == 0


def test_every_other_request_field_is_replayed_unchanged() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = chat_body(
        tools=tools,
        tool_choice="auto",
        response_format={"type": "json_object"},
        user="end-user-17",
        metadata={"a": 1},
    )
    assert _body(build_replay_request(make_exchange(body))) == body


# ----------------------------------------------------------------------- model


def test_model_override_replaces_only_the_model_field() -> None:
    body = chat_body(temperature=0.2)
    result = _body(build_replay_request(make_exchange(body), model="candidate-v2"))
    assert result == {**body, "model": "candidate-v2"}


def test_no_model_override_keeps_the_captured_model() -> None:
    assert _body(build_replay_request(make_exchange(chat_body())))["model"] == "baseline-v1"


# ------------------------------------------------------------------- credentials


def test_captured_credentials_are_never_forwarded() -> None:
    exchange = make_exchange(chat_body(), headers=SECRET_HEADERS)
    assert {h.name for h in exchange.request.headers} >= {"authorization", "cookie", "x-api-key"}
    request = _request(build_replay_request(exchange, api_key="shadow-key"))
    names = {k.lower() for k in request.headers}
    assert not names & {"cookie", "x-api-key", "api-key", "x-forwarded-for", "host"}
    assert request.headers["authorization"] == "Bearer shadow-key"
    everything = repr(request).encode() + request.body
    for _, secret in SECRET_HEADERS:
        assert secret.encode() not in everything


def test_shadow_credential_and_marker_headers() -> None:
    exchange = make_exchange(chat_body(), headers=SECRET_HEADERS)
    request = _request(build_replay_request(exchange, api_key="shadow-key"))
    assert dict(request.headers) == {
        "content-type": "application/json",
        "accept": "application/json",
        SHADOW_MARKER_HEADER: "replay",
        f"{SHADOW_MARKER_HEADER}-exchange-id": exchange.exchange_id,
        "authorization": "Bearer shadow-key",
    }


@pytest.mark.parametrize("api_key", [None, ""])
def test_without_shadow_credential_no_authorization_at_all(api_key: str | None) -> None:
    exchange = make_exchange(chat_body(), headers=SECRET_HEADERS)
    request = _request(build_replay_request(exchange, api_key=api_key))
    assert "authorization" not in {k.lower() for k in request.headers}


# ------------------------------------------------------------------ streaming, usage


def test_non_streamed_capture_is_replayed_without_stream_options() -> None:
    request = _request(build_replay_request(make_exchange(chat_body(stream=False))))
    assert request.stream is False
    body = orjson.loads(request.body)
    assert "stream_options" not in body
    assert body["stream"] is False
    assert request.headers["accept"] == "application/json"


def test_streamed_capture_gets_include_usage_on_the_replay_only() -> None:
    captured = chat_body(stream=True)
    exchange = make_exchange(captured)
    request = _request(build_replay_request(exchange))
    assert request.stream is True
    assert request.headers["accept"] == "text/event-stream"
    assert orjson.loads(request.body)["stream_options"] == {"include_usage": True}
    # The captured exchange (what the live path saw) is untouched.
    assert orjson.loads(exchange.request.body) == captured
    assert "stream_options" not in exchange.request.body


def test_streamed_capture_that_declined_usage_is_asked_for_it_on_the_replay() -> None:
    captured = chat_body(
        stream=True, stream_options={"include_usage": False, "continuous_usage_stats": True}
    )
    exchange = make_exchange(captured)
    body = _body(build_replay_request(exchange))
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert orjson.loads(exchange.request.body)["stream_options"]["include_usage"] is False


def test_stream_options_on_a_non_streamed_capture_are_left_alone() -> None:
    captured = chat_body(stream_options={"include_usage": False})
    assert _body(build_replay_request(make_exchange(captured))) == captured


def test_rewrite_is_pure() -> None:
    exchange = make_exchange(chat_body(stream=True, temperature=0.1), headers=SECRET_HEADERS)
    before = exchange.model_dump(mode="json")
    first = build_replay_request(exchange, model="c", api_key="k")
    second = build_replay_request(exchange, model="c", api_key="k")
    assert first == second
    assert exchange.model_dump(mode="json") == before
