"""``shadow-eval labels import`` and ``labels summary``: a labelled export flows back.

Every format: export with the CLI, fill the label columns as an analyst would (with a bad
label value, an unknown exchange id, another run's row and a duplicate), import, and find
exactly the labels written stored, the bad rows kept as rejected records with their
reasons, and every count in the command's output. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shadoweval.cli import app
from shadoweval.records import POOLED, LabelValue
from shadoweval.stats.labels import label_summary
from shadoweval.storage import Database, Repository
from tests.export.labelled import REJECTED_REASONS, fill_labels
from tests.export.seed import RUN_ID, seed_database


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


@pytest.fixture
def seeded_url(empty_url: str) -> str:
    seed_database(empty_url)
    return empty_url


def export(url: str, out: Path, fmt: str) -> Path:
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--format", fmt, "--per-task-type", 50,
        "--database-url", url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out / f"samples.{fmt}"


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_labelled_export_round_trips_into_stored_labels(
    seeded_url: str, tmp_path: Path, fmt: str
) -> None:
    path = export(seeded_url, tmp_path / "out", fmt)
    expected, unlabelled = fill_labels(path)
    result = cli(
        "labels", "import", path, "--run", RUN_ID, "--labeller", "ana", "--database-url",
        seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rejected = sum(REJECTED_REASONS.values())
    reasons = ", ".join(f"{r} {n}" for r, n in sorted(REJECTED_REASONS.items()))
    rows = len(expected) + rejected + unlabelled
    assert (
        f"{rows} rows read: {len(expected)} labels stored, {rejected} rejected ({reasons}), "
        f"{unlabelled} unlabelled"
    ) in flat(result.stdout)
    err = flat(result.stderr)
    assert "label 'great' is not one of candidate_better" in err
    assert "exchange_id 'ex-99999' is not a pair of run 'run-export'" in err
    assert "run_id 'another-run'" in err

    with Database(seeded_url) as db:
        repo = Repository(db)
        labels = repo.load_labels(RUN_ID)
        task_types = {s.exchange_id: s.task_type for s in repo.samples_by_ids(
            RUN_ID, list(expected))}  # fmt: skip
        assert {label.exchange_id: (label.label.value, label.note) for label in labels} == expected
        for label in labels:
            assert label.labeller == "ana"
            assert label.source == "import"
            assert label.run_id == RUN_ID
            assert label.task_type == task_types[label.exchange_id]
        stored = repo.list_rejected(RUN_ID, stage="label_import")
        assert sorted(r.reason for r in stored) == sorted(
            reason for reason, n in REJECTED_REASONS.items() for _ in range(n)
        )
        for record in stored:
            assert record.location is not None
            assert record.location.startswith(f"samples.{fmt}")
            assert record.raw is not None
            assert json.loads(record.raw)["exchange_id"]
            assert record.detail
        assert repo.count_rejected(RUN_ID, stage="label_import") == REJECTED_REASONS
        # the label shows on the pair
        first = next(iter(expected))
        sample = repo.samples_by_ids(RUN_ID, [first])[0]
        assert sample.label is not None
        assert sample.label.label.value == expected[first][0]


def test_importing_again_replaces_the_labellers_labels(seeded_url: str, tmp_path: Path) -> None:
    path = export(seeded_url, tmp_path / "out", "csv")
    expected, _ = fill_labels(path)
    args = ["labels", "import", path, "--run", RUN_ID, "--database-url", seeded_url]
    assert cli(*args, "--labeller", "ana").exit_code == 0
    text = path.read_text(encoding="utf-8").replace("Candidate Worse", "same", 1)
    path.write_text(text, encoding="utf-8")
    assert cli(*args, "--labeller", "ana").exit_code == 0
    assert cli(*args, "--labeller", "bo").exit_code == 0
    with Database(seeded_url) as db:
        labels = Repository(db).load_labels(RUN_ID)
    assert len([x for x in labels if x.labeller == "ana"]) == len(expected)
    assert len([x for x in labels if x.labeller == "bo"]) == len(expected)
    values = [x.label for x in labels if x.labeller == "ana"]
    assert LabelValue.CANDIDATE_WORSE not in values  # replaced by "same"


def test_summary_shows_what_the_stats_module_computes(seeded_url: str, tmp_path: Path) -> None:
    path = export(seeded_url, tmp_path / "out", "jsonl")
    fill_labels(path)
    imported = cli(
        "labels", "import", path, "--run", RUN_ID, "--labeller", "ana", "--database-url",
        seeded_url,
    )  # fmt: skip
    assert imported.exit_code == 0
    result = cli("labels", "summary", "--run", RUN_ID, "--json", "--database-url", seeded_url)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    with Database(seeded_url) as db:
        labels = Repository(db).load_labels(RUN_ID)
    frame = label_summary(labels)
    assert body["labels"] == len(labels) == 6
    assert [r["task_type"] for r in body["summary"]] == list(frame["task_type"])
    for got, want in zip(body["summary"], frame.to_dict(orient="records"), strict=True):
        for key, value in want.items():
            if isinstance(value, float) and math.isnan(value):
                assert got[key] is None
            elif isinstance(value, float):
                assert got[key] == pytest.approx(value, abs=1e-12)
            else:
                assert got[key] == value
    pooled = body["summary"][-1]
    assert pooled["task_type"] == POOLED
    assert (pooled["candidate_better"], pooled["candidate_worse"]) == (2, 1)
    assert pooled["win_rate"] == pytest.approx(2 / 6)

    table = cli("labels", "summary", "--run", RUN_ID, "--database-url", seeded_url)
    assert table.exit_code == 0
    text = flat(table.stdout)
    assert "all (pooled) 6 6 2 1 2 1" in text
    low, high = pooled["win_low"], pooled["win_high"]
    assert f"{2 / 6:.1%} [{low:.1%}, {high:.1%}]" in text


def test_summary_of_a_run_without_labels(seeded_url: str) -> None:
    result = cli("labels", "summary", "--run", RUN_ID, "--json", "--database-url", seeded_url)
    assert result.exit_code == 0
    body = json.loads(result.stdout)
    assert body["labels"] == 0
    assert body["summary"] == [
        {
            "task_type": POOLED, "n": 0, "labels": 0, "candidate_better": 0,
            "candidate_worse": 0,
            "same": 0, "both_bad": 0, "win_rate": None, "win_low": None, "win_high": None,
            "loss_rate": None, "loss_low": None, "loss_high": None,
        }
    ]  # fmt: skip


def test_errors_exit_3_with_a_clear_message(seeded_url: str, tmp_path: Path) -> None:
    missing = cli(
        "labels", "import", tmp_path / "nope.csv", "--run", RUN_ID, "--labeller", "ana",
        "--database-url", seeded_url,
    )  # fmt: skip
    assert missing.exit_code == 3
    assert "nope.csv" in flat(missing.stderr)
    path = export(seeded_url, tmp_path / "out", "csv")
    ghost = cli(
        "labels", "import", path, "--run", "ghost", "--labeller", "ana", "--database-url",
        seeded_url,
    )  # fmt: skip
    assert ghost.exit_code == 3
    assert "--run 'ghost': run not found" in flat(ghost.stderr)
    odd = tmp_path / "labels.xlsx"
    odd.write_bytes(b"PK")
    wrong = cli(
        "labels", "import", odd, "--run", RUN_ID, "--labeller", "ana", "--database-url",
        seeded_url,
    )  # fmt: skip
    assert wrong.exit_code == 3
    assert "'.xlsx'" in flat(wrong.stderr)
    blank = cli(
        "labels", "import", path, "--run", RUN_ID, "--labeller", " ", "--database-url",
        seeded_url,
    )  # fmt: skip
    assert blank.exit_code == 3
    assert "--labeller must not be empty" in flat(blank.stderr)
    summary = cli("labels", "summary", "--run", "ghost", "--database-url", seeded_url)
    assert summary.exit_code == 3
    for result in (missing, ghost, wrong, blank, summary):
        assert "Traceback" not in result.output


def test_importing_the_same_file_again_does_not_repeat_its_rejected_rows(
    seeded_url: str, tmp_path: Path
) -> None:
    path = export(seeded_url, tmp_path / "out", "csv")
    fill_labels(path)
    args = ["labels", "import", path, "--run", RUN_ID, "--labeller", "ana"]
    assert cli(*args, "--database-url", seeded_url).exit_code == 0
    again = cli(*args, "--database-url", seeded_url)
    assert again.exit_code == 0, again.output
    rejected = sum(REJECTED_REASONS.values())
    assert f"{rejected} rejected rows were already stored by an earlier import" in flat(
        again.stdout
    )
    with Database(seeded_url) as db:
        repo = Repository(db)
        assert repo.count_rejected(RUN_ID, stage="label_import") == REJECTED_REASONS
    # a row rejected for a new reason is stored
    text = path.read_text(encoding="utf-8").replace("great", "awful", 1)
    path.write_text(text, encoding="utf-8")
    third = cli(*args, "--database-url", seeded_url)
    assert third.exit_code == 0
    assert f"{rejected - 1} rejected rows were already stored" in flat(third.stdout)
    with Database(seeded_url) as db:
        counts = Repository(db).count_rejected(RUN_ID, stage="label_import")
    assert counts == {**REJECTED_REASONS, "bad_label": 2}


def test_blank_labels_on_reimport_leave_stored_labels_alone(
    seeded_url: str, tmp_path: Path
) -> None:
    path = export(seeded_url, tmp_path / "out", "jsonl")
    expected, _ = fill_labels(path)
    args = ["labels", "import", path, "--run", RUN_ID, "--labeller", "ana"]
    assert cli(*args, "--database-url", seeded_url).exit_code == 0
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row in rows:
        row["label"] = ""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    blank = cli(*args, "--database-url", seeded_url)
    # nothing imported is an error for a CI step (issue 13), and stored labels stay
    assert blank.exit_code == 3, blank.output
    assert "0 labels stored" in flat(blank.stdout)
    assert "labels import: nothing imported: no row of samples.jsonl became a label" in flat(
        blank.stderr
    )
    with Database(seeded_url) as db:
        labels = Repository(db).load_labels(RUN_ID)
    assert {x.exchange_id: (x.label.value, x.note) for x in labels} == expected


def test_summary_counts_pairs_once_and_shows_the_labels_given(
    seeded_url: str, tmp_path: Path
) -> None:
    path = export(seeded_url, tmp_path / "out", "csv")
    expected, _ = fill_labels(path)
    args = ["labels", "import", path, "--run", RUN_ID, "--database-url", seeded_url]
    assert cli(*args, "--labeller", "ana").exit_code == 0
    assert cli(*args, "--labeller", "bo").exit_code == 0
    result = cli("labels", "summary", "--run", RUN_ID, "--json", "--database-url", seeded_url)
    body = json.loads(result.stdout)
    pooled = body["summary"][-1]
    assert body["labels"] == pooled["labels"] == 2 * len(expected)
    assert pooled["n"] == len(expected)
    table = cli("labels", "summary", "--run", RUN_ID, "--database-url", seeded_url)
    text = flat(table.stdout)
    assert "pairs" in text
    assert f"all (pooled) {len(expected)} {2 * len(expected)}" in text


def test_a_semicolon_csv_imports_and_a_broken_one_names_the_line(
    seeded_url: str, tmp_path: Path
) -> None:
    path = export(seeded_url, tmp_path / "out", "csv")
    expected, _ = fill_labels(path)
    import pandas as pd

    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    semi = tmp_path / "semi.csv"
    frame.to_csv(semi, sep=";", index=False)
    result = cli(
        "labels", "import", semi, "--run", RUN_ID, "--labeller", "ana",
        "--database-url", seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{len(expected)} labels stored" in flat(result.stdout)

    broken = tmp_path / "broken.csv"
    broken.write_text(
        "exchange_id;run_id;task_type;label\nex-00000;run-export;chat;same\n"
        "ex-00001;run-export;chat;same;extra;cells;here\n",
        encoding="utf-8",
    )
    bad = cli(
        "labels", "import", broken, "--run", RUN_ID, "--labeller", "ana",
        "--database-url", seeded_url,
    )  # fmt: skip
    # the broken row is rejected naming its line and cell counts; the good one imports
    assert bad.exit_code == 0, bad.output
    assert "1 labels stored, 1 rejected (wrong_cell_count 1)" in flat(bad.stdout)
    message = flat(bad.stderr)
    assert "broken.csv:3: 7 cells separated by ';' where the header has 4" in message
    with Database(seeded_url) as db:
        (stored,) = Repository(db).list_rejected(RUN_ID, reason="wrong_cell_count")
    assert stored.location == "broken.csv:3"
    assert "Traceback" not in bad.output


def test_a_directory_and_a_long_labeller_are_named(seeded_url: str, tmp_path: Path) -> None:
    folder = cli(
        "labels", "import", tmp_path, "--run", RUN_ID, "--labeller", "ana",
        "--database-url", seeded_url,
    )  # fmt: skip
    assert folder.exit_code == 3
    assert "is a directory" in flat(folder.stderr)
    path = export(seeded_url, tmp_path / "out", "csv")
    long = cli(
        "labels", "import", path, "--run", RUN_ID, "--labeller", "a" * 201,
        "--database-url", seeded_url,
    )  # fmt: skip
    assert long.exit_code == 3
    message = flat(long.stderr)
    assert "--labeller" in message
    assert "201 characters; at most 200" in message
    for result in (folder, long):
        assert "Traceback" not in result.output


def test_json_help_says_what_is_printed() -> None:
    summary_help = flat(cli("labels", "summary", "--help").stdout)
    reference_help = flat(cli("labels", "import-reference", "--help").stdout)
    assert "verdict" not in summary_help.lower()
    assert "verdict" not in reference_help.lower()
    assert "Print the label summary as JSON" in summary_help
    assert "win and loss rates" in summary_help
    assert "Print the reference import as JSON" in reference_help
    assert "judgements stored" in reference_help
