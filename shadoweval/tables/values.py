"""Cell values of recorded tables: normalization and per-field parsing.

pandas hands cells over in several shapes depending on the file format: Python objects
from JSON, strings from CSV (read with ``dtype=str``), NumPy arrays and scalars from
Parquet list/struct columns, ``NaN``/``pd.NA``/``NaT`` for missing cells. :func:`to_python`
turns all of them into plain JSON-like Python values first; the parsers below then
either return a value or raise :class:`RowRejected` with a short machine-friendly
``reason`` (the row is reported, never dropped).

Cells that should hold structures (a message list, tools, tool calls) may also hold
their JSON text, which is how CSV stores them; such text is parsed.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, Literal

import numpy as np
import orjson

from shadoweval.records import ToolCall
from shadoweval.tables.bfcl_schema import BfclLanguage
from shadoweval.tables.prompt_calls import hermes_tool_calls

OutputFormat = Literal["text", "openai", "bfcl"]


class RowRejected(Exception):  # noqa: N818 - a control-flow signal, not an error type
    """A row that cannot become a :class:`~shadoweval.tables.RecordedRow`.

    Attributes:
        reason: short machine-friendly reason (``"missing_output"``, ``"bad_number"``).
        detail: human-readable explanation naming the column.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def to_python(value: object) -> Any:
    """Return ``value`` as plain JSON-like Python: NumPy/pandas → builtins, missing → ``None``.

    Recurses into dicts, lists, tuples and NumPy arrays. Floats that are NaN become
    ``None`` (pandas' missing marker); infinities are kept (and rejected where a number
    must be finite). Timestamps become ISO-8601 strings, bytes are decoded as UTF-8.
    """
    if value is None or _is_pandas_missing(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return to_python(value.item())
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, (datetime, date)):  # pandas' Timestamp is a datetime
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _is_pandas_missing(value: object) -> bool:
    """``pd.NA`` or ``pd.NaT``. pandas is looked up, not imported: a table read without it
    (the light install, :mod:`shadoweval.tables.plain_reader`) holds neither."""
    pd = sys.modules.get("pandas")
    return pd is not None and (value is pd.NA or value is pd.NaT)


def _maybe_json(value: Any, column: str) -> Any:
    """Parse a string cell that holds a JSON array or object; other values pass through."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise RowRejected(
                "invalid_json", f"column {column!r} holds text that is not JSON"
            ) from exc
    return value


def text_cell(value: Any, column: str, *, reason: str) -> str:
    """Return a required text cell; ``None`` or a non-string raises ``RowRejected(reason)``."""
    if value is None:
        raise RowRejected(reason, f"column {column!r} is null")
    if not isinstance(value, str):
        raise RowRejected(reason, f"column {column!r} is {type(value).__name__}, not text")
    return value


def label_cell(value: Any) -> str | None:
    """Return a label (task type, model, id) as text; integral floats lose their ``.0``."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float)):
        text = str(value).strip()
        return text or None
    return str(value)


def timestamp_cell(value: Any, column: str) -> datetime | None:
    """Return a UTC capture time, ``None`` when missing.

    Accepts ISO 8601 text with a UTC offset (``2026-11-30T08:00:00Z``,
    ``…+01:00``; converted to UTC), a pandas/datetime timestamp with a timezone, or Unix
    epoch seconds (int, float or numeric text). A timestamp without a timezone is
    refused (local time would be guessed), as are booleans and text that is neither:
    ``RowRejected("bad_timestamp")`` naming the column and the value.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise RowRejected("bad_timestamp", f"column {column!r} is a boolean, not a timestamp")
    if isinstance(value, (int, float)):
        if math.isnan(float(value)):
            return None
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise RowRejected(
                "bad_timestamp", f"column {column!r}: epoch seconds {value!r} out of range"
            ) from exc
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            return datetime.fromtimestamp(float(text), tz=UTC)
        except ValueError:
            pass
        try:
            at = datetime.fromisoformat(text)
        except ValueError as exc:
            raise RowRejected(
                "bad_timestamp",
                f"column {column!r} is not an ISO 8601 timestamp or epoch seconds: {text[:40]!r}",
            ) from exc
    else:
        raise RowRejected("bad_timestamp", f"column {column!r} is {type(value).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise RowRejected(
            "bad_timestamp",
            f"column {column!r} has no timezone: {str(value)[:40]!r} (write a UTC offset, e.g. Z)",
        )
    return at.astimezone(UTC)


def number_cell(value: Any, column: str) -> float | None:
    """Return a finite non-negative number, ``None`` when missing.

    Accepts ints, floats and numeric text (CSV). Booleans, negative, infinite or
    non-numeric values raise ``RowRejected("bad_number")``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise RowRejected("bad_number", f"column {column!r} is a boolean, not a number")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            number = float(text)
        except ValueError as exc:
            raise RowRejected(
                "bad_number", f"column {column!r} is not a number: {text[:40]!r}"
            ) from exc
    elif isinstance(value, (int, float)):
        number = float(value)
    else:
        raise RowRejected("bad_number", f"column {column!r} is {type(value).__name__}")
    if math.isnan(number):
        return None
    if math.isinf(number) or number < 0:
        raise RowRejected("bad_number", f"column {column!r} must be finite and >= 0, got {number}")
    return number


def int_cell(value: Any, column: str) -> int | None:
    """Return a non-negative integer count, ``None`` when missing (``117.0`` is accepted)."""
    number = number_cell(value, column)
    if number is None:
        return None
    if not number.is_integer():
        raise RowRejected("bad_number", f"column {column!r} is not an integer: {number}")
    return int(number)


def messages_cell(value: Any, column: str) -> list[dict[str, Any]]:
    """Return an OpenAI message list: non-empty, every item an object with a string ``role``.

    Keys whose value is ``None`` are dropped (Parquet fills absent struct fields with
    nulls); ``content`` is kept even when ``None`` (an assistant message with tool calls).
    """
    value = _maybe_json(value, column)
    if value is None:
        raise RowRejected("missing_prompt", f"column {column!r} is null")
    if not isinstance(value, list) or not value:
        raise RowRejected("bad_messages", f"column {column!r} is not a non-empty message list")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise RowRejected("bad_messages", f"column {column!r} message {i} has no string role")
        content = item.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RowRejected("bad_messages", f"column {column!r} message {i} content is not text")
        message = {k: v for k, v in item.items() if v is not None or k == "content"}
        message.setdefault("content", None)
        messages.append(message)
    return messages


RESERVED_REQUEST_FIELDS = frozenset({"model", "messages", "tools", "stream", "stream_options"})


def request_fields_cell(value: Any, column: str) -> dict[str, Any] | None:
    """Return a JSON object of extra request fields, ``None`` when the cell is empty.

    Raises:
        RowRejected: ``bad_request_fields`` when the cell is not an object or sets a field
            the mapping owns (:data:`RESERVED_REQUEST_FIELDS`).
    """
    value = _maybe_json(value, column)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RowRejected("bad_request_fields", f"column {column!r} is not a JSON object")
    reserved = sorted(RESERVED_REQUEST_FIELDS.intersection(value))
    if reserved:
        raise RowRejected(
            "bad_request_fields", f"column {column!r} sets fields the mapping owns: {reserved}"
        )
    return {str(k): v for k, v in value.items() if v is not None} or None


def openai_tools_cell(value: Any, column: str) -> list[dict[str, Any]] | None:
    """Return OpenAI tools ``[{"type": "function", "function": {...}}]``, ``None`` when empty.

    Bare function definitions (``{"name", "description", "parameters"}``) are wrapped.
    """
    value = _maybe_json(value, column)
    if value is None:
        return None
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise RowRejected("bad_tools", f"column {column!r} is not a list of tools")
    tools: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and isinstance(item.get("function"), dict):
            function = item["function"]
            tool = {**item, "type": item.get("type") or "function"}
        elif isinstance(item, dict) and "name" in item:
            function = item
            tool = {"type": "function", "function": item}
        else:
            raise RowRejected("bad_tools", f"column {column!r} tool {i} is not a function tool")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RowRejected("bad_tools", f"column {column!r} tool {i} has no function name")
        tools.append(tool)
    return tools or None


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return orjson.dumps(arguments).decode("utf-8")


def _openai_call(item: Any, index: int) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    nested = item.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else item
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    call_id = item.get("id")
    return ToolCall(
        index=index,
        id=call_id if isinstance(call_id, str) else None,
        type=item.get("type") if isinstance(item.get("type"), str) else "function",
        name=name,
        arguments=_arguments_text(function.get("arguments")),
    )


def _bfcl_call(item: Any, index: int) -> ToolCall | None:
    if not isinstance(item, dict) or len(item) != 1:
        return None
    ((name, arguments),) = item.items()
    if not name:
        return None
    return ToolCall(index=index, name=name, arguments=_arguments_text(arguments))


def _bfcl_text(value: str, language: BfclLanguage) -> tuple[str | None, tuple[ToolCall, ...]]:
    """A BFCL string result: prose, or calls written as Hermes ``<tool_call>`` blocks
    (prompt mode, decoded as the leaderboard does: :mod:`shadoweval.tables.prompt_calls`)."""
    decoded = hermes_tool_calls(value, language)
    if decoded is None or not decoded.calls:
        return value, ()
    return decoded.text, decoded.calls


def _list_output(
    value: list[Any], column: str, output_format: OutputFormat
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """A list cell: tool calls, and (BFCL) text parts among them, joined by newlines."""
    if not value:
        raise RowRejected("empty_output", f"column {column!r} is an empty tool-call list")
    parse = _openai_call if output_format == "openai" else _bfcl_call
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, item in enumerate(value):
        if output_format == "bfcl" and isinstance(item, str):
            texts.append(item)
            continue
        call = parse(item, len(calls))
        if call is None:
            raise RowRejected(
                "bad_tool_calls",
                f"column {column!r} item {i} is not a {output_format} tool call"
                + (" or text" if output_format == "bfcl" else "")
                + f": {str(item)[:80]}",
            )
        calls.append(call)
    return ("\n".join(texts) if texts else None), tuple(calls)


def output_cell(
    value: Any, column: str, output_format: OutputFormat, *, language: BfclLanguage = "python"
) -> tuple[str | None, tuple[ToolCall, ...]]:
    """Return ``(text, tool_calls)`` of an output cell.

    * ``text``: the cell must be a string (``""`` is a legitimate empty answer).
    * ``openai``: a ``tool_calls`` list (``[{"id", "type", "function": {"name",
      "arguments"}}]``; flat ``{"name", "arguments"}`` items are accepted).
    * ``bfcl``: a list of one-key objects ``{function_name: arguments_json_string}``;
      items that are strings are parts of the answer's text (joined by newlines: a model
      family that answers in text parts, or text mixed with calls). A string cell is the
      model's raw text: calls written in it as Hermes ``<tool_call>`` blocks (prompt
      mode) are decoded as the leaderboard does
      (:func:`~shadoweval.tables.prompt_calls.hermes_tool_calls`, with ``language``, the
      BFCL category's), the text around them kept.

    In both tool formats a string means a text answer (BFCL records a model that replied
    in prose that way), unless the string is the JSON text of a non-empty list of tool
    calls (how CSV stores them). Arguments that are objects are serialized to JSON text;
    argument strings are kept byte-for-byte even when they are not valid JSON (a real
    format failure worth measuring, never "repaired").

    Raises:
        RowRejected: ``missing_output`` (null), ``bad_output`` (wrong shape),
            ``empty_output`` (an empty call list), ``bad_tool_calls`` (a list item that is
            neither a call nor, in ``bfcl``, text).
    """
    if value is None:
        raise RowRejected("missing_output", f"column {column!r} is null")
    if output_format == "text":
        return text_cell(value, column, reason="bad_output"), ()
    parse = _openai_call if output_format == "openai" else _bfcl_call
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped.startswith("["):
            try:
                decoded = orjson.loads(value)
            except orjson.JSONDecodeError:
                return value, ()
            if isinstance(decoded, list) and decoded:
                parsed = [parse(item, i) for i, item in enumerate(decoded)]
                found = tuple(c for c in parsed if c is not None)
                if len(found) == len(parsed):
                    return None, found
        if output_format == "bfcl":
            return _bfcl_text(value, language)
        return value, ()
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise RowRejected("bad_output", f"column {column!r} is {type(value).__name__}")
    return _list_output(value, column, output_format)
