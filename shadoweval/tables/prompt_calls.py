"""Tool calls written as text (prompt mode), decoded the way BFCL decodes them.

A model without a native tool-calling API is given the tools in its prompt and writes
its calls into the answer text. The Hermes-2 family (NousResearch) writes each call as a
block::

    <tool_call>
    {"arguments": {"base": 10, "height": 5}, "name": "calculate_triangle_area"}
    </tool_call>

:func:`hermes_tool_calls` decodes such text as the Berkeley Function Calling
Leaderboard's Hermes handler (``decode_ast``) does, so that an import sees the calls the
official score saw (checked against every ``model_result_decoded`` of the score files of
``../shared/data/bfcl``): the text is split into lines; a line that is exactly
``<tool_call>`` opens a block, and the **next line** is the call: every ``'`` replaced by
``"``, then parsed as a JSON object with ``name`` and ``arguments``. Other lines of a
block are ignored (a call written over several lines fails on its first line, as it does
on the leaderboard). A call the leaderboard cannot decode (the line is not JSON after the
quote replacement — Python's ``True``, an apostrophe inside a string, a call cut off at
the token limit — or it lacks ``name`` or ``arguments``) is kept as a call whose
``arguments`` are that line as the decoder read it, and whose name is the ``"name"`` the
line writes (empty when none can be read): the tool-call checks then report the format
failure the official checker reported (``decoder_failed``: arguments that do not parse,
or a tool that is not offered) instead of seeing no call at all.

The text outside the blocks (whitespace stripped) is the answer's text; ``None`` when
there is none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from shadoweval.records import ToolCall
from shadoweval.tables.bfcl_schema import BfclLanguage
from shadoweval.tables.json_numbers import loads_keeping_numbers

__all__ = ["HERMES_CLOSE", "HERMES_OPEN", "TextToolCalls", "hermes_tool_calls"]

HERMES_OPEN = "<tool_call>"
"""The line that opens a Hermes tool-call block."""

HERMES_CLOSE = "</tool_call>"
"""The line that closes it."""

_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


@dataclass(frozen=True, slots=True)
class TextToolCalls:
    """The calls of a prompt-mode answer and the text around them.

    Attributes:
        text: the answer's text outside the blocks, stripped; ``None`` when empty.
        calls: one call per block, in order (``index`` from 0).
        undecodable: how many of ``calls`` the leaderboard could not decode.
    """

    text: str | None
    calls: tuple[ToolCall, ...]
    undecodable: int


def _decode(line: str, index: int, *, as_text: bool) -> tuple[ToolCall, bool]:
    """The call written on ``line``, and whether the leaderboard's decoder reads it."""
    quoted = line.replace("'", '"')
    try:
        value = loads_keeping_numbers(quoted)
    except ValueError:
        value = None
    if isinstance(value, dict):
        name, arguments = value.get("name"), value.get("arguments")
        if isinstance(name, str) and name and "arguments" in value:
            if as_text and isinstance(arguments, dict):
                arguments = {key: str(item) for key, item in arguments.items()}
            text = orjson.dumps(arguments).decode("utf-8")
            return ToolCall(index=index, name=name, arguments=text), True
    match = _NAME.search(quoted)
    name = match.group(1) if match else ""
    return ToolCall(index=index, name=name, arguments=quoted), False


def hermes_tool_calls(text: str, language: BfclLanguage = "python") -> TextToolCalls | None:
    """Decode the Hermes ``<tool_call>`` blocks of ``text`` (module docstring).

    ``language`` is the BFCL category's: for ``java`` and ``javascript`` every argument
    value becomes Python's ``str()`` of it (``True`` → ``"True"``, a list →
    ``"['a', 'b']"``), as the leaderboard's decoder casts them (those categories' schemas
    type every parameter as a string).

    Returns:
        ``None`` when no line of ``text`` is ``<tool_call>`` (a plain text answer), else
        the calls and the remaining text.
    """
    lines = text.split("\n")
    if HERMES_OPEN not in lines:
        return None
    calls: list[ToolCall] = []
    outside: list[str] = []
    undecodable = 0
    in_block = False
    expect_call = False
    for line in lines:
        if line == HERMES_OPEN:
            in_block = expect_call = True
        elif line == HERMES_CLOSE:
            in_block = expect_call = False
        elif expect_call:
            call, decoded = _decode(line, len(calls), as_text=language != "python")
            calls.append(call)
            undecodable += not decoded
            expect_call = False
        elif not in_block:
            outside.append(line)
    rest = "\n".join(outside).strip()
    return TextToolCalls(text=rest or None, calls=tuple(calls), undecodable=undecodable)
