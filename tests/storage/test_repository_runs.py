"""Runs, verdict history and rejected records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from shadoweval.errors import RecordDecodeError, StorageError
from shadoweval.records import Decision
from shadoweval.storage import RejectedRecord, RejectStage, Repository, RunStatus

from .factories import BASELINE, CANDIDATE, T0, make_verdict

POLICY_YAML = "alpha: 0.05\nmetrics:\n  similarity: {margin: -0.05}  # ≤ 5 % worse 😬\n"


def create_run(repo: Repository, run_id: str = "run-1", **kwargs: object) -> None:
    repo.create_run(
        run_id=run_id,
        name=kwargs.pop("name", "llama 3.1 → 3.3"),  # type: ignore[arg-type]
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:policy",
        policy_yaml=POLICY_YAML,
        **kwargs,  # type: ignore[arg-type]
    )


def test_run_records_identities_policy_and_settings(repo: Repository) -> None:
    created = repo.create_run(
        run_id="run-1",
        name="llama 3.1 → 3.3",
        baseline=BASELINE,
        candidate=CANDIDATE,
        candidate_base_url="http://shadow:8000/v1",
        policy_hash="sha256:policy",
        policy_yaml=POLICY_YAML,
        source="/var/log/shadow/capture-ü/",
        settings={"replay": {"concurrency": 16, "rate_per_s": None}, "tags": ["a", "ü"]},
        created_at=T0,
    )
    loaded = repo.get_run("run-1")
    assert loaded == created
    assert loaded is not None
    assert loaded.baseline == BASELINE
    assert loaded.candidate == CANDIDATE
    assert loaded.policy_hash == "sha256:policy"
    assert loaded.policy_yaml == POLICY_YAML
    assert loaded.created_at == T0
    assert loaded.created_at.tzinfo is UTC
    assert loaded.status is RunStatus.OPEN
    assert loaded.settings == {
        "replay": {"concurrency": 16, "rate_per_s": None},
        "tags": ["a", "ü"],
    }
    with repo.database.connect() as conn:
        row = conn.execute(sa.text("SELECT policy_hash, status FROM run")).one()
    assert tuple(row) == ("sha256:policy", "open")


def test_run_id_defaults_to_a_new_id_and_duplicates_are_refused(repo: Repository) -> None:
    first = repo.create_run(
        name="a", baseline=BASELINE, candidate=CANDIDATE, policy_hash="h", policy_yaml=""
    )
    assert len(first.run_id) == 26
    with pytest.raises(StorageError, match="already exists"):
        create_run(repo, run_id=first.run_id)


def test_get_unknown_run_is_none(repo: Repository) -> None:
    assert repo.get_run("nope") is None


def test_list_runs_newest_first_and_by_status(repo: Repository) -> None:
    for i in range(3):
        create_run(repo, run_id=f"run-{i}", created_at=T0 + timedelta(minutes=i))
    repo.set_run_status("run-1", RunStatus.HELD)
    assert [r.run_id for r in repo.list_runs()] == ["run-2", "run-1", "run-0"]
    assert [r.run_id for r in repo.list_runs(status=RunStatus.HELD)] == ["run-1"]
    assert [r.run_id for r in repo.list_runs(limit=1)] == ["run-2"]


def test_set_run_status_and_terminal_statuses(repo: Repository) -> None:
    create_run(repo)
    assert repo.set_run_status("run-1", RunStatus.HELD).status is RunStatus.HELD
    assert repo.set_run_status("run-1", RunStatus.PROMOTED).status is RunStatus.PROMOTED
    assert repo.set_run_status("run-1", RunStatus.PROMOTED).status is RunStatus.PROMOTED
    with pytest.raises(StorageError, match="terminal"):
        repo.set_run_status("run-1", RunStatus.ROLLED_BACK)
    run = repo.get_run("run-1")
    assert run is not None
    assert run.status is RunStatus.PROMOTED
    with pytest.raises(StorageError, match="unknown run"):
        repo.set_run_status("nope", RunStatus.HELD)


def test_verdict_history_is_ordered_by_decision_time(repo: Repository) -> None:
    create_run(repo)
    create_run(repo, run_id="other")
    # Inserted out of order; two share one instant (then insertion order decides).
    second = make_verdict("run-1", decided_at=T0 + timedelta(minutes=5), look=2)
    first = make_verdict("run-1", decided_at=T0, look=1)
    third_a = make_verdict("run-1", decided_at=T0 + timedelta(minutes=9), look=3)
    third_b = make_verdict(
        "run-1",
        decided_at=(T0 + timedelta(minutes=9)).astimezone(timezone(timedelta(hours=-5))),
        decision=Decision.PROMOTE,
        look=4,
    )
    repo.save_verdict(make_verdict("other", decided_at=T0), command="api")
    ids = [
        repo.save_verdict(second, command="shadow-eval gate --run run-1"),
        repo.save_verdict(first, command="shadow-eval gate --look 1"),
        repo.save_verdict(third_a, command="ci"),
        repo.save_verdict(third_b, command="ci ✅"),
    ]
    history = repo.verdict_history("run-1")
    assert [e.verdict for e in history] == [first, second, third_a, third_b]
    assert [e.verdict.look for e in history] == [1, 2, 3, 4]
    assert [e.command for e in history] == [
        "shadow-eval gate --look 1",
        "shadow-eval gate --run run-1",
        "ci",
        "ci ✅",
    ]
    assert [e.id for e in history] == [ids[1], ids[0], ids[2], ids[3]]
    assert repo.latest_verdict("run-1") == third_b
    assert repo.latest_verdict("other") is not None
    assert repo.latest_verdict("nobody") is None
    assert repo.verdict_history("nobody") == []


def test_verdict_for_unknown_run_is_a_storage_error(repo: Repository) -> None:
    with pytest.raises(StorageError, match="database operation failed"):
        repo.save_verdict(make_verdict("ghost", decided_at=T0), command="x")


def test_rejected_records_are_kept_and_counted_by_reason(repo: Repository) -> None:
    create_run(repo)
    big_raw = '{"broken": "' + "ü😀" * 200_000  # ~1.2 MB of text, never truncated
    records = [
        RejectedRecord(
            stage=RejectStage.CAPTURE_LOG,
            reason="invalid_json",
            location="capture-000001.jsonl:17",
            detail="Expecting ',' delimiter",
            raw=big_raw,
            created_at=T0,
        ),
        RejectedRecord(
            stage="capture_log", reason="invalid_json", location="capture-000001.jsonl:18"
        ),
        RejectedRecord(stage="capture_log", reason="schema_version", raw='{"schema_version":9}'),
        RejectedRecord(stage="replay", reason="unknown_exchange", run_id="run-1"),
        RejectedRecord(stage="compare", reason="invalid_json", run_id="run-1"),
        RejectedRecord(stage="replay", reason="unknown_run", run_id="run-that-never-was"),
    ]
    assert repo.save_rejected_many(records) == 6
    assert repo.save_rejected_many([]) == 0

    assert repo.count_rejected() == {
        "invalid_json": 3,
        "schema_version": 1,
        "unknown_exchange": 1,
        "unknown_run": 1,
    }
    assert repo.count_rejected(stage=RejectStage.CAPTURE_LOG) == {
        "invalid_json": 2,
        "schema_version": 1,
    }
    assert repo.count_rejected("run-1") == {"unknown_exchange": 1, "invalid_json": 1}
    assert repo.count_rejected("run-1", stage="replay") == {"unknown_exchange": 1}

    listed = repo.list_rejected(stage="capture_log")
    assert [r.location for r in listed] == [
        "capture-000001.jsonl:17",
        "capture-000001.jsonl:18",
        None,
    ]
    assert listed[0].raw == big_raw
    assert listed[0].created_at == T0
    assert listed[0].id is not None
    assert [r.reason for r in repo.list_rejected("run-1")] == ["unknown_exchange", "invalid_json"]
    assert len(repo.list_rejected(reason="invalid_json", limit=2)) == 2
    assert len(repo.list_rejected(limit=10, offset=5)) == 1


def test_save_one_rejected_record(repo: Repository) -> None:
    first = repo.save_rejected(
        run_id="run-x",
        stage=RejectStage.CAPTURE_LOG,
        location="seg.jsonl:9",
        reason="schema",
        detail="1 validation error for Exchange",
        raw='{"exchange_id": 1}',
    )
    second = repo.save_rejected(stage="bus", reason="invalid_json", created_at=T0)
    assert second > first
    assert repo.count_rejected("run-x") == {"schema": 1}
    one, two = repo.list_rejected()
    assert (one.id, one.stage, one.location, one.raw) == (
        first,
        "capture_log",
        "seg.jsonl:9",
        '{"exchange_id": 1}',
    )
    assert (two.id, two.run_id, two.created_at) == (second, None, T0)


def test_rejected_record_from_decode_error(repo: Repository) -> None:
    error = RecordDecodeError("line is not JSON", location="seg.jsonl:3", reason="invalid_json")
    record = RejectedRecord.from_decode_error(error, stage=RejectStage.IMPORT, raw="{oops")
    repo.save_rejected_many([record])
    (stored,) = repo.list_rejected()
    assert (stored.stage, stored.reason, stored.location, stored.detail, stored.raw) == (
        "import",
        "invalid_json",
        "seg.jsonl:3",
        "line is not JSON",
        "{oops",
    )


def test_rejected_raw_with_nul_characters_is_kept(repo: Repository) -> None:
    raw = "bin\x00ary \x00garbage"
    rejected_id = repo.save_rejected(stage="capture_log", reason="invalid_utf8", raw=raw)
    (stored,) = repo.list_rejected()
    assert stored.id == rejected_id
    if repo.database.dialect == "postgresql":
        assert stored.raw == raw.replace("\x00", "\ufffd")
    else:
        assert stored.raw == raw


def test_naive_datetimes_are_refused(repo: Repository) -> None:
    with pytest.raises(StorageError, match="naive datetime"):
        repo.save_rejected(stage="x", reason="y", created_at=datetime(2025, 1, 1))
