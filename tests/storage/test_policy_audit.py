"""The policy audit log and latest decisions, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from shadoweval.errors import StorageError
from shadoweval.records import Decision
from shadoweval.storage import (
    Database,
    PolicyAuditAction,
    Repository,
    head_revision,
)
from shadoweval.storage.audit import current_actor
from shadoweval.storage.database import alembic_config

from .factories import BASELINE, CANDIDATE, T0, make_verdict

HASH = "sha256:" + "1" * 64
OTHER = "sha256:" + "2" * 64


def create_run(repo: Repository, run_id: str = "run-1", **kwargs: object) -> None:
    repo.create_run(
        run_id=run_id,
        name="llama 3.1 → 3.3",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash=HASH,
        policy_yaml="alpha: 0.05\n",
        created_at=T0,
        **kwargs,  # type: ignore[arg-type]
    )


def test_creating_a_run_audits_its_policy_in_the_same_write(repo: Repository) -> None:
    create_run(
        repo,
        command="shadow-eval evaluate",
        actor="alice",
        audit_detail={"policy_path": "/etc/shadow-eval/policy ü.yaml"},
    )
    (entry,) = repo.policy_audit("run-1")
    assert entry.action is PolicyAuditAction.CREATED
    assert entry.run_id == "run-1"
    assert entry.policy_hash == HASH
    assert entry.recorded_at == T0
    assert entry.recorded_at.utcoffset() == timedelta(0)
    assert entry.command == "shadow-eval evaluate"
    assert entry.actor == "alice"
    assert entry.detail == {"policy_path": "/etc/shadow-eval/policy ü.yaml"}


def test_a_refused_duplicate_run_leaves_no_audit_row(repo: Repository) -> None:
    create_run(repo)
    with pytest.raises(StorageError, match="already exists"):
        create_run(repo, command="again")
    assert [e.command for e in repo.policy_audit("run-1")] == ["create_run"]


def test_actor_defaults_to_the_os_user(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGNAME", "bob-the-operator")
    assert current_actor() == "bob-the-operator"
    create_run(repo)
    repo.record_policy_audit(run_id="run-1", policy_hash=HASH, action="used", command="gate")
    assert {e.actor for e in repo.policy_audit("run-1")} == {"bob-the-operator"}


def test_used_and_refused_rows_in_order_with_both_hashes(repo: Repository) -> None:
    create_run(repo)
    used = repo.record_policy_audit(
        run_id="run-1",
        policy_hash=HASH,
        action=PolicyAuditAction.USED,
        command="shadow-eval gate",
        recorded_at=T0 + timedelta(minutes=2),
    )
    refused = repo.record_policy_audit(
        run_id="run-1",
        policy_hash=OTHER,
        action=PolicyAuditAction.REFUSED,
        command="shadow-eval evaluate",
        detail={"run_policy_hash": HASH, "presented_policy_hash": OTHER},
        recorded_at=T0 + timedelta(minutes=1),
    )
    assert refused > used
    log = repo.policy_audit("run-1")
    assert [e.action for e in log] == [
        PolicyAuditAction.CREATED,
        PolicyAuditAction.REFUSED,  # ordered by time, not by id
        PolicyAuditAction.USED,
    ]
    assert log[1].policy_hash == OTHER
    assert log[1].detail == {"run_policy_hash": HASH, "presented_policy_hash": OTHER}
    assert log[1].id == refused


def test_logs_are_per_run_and_an_unknown_run_has_none(repo: Repository) -> None:
    create_run(repo, "a")
    create_run(repo, "b")
    repo.record_policy_audit(run_id="b", policy_hash=HASH, action="used", command="gate")
    assert len(repo.policy_audit("a")) == 1
    assert len(repo.policy_audit("b")) == 2
    assert repo.policy_audit("nope") == []


def test_bad_rows_are_refused(repo: Repository) -> None:
    create_run(repo)
    with pytest.raises(StorageError):
        repo.record_policy_audit(run_id="nope", policy_hash=HASH, action="used", command="x")
    with pytest.raises(ValueError, match="approved"):
        repo.record_policy_audit(run_id="run-1", policy_hash=HASH, action="approved", command="x")
    with pytest.raises(StorageError, match="naive datetime"):
        repo.record_policy_audit(
            run_id="run-1",
            policy_hash=HASH,
            action="used",
            command="x",
            recorded_at=datetime(2025, 1, 1),  # naive: the point of the test
        )
    assert len(repo.policy_audit("run-1")) == 1


def test_latest_decisions_of_many_runs_in_one_query(repo: Repository) -> None:
    for run_id in ("a", "b", "c"):
        create_run(repo, run_id)
    repo.save_verdict(make_verdict("a", decided_at=T0, decision=Decision.HOLD), "gate")
    repo.save_verdict(
        make_verdict("a", decided_at=T0 + timedelta(hours=1), decision=Decision.PROMOTE, look=2),
        "gate",
    )
    repo.save_verdict(make_verdict("b", decided_at=T0, decision=Decision.ROLLBACK), "gate")
    latest = repo.latest_decisions(["a", "b", "c", "unknown"])
    assert set(latest) == {"a", "b"}
    assert latest["a"].decision is Decision.PROMOTE
    assert latest["a"].look == 2
    assert latest["a"].decided_at == T0 + timedelta(hours=1)
    assert latest["b"].decision is Decision.ROLLBACK
    assert repo.latest_decisions([]) == {}


def test_upgrade_from_0001_backfills_a_created_row_per_run(empty_url: str) -> None:
    db = Database(empty_url)
    try:
        db.upgrade("0001")
        with db.connect() as conn:
            run = sa.table(
                "run",
                *(
                    sa.column(name)
                    for name in (
                        "run_id",
                        "name",
                        "created_at",
                        "baseline_model",
                        "candidate_model",
                        "policy_hash",
                        "policy_yaml",
                        "status",
                        "settings",
                    )
                ),
            )
            conn.execute(
                run.insert(),
                [
                    {
                        "run_id": run_id,
                        "name": run_id,
                        "created_at": T0 + timedelta(minutes=i),
                        "baseline_model": '{"name": "a"}',
                        "candidate_model": '{"name": "b"}',
                        "policy_hash": f"sha256:{run_id}",
                        "policy_yaml": "",
                        "status": "open",
                        "settings": "{}",
                    }
                    for i, run_id in enumerate(("old-1", "old-2"))
                ],
            )
        db.upgrade()
        assert db.current_revision() == head_revision()
        assert db.schema_diff() == []
        repo = Repository(db)
        for i, run_id in enumerate(("old-1", "old-2")):
            (entry,) = repo.policy_audit(run_id)
            assert entry.action is PolicyAuditAction.CREATED
            assert entry.policy_hash == f"sha256:{run_id}"
            assert entry.recorded_at == T0 + timedelta(minutes=i)
            assert entry.actor == "unknown"
            assert entry.detail == {"backfilled": True}
        with db.connect() as conn:
            command.downgrade(alembic_config(conn), "0001")
        assert "policy_audit" not in sa.inspect(db.engine).get_table_names()
        assert db.current_revision() == "0001"
    finally:
        db.dispose()
