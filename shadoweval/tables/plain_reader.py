"""Reading recorded tables without pandas: JSON array, JSON Lines, CSV/TSV (the stdlib, orjson).

The light install (``pip install shadow-eval``, no ``tables`` extra) reads tables here, so
``mock-llm`` and ``import`` serve the formats the docs give them without pandas;
:func:`shadoweval.tables.reader.read_table` uses pandas whenever it is installed. The choices
follow the pandas reader's, so that values arrive as they were written:

* JSON / JSON Lines: orjson; nested objects and lists stay Python objects, no type
  guessing. Numbers beyond a double or a 64-bit integer (1000! in a BFCL score) are kept
  exactly, as their text (:func:`~shadoweval.tables.json_numbers.loads_keeping_numbers`).
* CSV / TSV: every cell as text; only the empty cell is missing (``None``), so an answer
  ``"None"`` or ``"NA"`` is kept as text and an id ``"007"`` keeps its zeros.
* A trailing ``.gz`` is decompressed.
* Parquet needs pandas and pyarrow: :class:`ModuleNotFoundError` naming the ``tables`` extra.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path
from typing import Any

from shadoweval.tables.frames import TABLES_EXTRA, RecordFrame
from shadoweval.tables.json_numbers import loads_keeping_numbers


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix.lower() == ".gz" else raw


def _records(value: Any, path: Path) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
        raise ValueError(f"{path} is not a JSON array of row objects")
    return value


def _json_lines(data: bytes, path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        row = loads_keeping_numbers(line)
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number} is not a JSON object")
        rows.append(row)
    return rows


def _delimited(data: bytes, delimiter: str) -> RecordFrame:
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""), delimiter=delimiter)
    header = next(reader, None)
    if header is None:
        return RecordFrame([])
    rows = []
    for cells in reader:
        if not cells:
            continue
        if len(cells) > len(header):
            raise ValueError(f"expected {len(header)} fields, saw {len(cells)}")
        padded = cells + [""] * (len(header) - len(cells))
        rows.append({column: padded[i] or None for i, column in enumerate(header)})
    return RecordFrame(rows, header)


def read_plain_table(path: Path, fmt: str) -> RecordFrame:
    """Read one table file (JSON, JSON Lines, CSV or TSV) into a :class:`RecordFrame`.

    Raises:
        ModuleNotFoundError: ``fmt`` is ``parquet`` (``name="pandas"``; the message names
            the ``tables`` extra).
        ValueError: the file cannot be parsed as that format (the caller reports it as an
            unreadable table).
    """
    if fmt == "parquet":
        raise ModuleNotFoundError(
            f"reading the Parquet table {path} needs pandas and pyarrow: "
            f"the {TABLES_EXTRA!r} extra",
            name="pandas",
        )
    data = _read_bytes(path)
    if fmt == "json":
        return RecordFrame(_records(loads_keeping_numbers(data), path))
    if fmt == "jsonl":
        return RecordFrame(_json_lines(data, path))
    if fmt in ("csv", "tsv"):
        return _delimited(data, "\t" if fmt == "tsv" else ",")
    raise ValueError(f"unknown table format {fmt!r}")
