"""The capture-log reader under malformed lines (issue 13): one entry per line, never a crash.

Hypothesis draws batches of mutations (:mod:`tests.malformed`), each applied to many unique
base lines; the lines are written as a segment (plain or gzip, sometimes after a UTF-8
byte-order mark) and read back. Every physical line must yield exactly one entry — an
exchange, or an error with its ``file:line`` and a known reason — and a line that decodes
must decode the same way on every read (a line without ``exchange_id`` included).
"""

from __future__ import annotations

import gzip
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shadoweval.capture_log import read_capture_log
from tests.malformed import malformed, mutations, one_line

REASONS = {"invalid_json", "invalid_utf8", "schema", "schema_version", "blank_line"}
EXAMPLES = 40
MUTATIONS_PER_EXAMPLE = 50
LINES_PER_MUTATION = 6
"""40 examples × 50 mutations × 6 lines = 12,000 lines."""


def test_every_line_of_a_malformed_capture_log_yields_one_entry() -> None:
    thrown = {"lines": 0, "exchanges": 0, "rejected": 0}

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None)
    @given(
        batch=st.lists(mutations, min_size=MUTATIONS_PER_EXAMPLE, max_size=MUTATIONS_PER_EXAMPLE),
        compress=st.booleans(),
        bom=st.booleans(),
    )
    def read(batch: list[Any], compress: bool, bom: bool) -> None:
        lines = [
            one_line(malformed(mutation, i * LINES_PER_MUTATION + k, prefix="log"))
            for i, mutation in enumerate(batch)
            for k in range(LINES_PER_MUTATION)
        ]
        data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n"
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "segment.jsonl"
            path.write_bytes(gzip.compress(data) if compress else data)
            first = list(read_capture_log(path))
            again = list(read_capture_log(path))
        assert len(first) == len(lines)  # one entry per line: nothing skipped, nothing split
        for number, entry in enumerate(first, start=1):
            assert entry.location == f"segment.jsonl:{number}"
            assert (entry.exchange is None) != (entry.error is None), entry
            if entry.error is not None:
                assert entry.error.reason in REASONS, entry.error
                assert str(entry.error).startswith(entry.location), entry.error
        # the same file reads the same way: the same ids, the same reasons
        assert [(e.exchange, e.error and e.error.reason) for e in again] == [
            (e.exchange, e.error and e.error.reason) for e in first
        ]
        thrown["lines"] += len(lines)
        thrown["exchanges"] += sum(e.exchange is not None for e in first)
        thrown["rejected"] += sum(e.error is not None for e in first)

    read()
    assert thrown["lines"] >= 10_000
    assert thrown["exchanges"] + thrown["rejected"] == thrown["lines"]
    print(f"capture-log reader: {thrown}")  # the numbers of docs/reliability.md
