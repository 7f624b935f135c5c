"""Recorded tables → capture log: a benchmark's or an operator's outputs, replayed as traffic.

A recorded table holds prompts and the answers one model gave (AlpacaEval, MT-Bench, BFCL,
or an own CSV/Parquet/JSON export). :func:`load_table` reads one through a preset or an
explicit column mapping (:class:`TableSource`, :func:`shadoweval.tables.load_recorded_rows`);
:func:`import_table` writes its rows as a capture log, as if the sidecar had captured the
model answering them (:func:`capture.table_import.import_rows`). ``shadow-eval import``
and the demo import through here; ``shadow-eval mock-llm`` only loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture.table_import import ImportReport, import_rows
from shadoweval.tables import LoadResult, TableFormat, TableMapping, load_recorded_rows

__all__ = ["ImportReport", "ImportRequest", "TableSource", "import_table", "load_table"]


@dataclass(frozen=True, slots=True)
class TableSource:
    """Where a recorded table is and how its columns map.

    Attributes:
        input: the outputs table: a file (JSON array, JSON Lines, CSV, Parquet) or a
            directory of them.
        mapping: an explicit column mapping; exactly one of ``mapping`` and ``preset``.
        preset: a built-in mapping (``alpaca_eval``, ``mt_bench``, ``bfcl``).
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
    """

    table: TableSource
    out: Path
    stream: bool = True
    sampling: dict[str, Any] = field(default_factory=dict)
    compress: bool = False


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
        ConfigError: an unknown sampling parameter (before anything is written).
    """
    rows = load_table(request.table)
    sampling = {k: v for k, v in request.sampling.items() if v is not None}
    return import_rows(
        rows, out=request.out, stream=request.stream, sampling=sampling, compress=request.compress
    )
