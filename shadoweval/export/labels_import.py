"""Read a labelled export back: the analyst's ``label`` / ``label_note`` columns → labels.

The file is an export (CSV, JSONL or Parquet, told apart by its extension) in which an
analyst filled some ``label`` cells with one of :class:`~shadoweval.records.LabelValue`
(``candidate_better``, ``candidate_worse``, ``same``, ``both_bad``; case, blanks and
hyphens are forgiven: ``Candidate Better`` and ``candidate-better`` read as
``candidate_better``) and optionally ``label_note``. Only ``exchange_id``, ``run_id``,
``task_type``, ``label`` and ``label_note`` are read; the other columns may have been
edited or dropped.

A CSV may be separated by ``,`` (as exported), ``;`` or a tab (as spreadsheet programs
save it in some locales): the separator is the one of the three that the header line holds
most often. A CSV row whose cell count differs from the header's (a cell holding the
separator unquoted, a row cut short) is rejected (``wrong_cell_count``) with its
``<file>:<line>`` and both counts, never read as another row or as unlabelled; blank lines
are no rows (counted in :attr:`LabelImport.blank_lines`). Exchange ids that look like
ULIDs (26 Crockford base-32 characters) are read case-insensitively and stored in upper
case. ``label_note`` may hold at most :data:`MAX_NOTE_CHARS` characters (as in the
dashboard's form) and the labeller's name at most :data:`MAX_LABELLER_CHARS`.

Each row ends as exactly one of:

* **unlabelled** — ``label`` empty: skipped and counted;
* **a label** — a :class:`~shadoweval.records.HumanLabel` (``source="import"``);
* **rejected** — kept with its location (``<file>:<line>`` in CSV and JSONL, the line
  where the row starts; ``<file>#<row>`` in Parquet, 1-based), a reason
  (:data:`REJECT_REASONS`), a message that starts with the location and names the field
  and the value, and the row as JSON; the caller stores it
  (``Repository.save_rejected_many``) and goes on with the next row.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from shadoweval.errors import ConfigError, RecordDecodeError
from shadoweval.export.writer import unescape_formula
from shadoweval.records import HumanLabel, LabelValue, utc_now
from shadoweval.text import held_invalid_utf8

if TYPE_CHECKING:
    from shadoweval.export.ppi import PpiSample

LABEL_STAGE = "label_import"
"""``rejected_record.stage`` of rows refused here."""

REJECT_REASONS: tuple[str, ...] = (
    "invalid_json",
    "wrong_cell_count",
    "unreadable_row",
    "missing_exchange_id",
    "wrong_run",
    "unknown_exchange_id",
    "missing_task_type",
    "bad_label",
    "note_too_long",
    "duplicate_exchange_id",
    "unprocessable",
)
"""Why a row is rejected (see :func:`read_labelled`)."""

READ_FORMATS: tuple[str, ...] = ("csv", "jsonl", "parquet")

MAX_NOTE_CHARS = 2000
"""Longest ``label_note`` (after trimming blanks); the dashboard's label form applies the same
cap (:func:`shadoweval.application.labels.make_label`)."""
MAX_LABELLER_CHARS = 200
"""Longest labeller name (after trimming blanks)."""

CSV_SEPARATORS: tuple[str, ...] = (",", ";", "\t")
"""Separators a labelled CSV may use (the header line decides, ``,`` on a tie)."""

_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """A row that could not become a label: where, why (``reason`` of
    :data:`REJECT_REASONS`), the message, and the row as JSON text."""

    location: str
    reason: str
    detail: str
    raw: str


@dataclass(frozen=True, slots=True)
class LabelImport:
    """What a labelled file held: labels, rejected rows, and how many rows were unlabelled
    (and how many blank lines, which are no rows, the file had)."""

    labels: list[HumanLabel] = field(default_factory=list)
    rejected: list[RejectedRow] = field(default_factory=list)
    unlabelled: int = 0
    blank_lines: int = 0

    @property
    def rows(self) -> int:
        """Rows read (labels + rejected + unlabelled)."""
        return len(self.labels) + len(self.rejected) + self.unlabelled


def normalize_label(value: str) -> str:
    """``" Candidate-Better "`` → ``"candidate_better"``."""
    return "_".join(value.strip().lower().replace("-", " ").split())


def _cell(value: Any) -> str:
    """A cell as text: ``None`` and NaN are empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value if isinstance(value, str) else str(value)


def normalize_exchange_id(value: str) -> str:
    """An exchange id as stored: blanks trimmed, and a ULID-shaped id in upper case
    (``01hx…`` → ``01HX…``); other ids are kept as they are."""
    text = value.strip()
    return text.upper() if _ULID.fullmatch(text) else text


def _raw(row: Mapping[str, Any]) -> str:
    return orjson.dumps(dict(row), default=str, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")


def _format(path: Path) -> str:
    suffix = path.suffix.lower().lstrip(".")
    fmt = {"ndjson": "jsonl", "pq": "parquet"}.get(suffix, suffix)
    if fmt not in READ_FORMATS:
        raise ConfigError(
            f"labelled file {path} has extension {path.suffix!r}; expected .csv, .jsonl or "
            ".parquet",
            field="file",
            value=str(path),
        )
    return fmt


Rows = Iterator[tuple[str, Mapping[str, Any] | RejectedRow | None]]
"""``(location, row)`` per row of a file: its cells by column, the rejection of a row that
cannot be read, or ``None`` for a blank line (no row)."""


def csv_separator(path: Path) -> str:
    """The separator of a labelled CSV: whichever of :data:`CSV_SEPARATORS` its header
    line holds most often (``,`` when it holds none, or on a tie).

    Raises:
        RecordDecodeError: the file cannot be read.
    """
    try:
        with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
            header = handle.readline()
    except OSError as exc:
        raise RecordDecodeError(
            f"cannot read {path}: {exc}", location=str(path), reason="unreadable"
        ) from exc
    return max(CSV_SEPARATORS, key=header.count)  # the first of equals: "," on a tie


CSV_FIELD_LIMIT = 2**31 - 1
"""Longest CSV cell read (an export holds whole answers; the :mod:`csv` default is 128 KiB)."""


def _unreadable(path: Path, exc: OSError) -> RecordDecodeError:
    return RecordDecodeError(f"cannot read {path}: {exc}", location=str(path), reason="unreadable")


def _csv_rows(path: Path) -> Rows:
    """The rows of a labelled CSV by its header, each located at ``<file>:<line>`` (the
    line where the row starts; 1 is the header). Cells are text, as written, less the
    export's formula escape (:func:`~shadoweval.export.writer.unescape_formula`)."""
    separator = csv_separator(path)
    shown = "tab" if separator == "\t" else repr(separator)
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    try:
        # surrogateescape: a byte that is not UTF-8 is kept apart (a lone surrogate) and
        # its row refused (invalid_utf8) instead of read with a replacement character.
        handle = path.open(encoding="utf-8-sig", errors="surrogateescape", newline="")
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    with handle:
        reader = csv.reader(handle, delimiter=separator)
        try:
            header = next(reader, None)
        except (csv.Error, OSError) as exc:
            raise RecordDecodeError(
                f"cannot read the header line of {path} as CSV (separator {shown}): {exc}",
                location=f"{path.name}:1",
                reason="unreadable",
            ) from exc
        if header is None:
            return
        start = reader.line_num + 1
        while True:
            location = f"{path.name}:{start}"
            try:
                cells = next(reader, None)
            except csv.Error as exc:
                detail = f"{location}: the row cannot be read as CSV (separator {shown}): {exc}"
                start = reader.line_num + 1
                yield location, RejectedRow(location, "unreadable_row", detail, "{}")
                continue
            except OSError as exc:
                raise _unreadable(path, exc) from exc
            start = reader.line_num + 1
            if cells is None:
                return
            if len(cells) != len(header) and not any(cell.strip() for cell in cells):
                yield location, None  # a blank line (white space and separators only)
                continue
            if len(cells) != len(header):
                detail = (
                    f"{location}: {len(cells)} cells separated by {shown} where the header has "
                    f"{len(header)} (a cell holding {shown} must be quoted; a row cut short "
                    "lost cells); the row is not read"
                )
                raw = _raw({"line_cells": cells, "header": header})
                yield location, RejectedRow(location, "wrong_cell_count", detail, raw)
                continue
            if any(held_invalid_utf8(cell) for cell in cells):
                detail = f"{location}: the row is not valid UTF-8 (save the file as UTF-8)"
                raw = _raw({"line_cells": [_shown(cell) for cell in cells]})
                yield location, RejectedRow(location, "invalid_utf8", detail, raw)
                continue
            # A cell the export escaped (a run id or note starting like a formula) is read
            # as it was before the escape, so a round trip keeps every value.
            yield location, dict(zip(header, map(unescape_formula, cells), strict=True))


def _shown(cell: str) -> str:
    """A cell for the rejected record: bytes that are not UTF-8 as U+FFFD."""
    return cell.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _jsonl_rows(path: Path) -> Rows:
    try:
        lines = path.read_bytes().removeprefix(b"\xef\xbb\xbf").splitlines()
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    for number, line in enumerate(lines, start=1):
        location = f"{path.name}:{number}"
        if not line.decode("utf-8", errors="replace").strip():
            yield location, None
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raw = line.decode("utf-8", errors="replace")
            detail = f"{location}: the line is not JSON ({exc})"
            yield location, RejectedRow(location, "invalid_json", detail, raw)
            continue
        if not isinstance(value, dict):
            raw = line.decode("utf-8", errors="replace")
            detail = f"{location}: the line is JSON {type(value).__name__}, not an object"
            yield location, RejectedRow(location, "invalid_json", detail, raw)
            continue
        yield location, value


def _parquet_rows(path: Path) -> Rows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        records = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise RecordDecodeError(
            f"cannot read {path} as Parquet: {exc}", location=str(path), reason="unreadable"
        ) from exc
    for i, record in enumerate(records, start=1):
        yield f"{path.name}#{i}", record


_READERS: dict[str, Callable[[Path], Rows]] = {
    "csv": _csv_rows,
    "jsonl": _jsonl_rows,
    "parquet": _parquet_rows,
}

_LABELS = ", ".join(v.value for v in LabelValue)


class TableScan:
    """The data rows of a CSV, JSONL or Parquet file (told apart by the extension), for an
    import: iterating yields ``(location, row)`` for each row that reads as a mapping of
    column → cell; the rows the readers refuse (bad JSON, a wrong cell count, bytes that
    are not UTF-8) collect in :attr:`rejected`, blank lines are counted in
    :attr:`blank_lines`, and the first data row must hold every column of ``required``.
    :func:`read_labelled` and :func:`shadoweval.export.canary_ratings.read_canary_ratings` read
    through it.

    Raises (while iterating):
        ConfigError: an unknown extension, or a required column missing (names the
            column, the file and the columns it has; ``what`` names the file's kind).
        RecordDecodeError: the file cannot be read at all in its format.
    """

    def __init__(self, path: Path, required: Sequence[str], *, what: str) -> None:
        self.path = path
        self.required = tuple(required)
        self.what = what
        self.rejected: list[RejectedRow] = []
        self.blank_lines = 0

    def __iter__(self) -> Iterator[tuple[str, Mapping[str, Any]]]:
        checked = False
        for location, row in _READERS[_format(self.path)](self.path):
            if row is None:
                self.blank_lines += 1
                continue
            if isinstance(row, RejectedRow):
                self.rejected.append(row)
                continue
            if not checked:
                for column in self.required:
                    if column not in row:
                        raise ConfigError(
                            f"{self.what} {self.path} has no {column!r} column (columns: "
                            f"{', '.join(map(str, row)) or 'none'})",
                            field=column,
                            value=str(self.path),
                        )
                checked = True
            yield location, row


def cell_text(value: Any) -> str:
    """A cell as text: ``None`` and NaN are empty."""
    return _cell(value)


def raw_row(row: Mapping[str, Any]) -> str:
    """A row as JSON text (kept with its rejection)."""
    return _raw_safely(row)


def read_labelled(
    path: Path,
    *,
    run_id: str,
    labeller: str,
    known: Mapping[str, str] | None = None,
    clock: Callable[[], datetime] = utc_now,
    sample: PpiSample | None = None,
) -> LabelImport:
    """Read the labels an analyst wrote into an export of run ``run_id``.

    Args:
        path: ``.csv``, ``.jsonl`` (or ``.ndjson``) or ``.parquet``.
        run_id: the run the labels belong to; a row whose ``run_id`` cell is set to
            another run is rejected (``wrong_run``).
        labeller: who labelled (stored on every label).
        known: the run's pairs, exchange id → task type. A row whose exchange id is not
            in it is rejected (``unknown_exchange_id``); its task type is the label's
            (the file's ``task_type`` cell is ignored). ``None``: every id is accepted
            and the task type comes from the file (``missing_task_type`` when empty).
        clock: ``labelled_at`` of every label.
        sample: the random label sample the export was (its manifest's ``ppi_sample``,
            :mod:`shadoweval.export.ppi`): the label of a pair it lists gets
            ``sample = sample.sample_id``; every other label (a row the analyst added, or
            no sample at all) ``None``, chosen by hand.

    Returns:
        The labels, the rejected rows and the count of unlabelled rows (and of blank
        lines). A second row for an exchange id already labelled in this file is rejected
        (``duplicate_exchange_id``); a CSV row whose cell count is not the header's
        (``wrong_cell_count``, naming ``<file>:<line>`` and both counts); any other error
        reading a row (``unprocessable``). Every row read is a label, a rejected row or
        unlabelled: ``rows == len(labels) + len(rejected) + unlabelled``.

    Raises:
        ConfigError: an unknown extension, an empty ``labeller`` or one longer than
            :data:`MAX_LABELLER_CHARS`, or a file without an ``exchange_id`` or ``label``
            column.
        RecordDecodeError: the file cannot be read at all in its format (not a file,
            unreadable, not Parquet; a CSV header that cannot be read).
    """
    if not labeller.strip():
        raise ConfigError("--labeller must not be empty", field="labeller", value=labeller)
    if len(labeller.strip()) > MAX_LABELLER_CHARS:
        raise ConfigError(
            f"--labeller {labeller.strip()[:40]!r}… has {len(labeller.strip())} characters; "
            f"at most {MAX_LABELLER_CHARS}",
            field="labeller",
            value=labeller,
        )
    labelled_at = clock()
    labels: list[HumanLabel] = []
    unlabelled = 0
    seen: set[str] = set()
    scan = TableScan(path, ("exchange_id", "label"), what="labelled file")
    rejected = scan.rejected
    for location, row in scan:
        try:
            read = _read_row(row, location, run_id, labeller, known, seen, labelled_at, sample)
        except Exception as exc:  # whatever a row holds, it is kept, not a crash
            detail = f"{location}: the row cannot be read: {type(exc).__name__}: {exc}"
            read = RejectedRow(location, "unprocessable", detail, _raw_safely(row))
        if read is None:
            unlabelled += 1
        elif isinstance(read, RejectedRow):
            rejected.append(read)
        else:
            seen.add(read.exchange_id)
            labels.append(read)
    return LabelImport(
        labels=labels, rejected=rejected, unlabelled=unlabelled, blank_lines=scan.blank_lines
    )


def _raw_safely(row: Mapping[str, Any]) -> str:
    try:
        return _raw(row)
    except (TypeError, ValueError):
        return repr(dict(row))[:100_000]


def _read_row(
    row: Mapping[str, Any],
    location: str,
    run_id: str,
    labeller: str,
    known: Mapping[str, str] | None,
    seen: set[str],
    labelled_at: datetime,
    sample: PpiSample | None = None,
) -> HumanLabel | RejectedRow | None:
    """The label of one row, its rejection, or ``None`` when its label cell is empty."""
    label_text = _cell(row.get("label")).strip()
    if not label_text:
        return None
    reject = _check_row(row, location, run_id, known, seen)
    if reject is not None:
        return reject
    exchange_id = normalize_exchange_id(_cell(row["exchange_id"]))
    try:
        value = LabelValue(normalize_label(label_text))
    except ValueError:
        return RejectedRow(
            location,
            "bad_label",
            f"{location}: label {label_text!r} is not one of {_LABELS}",
            _raw(row),
        )
    note = _cell(row.get("label_note")).strip()
    if len(note) > MAX_NOTE_CHARS:
        return RejectedRow(
            location,
            "note_too_long",
            f"{location}: label_note has {len(note)} characters; at most "
            f"{MAX_NOTE_CHARS} (exchange_id {exchange_id!r})",
            _raw(row),
        )
    task_type = known[exchange_id] if known is not None else _cell(row.get("task_type"))
    return HumanLabel(
        run_id=run_id,
        exchange_id=exchange_id,
        task_type=task_type,
        label=value,
        note=note,
        labeller=labeller.strip(),
        labelled_at=labelled_at,
        source="import",
        sample=sample.sample_id if sample and exchange_id in sample.exchange_ids else None,
    )


def _check_row(
    row: Mapping[str, Any],
    location: str,
    run_id: str,
    known: Mapping[str, str] | None,
    seen: set[str],
) -> RejectedRow | None:
    """The rejection of a labelled row (before its label value is read), if any."""
    exchange_id = normalize_exchange_id(_cell(row.get("exchange_id")))
    if not exchange_id:
        return RejectedRow(
            location, "missing_exchange_id", f"{location}: exchange_id is empty", _raw(row)
        )
    row_run = _cell(row.get("run_id")).strip()
    if row_run and row_run != run_id:
        return RejectedRow(
            location,
            "wrong_run",
            f"{location}: run_id {row_run!r} is not the run being labelled ({run_id!r})",
            _raw(row),
        )
    if known is not None and exchange_id not in known:
        return RejectedRow(
            location,
            "unknown_exchange_id",
            f"{location}: exchange_id {exchange_id!r} is not a pair of run {run_id!r}",
            _raw(row),
        )
    if known is None and not _cell(row.get("task_type")).strip():
        return RejectedRow(
            location,
            "missing_task_type",
            f"{location}: task_type is empty (exchange_id {exchange_id!r})",
            _raw(row),
        )
    if exchange_id in seen:
        return RejectedRow(
            location,
            "duplicate_exchange_id",
            f"{location}: exchange_id {exchange_id!r} is labelled again in this file "
            "(the first label is kept)",
            _raw(row),
        )
    return None
