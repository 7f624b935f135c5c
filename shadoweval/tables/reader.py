"""Reading recorded tables into pandas: JSON array, JSON Lines, CSV/TSV, Parquet.

pandas comes with the ``tables`` extra; without it (the light install) JSON, JSON Lines
and CSV/TSV are read by :mod:`shadoweval.tables.plain_reader` and Parquet asks for the extra.

The format comes from ``format=`` or the file extension; ``.json`` files and files with
other extensions are sniffed, because benchmark repositories name JSON Lines files
``.json`` (BFCL does). A trailing ``.gz`` is decompressed (pandas ``compression="infer"``).

Reading choices, so that values arrive as they were written:

* JSON / JSON Lines: ``dtype=False`` (no guessing that an id column is a number or a
  date), ``precise_float=True`` (latencies keep every digit); nested objects and lists
  stay Python objects. A file with a number beyond a double or a 64-bit integer (which
  pandas refuses) is read by the plain reader, which keeps such numbers exactly, as text.
* CSV / TSV: every column as text (``dtype=str``) and only the empty cell is missing
  (``keep_default_na=False``), so an answer ``"None"`` or ``"NA"`` is kept as text and
  an id ``"007"`` keeps its zeros; numbers are parsed per column later.
* Parquet: pyarrow; list and struct columns arrive as NumPy arrays and dicts (normalized
  by :func:`~shadoweval.tables.values.to_python`).
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from shadoweval.errors import RecordDecodeError
from shadoweval.tables.frames import RecordFrame, pandas_installed
from shadoweval.tables.json_numbers import loads_keeping_numbers
from shadoweval.tables.plain_reader import read_plain_table

if TYPE_CHECKING:
    import pandas as pd

TableFormat = Literal["json", "jsonl", "csv", "tsv", "parquet"]

TABLE_SUFFIXES: dict[str, TableFormat | None] = {
    ".json": None,  # sniffed: a JSON array, or JSON Lines named .json
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
"""Known table extensions (before an optional ``.gz``); ``None`` means "sniff"."""

_SNIFF_BYTES = 1 << 16


def _base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _head(path: Path) -> bytes:
    with path.open("rb") as raw:
        head = raw.read(_SNIFF_BYTES)
    if head[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    return head


def sniff_format(path: Path) -> TableFormat:
    """Guess a file's table format from its first bytes.

    Parquet magic ``PAR1`` → parquet; ``[`` → JSON array; ``{`` → JSON Lines when the first
    line is a complete JSON object, else a single JSON document; anything else → CSV.
    """
    head = _head(path)
    if head[:4] == b"PAR1":
        return "parquet"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"[":
        return "json"
    if text[:1] == b"{":
        first_line = text.split(b"\n", 1)[0]
        try:
            return "jsonl" if isinstance(loads_keeping_numbers(first_line), dict) else "json"
        except ValueError:
            return "json"
    return "csv"


def detect_format(path: str | Path) -> TableFormat:
    """Return the table format of ``path`` from its extension, sniffing when ambiguous."""
    path = Path(path)
    fmt = TABLE_SUFFIXES.get(_base_suffix(path))
    return fmt if fmt is not None else sniff_format(path)


def read_table(path: str | Path, format: TableFormat | None = None) -> pd.DataFrame | RecordFrame:
    """Read one table file into a DataFrame (via pandas; without pandas installed, a
    :class:`~shadoweval.tables.frames.RecordFrame` from :func:`read_plain_table`).

    Args:
        path: the file.
        format: force ``json`` (an array of row objects), ``jsonl``, ``csv``, ``tsv`` or
            ``parquet``; default: by extension, sniffing ``.json`` and unknown extensions.

    Returns:
        One DataFrame row per record, columns as in the file (an empty file gives an empty
        frame without columns).

    Raises:
        FileNotFoundError: ``path`` does not exist or is not a file.
        RecordDecodeError: the file cannot be parsed as that format
            (``reason="unreadable_table"``, ``location`` = the path).
        ModuleNotFoundError: a Parquet file without pandas installed (``name="pandas"``;
            the ``tables`` extra brings it).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"table not found: {path}")
    fmt = format or detect_format(path)
    if not pandas_installed():
        if path.stat().st_size == 0:
            return RecordFrame([])
        try:
            return read_plain_table(path, fmt)
        except (ValueError, OSError, UnicodeDecodeError) as exc:
            raise RecordDecodeError(
                f"{path}: cannot read as {fmt}: {exc}",
                location=str(path),
                reason="unreadable_table",
            ) from exc
    import pandas as pd

    if path.stat().st_size == 0:
        return pd.DataFrame()
    try:
        if fmt == "json":
            return pd.read_json(path, orient="records", dtype=False, precise_float=True)
        if fmt == "jsonl":
            return pd.read_json(path, lines=True, dtype=False, precise_float=True)
    except ValueError as exc:
        return _json_keeping_numbers(path, fmt, exc)
    try:
        if fmt in ("csv", "tsv"):
            return pd.read_csv(
                path,
                sep="\t" if fmt == "tsv" else ",",
                dtype=str,
                keep_default_na=False,
                na_values=[""],
            )
        if fmt == "parquet":
            return pd.read_parquet(path)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise RecordDecodeError(
            f"{path}: cannot read as {fmt}: {exc}", location=str(path), reason="unreadable_table"
        ) from exc
    raise ValueError(f"unknown table format {fmt!r}")


def _json_keeping_numbers(path: Path, fmt: TableFormat, error: ValueError) -> RecordFrame:
    """A JSON table pandas refused, read again keeping numbers beyond a double or int64
    exactly, as text (pandas refuses the whole file for one such cell: "Value is too
    big!"); a file that is not JSON at all is reported with pandas' message."""
    try:
        return read_plain_table(path, fmt)
    except (ValueError, OSError, UnicodeDecodeError):
        raise RecordDecodeError(
            f"{path}: cannot read as {fmt}: {error}", location=str(path), reason="unreadable_table"
        ) from error


def table_files(path: str | Path) -> list[Path]:
    """Return ``[path]`` for a file, or a directory's table files (known extensions), sorted.

    Raises:
        FileNotFoundError: nothing at ``path``, or a directory without table files.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.is_file() and _base_suffix(p) in TABLE_SUFFIXES
        )
        if not files:
            raise FileNotFoundError(f"no table files ({', '.join(TABLE_SUFFIXES)}) in {path}")
        return files
    raise FileNotFoundError(f"table not found: {path}")
