"""Mapped rows of recorded tables: ``RecordedRow``, ``RejectedRow``, ``LoadResult``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from shadoweval.errors import TableMappingError
from shadoweval.records import ToolCall
from shadoweval.tables.bfcl_schema import bfcl_functions_to_openai_tools
from shadoweval.tables.frames import RecordFrame
from shadoweval.tables.keys import prompt_key
from shadoweval.tables.mapping import TableMapping
from shadoweval.tables.values import (
    RowRejected,
    int_cell,
    label_cell,
    messages_cell,
    number_cell,
    openai_tools_cell,
    output_cell,
    request_fields_cell,
    text_cell,
    timestamp_cell,
    to_python,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True, slots=True)
class RecordedRow:
    """One recorded prompt and the answer a model gave it.

    Attributes:
        key: stable id: the ``id_col`` value, else ``"p-"`` + the first 16 hex digits of
            the prompt key (:func:`~shadoweval.tables.keys.prompt_key`); a repeated key in
            one load gets ``"~2"``, ``"~3"``… appended.
        messages: OpenAI chat messages sent (dicts with ``role`` and ``content``).
        tools: OpenAI tools ``[{"type": "function", "function": {...}}]`` or ``None``.
        output_text: the text answer; ``None`` when the answer is tool calls only.
        tool_calls: the tool calls of the answer (arguments as raw JSON text; ``id`` only
            when the table recorded one).
        task_type: task-type label (``"default"`` when the table has none).
        model: model name, when mapped.
        latency_ms, ttft_ms, itl_ms: recorded end-to-end latency, time to first token and
            mean inter-token latency, milliseconds.
        ttfc_ms: recorded time to first visible content (reasoning excluded), ms.
        prompt_tokens, completion_tokens: recorded token counts.
        location: ``"<file>#<row>"`` with the 0-based row position in that file.
        finish_reason: the recorded raw ``finish_reason``, when mapped.
        request_fields: further recorded request fields (``response_format`` …), or ``None``.
        captured_at: when the request was served (UTC), when ``captured_at_col`` is mapped.
        response_model: the model name the response reported (trace presets), when it
            differs from or adds to the requested ``model``.
        session_id: the recorded conversation or session id (trace presets); an import
            stores only its salted hash (``Exchange.session_key_hash``), as capture does.
        metadata: the recorded request metadata (trace presets), used only to tag the
            task type (a ``task_type`` key, then the capture's task-type rules); never
            written to the capture log.
        untagged: the loader found no task type of its own: an import tags the row with
            the capture's task-type rules (:class:`shadoweval.capture.tagging.TaskTagger`).
        route: the API route the request went to: ``/v1/chat/completions``, or
            ``/v1/completions`` for a recorded text completion (the request then holds
            ``prompt``, the last user message's text).
        cache_hit: the log says a cache answered (LiteLLM ``cache_hit``): the gate
            leaves the pair out of latency.
    """

    key: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    output_text: str | None
    tool_calls: tuple[ToolCall, ...]
    task_type: str
    model: str | None
    latency_ms: float | None
    ttft_ms: float | None
    itl_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    location: str
    finish_reason: str | None = None
    request_fields: dict[str, Any] | None = None
    captured_at: datetime | None = None
    ttfc_ms: float | None = None
    response_model: str | None = None
    session_id: str | None = None
    metadata: dict[str, Any] | None = None
    untagged: bool = False
    route: str = "/v1/chat/completions"
    cache_hit: bool = False

    @property
    def prompt_key(self) -> str:
        """The canonical prompt key of :attr:`messages` (see :mod:`shadoweval.tables.keys`)."""
        return prompt_key(self.messages)


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """A row that could not be mapped, kept with where it came from and why.

    ``reason`` is short and machine-friendly (``missing_output``, ``bad_number``,
    ``unmatched_id`` …); ``detail`` names the column; ``raw`` is the row as read
    (JSON-like values), so nothing is lost.
    """

    location: str
    reason: str
    detail: str
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadResult:
    """The rows of one or more table files: mapped rows and rejected rows, in file order.

    ``renamed_keys`` counts rows whose key repeated an earlier row's and was made unique
    (``"~2"``, ``"~3"``… appended; see :attr:`RecordedRow.key`): the rows are kept, and
    the count is reported so that a table with repeated ids does not pass unnoticed.
    ``notes`` says what the files do not record (``"<model>: no latency column in 12 result
    files: latency unknown (not zero)"``), for the import and the mock server to print.
    """

    rows: list[RecordedRow]
    rejected: list[RejectedRow]
    files: list[str]
    renamed_keys: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def rows_read(self) -> int:
        """Rows read from the files (mapped + rejected)."""
        return len(self.rows) + len(self.rejected)

    def rejected_by_reason(self) -> dict[str, int]:
        """Count rejected rows per reason."""
        counts: dict[str, int] = {}
        for item in self.rejected:
            counts[item.reason] = counts.get(item.reason, 0) + 1
        return counts

    @staticmethod
    def merge(parts: Sequence[LoadResult]) -> LoadResult:
        """Concatenate results in order, keeping row keys unique across parts."""
        rows: list[RecordedRow] = []
        seen: dict[str, int] = {}
        renamed = sum(p.renamed_keys for p in parts)
        for part in parts:
            for row in part.rows:
                unique = _unique(row, seen)
                renamed += unique is not row
                rows.append(unique)
        return LoadResult(
            rows=rows,
            rejected=[r for p in parts for r in p.rejected],
            files=[f for p in parts for f in p.files],
            renamed_keys=renamed,
            notes=list(dict.fromkeys(n for p in parts for n in p.notes)),
        )


def _unique(row: RecordedRow, seen: dict[str, int]) -> RecordedRow:
    """``row``, or a copy with ``"~<n>"`` appended to its key when the key was seen."""
    count = seen.get(row.key, 0) + 1
    seen[row.key] = count
    if count == 1:
        return row
    return dataclasses.replace(row, key=f"{row.key}~{count}")


def require_columns(
    frame: pd.DataFrame | RecordFrame, columns: Mapping[str, str], file: str
) -> None:
    """Raise :class:`TableMappingError` unless every mapped column is in ``frame``.

    Args:
        columns: ``{what it is mapped as: column name}``.
        file: the file, named in the message.
    """
    present = [str(c) for c in frame.columns]
    for role, column in columns.items():
        if column not in present:
            raise TableMappingError(
                f"column {column!r} (mapped as {role}) not found in {file}; "
                f"columns there: {present}"
            )


def _row(record: Mapping[str, Any], mapping: TableMapping, location: str) -> RecordedRow:
    m = mapping
    if m.messages_col is not None:
        messages = messages_cell(record.get(m.messages_col), m.messages_col)
    else:
        assert m.prompt_col is not None
        prompt = text_cell(record.get(m.prompt_col), m.prompt_col, reason="missing_prompt")
        messages = [{"role": "user", "content": prompt}]
    if m.system_col is not None:
        system = record.get(m.system_col)
        if system is not None and not isinstance(system, str):
            raise RowRejected("bad_system", f"column {m.system_col!r} is not text")
        if system:
            messages = [{"role": "system", "content": system}, *messages]
    text, calls = output_cell(
        record.get(m.output_col), m.output_col, m.output_format, language=m.tools_language
    )

    task_type = m.task_type
    if m.task_type_col is not None:
        task_type = label_cell(record.get(m.task_type_col)) or m.task_type
        if task_type is None:
            raise RowRejected("missing_task_type", f"column {m.task_type_col!r} is null")
    model = m.model
    if m.model_col is not None:
        model = label_cell(record.get(m.model_col)) or m.model

    tools = None
    if m.tools_col is not None:
        raw_tools = record.get(m.tools_col)
        if m.tools_format == "bfcl" and raw_tools is not None:
            try:
                tools = bfcl_functions_to_openai_tools(raw_tools, language=m.tools_language) or None
            except ValueError as exc:
                raise RowRejected("bad_tools", f"column {m.tools_col!r}: {exc}") from exc
        else:
            tools = openai_tools_cell(raw_tools, m.tools_col)

    def num(column: str | None) -> float | None:
        return None if column is None else number_cell(record.get(column), column)

    def count(column: str | None) -> int | None:
        return None if column is None else int_cell(record.get(column), column)

    if m.id_col is not None:
        key = label_cell(record.get(m.id_col))
        if key is None:
            raise RowRejected("missing_id", f"column {m.id_col!r} is null")
    else:
        key = "p-" + prompt_key(messages)[:16]
    finish = None
    if m.finish_reason_col is not None:
        finish = label_cell(record.get(m.finish_reason_col))
    request_fields = None
    if m.request_fields_col is not None:
        request_fields = request_fields_cell(record.get(m.request_fields_col), m.request_fields_col)
    captured_at = None
    if m.captured_at_col is not None:
        captured_at = timestamp_cell(record.get(m.captured_at_col), m.captured_at_col)
    return RecordedRow(
        key=key,
        messages=messages,
        tools=tools,
        output_text=text,
        tool_calls=calls,
        task_type=task_type or "default",
        model=model,
        latency_ms=m.to_ms(num(m.latency_col)),
        ttft_ms=m.to_ms(num(m.ttft_col)),
        itl_ms=m.to_ms(num(m.itl_col)),
        ttfc_ms=m.to_ms(num(m.ttfc_col)),
        prompt_tokens=count(m.prompt_tokens_col),
        completion_tokens=count(m.completion_tokens_col),
        location=location,
        finish_reason=finish,
        request_fields=request_fields,
        captured_at=captured_at,
    )


def rows_from_frame(
    frame: pd.DataFrame | RecordFrame,
    mapping: TableMapping,
    *,
    file: str,
    locations: Sequence[str] | None = None,
    pre_rejected: Mapping[int, tuple[str, str]] | None = None,
) -> LoadResult:
    """Map every row of ``frame``; bad rows become :class:`RejectedRow` s.

    Args:
        frame: the table (as read by :func:`~shadoweval.tables.reader.read_table`).
        mapping: the column mapping.
        file: the file named in locations and errors.
        locations: per-row locations (default ``"<file>#<position>"``).
        pre_rejected: row position → ``(reason, detail)`` for rows a caller already
            knows are bad (e.g. a join without a match).

    Raises:
        TableMappingError: a mapped column is missing from ``frame``.
    """
    require_columns(frame, mapping.mapped_columns(), file)
    rows: list[RecordedRow] = []
    rejected: list[RejectedRow] = []
    seen: dict[str, int] = {}
    renamed = 0
    records = frame.to_dict(orient="records")
    for position, raw in enumerate(records):
        location = locations[position] if locations is not None else f"{file}#{position}"
        record = {str(k): to_python(v) for k, v in raw.items()}
        known = (pre_rejected or {}).get(position)
        if known is not None:
            rejected.append(RejectedRow(location, known[0], known[1], record))
            continue
        try:
            row = _row(record, mapping, location)
        except RowRejected as exc:
            rejected.append(RejectedRow(location, exc.reason, exc.detail, record))
            continue
        unique = _unique(row, seen)
        renamed += unique is not row
        rows.append(unique)
    return LoadResult(rows=rows, rejected=rejected, files=[file], renamed_keys=renamed)
