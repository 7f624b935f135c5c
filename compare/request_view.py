"""What the scorers read of a captured request: JSON wanted, tools offered, prompt, budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from shadoweval.llm_protocol.messages_request import UntranslatableRequestError, chat_tools
from shadoweval.llm_protocol.models import ChatCompletionRequest, ResponseFormat, ToolDefinition
from shadoweval.llm_protocol.responses_request import input_items, messages_of, response_tools
from shadoweval.records import Exchange
from shadoweval.routes import MESSAGES, RESPONSES, normalize_route

_Part = TypeVar("_Part", ResponseFormat, ToolDefinition)


@dataclass(frozen=True, slots=True)
class RequestView:
    """What the scorers need from a captured request body.

    ``wants_json``: ``response_format`` is ``json_object`` or ``json_schema``;
    ``schema``: the ``json_schema`` schema, if any; ``tools``: the offered tools (empty
    when none); ``stream``: the request asked for a streamed response; ``prompt``: the
    text of the last ``user`` message (text parts — chat parts or Messages ``text``
    blocks — joined by newlines; a completions
    ``prompt`` string), ``None`` when there is none; ``max_tokens``: the token budget
    (``max_completion_tokens``, else ``max_tokens``; a positive integer or ``None``);
    ``sampled``: see :attr:`~shadoweval.records.PairScore.sampled`.
    """

    wants_json: bool = False
    schema: dict[str, Any] | None = None
    tools: tuple[ToolDefinition, ...] = ()
    stream: bool = False
    prompt: str | None = None
    max_tokens: int | None = None
    sampled: bool | None = None


def request_view(exchange: Exchange) -> RequestView:
    """Read ``response_format`` and ``tools`` from the captured request body (a Responses
    API body's ``text.format``, flat ``tools``, ``input`` and ``max_output_tokens`` read as
    their chat counterparts; a Messages API request's ``tools`` ``{name, description,
    input_schema}`` read as chat tools).

    Lenient: a body that is not a chat-completions request (e.g. ``/v1/completions``
    with a ``prompt``) still yields whichever of the two parts parse on their own; a
    body that is not a JSON object yields an empty view. Never raises.
    """
    body = exchange.request.json_body()
    if body is None:
        return RequestView()
    if normalize_route(exchange.request.path or exchange.route) == RESPONSES:
        body = _as_chat(body)
    try:
        request = ChatCompletionRequest.model_validate(body)
        response_format, tools = request.response_format, tuple(request.tools or ())
    except ValidationError:
        response_format = _lenient(ResponseFormat, body.get("response_format"))
        raw_tools = body.get("tools")
        candidates = raw_tools if isinstance(raw_tools, list) else []
        parsed = (_lenient(ToolDefinition, raw) for raw in candidates)
        tools = tuple(tool for tool in parsed if tool is not None)
    if normalize_route(exchange.request.path or exchange.route) == MESSAGES:
        tools = _messages_tools(body.get("tools"))
    wants_json = response_format is not None and response_format.type in (
        "json_object",
        "json_schema",
    )
    schema = response_format.schema_dict() if response_format is not None else None
    if schema is None and response_format is not None and response_format.type == "json_object":
        schema = {"type": "object"}  # JSON mode promises an object, not any JSON value
    return RequestView(
        wants_json=wants_json,
        schema=schema,
        tools=tools,
        stream=body.get("stream") is True,
        prompt=_prompt_text(body),
        max_tokens=_token_budget(body),
        sampled=_sampled(body),
    )


def _messages_tools(raw: object) -> tuple[ToolDefinition, ...]:
    """A Messages request's custom tools (``input_schema`` → ``parameters``); a server
    tool, which has no schema to check calls against, is left out."""
    tools = raw if isinstance(raw, list) else []
    out: list[ToolDefinition] = []
    for tool in tools:
        try:
            out.extend(ToolDefinition.model_validate(t) for t in chat_tools([tool]))
        except (UntranslatableRequestError, ValidationError):
            continue
    return tuple(out)


def _as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses API body read as the chat fields the view takes: ``text.format``
    (``{type: json_schema, schema}`` / ``{type: json_object}``) → ``response_format``; flat
    function ``tools`` → chat tools; ``input`` → ``messages`` (the last user input is the
    prompt); ``max_output_tokens`` → ``max_tokens``."""
    chat: dict[str, Any] = {k: body[k] for k in ("stream", "temperature") if k in body}
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and isinstance(fmt.get("type"), str):
        chat["response_format"] = {"type": fmt["type"], "json_schema": fmt}
    tools = response_tools(body.get("tools"))
    if tools:
        chat["tools"] = [tool.model_dump(exclude_none=True) for tool in tools]
    chat["messages"] = messages_of(input_items(body.get("input")))
    chat["max_tokens"] = body.get("max_output_tokens")
    return chat


def _prompt_text(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _content_text(message.get("content"))
        return None
    return _content_text(body.get("prompt"))


def _content_text(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part if isinstance(part, str) else part.get("text")
            for part in content
            if isinstance(part, str | dict)
        ]
        texts = [part for part in parts if isinstance(part, str)]
        return "\n".join(texts) if texts else None
    return None


def _token_budget(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if value > 0 and float(value).is_integer():
            return int(value)
    return None


def _sampled(body: dict[str, Any]) -> bool | None:
    temperature = body.get("temperature")
    if temperature is None:
        return True  # not given: the server's default temperature samples
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        return None
    if temperature < 0 or temperature != temperature:  # negative or NaN: unreadable
        return None
    return temperature > 0


def _lenient(model: type[_Part], value: object) -> _Part | None:
    if not isinstance(value, dict):
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None
