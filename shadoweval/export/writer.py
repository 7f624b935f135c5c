"""Serialize an export: ``samples.<ext>`` and ``manifest.json``, as files or one zip.

Formats (all UTF-8):

* **CSV** — pandas' writer (RFC 4180 quoting: a field with a comma, quote or line break
  is quoted, quotes doubled), ``\\n`` line ends, a header row; empty cells for unknown
  similarities; ``captured_at`` as ISO 8601 text; floats written with Python's shortest
  round-trip ``repr``.
* **JSONL** — one JSON object per line (orjson), keys in column order, ``null`` for
  unknown similarities, ``captured_at`` as ISO 8601 text.
* **Parquet** — pyarrow with a fixed schema (:data:`PARQUET_SCHEMA`): text columns
  ``string``, ``captured_at`` ``timestamp[us, UTC]``, similarities nullable ``double``.

JSONL and Parquet are never escaped: their cells are typed values, not text a spreadsheet
parses (a spreadsheet importing them reads a string as a string), and escaping would
change the data. The exporter writes no XLSX.

:func:`write_export` writes each file through a temporary name and renames it, the
manifest last; :func:`export_archive` puts the same bytes in a zip (the dashboard's
download and the API's answer).
"""

from __future__ import annotations

import csv
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from shadoweval.export.build import ExportResult
from shadoweval.export.manifest import samples_file_name
from shadoweval.export.request import FORMATS
from shadoweval.export.rows import EXPORT_COLUMNS, FLOAT_COLUMNS, TIME_COLUMNS

MANIFEST_FILE = "manifest.json"

PARQUET_SCHEMA = pa.schema(
    [
        pa.field(
            name,
            pa.float64()
            if name in FLOAT_COLUMNS
            else pa.timestamp("us", tz="UTC")
            if name in TIME_COLUMNS
            else pa.string(),
            nullable=True,
        )
        for name in EXPORT_COLUMNS
    ]
)
"""Column types of ``samples.parquet`` (every column nullable; only the similarities
are ever null)."""


def _iso(value: Any) -> str:
    return pd.Timestamp(value).isoformat()


def _text_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with timestamps as ISO 8601 text (for CSV and JSONL)."""
    out = rows.copy()
    for column in TIME_COLUMNS:
        out[column] = [_iso(v) for v in rows[column]]
    return out


FORMULA_PREFIXES: tuple[str, ...] = ("=", "+", "-", "@", "\t", "\r", "\n")
"""First characters that make a spreadsheet read a cell as a formula (OWASP CSV
injection: ``=``, ``+``, ``-``, ``@``, tab, carriage return, line feed)."""
FORMULA_ESCAPE = "'"
"""Put before such a cell: spreadsheets then show it as text."""


def escape_formula(text: str) -> str:
    """``text`` with a leading ``'`` when it starts like a formula (:data:`FORMULA_PREFIXES`),
    else unchanged."""
    return FORMULA_ESCAPE + text if text.startswith(FORMULA_PREFIXES) else text


def unescape_formula(text: str) -> str:
    """The inverse of :func:`escape_formula`: ``'=x`` → ``=x``; any other text unchanged
    (a ``'`` before a character that starts no formula was not put there by the export)."""
    if text.startswith(FORMULA_ESCAPE) and text[1:].startswith(FORMULA_PREFIXES):
        return text[1:]
    return text


def csv_bytes(rows: pd.DataFrame, *, raw_cells: bool = False) -> bytes:
    """The rows as CSV (see the module doc): formula-safe text cells unless ``raw_cells``.

    Text cells are always quoted (also a bare carriage return then stays inside its cell,
    which the minimal quoting of before let break the row); numbers never are.
    """
    frame = _text_frame(rows)
    if not raw_cells:
        for column in frame.columns:
            if column not in FLOAT_COLUMNS:
                frame[column] = [
                    escape_formula(v) if isinstance(v, str) else v for v in frame[column]
                ]
    header = ",".join(frame.columns) + "\n"  # the fixed column names: nothing to escape
    body = frame.to_csv(
        index=False, header=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC
    )
    return (header + body).encode("utf-8")


def jsonl_bytes(rows: pd.DataFrame) -> bytes:
    """The rows as JSON Lines, one object per pair."""
    out = io.BytesIO()
    frame = _text_frame(rows)
    for record in frame.to_dict(orient="records"):
        for column in FLOAT_COLUMNS:
            value = record[column]
            record[column] = None if value is None or pd.isna(value) else float(value)
        out.write(orjson.dumps(record))
        out.write(b"\n")
    return out.getvalue()


def parquet_bytes(rows: pd.DataFrame) -> bytes:
    """The rows as Parquet with :data:`PARQUET_SCHEMA`."""
    table = pa.Table.from_pandas(rows, schema=PARQUET_SCHEMA, preserve_index=False)
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def samples_bytes(result: ExportResult) -> bytes:
    """``samples.<ext>`` of ``result`` in its request's format."""
    fmt = result.request.fmt
    if fmt == "csv":
        return csv_bytes(result.rows, raw_cells=result.request.raw_cells)
    if fmt == "jsonl":
        return jsonl_bytes(result.rows)
    return parquet_bytes(result.rows)


def manifest_bytes(result: ExportResult) -> bytes:
    """``manifest.json``: the manifest, indented, with a final newline."""
    return orjson.dumps(result.manifest, option=orjson.OPT_INDENT_2) + b"\n"


def export_files(result: ExportResult) -> dict[str, bytes]:
    """File name → bytes: ``samples.<ext>`` then ``manifest.json``."""
    return {
        samples_file_name(result.request.fmt): samples_bytes(result),
        MANIFEST_FILE: manifest_bytes(result),
    }


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def stale_samples(out_dir: Path, fmt: str) -> list[Path]:
    """The ``samples.<other ext>`` files in ``out_dir`` that an export in ``fmt`` would
    leave behind from an earlier export in another format (only the names
    ``samples.csv``, ``samples.jsonl`` and ``samples.parquet`` are considered)."""
    return [
        out_dir / samples_file_name(other)
        for other in FORMATS
        if other != fmt and (out_dir / samples_file_name(other)).is_file()
    ]


def write_export(result: ExportResult, out_dir: Path) -> list[Path]:
    """Write ``samples.<ext>`` and ``manifest.json`` into ``out_dir`` (created if needed).

    Existing files of the same names are replaced; then the ``samples.<other ext>`` files
    of an earlier export in another format (:func:`stale_samples`) are removed, so the
    folder holds one export whose manifest describes its samples file. No other file is
    touched. Returns the two paths written, samples first.

    Raises:
        OSError: the directory or a file cannot be written, or a stale file removed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, data in export_files(result).items():
        path = out_dir / name
        _write_atomically(path, data)
        paths.append(path)
    for stale in stale_samples(out_dir, result.request.fmt):
        stale.unlink()
    return paths


def export_archive(result: ExportResult) -> bytes:
    """A zip (deflated) of ``samples.<ext>`` and ``manifest.json``, stamped with the
    manifest's ``created_at``."""
    created = pd.Timestamp(result.manifest["created_at"])
    stamp = (
        max(created.year, 1980),
        created.month,
        created.day,
        created.hour,
        created.minute,
        created.second,
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in export_files(result).items():
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return out.getvalue()
