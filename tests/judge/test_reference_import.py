"""BFCL's official per-item scores become reference judgements of a real imported run.

The run is BFCL gpt-4o-2024-05-13-FC imported with the ``bfcl`` preset (every category,
1,700 exchanges), as ``shadow-eval import`` writes it; each exchange becomes a scored
pair. ``labels import-reference`` reads the official score files of 05-13 (baseline) and
08-06 (candidate) and must find, per category, exactly the passes and failures the files
list (counted here independently, straight from the JSON lines): e.g. ``rest`` 0.829 →
0.586, so more pairs candidate_worse than candidate_better; ``relevance`` 0.771 → 0.879,
the other way. Pairs without a BFCL origin are counted, and broken score files are
refused naming the file and line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shadoweval.application.importing import ImportRequest, TableSource, import_table
from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.errors import RecordDecodeError
from shadoweval.export.reference_import import bfcl_item, read_bfcl_scores
from shadoweval.records import Exchange, JudgementSource, ModelIdentity, PairScore, QualityOutcome
from shadoweval.storage import Database, Repository
from tests.storage.factories import make_exchange, make_pair_score

RUN_ID = "bfcl-0513-0806"
BASE = "gpt-4o-2024-05-13-FC"
CAND = "gpt-4o-2024-08-06-FC"


def failed_positions(path: Path) -> tuple[dict[str, int], set[int]]:
    """Line 1 and the 0-based positions of the failure lines, read plainly."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines[0], {line["id"] - 1 for line in lines[1:]}


def expected_counts(shared: Path, category: str) -> dict[str, int]:
    head, base_failed = failed_positions(shared / f"bfcl/score/{BASE}/{category}_score.json")
    _, cand_failed = failed_positions(shared / f"bfcl/score/{CAND}/{category}_score.json")
    total = head["total_count"]
    return {
        "items": total,
        "better": len(base_failed - cand_failed),
        "worse": len(cand_failed - base_failed),
        "tie": total - len(base_failed ^ cand_failed),
        "baseline_pass": total - len(base_failed),
        "candidate_pass": total - len(cand_failed),
    }


@pytest.fixture(scope="module")
def bfcl_exchanges(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Exchange]:
    out = tmp_path_factory.mktemp("bfcl") / "capture"
    report = import_table(
        ImportRequest(
            table=TableSource(input=shared_data / f"bfcl/result/{BASE}", preset="bfcl"),
            out=out,
            stream=False,
        )
    )
    assert report.written == 1700
    return [entry.exchange for entry in read_capture_log(out) if entry.exchange is not None]


@pytest.fixture
def bfcl_run(bfcl_exchanges: list[Exchange], tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'bfcl.db'}"
    with Database(url) as db:
        db.upgrade()
        repo = Repository(db)
        repo.create_run(
            run_id=RUN_ID,
            name="BFCL 05-13 → 08-06",
            baseline=ModelIdentity(name=BASE),
            candidate=ModelIdentity(name=CAND),
            policy_hash="sha256:" + "0" * 64,
            policy_yaml="alpha: 0.025\n",
        )
        repo.save_exchanges(RUN_ID, bfcl_exchanges)
        repo.save_pair_scores(
            PairScore(
                run_id=RUN_ID,
                exchange_id=ex.exchange_id,
                task_type=ex.task_type,
                captured_at=ex.captured_at,
                similarity=0.5,
            )
            for ex in bfcl_exchanges
        )
    return url


def import_reference(url: str, shared: Path, *extra: str) -> Result:
    return CliRunner().invoke(
        app,
        [
            "labels", "import-reference", "--preset", "bfcl", "--run", RUN_ID,
            "--baseline-scores", str(shared / f"bfcl/score/{BASE}"),
            "--candidate-scores", str(shared / f"bfcl/score/{CAND}"),
            "--database-url", url, *extra,
        ],
    )  # fmt: skip


def test_every_imported_exchange_names_its_bfcl_item(bfcl_exchanges: list[Exchange]) -> None:
    items = [bfcl_item(ex.source) for ex in bfcl_exchanges]
    assert None not in items
    assert len(set(items)) == 1700
    by_category: dict[str, list[int]] = {}
    for category, position in items:  # type: ignore[misc]
        by_category.setdefault(category, []).append(position)
    assert sorted(by_category["rest"]) == list(range(70))
    assert sorted(by_category["simple"]) == list(range(400))
    for ex, (category, _) in zip(bfcl_exchanges, items, strict=True):  # type: ignore[misc]
        assert ex.task_type == category


def test_reference_judgements_match_the_official_scores(bfcl_run: str, shared_data: Path) -> None:
    result = import_reference(bfcl_run, shared_data, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["stored"] == 1700
    assert report["pairs"] == 1700
    assert report["pairs_without_item"] == 0
    assert len(report["categories"]) == 12
    for category, tally in report["categories"].items():
        expected = expected_counts(shared_data, category)
        assert tally["items"] == tally["matched"] == expected["items"]
        assert tally["not_in_run"] == 0
        assert (tally["better"], tally["worse"], tally["tie"]) == (
            expected["better"], expected["worse"], expected["tie"],
        ), category  # fmt: skip
        assert tally["baseline_pass_matched"] == expected["baseline_pass"]
        assert tally["candidate_pass_matched"] == expected["candidate_pass"]
    rest = report["categories"]["rest"]
    assert (rest["baseline_pass_matched"], rest["candidate_pass_matched"]) == (58, 41)
    assert rest["worse"] > rest["better"]
    assert round(rest["baseline_accuracy"], 3) == 0.829
    assert round(rest["candidate_accuracy"], 3) == 0.586
    relevance = report["categories"]["relevance"]
    assert relevance["better"] > relevance["worse"]

    with Database(bfcl_run) as db:
        stored = Repository(db).list_judgements(RUN_ID, JudgementSource.REFERENCE)
    assert len(stored) == 1700
    rest_worse = [
        j for j in stored if j.task_type == "rest" and j.outcome is QualityOutcome.CANDIDATE_WORSE
    ]
    assert len(rest_worse) == rest["worse"]
    sample = rest_worse[0]
    assert sample.baseline_pass is True
    assert sample.candidate_pass is False
    assert sample.checker == "bfcl-official-score"
    assert "candidate fail (" in sample.rationale


def test_the_table_output_and_a_repeat_import_replaces(bfcl_run: str, shared_data: Path) -> None:
    first = import_reference(bfcl_run, shared_data)
    assert first.exit_code == 0, first.output
    text = " ".join(first.stdout.replace("│", " ").split())
    assert "1700 pairs in run bfcl-0513-0806: 1700 reference judgements stored" in text
    assert "0 pairs without a bfcl item" in text
    again = import_reference(bfcl_run, shared_data)
    assert again.exit_code == 0
    with Database(bfcl_run) as db:
        assert len(Repository(db).list_judgements(RUN_ID)) == 1700


def test_pairs_without_a_bfcl_origin_are_counted(bfcl_run: str, shared_data: Path) -> None:
    scores = read_bfcl_scores(shared_data / f"bfcl/score/{BASE}")
    assert scores["rest"].correct_count == 58
    assert scores["rest"].passed(0)
    assert not scores["rest"].passed(1)  # "id": 2 is rest_1
    live = make_exchange(1, task_type="rest")  # captured by a sidecar, not imported
    with Database(bfcl_run) as db:
        repo = Repository(db)
        repo.save_exchanges(RUN_ID, [live])
        repo.save_pair_scores([make_pair_score(RUN_ID, live)])
    result = import_reference(bfcl_run, shared_data, "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert (report["pairs"], report["pairs_without_item"], report["stored"]) == (1701, 1, 1700)
    assert bfcl_item("sidecar:pod-1") is None
    assert bfcl_item("import:data/alpaca.json#3") is None
    assert bfcl_item("import:r/gorilla_openfunctions_v1_test_java_result.json#7") == ("java", 7)


def test_a_run_whose_pairs_match_no_item_imports_nothing_and_exits_3(
    bfcl_run: str, shared_data: Path
) -> None:
    """Issue 13: ``labels import-reference`` exited 0 when nothing was stored."""
    live = make_exchange(1, task_type="rest")  # captured by a sidecar: no BFCL item
    with Database(bfcl_run) as db:
        repo = Repository(db)
        repo.create_run(
            run_id="live-run", name="live", baseline=ModelIdentity(name=BASE),
            candidate=ModelIdentity(name=CAND), policy_hash="0" * 64, policy_yaml="a: 1\n",
        )  # fmt: skip
        repo.save_exchanges("live-run", [live])
        repo.save_pair_scores([make_pair_score("live-run", live)])
    args = ["labels", "import-reference", "--preset", "bfcl", "--run", "live-run",
            "--baseline-scores", str(shared_data / f"bfcl/score/{BASE}"),
            "--candidate-scores", str(shared_data / f"bfcl/score/{CAND}"),
            "--database-url", bfcl_run]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output
    message = " ".join(result.stderr.split())
    assert "nothing imported: none of the 1 pairs of run live-run matched a bfcl item" in message
    assert "1 pairs in run live-run: 0 reference judgements stored" in " ".join(
        result.stdout.replace("│", " ").split()
    )
    assert CliRunner().invoke(app, [*args, "--json"]).exit_code == 3


def test_broken_score_files_are_refused_naming_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "score"
    folder.mkdir()
    path = folder / "rest_score.json"
    path.write_text(
        '{"accuracy": 0.5, "correct_count": 1, "total_count": 2}\n'
        '{"id": 3, "test_category": "rest"}\n'
    )
    with pytest.raises(RecordDecodeError, match=r"rest_score.json:2: id 3 is not an item in 1..2"):
        read_bfcl_scores(folder)
    path.write_text(
        '{"accuracy": 0.5, "correct_count": 1, "total_count": 2}\n'
        '{"id": 1, "prompt": {"id": "rest_1"}}\n'
    )
    with pytest.raises(RecordDecodeError, match=r"should be item 'rest_0', but its prompt is"):
        read_bfcl_scores(folder)
    path.write_text('{"accuracy": 0.5, "correct_count": 2, "total_count": 2}\n{"id": 1}\n')
    with pytest.raises(RecordDecodeError, match="correct_count 2 does not match"):
        read_bfcl_scores(folder)


def test_unknown_preset_and_missing_folder_exit_3(bfcl_run: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "labels", "import-reference", "--preset", "helm", "--run", RUN_ID,
            "--baseline-scores", str(tmp_path), "--candidate-scores", str(tmp_path),
            "--database-url", bfcl_run,
        ],
    )  # fmt: skip
    assert result.exit_code == 3
    assert "known reference presets are bfcl" in result.stderr
    result = CliRunner().invoke(
        app,
        [
            "labels", "import-reference", "--run", RUN_ID,
            "--baseline-scores", str(tmp_path / "nope"), "--candidate-scores", str(tmp_path),
            "--database-url", bfcl_run,
        ],
    )  # fmt: skip
    assert result.exit_code == 3
    assert "does not exist" in result.stderr


def test_score_file_with_a_number_beyond_float_range_is_read(tmp_path: Path) -> None:
    """A failed executable item's ``execution_result`` holds 1000! (issue 29, 9d): the file
    is read (it was refused: "number is infinity when parsed as double") and the item
    counted as failed."""
    folder = tmp_path / "score"
    folder.mkdir()
    big = str(math.factorial(1000))
    (folder / "executable_simple_score.json").write_text(
        '{"accuracy": 0.5, "correct_count": 1, "total_count": 2}\n'
        '{"id": 2, "error_type": "executable_checker:wrong_result", '
        '"prompt": {"id": "executable_simple_1"}, "execution_result": [' + big + "]}\n"
    )
    (score,) = read_bfcl_scores(folder).values()
    assert score.failed == {1: "executable_checker:wrong_result"}
    assert score.passed(0)
    assert not score.passed(1)
