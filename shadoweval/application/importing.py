"""Recorded tables → capture log: a benchmark's or an operator's outputs, replayed as traffic.

A recorded table holds prompts and the answers one model gave (AlpacaEval, MT-Bench, BFCL,
or an own CSV/Parquet/JSON export). :func:`load_table` reads one through a preset or an
explicit column mapping (:class:`TableSource`, :func:`shadoweval.tables.load_recorded_rows`);
:func:`import_table` writes its rows as a capture log, as if the sidecar had captured the
model answering them (:func:`shadoweval.capture.table_import.import_rows`). ``shadow-eval import``
and the demo import through here; ``shadow-eval mock-llm`` only loads.

Trace presets (``otel_genai``, ``langfuse``, ``litellm``: logs of live traffic) are
imported as the capture sidecar would have captured that traffic: redacted with the
configured body rules (``capture.body_redaction``), tagged with the configured task-type
rules (``capture.task_type_header``, ``capture.task_type_rules``) and with session ids
stored as hashes salted with ``capture.session_salt``
(:class:`shadoweval.capture.table_import.CaptureRules`). Benchmark tables and explicit mappings are
stored as they are unless redaction is asked for (``ImportRequest.redact``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shadoweval.body_redaction import BodyRedactor
from shadoweval.capture.table_import import CaptureRules, ImportReport, import_rows
from shadoweval.capture.tagging import TaskTagger
from shadoweval.config import load_settings
from shadoweval.tables import (
    PRESETS,
    LoadResult,
    TableFormat,
    TableMapping,
    load_recorded_rows,
)

__all__ = [
    "ImportReport",
    "ImportRequest",
    "TableSource",
    "capture_rules",
    "import_table",
    "is_trace_preset",
    "load_table",
]


@dataclass(frozen=True, slots=True)
class TableSource:
    """Where a recorded table is and how its columns map.

    Attributes:
        input: the outputs table: a file (JSON array, JSON Lines, CSV, Parquet) or a
            directory of them.
        mapping: an explicit column mapping; exactly one of ``mapping`` and ``preset``.
        preset: a built-in mapping (``alpaca_eval``, ``mt_bench``, ``bfcl``) or trace
            format (``otel_genai``, ``langfuse``, ``litellm``).
        prompts: the prompts table joined to the outputs (presets that use one).
        format: force the file format; ``None``: from the file name.
    """

    input: Path
    mapping: TableMapping | None = None
    preset: str | None = None
    prompts: Path | None = None
    format: TableFormat | None = None


@dataclass(frozen=True, slots=True)
class ImportRequest:
    """An import: the table, the capture-log directory, and how requests are recorded.

    Attributes:
        table: the recorded table.
        out: the capture-log directory (created; new segments are added to what is there).
        stream: record requests as streamed (with ``stream_options.include_usage``).
        sampling: sampling parameters recorded in every request (only these, never
            invented): ``temperature``, ``top_p``, ``max_tokens`` …; ``None`` values are
            dropped.
        compress: gzip the segments.
        redact: apply the capture's body redaction; ``None``: on for a trace preset, off
            for a table (a benchmark's prompts are replayed as published).
        limit: write at most this many exchanges (``None``: all).
    """

    table: TableSource
    out: Path
    stream: bool = True
    sampling: dict[str, Any] = field(default_factory=dict)
    compress: bool = False
    redact: bool | None = None
    limit: int | None = None


def is_trace_preset(name: str | None) -> bool:
    """Whether ``name`` is a trace preset (logs of live traffic), not a table preset."""
    chosen = PRESETS.get(name) if name is not None else None
    return chosen is not None and chosen.kind == "trace"


def capture_rules(*, redact: bool) -> CaptureRules:
    """The capture's rules from the settings: body redaction (when ``redact``), the
    task-type rules and the session salt (``SHADOWEVAL_CAPTURE__*``).

    Raises:
        ConfigError: invalid settings (an unknown redaction rule, a bad pattern).
    """
    capture = load_settings().capture
    return CaptureRules(
        redactor=BodyRedactor(capture.body_redaction) if redact else None,
        tagger=TaskTagger(capture.task_type_header, capture.task_type_rules),
        session_salt=capture.session_salt.get_secret_value().encode("utf-8"),
    )


def load_table(source: TableSource) -> LoadResult:
    """Read the table's rows (and the rows it rejects, each with location and reason).

    Raises:
        TableMappingError: a mapped column is missing, an unknown preset, or a bad
            combination (both or neither of a mapping and a preset).
        FileNotFoundError: no table at ``source.input``.
        RecordDecodeError: a file that cannot be parsed.
    """
    return load_recorded_rows(
        source.input,
        source.mapping,
        preset=source.preset,
        prompts=source.prompts,
        format=source.format,
    )


def import_table(request: ImportRequest) -> ImportReport:
    """Read the table (:func:`load_table`) and write its rows as a capture log at
    ``request.out``.

    Rows the table rejects, and rows that cannot become an exchange, are reported and
    appended to ``<out>.rejected.jsonl`` beside the directory.

    Raises:
        TableMappingError, FileNotFoundError, RecordDecodeError: as :func:`load_table`.
        ConfigError: an unknown sampling parameter, a ``limit`` < 1 or invalid capture
            settings (before anything is written).
    """
    trace = is_trace_preset(request.table.preset)
    redact = trace if request.redact is None else request.redact
    # a table's rows carry their own task types: the rules are only read when needed
    rules = capture_rules(redact=redact) if trace or redact else None
    rows = load_table(request.table)
    sampling = {k: v for k, v in request.sampling.items() if v is not None}
    return import_rows(
        rows,
        out=request.out,
        stream=request.stream,
        sampling=sampling,
        compress=request.compress,
        rules=rules,
        limit=request.limit,
    )
