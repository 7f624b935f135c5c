"""Reading a labelled export: labels, unlabelled rows counted, bad rows kept with a reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shadoweval.application.labels import MAX_NOTE_CHARS as DASHBOARD_MAX_NOTE_CHARS
from shadoweval.errors import ConfigError, RecordDecodeError
from shadoweval.export import read_labelled
from shadoweval.export.labels_import import (
    MAX_NOTE_CHARS,
    csv_separator,
    normalize_exchange_id,
    normalize_label,
)
from shadoweval.records import HumanLabel, LabelValue

AT = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def jsonl(path: Path, *rows: object) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def test_labels_from_a_jsonl_file_with_every_kind_of_row(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "labelled.jsonl",
        {"exchange_id": "a", "run_id": "r", "task_type": "chat", "label": "same",
         "label_note": " fine "},
        {"exchange_id": "b", "run_id": "r", "task_type": "chat", "label": ""},
        {"exchange_id": "c", "run_id": "r", "task_type": "chat", "label": None},
        "{not json",
        "[1, 2]",
        "",
        {"exchange_id": "", "label": "same"},
        {"exchange_id": "d", "run_id": "r", "task_type": "", "label": "same"},
        {"exchange_id": "e", "run_id": "r", "task_type": "extract", "label": "better"},
        {"exchange_id": "a", "run_id": "r", "task_type": "chat", "label": "both_bad"},
        {"exchange_id": "f", "run_id": "r2", "task_type": "chat", "label": "same"},
        {"exchange_id": "g", "task_type": "qa", "label": "Both Bad", "label_note": 3},
    )  # fmt: skip
    result = read_labelled(path, run_id="r", labeller="ana", clock=lambda: AT)
    assert result.labels == [
        HumanLabel(run_id="r", exchange_id="a", task_type="chat", label=LabelValue.SAME,
                   note="fine", labeller="ana", labelled_at=AT, source="import"),
        HumanLabel(run_id="r", exchange_id="g", task_type="qa", label=LabelValue.BOTH_BAD,
                   note="3", labeller="ana", labelled_at=AT, source="import"),
    ]  # fmt: skip
    assert result.unlabelled == 2
    assert [(r.location, r.reason) for r in result.rejected] == [
        ("labelled.jsonl:4", "invalid_json"),
        ("labelled.jsonl:5", "invalid_json"),
        ("labelled.jsonl:7", "missing_exchange_id"),
        ("labelled.jsonl:8", "missing_task_type"),
        ("labelled.jsonl:9", "bad_label"),
        ("labelled.jsonl:10", "duplicate_exchange_id"),
        ("labelled.jsonl:11", "wrong_run"),
    ]
    assert result.rows == 11
    bad = result.rejected[4]
    assert "label 'better' is not one of candidate_better, candidate_worse, same, both_bad" in (
        bad.detail
    )
    assert json.loads(bad.raw)["exchange_id"] == "e"
    assert result.rejected[0].raw == "{not json"


def test_known_pairs_decide_task_type_and_unknown_ids(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "x.ndjson",
        {"exchange_id": "a", "task_type": "wrong", "label": "candidate-better"},
        {"exchange_id": "zz", "task_type": "chat", "label": "same"},
    )
    result = read_labelled(path, run_id="r", labeller="ana", known={"a": "chat"})
    assert [(x.exchange_id, x.task_type, x.label) for x in result.labels] == [
        ("a", "chat", LabelValue.CANDIDATE_BETTER)
    ]
    assert [r.reason for r in result.rejected] == ["unknown_exchange_id"]
    assert "exchange_id 'zz' is not a pair of run 'r'" in result.rejected[0].detail


def test_csv_without_the_label_columns_and_odd_files_are_refused(tmp_path: Path) -> None:
    no_label = tmp_path / "a.csv"
    no_label.write_text("exchange_id,note\nx,y\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="has no 'label' column"):
        read_labelled(no_label, run_id="r", labeller="ana")
    with pytest.raises(ConfigError, match=r"extension '\.txt'"):
        read_labelled(tmp_path / "a.txt", run_id="r", labeller="ana")
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(RecordDecodeError, match="cannot read"):
        read_labelled(broken, run_id="r", labeller="ana")
    with pytest.raises(ConfigError, match="--labeller must not be empty"):
        read_labelled(no_label, run_id="r", labeller="")


def test_csv_with_a_byte_order_mark_reads(tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("exchange_id,task_type,label\r\na,chat,SAME\r\n".encode("utf-8-sig"))
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [(x.exchange_id, x.label) for x in result.labels] == [("a", LabelValue.SAME)]
    assert result.rejected == []


def test_a_formula_escaped_csv_round_trips(tmp_path: Path) -> None:
    """The export writes a run id or note that starts like a formula with a leading ``'``
    (OWASP); the import reads it back as it was, so the labels belong to the run."""
    from shadoweval.export.writer import escape_formula, unescape_formula

    path = tmp_path / "escaped.csv"
    row = ["a", escape_formula("-canary"), "chat", "same", escape_formula("=looks better")]
    path.write_text(
        "exchange_id,run_id,task_type,label,label_note\n" + ",".join(row) + "\n"
        "b,-canary,chat,same,'plain quote\n",
        encoding="utf-8",
    )
    result = read_labelled(path, run_id="-canary", labeller="ana")
    assert result.rejected == []
    assert [(x.exchange_id, x.note) for x in result.labels] == [
        ("a", "=looks better"),
        ("b", "'plain quote"),  # a quote before no formula character is the analyst's
    ]
    for text in ("=1", "+x", "-1", "@a", "\tt", "plain", "'", ""):
        assert unescape_formula(escape_formula(text)) == text


def test_a_csv_row_with_bytes_that_are_not_utf8_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(
        b"exchange_id,task_type,label,label_note\na,chat,same,caf\xe9\nb,chat,same,ok\n"
    )
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [x.exchange_id for x in result.labels] == ["b"]
    (rejected,) = result.rejected
    assert (rejected.location, rejected.reason) == ("latin1.csv:2", "invalid_utf8")
    assert "\ufffd" in rejected.raw


@pytest.mark.parametrize(
    ("typed", "value"),
    [("candidate_better", "candidate_better"), (" Candidate-Worse ", "candidate_worse"),
     ("BOTH  BAD", "both_bad"), ("Same", "same")],
)  # fmt: skip
def test_label_spelling_is_forgiven(typed: str, value: str) -> None:
    assert normalize_label(typed) == value


ULID = "01HX3V7Q8K9M2N4P5R6S7T8V9W"


def test_ulid_shaped_exchange_ids_are_read_case_insensitively(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "x.jsonl",
        {"exchange_id": ULID.lower(), "label": "same"},
        {"exchange_id": f" {ULID[:13].lower()}{ULID[13:]} ", "label": "same"},
        {"exchange_id": "ex-00001", "label": "same"},
        {"exchange_id": "EX-00001", "label": "same"},
    )
    known = {ULID: "chat", "ex-00001": "qa"}
    result = read_labelled(path, run_id="r", labeller="ana", known=known)
    assert [x.exchange_id for x in result.labels] == [ULID, "ex-00001"]
    # the mixed-case copy is the same pair: a duplicate; other ids keep their case
    assert [r.reason for r in result.rejected] == ["duplicate_exchange_id", "unknown_exchange_id"]
    assert normalize_exchange_id("01hx3v7q8k9m2n4p5r6s7t8v9w") == ULID
    assert normalize_exchange_id("81hx3v7q8k9m2n4p5r6s7t8v9w") == "81hx3v7q8k9m2n4p5r6s7t8v9w"
    assert normalize_exchange_id("run-abc") == "run-abc"


def test_a_note_longer_than_the_dashboards_cap_is_rejected(tmp_path: Path) -> None:
    assert MAX_NOTE_CHARS == DASHBOARD_MAX_NOTE_CHARS == 2000
    path = jsonl(
        tmp_path / "x.jsonl",
        {"exchange_id": "a", "task_type": "chat", "label": "same", "label_note": "n" * 2000},
        {"exchange_id": "b", "task_type": "chat", "label": "same", "label_note": "n" * 2001},
        {"exchange_id": "b", "task_type": "chat", "label": "same", "label_note": "fine"},
    )
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [(x.exchange_id, len(x.note)) for x in result.labels] == [("a", 2000), ("b", 4)]
    assert [r.reason for r in result.rejected] == ["note_too_long"]
    assert "label_note has 2001 characters; at most 2000" in result.rejected[0].detail


def test_a_labeller_name_is_capped(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "x.jsonl", {"exchange_id": "a", "task_type": "c", "label": "same"})
    assert len(read_labelled(path, run_id="r", labeller="b" * 200).labels) == 1
    with pytest.raises(ConfigError, match=r"--labeller 'b.*201 characters; at most 200") as caught:
        read_labelled(path, run_id="r", labeller="b" * 201)
    assert caught.value.field == "labeller"


@pytest.mark.parametrize("separator", [",", ";", "\t"])
def test_csv_separators(tmp_path: Path, separator: str) -> None:
    path = tmp_path / "x.csv"
    rows = [
        ["exchange_id", "run_id", "task_type", "label", "label_note"],
        ["a", "r", "chat", "same", "one, two; three"],
        ["b", "r", "chat", "Candidate Worse", ""],
    ]
    text = "".join(
        separator.join(f'"{cell}"' if ("," in cell or ";" in cell) else cell for cell in row) + "\n"
        for row in rows
    )
    path.write_text(text, encoding="utf-8")
    assert csv_separator(path) == separator
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [(x.exchange_id, x.label, x.note) for x in result.labels] == [
        ("a", LabelValue.SAME, "one, two; three"),
        ("b", LabelValue.CANDIDATE_WORSE, ""),
    ]


def test_a_csv_row_that_does_not_match_its_header_is_rejected_naming_the_line(
    tmp_path: Path,
) -> None:
    """A row holding the separator unquoted is kept as a rejected row naming file:line and
    both cell counts; the other rows are read (the import goes on)."""
    path = tmp_path / "semi.csv"
    lines = ["exchange_id;run_id;task_type;label"] + [f"e{i};r;chat;same" for i in range(12)]
    lines.append("e12;r;chat;same;note;with;semicolons")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = read_labelled(path, run_id="r", labeller="ana")
    assert len(result.labels) == 12
    (rejected,) = result.rejected
    assert (rejected.location, rejected.reason) == ("semi.csv:14", "wrong_cell_count")
    assert rejected.detail.startswith(
        "semi.csv:14: 7 cells separated by ';' where the header has 4"
    )
    assert "must be quoted" in rejected.detail
    assert json.loads(rejected.raw)["line_cells"][4:] == ["note", "with", "semicolons"]


def test_a_row_with_3_cells_instead_of_15_is_rejected_not_unlabelled(tmp_path: Path) -> None:
    """Issue 13: a row cut short (3 cells of an export's 15) was read as "unlabelled"."""
    header = [
        "run_id", "exchange_id", "task_type", "similarity", "flags", "request",
        "baseline_text", "candidate_text", "baseline_tool_calls", "candidate_tool_calls",
        "candidate_error_kind", "baseline_finish_reason", "candidate_finish_reason", "label",
        "label_note",
    ]  # fmt: skip
    full = ["r", "a", "chat", *[""] * 10, "same", ""]
    path = tmp_path / "samples.csv"
    path.write_text(
        ",".join(header) + "\n" + ",".join(full) + "\n" + "r,b,chat\n" + "\n"
        + '"r","c","multi\nline",' + ",".join([""] * 10) + ",same,\n" + "r,d\n",
        encoding="utf-8",
    )  # fmt: skip
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [x.exchange_id for x in result.labels] == ["a", "c"]
    assert [(r.location, r.reason) for r in result.rejected] == [
        ("samples.csv:3", "wrong_cell_count"),
        ("samples.csv:7", "wrong_cell_count"),  # the line where the row starts
    ]
    assert "samples.csv:3: 3 cells separated by ',' where the header has 15" in (
        result.rejected[0].detail
    )
    assert result.unlabelled == 0
    assert result.blank_lines == 1
    assert result.rows == 4


def test_jsonl_locations_name_the_line_and_a_bom_is_not_part_of_it(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    row = {"exchange_id": "a", "task_type": "chat", "label": "same"}
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row).encode() + b"\n\n[1]\n\xe3\x80\x80\n")
    result = read_labelled(path, run_id="r", labeller="ana")
    assert [x.exchange_id for x in result.labels] == ["a"]
    assert [(r.location, r.reason) for r in result.rejected] == [("l.jsonl:3", "invalid_json")]
    assert result.rejected[0].detail.startswith("l.jsonl:3: ")
    assert result.blank_lines == 2
