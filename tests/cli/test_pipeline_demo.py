"""``shadow-eval demo``: the whole loop on simulated models, both directions: the regressed
candidate is rolled back on both planted regressions, the better one is promoted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shadoweval.application.demo import PLANTED, caught_regressions
from shadoweval.cli import app
from shadoweval.records import CheckOutcome, Decision, Verdict


@pytest.mark.slow
def test_demo_exits_0_rolls_back_the_regressed_and_promotes_the_better_candidate(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "demo"
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--workdir",
            str(workdir),
            "--per-task-type",
            "200",
            "--encoder",
            "hashing",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "demo OK" in result.stdout
    report = json.loads((workdir / "report.json").read_text(encoding="utf-8"))
    verdict = Verdict.model_validate(report["verdict"])
    assert verdict.decision is Decision.ROLLBACK
    assert sorted(caught_regressions(verdict)) == sorted(PLANTED)
    # Every captured request was replayed to both replicas; nothing was lost.
    # 200 requests per task type, support questions twice as often: 1,000.
    assert report["replay"]["lines_read"] == 1000
    assert report["replay"]["sent"] == {"candidate": 1000, "baseline_repeat": 1000}
    assert report["rejected"] == {}
    assert verdict.coverage.captured == 1000
    assert {row["task_type"] for row in report["per_task_type"]} >= {
        "support_chat",
        "classification",
        "extraction",
        "summarization",
    }
    # The better candidate: its answers changed (it answers the baseline's loops and
    # refusals properly), the simulated judge says better, and it is promoted.
    better = json.loads((workdir / "report-better.json").read_text(encoding="utf-8"))
    promoted = Verdict.model_validate(better["verdict"])
    assert promoted.decision is Decision.PROMOTE, promoted.reasons
    assert promoted.reasons[0].startswith("all ")
    assert any(r.startswith("observation window: the pairs span 26.0 h") for r in promoted.reasons)
    net = {c.task_type: c for c in promoted.checks if c.metric == "net_harm"}
    assert net["support_chat"].outcome is CheckOutcome.PASS
    assert net["support_chat"].estimate is not None
    assert net["support_chat"].estimate < 0  # net harm below 0: the candidate is better
    harms = {c.task_type: c for c in promoted.checks if c.metric == "harm_degeneration"}
    assert harms["support_chat"].estimate is not None
    assert harms["support_chat"].estimate < 0  # the baseline looped, the candidate did not
    # The judge stage ran before the gate, sent only changed pairs, to the simulated judge.
    judged = better["judge_run"]
    assert judged["endpoint"].startswith("http://127.0.0.1:")
    chat = next(t for t in judged["task_types"] if t["task_type"] == "support_chat")
    assert 0 < chat["selected"] == chat["changed"] <= 400
    assert chat["better"] > 0
    assert chat["worse"] == 0
    assert better["judgement"] is not None


def test_demo_never_deletes_files_it_did_not_write(tmp_path: Path) -> None:
    workdir = tmp_path / "my-project"
    workdir.mkdir()
    precious = workdir / "thesis.txt"
    precious.write_text("years of work", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "demo",
            "--workdir",
            str(workdir),
            "--per-task-type",
            "10",
            "--encoder",
            "hashing",
            "--no-progress",
        ],
    )
    assert precious.exists(), f"demo deleted {precious} (exit {result.exit_code})"
    assert result.exit_code == 3
    assert "not empty and was not made by the demo" in " ".join(result.stderr.split())


def test_demo_rerun_removes_only_what_it_made(tmp_path: Path) -> None:
    from shadoweval.application.demo import MARKER, reset_workdir

    workdir = tmp_path / "w"
    reset_workdir(workdir)
    (workdir / "capture").mkdir()
    (workdir / "capture" / "exchanges-1.jsonl").write_text("{}\n", encoding="utf-8")
    (workdir / "report.json").write_text("{}", encoding="utf-8")
    added_later = workdir / "notes.txt"
    added_later.write_text("mine", encoding="utf-8")
    reset_workdir(workdir)
    assert (workdir / MARKER).is_file()
    assert not (workdir / "capture").exists()
    assert not (workdir / "report.json").exists()
    assert added_later.read_text(encoding="utf-8") == "mine"


def test_demo_with_too_little_data_does_not_claim_success(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["demo", "--workdir", str(tmp_path / "d"), "--per-task-type", "10",
         "--encoder", "hashing", "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "demo FAILED" in result.stdout
    assert "demo OK" not in result.stdout
