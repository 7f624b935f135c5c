"""Requests of the OpenAI Responses API (``POST /v1/responses``), leniently read.

Source: the OpenAI API reference, "Create a model response". A request carries ``input`` (a
string, or a list of *input items*: messages ``{role, content}`` whose content is a string
or ``input_text``/``output_text`` parts, ``function_call`` ``{call_id, name, arguments}``,
``function_call_output`` ``{call_id, output}``, ``reasoning`` items …), ``instructions`` (a
system message that is *not* carried to a later turn), flat function ``tools``
(``{type: function, name, parameters}``), ``text.format`` (``json_schema`` with its
``schema``, or ``json_object``), ``max_output_tokens``, ``temperature``/``top_p``,
``reasoning``, ``stream``, ``store`` and ``previous_response_id`` (the server's stored
conversation this turn continues).

:func:`messages_of` gives the chat-completions view of a conversation (the mock server's
prompt key, the scorers' prompt), :func:`answer_items` the input items that stand for an
answer in a later turn (how the replay rebuilds a stored conversation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shadoweval.llm_protocol.models import (
    FunctionDefinition,
    OpenAIModel,
    StreamOptions,
    ToolDefinition,
    _split_params,
)
from shadoweval.records import ToolCall

__all__ = [
    "RESPONSES_SAMPLING_PARAMS",
    "ResponsesRequest",
    "answer_items",
    "input_items",
    "messages_of",
    "response_tools",
]

RESPONSES_SAMPLING_PARAMS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "max_output_tokens",
    "reasoning",
    "top_logprobs",
)
"""Request fields of a Responses request that change what a model samples (a replay pins
each one it finds)."""


class ResponsesRequest(OpenAIModel):
    """A ``POST /v1/responses`` body, leniently parsed (unknown fields kept)."""

    model: str | None = None
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    input: str | list[Any]
    reasoning: dict[str, Any] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    store: bool | None = None
    previous_response_id: str | None = None

    def sampling_params(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Split :data:`RESPONSES_SAMPLING_PARAMS` into (present name → value, not set);
        the present ones also hold ``store: False``, which every replay sends
        (:mod:`shadoweval.replay.rewrite`)."""
        present, missing = _split_params(self, RESPONSES_SAMPLING_PARAMS)
        return present | {"store": False}, missing


def input_items(value: object) -> list[dict[str, Any]]:
    """A request's ``input`` as a list of items: a string is one ``user`` message; items
    that are not JSON objects are left out."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return [dict(item) for item in value if isinstance(item, Mapping)]
    return []


def answer_items(text: str | None, tool_calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The input items that stand for an answer in a later turn: an ``assistant`` message
    with its ``output_text`` (when it said something), then one ``function_call`` item per
    call (``call_id`` = the call's id, which the next turn's ``function_call_output`` names).
    Reasoning items are not carried (without ``store`` a server cannot resolve them)."""
    items: list[dict[str, Any]] = []
    if text:
        items.append({"role": "assistant", "content": [{"type": "output_text", "text": text}]})
    for call in tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id or f"call_{call.index}",
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    return items


def _part_text(content: object) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else ()
    return "".join(
        str(part.get("text"))
        for part in parts
        if isinstance(part, Mapping) and isinstance(part.get("text"), str)
    )


def messages_of(
    items: Iterable[Mapping[str, Any]], instructions: str | None = None
) -> list[dict[str, Any]]:
    """The chat-completions messages a conversation of input items reads as.

    ``instructions`` → a first ``system`` message; a message item → ``{role, content}`` (its
    text parts joined); ``function_call`` items → ``tool_calls`` of the assistant message
    just before them (a new empty assistant message when there is none);
    ``function_call_output`` → a ``tool`` message; other items (reasoning, …) are left out.
    """
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": _part_text(item.get("content"))})
        elif kind == "function_call":
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant" or last.get("tool_calls") is None:
                if last is None or last["role"] != "assistant":
                    last = {"role": "assistant", "content": ""}
                    messages.append(last)
                last["tool_calls"] = []
            last["tool_calls"].append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else _part_text(output),
                }
            )
    return messages


def response_tools(tools: object) -> tuple[ToolDefinition, ...]:
    """Flat Responses function tools (``{type: function, name, description, parameters,
    strict}``) as chat :class:`ToolDefinition` s; built-in tools (web search, …) and entries
    that are no function tool are left out."""
    out: list[ToolDefinition] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            continue
        name = tool.get("name")
        if not isinstance(name, str):
            continue
        parameters = tool.get("parameters")
        description = tool.get("description")
        strict = tool.get("strict")
        out.append(
            ToolDefinition(
                type="function",
                function=FunctionDefinition(
                    name=name,
                    description=description if isinstance(description, str) else None,
                    parameters=parameters if isinstance(parameters, dict) else None,
                    strict=strict if isinstance(strict, bool) else None,
                ),
            )
        )
    return tuple(out)
