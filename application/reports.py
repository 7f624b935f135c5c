"""JSON-ready rows of the tables the application layer returns (summaries, label rates).

A face that prints a table as JSON, and the evaluation report, turn a :mod:`pandas` frame
into records the same way: :func:`json_records`.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["json_records"]


def json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per row, column name → value, ready for :func:`json.dumps`.

    NaN becomes ``None`` and numpy scalars become Python ones; column names become
    strings.
    """
    records: list[dict[str, Any]] = []
    for row in frame.to_dict(orient="records"):
        record: dict[str, Any] = {}
        for key, value in row.items():
            if hasattr(value, "item"):
                value = value.item()
            if isinstance(value, float) and math.isnan(value):
                value = None
            record[str(key)] = value
        records.append(record)
    return records
