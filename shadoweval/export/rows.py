"""One exported row per pair: the columns and their types, and the frame that holds them.

Columns (:data:`EXPORT_COLUMNS`), in order:

* ``exchange_id``, ``run_id``, ``task_type`` — text;
* ``captured_at`` — when the live request was captured (UTC; a timezone-aware timestamp
  in the frame and Parquet, ISO 8601 text in CSV and JSONL);
* ``similarity``, ``noise_similarity`` — cosine similarity in [-1, 1], float64, empty
  (null) when unknown;
* ``flags`` — the pair's :class:`~shadoweval.pair_flags.PairFlag` values joined by ``;``
  (empty for none);
* ``request`` — the captured request's messages as JSON text;
* ``baseline_text``, ``candidate_text`` — the two answers;
* ``baseline_tool_calls``, ``candidate_tool_calls`` — JSON text of the tool-call lists
  (``[]`` for none);
* ``candidate_error_kind`` — why the candidate's replay failed
  (:class:`~shadoweval.records.ReplayErrorKind` value, e.g. ``timeout``), empty when it
  answered: an errored candidate's text is not a judgement of the model;
* ``label``, ``label_note`` — empty, for the analyst (one of
  :class:`~shadoweval.records.LabelValue`, and free text); read back by
  :func:`~shadoweval.export.labels_import.read_labelled`.

Every text column except the ids, ``flags`` and ``candidate_error_kind`` passes through
the redactor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pandas as pd

from shadoweval.export.redaction import CountingRedactor
from shadoweval.storage.samples import Sample

EXPORT_COLUMNS: tuple[str, ...] = (
    "exchange_id",
    "run_id",
    "task_type",
    "captured_at",
    "similarity",
    "noise_similarity",
    "flags",
    "request",
    "baseline_text",
    "candidate_text",
    "baseline_tool_calls",
    "candidate_tool_calls",
    "candidate_error_kind",
    "label",
    "label_note",
)
FLOAT_COLUMNS: tuple[str, ...] = ("similarity", "noise_similarity")
TIME_COLUMNS: tuple[str, ...] = ("captured_at",)
TEXT_COLUMNS: tuple[str, ...] = tuple(
    c for c in EXPORT_COLUMNS if c not in FLOAT_COLUMNS + TIME_COLUMNS
)
FLAG_SEPARATOR = ";"


def json_text(value: Any) -> str:
    """Compact JSON text (UTF-8, non-ASCII kept, keys in their order)."""
    return orjson.dumps(value).decode("utf-8")


def sample_row(sample: Sample, redact: CountingRedactor) -> dict[str, Any]:
    """The exported row of one pair; every text field redacted through ``redact``."""
    return {
        "exchange_id": sample.exchange_id,
        "run_id": sample.run_id,
        "task_type": sample.task_type,
        "captured_at": sample.captured_at,
        "similarity": sample.similarity,
        "noise_similarity": sample.noise_similarity,
        "flags": FLAG_SEPARATOR.join(flag.value for flag in sample.flags),
        "request": json_text(redact.json(sample.request_messages)),
        "baseline_text": redact(sample.baseline_text),
        "candidate_text": redact(sample.candidate_text),
        "baseline_tool_calls": json_text(redact.json(sample.baseline_tool_calls)),
        "candidate_tool_calls": json_text(redact.json(sample.candidate_tool_calls)),
        "candidate_error_kind": sample.candidate_error_kind or "",
        "label": "",
        "label_note": "",
    }


def rows_frame(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a frame with :data:`EXPORT_COLUMNS` in order and fixed dtypes.

    ``captured_at`` is ``datetime64[us, UTC]``, the similarities ``float64`` (NaN when
    unknown), every other column ``object`` holding ``str``. An empty export has the same
    columns and dtypes.
    """
    frame = pd.DataFrame.from_records(list(rows), columns=list(EXPORT_COLUMNS))
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column], errors="raise").astype("float64")
    for column in TIME_COLUMNS:
        frame[column] = pd.to_datetime(frame[column], utc=True).astype("datetime64[us, UTC]")
    for column in TEXT_COLUMNS:
        frame[column] = frame[column].astype(object)
    return frame
