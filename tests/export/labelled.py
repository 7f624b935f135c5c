"""What an analyst does to an export: fill some label cells, break a few rows, save it."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests.export.readback import read_csv

NOTE = 'kürzer, aber "präziser"\nzweite Zeile 👍'

GOOD: list[tuple[str, str, str]] = [
    # (label as typed, stored value, note)
    ("candidate_better", "candidate_better", NOTE),
    ("Candidate Worse", "candidate_worse", "worse, clearly"),
    ("same", "same", ""),
    ("both-bad", "both_bad", "NA"),
    (" CANDIDATE_BETTER ", "candidate_better", ""),
    ("same", "same", "=1+1"),
]
"""Labels of the first six rows and what must be stored."""

REJECTED_REASONS = {
    "bad_label": 1,
    "unknown_exchange_id": 1,
    "wrong_run": 1,
    "duplicate_exchange_id": 1,
}


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The export's rows as text dicts (every cell a string, None for empty similarity)."""
    data = path.read_bytes()
    if path.suffix == ".csv":
        frame = read_csv(data)
        cleaned = frame.astype(object).where(frame.notna(), None)
        return [{str(k): v for k, v in r.items()} for r in cleaned.to_dict("records")]
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line]
    rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(data)).to_pylist()
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None) -> None:
    """Save the edited rows in the file's own format."""
    if path.suffix == ".csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        path.write_text(
            "".join(json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in rows),
            encoding="utf-8",
        )
    else:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def fill_labels(path: Path) -> tuple[dict[str, tuple[str, str]], int]:
    """Label an export in place as an analyst would, with mistakes.

    Rows 0-5 get :data:`GOOD` labels; row 6 a label that is not one; row 7 a valid label
    but another run's id; a copy of row 0 relabelled (duplicate); a row for an exchange
    the run does not have. Returns ``{exchange_id: (label, note)}`` of the labels that
    must be stored, and the number of rows left unlabelled.
    """
    rows = read_rows(path)
    schema = pq.read_schema(path) if path.suffix == ".parquet" else None
    expected: dict[str, tuple[str, str]] = {}
    for row, (typed, stored, note) in zip(rows, GOOD, strict=False):
        row["label"] = typed
        row["label_note"] = note
        expected[row["exchange_id"]] = (stored, note.strip())
    rows[6]["label"] = "great"
    rows[7]["label"] = "same"
    rows[7]["run_id"] = "another-run"
    duplicate = dict(rows[0])
    duplicate["label"] = "candidate_worse"
    unknown = dict(rows[1])
    unknown["exchange_id"] = "ex-99999"
    unknown["label"] = "same"
    rows += [duplicate, unknown]
    write_rows(path, rows, schema)
    unlabelled = len(rows) - len(GOOD) - sum(REJECTED_REASONS.values())
    return expected, unlabelled
