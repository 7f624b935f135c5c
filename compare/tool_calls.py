"""Tool-call checks of one response: arguments parse, tool is offered, arguments fit schema.

For every call of an assistant message (OpenAI ``tool_calls``):

1. ``arguments`` (a JSON string as sent) must parse strictly as a JSON **object**
   (:func:`shadoweval.compare.json_parse.parse_json`; nothing is repaired, so arguments with ``//``
   comments fail, as 3 of 4,844 real BFCL gpt-4o calls do). An empty string fails too:
   OpenAI sends ``"{}"`` for a call without arguments.
2. ``name`` must be one of the offered ``tools``' function names (exact match), else
   ``unknown_tool``. With no tools offered every call is unknown.
3. The parsed arguments must validate against that function's ``parameters`` JSON Schema
   (:mod:`shadoweval.compare.schemas`: the schema's ``$schema`` or Draft 2020-12, never the
   network). A function without ``parameters`` accepts any object. A ``parameters``
   schema that is itself invalid (BFCL's ``"type": "dict"``) makes the call
   schema-invalid with a detail saying the schema is invalid; it never raises.

Flags aggregate over calls with "all": ``arguments_parse`` is true when every call's
arguments parse, ``schema_valid`` when every call parses, names an offered tool and
validates; ``unknown_tool`` when any call names a tool not offered. With zero calls the
flags are vacuously true and ``calls == 0`` tells a text answer apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from shadoweval.compare.json_parse import parse_json
from shadoweval.compare.schemas import check_against_schema
from shadoweval.llm_protocol.models import ToolDefinition
from shadoweval.records import ToolCall, ToolCallFlags

__all__ = ["tool_call_flags"]

_DETAIL_LIMIT: Final = 600


def tool_call_flags(
    calls: Sequence[ToolCall], tools: Sequence[ToolDefinition] | None
) -> ToolCallFlags:
    """Check every tool call of one response against the tools the request offered.

    Args:
        calls: the response's tool calls (:attr:`ResponseRecord.tool_calls`).
        tools: the request's ``tools`` (:attr:`ChatCompletionRequest.tools`), or ``None``.

    Returns:
        :class:`~shadoweval.records.ToolCallFlags`; ``detail`` lists each failing call as
        ``call <index> <name>: <reason>`` separated by ``"; "`` (trimmed to 600
        characters), ``None`` when all pass. Never raises.
    """
    offered = {tool.function.name: tool for tool in tools or ()}
    all_parse = True
    all_valid = True
    unknown = False
    problems: list[str] = []
    for call in calls:
        label = f"call {call.index} {call.name}"
        parsed = parse_json(call.arguments)
        if not parsed.ok:
            reason = "empty" if not call.arguments.strip() else parsed.error
            problems.append(f"{label}: arguments do not parse as JSON ({reason})")
            all_parse = False
        elif not isinstance(parsed.value, dict):
            kind = _json_type(parsed.value)
            problems.append(f"{label}: arguments are a JSON {kind}, not an object")
            all_parse = False
        tool = offered.get(call.name)
        if tool is None:
            unknown = True
            all_valid = False
            problems.append(f"{label}: tool not offered")
            continue
        if not parsed.ok or not isinstance(parsed.value, dict):
            all_valid = False
            continue
        schema = tool.function.parameters
        if schema is None:
            continue
        check = check_against_schema(parsed.value, schema)
        if not check.valid:
            all_valid = False
            problems.append(f"{label}: {check.detail}")
    detail = "; ".join(problems) if problems else None
    if detail is not None and len(detail) > _DETAIL_LIMIT:
        detail = detail[: _DETAIL_LIMIT - 1] + "…"
    return ToolCallFlags(
        calls=len(calls),
        arguments_parse=all_parse,
        schema_valid=all_valid,
        unknown_tool=unknown,
        detail=detail,
    )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "null" if value is None else "value"
