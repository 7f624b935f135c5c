"""``shadow-eval canary start / status / rollback / ingest`` on a SQLite database and a real
split directory (the Envoy front's settings from the environment)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from shadoweval.capture.canary_split import read_split
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.cli import app
from shadoweval.storage import Database, Repository
from tests.storage.factories import BASELINE, CANDIDATE, T0, make_exchange


def cli(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__UPSTREAM_URL", "http://127.0.0.1:8000")
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL", "http://127.0.0.1:8001")
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR", str(tmp_path / "split"))
    db_url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with Database(db_url) as db:
        db.upgrade()
        Repository(db).create_run(
            run_id="run-1",
            name="r",
            baseline=BASELINE,
            candidate=CANDIDATE,
            policy_hash="sha256:gate",
            policy_yaml="{}\n",
            created_at=T0 - timedelta(hours=1),
        )
    return db_url


def _start(url: str, why: str) -> str:
    """``canary start`` of run-1 (no shadow verdict: ``--without-promote``); the canary id."""
    started = cli(
        "canary", "start", "--run", "run-1", "--without-promote", "--why", why,
        "--database-url", url,
    )  # fmt: skip
    assert started.exit_code == 0, started.output
    return started.output.split()[1]


def test_start_ingest_status_rollback(url: str, tmp_path: Path) -> None:
    canary_id = _start(url, "shadow PROMOTE")
    assert read_split(tmp_path / "split").candidate_share == 0.01

    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        ex = make_exchange(1, captured_at=T0 + timedelta(days=3650))
        writer.write(ex.model_copy(update={"served_by": "candidate_model"}))
    ingested = cli("canary", "ingest", canary_id, "--capture-log", log, "--database-url", url)
    assert ingested.exit_code == 0, ingested.output
    assert "1 observations stored (candidate 1)" in ingested.output

    running = cli("canary", "status", canary_id, "--json", "--database-url", url)
    assert running.exit_code == 1, running.output  # HOLD's code: still running
    body = json.loads(running.output)
    assert body["state"] == "running"
    assert body["observed_per_arm"] == {"candidate": 1}
    assert body["rejected_lines"] == {}
    assert [a["action"] for a in body["audit"]] == ["canary_started"]

    no_why = cli("canary", "rollback", canary_id, "--why", "", "--database-url", url)
    assert no_why.exit_code == 3
    assert "must say why" in no_why.output
    rolled = cli("canary", "rollback", canary_id, "--why", "too slow", "--database-url", url)
    assert rolled.exit_code == 0, rolled.output
    assert read_split(tmp_path / "split").candidate_share == 0.0
    final = cli("canary", "status", canary_id, "--database-url", url)
    assert final.exit_code == 2, final.output
    assert "canary_rolled_back" in final.output
    assert "too slow" in final.output


def test_unknown_canary_exits_3_naming_it(url: str) -> None:
    result = cli("canary", "status", "nope", "--database-url", url)
    assert result.exit_code == 3
    assert "canary_id = 'nope'" in result.output


def test_run_once_rate_and_the_run_loop_exit_codes(url: str, tmp_path: Path) -> None:
    canary_id = _start(url, "go")
    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        ex = make_exchange(1, captured_at=T0 + timedelta(days=3650))
        writer.write(ex.model_copy(update={"served_by": "candidate_model"}))
    once = cli("canary", "run", canary_id, "--capture-log", log, "--once", "--database-url", url)
    assert once.exit_code == 1, once.output  # held: the default policy's day has not passed
    assert f"canary {canary_id} step 0: held (share 0.01, 1 new observations)" in once.output

    ratings = tmp_path / "ratings.csv"
    ratings.write_text(f"exchange_id,rating\n{ex.exchange_id},8\nex-unknown,2\n", encoding="utf-8")
    rated = cli(
        "canary", "rate", canary_id, "--file", ratings, "--rater", "ana", "--database-url", url
    )
    assert rated.exit_code == 0, rated.output
    assert "1 ratings stored, 1 rows rejected" in rated.output
    assert "unknown_exchange_id" in rated.output

    bad = cli(
        "canary", "run", canary_id, "--capture-log", log, "--interval", "0", "--database-url", url
    )
    assert bad.exit_code == 3
    assert "interval_s = 0" in bad.output


def test_rollback_with_the_database_unreachable_still_moves_the_split(
    url: str, tmp_path: Path
) -> None:
    canary_id = _start(url, "go")
    down = "postgresql+psycopg://postgres@127.0.0.1:1/test"
    rolled = cli("canary", "rollback", canary_id, "--why", "p99", "--database-url", down)
    assert rolled.exit_code == 3, rolled.output
    assert "rolled back anyway (share 0" in rolled.output
    assert read_split(tmp_path / "split").candidate_share == 0.0
    again = cli("canary", "rollback", canary_id, "--why", "p99", "--database-url", url)
    assert again.exit_code == 0, again.output


def test_start_needs_the_shadow_runs_promote(url: str, tmp_path: Path) -> None:
    refused = cli("canary", "start", "--run", "run-1", "--why", "go", "--database-url", url)
    assert refused.exit_code == 3, refused.output
    assert "latest gate verdict is none (never gated)" in refused.output
    assert "--without-promote" in refused.output
    assert not (tmp_path / "split" / "split.yaml").exists()  # the split was never touched


def test_sample_writes_a_blind_redacted_sheet_that_rate_reads_back(
    url: str, tmp_path: Path
) -> None:
    """The sheet holds both arms' answers, no arm column, no secret or e-mail address (the
    exports' body redactor); filled in, ``canary rate`` stores each rating with its arm."""
    canary_id = _start(url, "go")
    secret, email = "sk-live-CANARY0123456789abcdef", "ana.lyst@example.com"
    log = tmp_path / "log"
    with CaptureLogWriter(log) as writer:
        for n, cluster in ((1, "candidate_model"), (2, "live_model"), (3, "live_model")):
            ex = make_exchange(
                n,
                captured_at=T0 + timedelta(days=3650, seconds=n),
                text=f"key {secret} mail {email}",
            )
            writer.write(ex.model_copy(update={"served_by": cluster}))
    assert (
        cli("canary", "ingest", canary_id, "--capture-log", log, "--database-url", url).exit_code
        == 0
    )
    sheet = tmp_path / "sheet.csv"
    sampled = cli(
        "canary", "sample", canary_id, "--capture-log", log, "--out", sheet, "--per-arm", "1",
        "--database-url", url,
    )  # fmt: skip
    assert sampled.exit_code == 0, sampled.output
    assert "2 answers written" in sampled.output
    text = sheet.read_text(encoding="utf-8")
    assert secret not in text
    assert email not in text
    header = text.splitlines()[0]
    assert header == '"exchange_id","task_type","request","answer","rating","rater","note"'
    assert "arm" not in header.replace("answer", "")
    again = cli(
        "canary", "sample", canary_id, "--capture-log", log, "--out", sheet,
        "--database-url", url,
    )  # fmt: skip
    assert again.exit_code == 3
    assert "is not overwritten" in again.output

    import csv

    with sheet.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["rating"] = "7"
    filled = tmp_path / "filled.csv"
    with filled.open("w", encoding="utf-8", newline="") as fh:
        out = csv.DictWriter(fh, fieldnames=list(rows[0]))
        out.writeheader()
        out.writerows(rows)
    rated = cli(
        "canary", "rate", canary_id, "--file", filled, "--rater", "ana", "--database-url", url
    )
    assert rated.exit_code == 0, rated.output
    assert "2 ratings stored, 0 rows rejected" in rated.output
    with Database(url) as db:
        ratings = Repository(db).canary_ratings(canary_id)
        arms = {o.exchange_id: o.arm for o in Repository(db).canary_observations(canary_id)}
    assert sorted(arms[r.exchange_id] for r in ratings) == ["baseline", "candidate"]
