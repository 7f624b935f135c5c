"""``shadow-eval export`` through CliRunner, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shadoweval.cli import app
from shadoweval.storage import Database, Repository
from shadoweval.storage.samples import SampleFilter
from tests.export.changed import judge_pairs
from tests.export.readback import decoded, expected_rows, records
from tests.export.seed import RUN_ID, TASK_TYPES, Seeded, seed_database


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    """Output with rich's line wrapping and table borders undone."""
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


@pytest.fixture
def seeded_url(empty_url: str) -> str:
    seed_database(empty_url)
    return empty_url


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export_writes_samples_and_manifest_and_prints_counts(
    seeded_url: str, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / "export"
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--format", fmt, "--per-task-type", 4,
        "--database-url", seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", f"samples.{fmt}"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"] == {
        t: {"matching": n, "exported": min(n, 4)} for t, n in sorted(TASK_TYPES.items())
    }
    text = flat(result.stdout)
    for task_type, n in TASK_TYPES.items():
        assert f"{task_type} {n} {min(n, 4)}" in text
    assert "total 22 11" in text
    assert "redactions: secret_field 0, secret_key 0, email 0, card_number 0, phone 0" in text
    assert f"wrote {out / f'samples.{fmt}'}" in text
    rows = records(f"samples.{fmt}", (out / f"samples.{fmt}").read_bytes())
    with Database(seeded_url) as db:
        repo = Repository(db)
        ids = [r["exchange_id"] for r in rows]
        assert [decoded(r) for r in rows] == expected_rows(
            f"samples.{fmt}", repo.samples_by_ids(RUN_ID, ids)
        )
        want = []
        for task_type in repo.task_types(RUN_ID):
            want += [i for i, _ in repo.sample_ids(RUN_ID, SampleFilter(), task_type)[:4]]
        assert ids == want


def test_filters_seed_and_order_reach_the_manifest(seeded_url: str, tmp_path: Path) -> None:
    def export(out: Path, seed: int) -> Result:
        return cli(
            "export", "--run-id", RUN_ID, "--out", out, "--order", "random", "--seed", seed,
            "--per-task-type", 3, "--max-similarity", 0.9, "--min-similarity", "-0.5",
            "--task-type", "chat", "--task-type", "extract", "--flag", "format_regression",
            "--database-url", seeded_url,
        )  # fmt: skip

    first = export(tmp_path / "a", 5)
    assert first.exit_code == 0, first.output
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["order"] == "random"
    assert manifest["seed"] == 5
    assert manifest["per_task_type"] == 3
    assert manifest["filters"] == {
        "task_types": ["chat", "extract"],
        "flags": ["format_regression"],
        "min_similarity": -0.5,
        "max_similarity": 0.9,
        "changed_unjudged": False,
        "exchange_ids": None,
    }
    assert set(manifest["counts"]) == {"chat", "extract"}
    assert "seed 5" in flat(first.stdout)
    again = export(tmp_path / "b", 5)
    assert again.exit_code == 0
    same = (tmp_path / "a" / "samples.csv").read_bytes()
    assert (tmp_path / "b" / "samples.csv").read_bytes() == same
    other = [export(tmp_path / f"s{seed}", seed) for seed in range(6, 12)]
    assert all(r.exit_code == 0 for r in other)
    assert any((tmp_path / f"s{s}" / "samples.csv").read_bytes() != same for s in range(6, 12))


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--run", "ghost"], ["--run 'ghost'", "not found"]),
        (["--flag", "format_regresion"], ["--flag 'format_regresion'", "known flags"]),
        (["--format", "xlsx"], ["--format 'xlsx'", "csv, jsonl, parquet"]),
        (["--order", "random"], ["--order random needs --seed"]),
        (["--order", "best"], ["--order 'best'"]),
        (["--min-similarity", "0.8", "--max-similarity", "0.2"],
         ["--min-similarity 0.8", "greater than --max-similarity 0.2"]),
        (["--max-similarity", "1.5"], ["--max-similarity 1.5", "outside [-1, 1]"]),
        (["--min-similarity", "-2"], ["--min-similarity -2.0", "outside [-1, 1]"]),
        (["--min-similarity", "low"], ["--min-similarity 'low' is not a number"]),
        (["--seed", "1.5"], ["--seed '1.5' is not an integer"]),
        (["--per-task-type", "0"], ["--per-task-type 0", "from 1 to 1000000"]),
        (["--per-task-type", "100000000000000000000"],
         ["--per-task-type 100000000000000000000", "from 1 to 1000000"]),
        (["--per-task-type", "1000001"], ["--per-task-type 1000001"]),
        (["--order", "random", "--seed", "100000000000000000000000"],
         ["--seed 100000000000000000000000", "from 0 to 2**63 - 1"]),
        (["--order", "random", "--seed", "9223372036854775808"],
         ["--seed 9223372036854775808", "from 0 to 2**63 - 1"]),
        (["--order", "random", "--seed", "-1"], ["--seed -1"]),
        (["--seed", "7"], ["--seed only applies to --order random", "--seed 7"]),
        (["--order", "lowest", "--seed", "0"], ["--seed only applies to --order random"]),
        (["--per-task-type", "many"], ["--per-task-type 'many' is not an integer"]),
        (["--task-type", "poetry"], ["--task-type 'poetry'", "chat, extract, summarize"]),
    ],
)  # fmt: skip
def test_bad_input_exits_3_naming_the_option_and_value(
    seeded_url: str, tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    base = ["export", "--out", tmp_path / "out", "--database-url", seeded_url]
    if "--run" not in args:
        base += ["--run", RUN_ID]
    result = cli(*base, *args)
    assert result.exit_code == 3, result.output
    message = flat(result.stderr)
    for fragment in fragments:
        assert fragment in message
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_out_that_is_a_file_and_a_missing_database_exit_3(seeded_url: str, tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x", encoding="utf-8")
    result = cli("export", "--run", RUN_ID, "--out", target, "--database-url", seeded_url)
    assert result.exit_code == 3
    assert "is not a directory" in flat(result.stderr)
    missing = f"sqlite:///{tmp_path / 'nope.db'}"
    result = cli("export", "--run", RUN_ID, "--out", tmp_path / "o", "--database-url", missing)
    assert result.exit_code == 3
    assert "does not exist" in flat(result.stderr)
    assert "Traceback" not in result.output


def test_the_largest_seed_is_accepted(seeded_url: str, tmp_path: Path) -> None:
    out = tmp_path / "big"
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--order", "random",
        "--seed", 2**63 - 1, "--per-task-type", 1000000, "--database-url", seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["seed"], manifest["per_task_type"]) == (2**63 - 1, 1000000)


def test_an_empty_out_is_an_error(seeded_url: str, tmp_path: Path) -> None:
    for blank in ("", " "):
        result = cli("export", "--run", RUN_ID, "--out", blank, "--database-url", seeded_url)
        assert result.exit_code == 3, result.output
        assert f"--out {blank!r} is empty" in flat(result.stderr)
        assert "Traceback" not in result.output


def test_an_export_in_another_format_removes_the_stale_samples_file(
    seeded_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "o"
    base = ["export", "--run", RUN_ID, "--out", out, "--database-url", seeded_url]
    assert cli(*base, "--format", "csv").exit_code == 0
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    (out / "samples.csv.bak").write_text("mine too", encoding="utf-8")
    result = cli(*base, "--format", "parquet")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json", "notes.txt", "samples.csv.bak", "samples.parquet",
    ]  # fmt: skip
    assert f"removed {out / 'samples.csv'}" in flat(result.stdout)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["file"] == "samples.parquet"
    again = cli(*base, "--format", "parquet")
    assert again.exit_code == 0
    assert "removed" not in flat(again.stdout)


def test_database_url_comes_from_the_environment(
    seeded_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWEVAL_DATABASE__URL", seeded_url)
    result = cli("export", "--run", RUN_ID, "--out", tmp_path / "env", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "env" / "samples.jsonl").is_file()


def test_a_bad_redaction_setting_exits_3(
    seeded_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__BODY_REDACTION__RULES", '["email", "ssn"]')
    result = cli("export", "--run", RUN_ID, "--out", tmp_path / "o", "--database-url", seeded_url)
    assert result.exit_code == 3
    assert "unknown body redaction rule 'ssn'" in flat(result.stderr)
    assert not (tmp_path / "o").exists()


def test_seeded_fixture_is_what_the_export_sees(seeded_url: str) -> None:
    with Database(seeded_url) as db:
        assert Repository(db).task_types(RUN_ID) == sorted(TASK_TYPES)


__all__ = ["Seeded"]


def test_changed_unjudged_exports_only_the_pairs_left_to_judge(
    empty_url: str, tmp_path: Path
) -> None:
    seeded = seed_database(empty_url)
    with Database(empty_url) as db:
        expected = judge_pairs(Repository(db), seeded)
    out = tmp_path / "left"
    result = cli(
        "export", "--run", RUN_ID, "--out", out, "--per-task-type", 100, "--format", "jsonl",
        "--changed-unjudged", "--database-url", empty_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = records("samples.jsonl", (out / "samples.jsonl").read_bytes())
    assert {r["exchange_id"] for r in rows} == expected
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["filters"]["changed_unjudged"] is True
    assert manifest["filters"]["exchange_ids"] == len(expected)
    text = flat(result.stdout)
    assert f"only changed pairs not judged yet: {len(expected)} in the run" in text
    assert f"total {len(expected)} {len(expected)}" in text


def test_raw_cells_writes_formula_cells_as_they_are(seeded_url: str, tmp_path: Path) -> None:
    formula = "=SUM(A1:A2) starts like a formula"  # a seeded candidate answer
    for flags, cell, mode in (((), "'" + formula, "formula_escaped"),
                              (("--raw-cells",), formula, "raw")):  # fmt: skip
        out = tmp_path / mode
        result = cli(
            "export", "--run", RUN_ID, "--out", out, "--per-task-type", 20, *flags,
            "--database-url", seeded_url,
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        rows = records("samples.csv", (out / "samples.csv").read_bytes())
        assert cell in {r["candidate_text"] for r in rows}
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["cells"] == mode
    parquet = tmp_path / "parquet"
    result = cli(
        "export", "--run", RUN_ID, "--out", parquet, "--format", "parquet",
        "--database-url", seeded_url,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = records("samples.parquet", (parquet / "samples.parquet").read_bytes())
    assert formula in {r["candidate_text"] for r in rows}  # typed: never escaped
    assert json.loads((parquet / "manifest.json").read_text(encoding="utf-8"))["cells"] == "typed"
