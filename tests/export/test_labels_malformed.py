"""Labelled files an analyst broke (issue 13): every row a label, rejected or unlabelled.

Hypothesis draws batches of row mutations — rows with too many or too few cells (the
3-cells-instead-of-15 row once read as "unlabelled"), unquoted separators, random text
lines, hostile label, id, run and note cells, blank lines — and writes each batch as a
labelled CSV (``,``, ``;`` or tab) or JSONL file over the columns of a real export. Each
file is imported into a seeded run (SQLite and PostgreSQL) with
:func:`shadoweval.application.labels.import_labelled_export`, twice. No import may raise; every row
must be a stored label, a rejected record with a known reason and a message that starts
with its ``file:line``, or an unlabelled row (count in = labels + rejected + unlabelled);
a row with the wrong cell count is rejected as ``wrong_cell_count``; the second import
stores no new rejected record.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadoweval.application.labels import import_labelled_export
from shadoweval.export.labels_import import REJECT_REASONS
from shadoweval.storage import Repository
from tests.export.seed import RUN_ID, Seeded
from tests.malformed import HOSTILE

pytestmark = pytest.mark.slow

EXAMPLES = 20
MUTATIONS_PER_EXAMPLE = 25
ROWS_PER_MUTATION = 20
"""20 examples × 25 mutations × 20 rows = 10,000 rows per database."""

COLUMNS = [
    "run_id", "exchange_id", "task_type", "similarity", "flags", "request", "baseline_text",
    "candidate_text", "baseline_tool_calls", "candidate_tool_calls", "candidate_error_kind",
    "baseline_finish_reason", "candidate_finish_reason", "label", "label_note",
]  # fmt: skip
"""15 columns, as in an export (the ones that are read and some that are not)."""

LABELS = ["candidate_better", "Candidate Worse", "same", "both-bad", " SAME ", "great", ""]
texts = st.text(max_size=30)
cells = st.one_of(st.sampled_from([h for h in HOSTILE if isinstance(h, str)]), texts)

row_mutations = st.one_of(
    st.tuples(st.just("good"), st.sampled_from(LABELS), texts),
    st.tuples(st.just("cells"), st.integers(min_value=0, max_value=40)),
    st.tuples(st.just("line"), st.text(max_size=80)),
    st.tuples(st.just("label"), cells),
    st.tuples(st.just("id"), cells),
    st.tuples(st.just("run"), cells),
    st.tuples(st.just("note"), cells, st.integers(min_value=0, max_value=2100)),
    st.tuples(
        st.just("blank"),
    ),
)


def row_for(mutation: tuple[Any, ...], n: int, ids: list[str]) -> list[str] | str | None:
    """Cells of the row ``mutation`` makes (``n``: its number), a raw line, or ``None``
    for a blank line."""
    cells = {c: f"{c} {n}" for c in COLUMNS}
    cells.update(run_id=RUN_ID, exchange_id=ids[n % len(ids)], task_type="chat", label="same")
    cells["label_note"] = ""
    kind = mutation[0]
    if kind == "good":
        cells["label"], cells["label_note"] = mutation[1], mutation[2]
    elif kind == "cells":
        return [f"c{n}.{i}" for i in range(mutation[1])]
    elif kind == "line":
        return re.sub(r'["\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]', " ", mutation[1])
    elif kind == "label":
        cells["label"] = mutation[1]
    elif kind == "id":
        cells["exchange_id"] = mutation[1]
    elif kind == "run":
        cells["run_id"] = mutation[1]
    elif kind == "note":
        cells["label_note"] = mutation[1] * (mutation[2] // max(len(mutation[1]), 1) + 1)
    elif kind == "blank":
        return None
    return [cells[c] for c in COLUMNS]


def write(path: Path, rows: list[list[str] | str | None], separator: str) -> int:
    """Write ``rows`` as CSV (``separator``) or JSONL; return the blank lines written."""
    out = io.StringIO(newline="")
    blanks = 0
    if path.suffix == ".csv":
        writer = csv.writer(out, delimiter=separator)  # quotes cells holding CR or LF
        writer.writerow(COLUMNS)
        for row in rows:
            if row is None or row == []:
                out.write("\n")
                blanks += 1
            elif isinstance(row, str):
                out.write(row + "\n")
                # white space and separators only, not a whole row of empty cells: no row
                count = row.count(separator) + 1
                blanks += not row.replace(separator, "").strip() and count != len(COLUMNS)
            else:
                writer.writerow(row)
    else:
        for row in rows:
            if row is None:
                out.write("\n")
                blanks += 1
            elif isinstance(row, str):
                out.write(row + "\n")
                blanks += not row.strip()
            elif len(row) != len(COLUMNS):
                out.write(json.dumps(row) + "\n")  # a JSON list: not a row object
            else:
                out.write(json.dumps(dict(zip(COLUMNS, row, strict=True))) + "\n")
    path.write_text(out.getvalue(), encoding="utf-8")
    return blanks


def test_labels_import_keeps_or_rejects_every_malformed_row(
    repo: Repository, seeded: Seeded, tmp_path: Path
) -> None:
    ids = [score.exchange_id for score in seeded.scores]
    totals = {"rows": 0, "labels": 0, "rejected": 0, "unlabelled": 0}
    reasons: dict[str, int] = {}
    example = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        batch=st.lists(
            row_mutations, min_size=MUTATIONS_PER_EXAMPLE, max_size=MUTATIONS_PER_EXAMPLE
        ),
        fmt=st.sampled_from(["csv", "jsonl"]),
        separator=st.sampled_from([",", ";", "\t"]),
    )
    def throw(batch: list[Any], fmt: str, separator: str) -> None:
        nonlocal example
        example += 1
        rows = [
            row_for(mutation, i * ROWS_PER_MUTATION + k, ids)
            for i, mutation in enumerate(batch)
            for k in range(ROWS_PER_MUTATION)
        ]
        path = tmp_path / f"labelled-{example:03d}.{fmt}"
        blanks = write(path, rows, separator)
        stored_before = sum(repo.count_rejected(RUN_ID, stage="label_import").values())

        result = import_labelled_export(repo, path, run_id=RUN_ID, labeller="prop")  # no raise

        imported = result.imported
        assert imported.rows == len(rows) - blanks  # count in = labels + rejected + unlabelled
        assert imported.blank_lines == blanks
        assert result.stored == len(imported.labels)
        numbers = []
        for rejected in imported.rejected:
            assert rejected.reason in REJECT_REASONS, rejected
            assert rejected.detail.startswith(rejected.location + ":"), rejected
            name, number = rejected.location.rsplit(":", 1)
            assert name == path.name
            numbers.append(int(number))
        assert numbers == sorted(numbers)
        if fmt == "csv":  # every row with another cell count than the header's is rejected
            wrong = sum(isinstance(r, list) and len(r) != len(COLUMNS) and r != [] for r in rows)
            assert reasons_of(imported.rejected).get("wrong_cell_count", 0) >= wrong
        stored_after = sum(repo.count_rejected(RUN_ID, stage="label_import").values())
        assert stored_after - stored_before == len(imported.rejected) - result.skipped

        again = import_labelled_export(repo, path, run_id=RUN_ID, labeller="prop")
        assert again.skipped == len(again.imported.rejected)  # nothing stored twice
        assert sum(repo.count_rejected(RUN_ID, stage="label_import").values()) == stored_after
        totals["rows"] += imported.rows + blanks
        totals["labels"] += len(imported.labels)
        totals["rejected"] += len(imported.rejected)
        totals["unlabelled"] += imported.unlabelled + blanks
        for reason, n in reasons_of(imported.rejected).items():
            reasons[reason] = reasons.get(reason, 0) + n

    throw()
    assert totals["rows"] >= 10_000
    assert totals["labels"] + totals["rejected"] + totals["unlabelled"] == totals["rows"]
    print(f"labels import: {totals} {reasons}")  # the numbers of docs/reliability.md


def reasons_of(rejected: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in rejected:
        out[row.reason] = out.get(row.reason, 0) + 1
    return out
