"""What the trace presets share: reading JSON exports, OpenAI messages, numbers and times.

The trace presets (:mod:`~shadoweval.tables.traces.otel`,
:mod:`~shadoweval.tables.traces.langfuse`, :mod:`~shadoweval.tables.traces.litellm`) read
logs that an LLM application already keeps, not tables, so they parse JSON themselves
(orjson) instead of going through pandas: the records are nested documents (an OTLP
export holds many spans per line). A file is one JSON document (an object or an array)
or JSON Lines (one document per line); a line that is not JSON is **kept** as a rejected
record (``invalid_json``), never skipped, and the other lines are read.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from shadoweval.llm_protocol import SAMPLING_PARAMS
from shadoweval.records import ToolCall
from shadoweval.tables.reader import table_files
from shadoweval.tables.rows import LoadResult, RecordedRow, RejectedRow, _unique
from shadoweval.tables.values import RowRejected, messages_cell, output_cell

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"

SAMPLING_FIELDS: tuple[str, ...] = tuple(
    name for name in SAMPLING_PARAMS if name not in ("logit_bias", "min_p", "repetition_penalty")
)
"""Recorded request parameters a trace preset copies into the replayed request: those of
:data:`shadoweval.llm_protocol.SAMPLING_PARAMS`, in its order, but ``logit_bias``,
``min_p`` and ``repetition_penalty``."""

REQUEST_FIELDS: tuple[str, ...] = ("response_format", "tool_choice", "parallel_tool_calls")
"""Further recorded request fields copied as they are."""


@dataclass(frozen=True, slots=True)
class Document:
    """One JSON document of an export file.

    Attributes:
        location: ``<file>#<n>`` (0-based document position in the file) or, for a JSON
            Lines file, ``<file>:<line>`` (1-based line number).
        value: the parsed document, ``None`` when it did not parse (see ``error``).
        error: why the document is unreadable (``None`` when it parsed).
        raw: the text of an unreadable line (cut to 2000 characters), else ``""``.
    """

    location: str
    value: Any
    error: str | None = None
    raw: str = ""


def _read_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.removeprefix(b"\xef\xbb\xbf")


def read_documents(path: Path) -> Iterator[Document]:
    """Yield the JSON documents of one export file (gzip is detected by its magic bytes).

    The whole file is tried as one JSON document first; when it is not one, it is read
    as JSON Lines: each non-blank line one document, a line that does not parse a
    :class:`Document` with ``error`` set (the file is still read to its end).
    """
    data = _read_bytes(path)
    if not data.strip():
        return
    try:
        yield Document(f"{path}#0", orjson.loads(data))
        return
    except orjson.JSONDecodeError:
        pass
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        location = f"{path}:{number}"
        try:
            yield Document(location, orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            text = line.decode("utf-8", errors="replace")[:2000]
            yield Document(location, None, f"line {number} is not JSON: {exc}", text)


def export_files(path: Path) -> list[Path]:
    """The export files at ``path``: the file itself, or a directory's ``.json``,
    ``.jsonl``, ``.ndjson`` files (optionally ``.gz``), sorted.

    Raises:
        FileNotFoundError: nothing at ``path``, or a directory without such files.
    """
    return table_files(path)


class RowCollector:
    """Collects the rows and rejected records of a trace load, in file order."""

    def __init__(self) -> None:
        self.rows: list[RecordedRow] = []
        self.rejected: list[RejectedRow] = []
        self.files: list[str] = []
        self._seen: dict[str, int] = {}
        self._renamed = 0

    def add(self, row: RecordedRow) -> None:
        """Keep ``row`` (its key made unique when it repeats an earlier row's)."""
        unique = _unique(row, self._seen)
        self._renamed += unique is not row
        self.rows.append(unique)

    def reject(self, location: str, reason: str, detail: str, raw: Any) -> None:
        """Keep a record that cannot be mapped, with its reason and the record itself."""
        kept = raw if isinstance(raw, dict) else {"value": raw}
        self.rejected.append(RejectedRow(location, reason, detail, kept))

    def documents(self, path: Path) -> Iterator[Document]:
        """The JSON documents of the export files at ``path`` (:func:`export_files`,
        :func:`read_documents`), each file kept in ``files`` as it is reached; a document
        that is not JSON is rejected ``invalid_json`` here, not yielded.

        Raises:
            FileNotFoundError: nothing at ``path``.
        """
        for file in export_files(path):
            self.files.append(str(file))
            for document in read_documents(file):
                if document.error is not None:
                    self.reject(document.location, "invalid_json", document.error, document.raw)
                    continue
                yield document

    def add_mapped(
        self, location: str, record: Mapping[str, Any], mapped: Callable[[], RecordedRow]
    ) -> None:
        """Keep the row ``mapped()`` makes of ``record``, or ``record`` as rejected: with the
        reason of the :class:`RowRejected` it raised, or ``unprocessable`` when it raised
        anything else (whatever a record holds, it is kept, not a crash)."""
        try:
            self.add(mapped())
        except RowRejected as exc:
            self.reject(location, exc.reason, exc.detail, dict(record))
        except Exception as exc:  # whatever a record holds, it is kept, not a crash
            detail = f"cannot be mapped: {type(exc).__name__}: {exc}"
            self.reject(location, "unprocessable", detail, dict(record))

    def result(self) -> LoadResult:
        """The :class:`LoadResult` of everything collected."""
        return LoadResult(
            rows=self.rows, rejected=self.rejected, files=self.files, renamed_keys=self._renamed
        )


def maybe_json(value: Any) -> Any:
    """A string holding a JSON object or array, parsed; anything else as it is.

    Raises:
        RowRejected: ``invalid_json`` when the string starts like JSON but does not parse.
    """
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise RowRejected(
                "invalid_json", f"a JSON-looking value does not parse: {exc}"
            ) from exc
    return value


def chat_messages(value: Any, field: str) -> list[dict[str, Any]]:
    """An OpenAI chat message list from a recorded input (``field`` names it in errors).

    A string is one user message; a single message object is a list of one. Messages
    are checked as :func:`~shadoweval.tables.values.messages_cell` does (string
    ``role``, text or content-part ``content``; an assistant message may carry
    ``tool_calls`` and a tool message ``tool_call_id``).

    Raises:
        RowRejected: ``no_content`` (null, empty, or messages without any text or tool
            call), ``bad_messages`` (wrong shape).
    """
    value = maybe_json(value)
    if value is None or value == "" or value == []:
        raise RowRejected("no_content", f"{field} is empty: no prompt was recorded")
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    elif isinstance(value, dict) and isinstance(value.get("role"), str):
        value = [value]
    try:
        messages = messages_cell(value, field)
    except RowRejected as exc:
        reason = exc.reason if exc.reason != "missing_prompt" else "no_content"
        raise RowRejected(reason, exc.detail) from None
    if not any(m.get("content") or m.get("tool_calls") for m in messages):
        # the instrumentations still emit the message events, with empty bodies, when
        # content capture is off: roles without any text are no prompt
        raise RowRejected("no_content", f"{field}: the messages carry no content")
    return messages


def message_output(message: Any, field: str) -> tuple[str | None, tuple[ToolCall, ...]]:
    """``(text, tool_calls)`` of an OpenAI assistant message (or a bare string answer).

    ``content`` may be a string or content parts (their ``text`` joined); ``tool_calls``
    are OpenAI tool calls (``{"id", "type", "function": {"name", "arguments"}}``).

    Raises:
        RowRejected: ``no_output`` (no content and no tool call), ``bad_output``.
    """
    message = maybe_json(message)
    if isinstance(message, str):
        return message, ()
    if not isinstance(message, Mapping):
        raise RowRejected("no_output" if message is None else "bad_output", f"{field}: no answer")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    if content is not None and not isinstance(content, str):
        raise RowRejected("bad_output", f"{field}.content is {type(content).__name__}")
    calls: tuple[ToolCall, ...] = ()
    raw_calls = maybe_json(message.get("tool_calls"))
    if raw_calls:
        _, calls = output_cell(raw_calls, f"{field}.tool_calls", "openai")
    if content is None and not calls:
        raise RowRejected("no_output", f"{field} has neither content nor tool calls")
    return content, calls


def openai_tools(value: Any, field: str) -> list[dict[str, Any]] | None:
    """OpenAI tools ``[{"type": "function", "function": {...}}]`` from recorded tool
    definitions: OpenAI tools, or flat ``{"type": "function", "name", "description",
    "parameters"}`` items (the form of ``gen_ai.tool.definitions`` and of the Responses
    API); ``None`` when there are none.

    Raises:
        RowRejected: ``bad_tools``.
    """
    value = maybe_json(value)
    if value is None or value == []:
        return None
    if not isinstance(value, list):
        raise RowRejected("bad_tools", f"{field} is not a list of tools")
    tools: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise RowRejected("bad_tools", f"{field}[{i}] is not an object")
        if isinstance(item.get("function"), Mapping):
            function = dict(item["function"])
        else:
            function = {k: v for k, v in item.items() if k != "type"}
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RowRejected("bad_tools", f"{field}[{i}] has no function name")
        tools.append({"type": "function", "function": function})
    return tools or None


def finite_number(value: Any, field: str) -> float | None:
    """A recorded number (int, float or numeric text), ``None`` when missing or not a
    finite number (Langfuse writes ``"inf"`` for an unset ``max_tokens``).

    Raises:
        RowRejected: ``bad_number`` for a boolean or a non-numeric value.
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise RowRejected("bad_number", f"{field} is a boolean, not a number")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError as exc:
            raise RowRejected("bad_number", f"{field} is not a number: {value[:40]!r}") from exc
    if not isinstance(value, (int, float)):
        raise RowRejected("bad_number", f"{field} is {type(value).__name__}, not a number")
    number = float(value)
    return number if math.isfinite(number) else None


def token_count(value: Any, field: str) -> int | None:
    """A recorded token count, ``None`` when missing.

    Raises:
        RowRejected: ``bad_number`` for a negative, fractional or non-numeric count.
    """
    number = finite_number(value, field)
    if number is None:
        return None
    if number < 0 or not number.is_integer():
        raise RowRejected("bad_number", f"{field} must be a whole count >= 0, got {value!r}")
    return int(number)


def request_parameters(params: Mapping[str, Any] | None, field: str) -> dict[str, Any] | None:
    """The recorded request parameters the replay pins (:data:`SAMPLING_FIELDS`,
    :data:`REQUEST_FIELDS`), numbers parsed from text; ``None`` when none are present.

    Integer parameters (``max_tokens``, ``seed``, ``n``, ``top_k``) stay integers; a
    value that is not finite (``"inf"``) is left out, as if not recorded.
    """
    if not params:
        return None
    out: dict[str, Any] = {}
    for name in SAMPLING_FIELDS:
        value = params.get(name)
        if value is None:
            continue
        if name == "stop":
            stop = maybe_json(value)
            if isinstance(stop, (str, list)) and stop:
                out[name] = stop
            continue
        number = finite_number(value, f"{field}.{name}")
        if number is None:
            continue
        integral = name in ("max_tokens", "max_completion_tokens", "seed", "n", "top_k")
        out[name] = int(number) if integral and number.is_integer() else number
    for name in REQUEST_FIELDS:
        value = maybe_json(params.get(name))
        if value is not None:
            out[name] = value
    return out or None


def parse_time(value: Any, field: str) -> datetime | None:
    """A recorded time as UTC: ISO 8601 with an offset (``2025-03-01T10:00:00.123Z``),
    or Unix epoch seconds (int or float); ``None`` when missing.

    Raises:
        RowRejected: ``bad_timestamp`` (no timezone, not a time, out of range).
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise RowRejected("bad_timestamp", f"{field} is a boolean, not a time")
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise RowRejected("bad_timestamp", f"{field}: {value!r} is out of range") from exc
    if not isinstance(value, str):
        raise RowRejected("bad_timestamp", f"{field} is {type(value).__name__}, not a time")
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise RowRejected("bad_timestamp", f"{field} is not ISO 8601: {value[:40]!r}") from exc
    if at.tzinfo is None or at.utcoffset() is None:
        raise RowRejected("bad_timestamp", f"{field} has no timezone: {value[:40]!r}")
    return at.astimezone(UTC)


def elapsed_ms(start: datetime | None, end: datetime | None, field: str) -> float | None:
    """``end − start`` in milliseconds, ``None`` when either is missing.

    Raises:
        RowRejected: ``bad_timing`` when ``end`` is before ``start``.
    """
    if start is None or end is None:
        return None
    ms = (end - start).total_seconds() * 1000.0
    if ms < 0:
        raise RowRejected("bad_timing", f"{field} is before the start time ({ms:.1f} ms)")
    return ms


def label(value: Any) -> str | None:
    """A recorded id or label as text (``None`` when missing or blank)."""
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return text or None
