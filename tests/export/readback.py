"""Reading exported files back the way an analyst would (pandas / pyarrow / json)."""

from __future__ import annotations

import io
import json
import math
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from shadoweval.export import EXPORT_COLUMNS
from shadoweval.export.writer import escape_formula
from shadoweval.storage.samples import Sample


def read_csv(data: bytes) -> pd.DataFrame:
    """CSV as documented: text stays text ("NA" too); only empty similarities are NaN."""
    return pd.read_csv(
        io.BytesIO(data),
        dtype={c: str for c in EXPORT_COLUMNS if c not in ("similarity", "noise_similarity")},
        keep_default_na=False,
        na_values={"similarity": [""], "noise_similarity": [""]},
    )


def records(name: str, data: bytes) -> list[dict[str, Any]]:
    """Rows of ``samples.<ext>`` as dicts with similarity ``None``-or-float and an aware
    ``captured_at``."""
    rows: list[dict[Any, Any]]
    if name.endswith(".csv"):
        rows = read_csv(data).to_dict(orient="records")
    elif name.endswith(".jsonl"):
        rows = [json.loads(line) for line in data.decode("utf-8").split("\n") if line]
    else:
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    out: list[dict[str, Any]] = []
    for raw in rows:
        row = {str(k): v for k, v in raw.items()}
        for column in ("similarity", "noise_similarity"):
            value = row[column]
            row[column] = None if value is None or math.isnan(value) else float(value)
        stamp = row["captured_at"]
        row["captured_at"] = (
            stamp.to_pydatetime()
            if isinstance(stamp, pd.Timestamp)
            else datetime.fromisoformat(stamp)
            if isinstance(stamp, str)
            else stamp
        )
        out.append(row)
    return out


def expected_row(sample: Sample) -> dict[str, Any]:
    """What the export must hold for ``sample`` when no redaction rule fires."""
    return {
        "exchange_id": sample.exchange_id,
        "run_id": sample.run_id,
        "task_type": sample.task_type,
        "captured_at": sample.captured_at,
        "similarity": sample.similarity,
        "noise_similarity": sample.noise_similarity,
        "flags": ";".join(f.value for f in sample.flags),
        "request": sample.request_messages,
        "baseline_text": sample.baseline_text,
        "candidate_text": sample.candidate_text,
        "baseline_tool_calls": sample.baseline_tool_calls,
        "candidate_tool_calls": sample.candidate_tool_calls,
        "candidate_error_kind": sample.candidate_error_kind or "",
        "label": "",
        "label_note": "",
    }


def decoded(row: dict[str, Any]) -> dict[str, Any]:
    """An exported row with its JSON-text columns parsed."""
    out = dict(row)
    for column in ("request", "baseline_tool_calls", "candidate_tool_calls"):
        out[column] = json.loads(row[column])
    return out


def unzip(archive: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(archive)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def as_csv_cells(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (:func:`expected_row`) as a default CSV export holds it: every text cell that
    starts like a formula with a leading ``'``; numbers and parsed JSON unchanged."""
    return {k: escape_formula(v) if isinstance(v, str) else v for k, v in row.items()}


def expected_rows(name: str, samples: list[Sample]) -> list[dict[str, Any]]:
    """:func:`expected_row` of each sample, as the file ``name`` holds it (CSV: escaped)."""
    rows = [expected_row(s) for s in samples]
    return [as_csv_cells(r) for r in rows] if name.endswith(".csv") else rows
