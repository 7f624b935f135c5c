"""JSON-ready rows of the tables the application layer returns (summaries, label rates).

A face that prints a table as JSON, and the evaluation report, turn a :mod:`pandas` frame
into records the same way: :func:`json_records`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from shadoweval.tables.values import to_python

__all__ = ["json_records"]


def json_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One dict per row, column name → value, ready for :func:`json.dumps`.

    NaN becomes ``None`` and numpy scalars become Python ones; column names become
    strings (:func:`shadoweval.tables.values.to_python`, the tables' own converter).
    """
    return [to_python(row) for row in frame.to_dict(orient="records")]
