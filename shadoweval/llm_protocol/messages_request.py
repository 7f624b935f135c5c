"""A Messages API request (``POST /v1/messages``): its lenient model, and its translation
to an OpenAI chat-completions request (pure).

Source: Anthropic's Messages API reference (request body: ``model``, ``messages`` whose
``content`` is a string or a list of blocks, ``system``, ``max_tokens`` — required —,
``temperature``, ``top_p``, ``top_k``, ``stop_sequences``, ``tools`` ``[{name,
description, input_schema}]``, ``tool_choice``, ``stream``, ``thinking``, ``metadata``) and
OpenAI's chat-completions reference.

The translation (:func:`messages_to_chat`) is what a replay sends when the policy's replay
settings say a candidate speaks chat completions only
(``replay.candidate_translate: {/v1/messages: /v1/chat/completions}``):

=====================================  ==================================================
Messages                               chat completions
=====================================  ==================================================
``system`` (string or text blocks)     a first ``system`` message
``text`` blocks                        the message's ``content`` (joined)
``tool_use`` blocks (assistant)        ``tool_calls`` (``input`` → ``arguments`` JSON)
``tool_result`` blocks (user)          ``tool`` messages (``tool_use_id`` →
                                       ``tool_call_id``), before the turn's text
``tools[].input_schema``               ``tools[].function.parameters``
``tool_choice`` auto / any / tool /    ``auto`` / ``required`` / ``{function: {name}}`` /
none                                   ``none``; ``disable_parallel_tool_use`` →
                                       ``parallel_tool_calls: false``
``max_tokens``, ``temperature``,       the same names
``top_p``
``stop_sequences``                     ``stop``
``stream``                             ``stream``
=====================================  ==================================================

Never silent: what has no chat-completions field is dropped and *named* in
:attr:`ChatTranslation.losses` (``top_k``, ``thinking``, ``metadata``, thinking blocks of
earlier assistant turns, ``cache_control`` hints, a tool result's ``is_error``, any other
top-level field). What cannot be translated without changing the question — an image or
document block, a server tool (``web_search_…``), a tool result holding an image — raises
:class:`UntranslatableRequestError` naming the field and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from shadoweval.llm_protocol.models import _split_params
from shadoweval.routes import CHAT_COMPLETIONS, MESSAGES

__all__ = [
    "ANTHROPIC_VERSION",
    "MESSAGES_SAMPLING_PARAMS",
    "TRANSLATIONS",
    "ChatTranslation",
    "MessagesRequest",
    "UntranslatableRequestError",
    "chat_tools",
    "messages_as_chat",
    "messages_to_chat",
    "translate_request",
]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header a replay sends with its ``x-api-key`` (the API's
current version; the official SDKs send the same)."""

TRANSLATIONS: frozenset[tuple[str, str]] = frozenset({(MESSAGES, CHAT_COMPLETIONS)})
"""The (captured route, candidate route) pairs a replay can translate between."""

MESSAGES_SAMPLING_PARAMS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "stop_sequences",
    "thinking",
)
"""Messages request fields that change what a model samples (a replay pins each one set)."""

_TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
    }
)
"""Top-level fields :func:`messages_to_chat` carries over; any other one is a named loss."""


class MessagesMessage(BaseModel):
    """One turn: ``role`` (``user`` / ``assistant``) and ``content`` (string or blocks)."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]]


class MessagesRequest(BaseModel):
    """A ``POST /v1/messages`` body, leniently parsed (unknown fields kept)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[MessagesMessage]
    system: str | list[dict[str, Any]] | None = None
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop_sequences: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    stream: bool | None = None
    thinking: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    def sampling_params(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Split :data:`MESSAGES_SAMPLING_PARAMS` into (present name → value, names not set)."""
        return _split_params(self, MESSAGES_SAMPLING_PARAMS)


class UntranslatableRequestError(ValueError):
    """A Messages request that has no chat-completions equivalent; the message names the
    field (``messages[2].content[0].type``) and its value."""


@dataclass(frozen=True, slots=True)
class ChatTranslation:
    """A chat-completions request ``body`` and the ``losses``: Messages fields dropped on
    the way, each named with why (``"top_k: no chat-completions field"``)."""

    body: dict[str, Any]
    losses: tuple[str, ...]


def _text_blocks(blocks: list[dict[str, Any]], where: str, losses: list[str]) -> str:
    """The text of ``text`` blocks joined; any other block type is untranslatable."""
    parts = []
    for j, block in enumerate(blocks):
        if block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise UntranslatableRequestError(
                f"{where}[{j}].type: {block.get('type')!r} cannot be translated to chat "
                "completions (text blocks only here)"
            )
        if "cache_control" in block:
            losses.append(f"{where}[{j}].cache_control: prompt-caching hint dropped")
        parts.append(block["text"])
    return "".join(parts)


def _tool_result(block: dict[str, Any], where: str, losses: list[str]) -> dict[str, Any]:
    content = block.get("content", "")
    text = (
        content if isinstance(content, str) else _text_blocks(content, f"{where}.content", losses)
    )
    if block.get("is_error"):
        losses.append(f"{where}.is_error: the error flag has no chat-completions field")
    return {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}


def _turn(message: MessagesMessage, where: str, losses: list[str]) -> list[dict[str, Any]]:
    """One Messages turn as chat messages (tool results first, as chat wants them right
    after the assistant's tool calls)."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    tool_messages: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(message.content):
        kind, at = block.get("type"), f"{where}.content[{j}]"
        if kind == "tool_result":
            tool_messages.append(_tool_result(block, at, losses))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind in ("thinking", "redacted_thinking"):
            losses.append(f"{at}.type: {kind} block of an earlier turn dropped")
        else:
            texts.append(block)
    out = tool_messages
    text = _text_blocks(texts, f"{where}.content", losses) if texts else None
    if text is not None or calls:
        turn: dict[str, Any] = {"role": message.role, "content": text}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def chat_tools(tools: object) -> list[dict[str, Any]]:
    """Messages ``tools`` (``{name, description, input_schema}``) as chat ``tools``
    (``{type: function, function: {name, description, parameters}}``).

    Raises:
        UntranslatableRequestError: a tool is not a custom tool (a server tool such as
            ``web_search_20250305`` has a ``type`` and no ``input_schema``), or ``tools`` is
            not a list.
    """
    if not isinstance(tools, list):
        raise UntranslatableRequestError(f"tools: {type(tools).__name__} is not a list")
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type", "custom") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or kind != "custom" or "input_schema" not in tool:
            raise UntranslatableRequestError(
                f"tools[{i}].type: {kind!r} is a server tool (or not a tool with "
                "input_schema): no chat-completions function to translate it to"
            )
        function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Mapping[str, Any], out: dict[str, Any]) -> None:
    kind = choice.get("type")
    mapped: dict[str, Any] = {
        "auto": "auto",
        "any": "required",
        "none": "none",
        "tool": {"type": "function", "function": {"name": choice.get("name")}},
    }
    if kind not in mapped:
        raise UntranslatableRequestError(f"tool_choice.type: {kind!r} has no chat-completions form")
    out["tool_choice"] = mapped[kind]
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False


def messages_as_chat(request: MessagesRequest, losses: list[str]) -> list[dict[str, Any]]:
    """The conversation as chat messages (``system`` first); losses appended to ``losses``.

    Raises:
        UntranslatableRequestError: a block or ``system`` part has no chat-completions form.
    """
    out: list[dict[str, Any]] = []
    if isinstance(request.system, str):
        out.append({"role": "system", "content": request.system})
    elif request.system:
        out.append({"role": "system", "content": _text_blocks(request.system, "system", losses)})
    for i, message in enumerate(request.messages):
        out.extend(_turn(message, f"messages[{i}]", losses))
    return out


def messages_to_chat(body: Mapping[str, Any]) -> ChatTranslation:
    """Translate a Messages request body to a chat-completions body (module doc's table).

    Raises:
        UntranslatableRequestError: the request cannot be translated (the message names the
            field and the value).
        pydantic.ValidationError: ``body`` is not a Messages request.
    """
    request = MessagesRequest.model_validate(body)
    losses: list[str] = []
    out: dict[str, Any] = {"messages": messages_as_chat(request, losses)}
    for name in ("model", "max_tokens", "temperature", "top_p", "stream"):
        if body.get(name) is not None:
            out[name] = body[name]
    if request.stop_sequences is not None:
        out["stop"] = request.stop_sequences
    if request.tools is not None:
        out["tools"] = chat_tools(request.tools)
    if request.tool_choice is not None:
        _tool_choice(request.tool_choice, out)
    for name in sorted(set(body) - _TRANSLATED):
        if body[name] is not None:
            losses.append(f"{name}: no chat-completions field, dropped")
    return ChatTranslation(out, tuple(losses))


def translate_request(source: str, target: str, body: Mapping[str, Any]) -> ChatTranslation | str:
    """Translate a captured ``source``-route body for a ``target``-route candidate.

    Returns the :class:`ChatTranslation`, or — for a request that cannot be translated —
    the skip reason ``"untranslatable for <target>: <field>: <value> …"``.

    Raises:
        ValueError: ``(source, target)`` is not in :data:`TRANSLATIONS` (the settings
            validate it first).
    """
    if (source, target) not in TRANSLATIONS:
        raise ValueError(f"no translation from {source} to {target}")
    try:
        return messages_to_chat(body)
    except UntranslatableRequestError as exc:
        return f"untranslatable for {target}: {exc}"
