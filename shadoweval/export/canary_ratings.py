"""Read spot-check ratings of a canary's live answers: ``exchange_id``, ``rating`` → ratings.

A live canary's judged quality comes from people (or a judge) rating a sample of the
answers each arm gave (docs/canary.md, "Spot checks"). The file is CSV, JSONL or Parquet
(the readers of :mod:`shadoweval.export.labels_import`, so the same separators, encodings and row
rejections apply) with the columns:

* ``exchange_id`` (required) — an exchange the canary observed (``canary_observation``);
* ``rating`` (required) — a number from 1 to 10 (MT-Bench single-answer grading, Zheng et
  al. 2023); the canary policy's ``rating_bad_at_or_below`` says which count as bad;
* ``rater`` (optional) — who rated; an empty cell takes the ``rater`` argument;
* ``note`` (optional) — at most :data:`~shadoweval.export.labels_import.MAX_NOTE_CHARS` characters.

The rater never sees which version answered: the arm comes from the stored observation,
not from the file. Each row ends as a rating, a rejected row (kept with its location,
reason and the row; the caller stores it and goes on), or an empty ``rating`` cell
(skipped and counted).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from shadoweval.errors import ConfigError
from shadoweval.export.labels_import import (
    MAX_LABELLER_CHARS,
    MAX_NOTE_CHARS,
    RejectedRow,
    TableScan,
    cell_text,
    normalize_exchange_id,
    raw_row,
)
from shadoweval.export.writer import escape_formula
from shadoweval.records import utc_now
from shadoweval.storage.types import CanaryRating

__all__ = [
    "RATING_MAX",
    "RATING_MIN",
    "RATING_SHEET_COLUMNS",
    "RATING_STAGE",
    "RatingImport",
    "rating_sheet_bytes",
    "read_canary_ratings",
]

RATING_STAGE = "canary_rating"
"""``rejected_record.stage`` of rating rows refused here."""

RATING_MIN, RATING_MAX = 1.0, 10.0
"""The rating scale (MT-Bench single-answer grading)."""


@dataclass(frozen=True, slots=True)
class RatingImport:
    """What a ratings file held: the ratings, the rejected rows, rows with an empty
    ``rating`` cell, and blank lines (no rows)."""

    ratings: list[CanaryRating] = field(default_factory=list)
    rejected: list[RejectedRow] = field(default_factory=list)
    unrated: int = 0
    blank_lines: int = 0


def _rating_value(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and RATING_MIN <= value <= RATING_MAX else None


def read_canary_ratings(
    path: Path,
    *,
    canary_id: str,
    observed: Set[str],
    rater: str,
    clock: Callable[[], datetime] = utc_now,
) -> RatingImport:
    """Read the spot-check ratings of canary ``canary_id`` from ``path``.

    Args:
        path: ``.csv``, ``.jsonl`` (``.ndjson``) or ``.parquet``.
        canary_id: the canary the ratings belong to.
        observed: the exchange ids the canary observed; a row naming another is rejected
            (``unknown_exchange_id``).
        rater: who rated, for rows whose ``rater`` cell is empty.
        clock: ``rated_at`` of every rating.

    Returns:
        The ratings and rejected rows: ``missing_exchange_id``, ``unknown_exchange_id``,
        ``bad_rating`` (not a number from 1 to 10; the message names the value),
        ``bad_rater`` (longer than :data:`~shadoweval.export.labels_import.MAX_LABELLER_CHARS`),
        ``note_too_long``, ``duplicate_exchange_id`` (a second row of one exchange and
        rater in the file), plus what the readers reject (bad JSON, wrong cell count).

    Raises:
        ConfigError: an unknown extension, an empty ``rater`` argument, or a file without
            an ``exchange_id`` or ``rating`` column (names the column).
        RecordDecodeError: the file cannot be read at all in its format.
    """
    if not rater.strip():
        raise ConfigError("--rater must not be empty", field="rater", value=rater)
    rated_at = clock()
    ratings: list[CanaryRating] = []
    unrated = 0
    seen: set[tuple[str, str]] = set()
    scan = TableScan(path, ("exchange_id", "rating"), what="ratings file")
    rejected = scan.rejected
    for location, row in scan:
        read = _read_row(row, canary_id=canary_id, observed=observed, rater=rater, seen=seen)
        if read is None:
            unrated += 1
        elif isinstance(read, tuple):
            reason, message = read
            rejected.append(RejectedRow(location, reason, f"{location}: {message}", raw_row(row)))
        else:
            exchange_id, who, value, note = read.exchange_id, read.rater, read.rating, read.note
            seen.add((exchange_id, who))
            ratings.append(
                CanaryRating(
                    canary_id=canary_id,
                    exchange_id=exchange_id,
                    rater=who,
                    rating=value,
                    rated_at=rated_at,
                    note=note,
                )
            )
    return RatingImport(ratings, rejected, unrated, scan.blank_lines)


@dataclass(frozen=True, slots=True)
class _Read:
    exchange_id: str
    rater: str
    rating: float
    note: str


def _read_row(
    row: Mapping[str, Any],
    *,
    canary_id: str,
    observed: Set[str],
    rater: str,
    seen: Set[tuple[str, str]],
) -> _Read | tuple[str, str] | None:
    """One row's rating, its rejection ``(reason, message)``, or ``None`` (no rating)."""
    rating_text = cell_text(row.get("rating")).strip()
    if not rating_text:
        return None
    exchange_id = normalize_exchange_id(cell_text(row.get("exchange_id")))
    who = cell_text(row.get("rater")).strip() or rater.strip()
    note = cell_text(row.get("note")).strip()
    value = _rating_value(rating_text)
    if not exchange_id:
        return "missing_exchange_id", "exchange_id is empty"
    if exchange_id not in observed:
        return (
            "unknown_exchange_id",
            f"exchange_id {exchange_id!r} is not an exchange canary {canary_id!r} observed",
        )
    if value is None:
        return (
            "bad_rating",
            f"rating {rating_text!r} is not a number from {RATING_MIN:g} to {RATING_MAX:g} "
            f"(exchange_id {exchange_id!r})",
        )
    if len(who) > MAX_LABELLER_CHARS:
        return "bad_rater", f"rater has {len(who)} characters; at most {MAX_LABELLER_CHARS}"
    if len(note) > MAX_NOTE_CHARS:
        return "note_too_long", f"note has {len(note)} characters; at most {MAX_NOTE_CHARS}"
    if (exchange_id, who) in seen:
        return (
            "duplicate_exchange_id",
            f"exchange_id {exchange_id!r} is rated by {who!r} twice in this file",
        )
    return _Read(exchange_id, who, value, note)


RATING_SHEET_COLUMNS: tuple[str, ...] = (
    "exchange_id",
    "task_type",
    "request",
    "answer",
    "rating",
    "rater",
    "note",
)
"""Columns of a spot-check sheet (:func:`rating_sheet_bytes`): what the rater reads
(``request``: the messages as JSON text, ``answer``: the answer's text) and the cells they
fill (``rating`` 1–10, optional ``rater`` and ``note``). No arm: the rating is blind, and
:func:`read_canary_ratings` joins the arm from the stored observation."""


def rating_sheet_bytes(rows: Sequence[Mapping[str, str]], fmt: str) -> bytes:
    """A spot-check sheet as CSV or JSON Lines (``fmt``: ``csv`` or ``jsonl``), columns
    :data:`RATING_SHEET_COLUMNS` in order, each row's missing cells empty. CSV text cells
    are formula-safe (:func:`shadoweval.export.writer.escape_formula`, undone when the filled sheet
    is
    read back by :func:`read_canary_ratings`) and always quoted.

    Raises:
        ConfigError: ``fmt`` is neither ``csv`` nor ``jsonl``.
    """
    table = [{column: str(row.get(column, "")) for column in RATING_SHEET_COLUMNS} for row in rows]
    if fmt == "jsonl":
        return b"".join(orjson.dumps(record) + b"\n" for record in table)
    if fmt != "csv":
        raise ConfigError(
            f"format = {fmt!r}: a spot-check sheet is csv or jsonl", field="format", value=fmt
        )
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(RATING_SHEET_COLUMNS)
    for record in table:
        writer.writerow([escape_formula(record[column]) for column in RATING_SHEET_COLUMNS])
    return out.getvalue().encode("utf-8")
