"""Idempotent rejections (issue 13): the same rejection of a run is stored once.

Migration 0006 adds ``rejected_record.fingerprint`` and a unique index on
``(run_id, stage, fingerprint)``; SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command

from shadoweval.storage import (
    Database,
    RejectedRecord,
    Repository,
    head_revision,
    rejection_fingerprint,
)
from shadoweval.storage.database import alembic_config

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def rejection(
    location: str, raw: str, *, run_id: str | None = "run-1", **kw: str
) -> RejectedRecord:
    return RejectedRecord(
        stage=kw.get("stage", "capture_log"),
        reason=kw.get("reason", "invalid_json"),
        location=location,
        detail=f"{location}: broken",
        raw=raw,
        run_id=run_id,
        fingerprint=rejection_fingerprint(location, raw),
    )


def test_the_fingerprint_is_of_location_and_content() -> None:
    one = rejection_fingerprint("seg.jsonl:7", "{oops")
    assert one == rejection_fingerprint("seg.jsonl:7", "{oops")
    assert len(one) == 64
    assert int(one, 16) >= 0
    assert one != rejection_fingerprint("seg.jsonl:8", "{oops")
    assert one != rejection_fingerprint("seg.jsonl:7", "{oops!")
    assert rejection_fingerprint(None, None) == rejection_fingerprint("", "")
    assert rejection_fingerprint("x", "\ud800") != rejection_fingerprint("x", "")  # no raise


def test_storing_the_same_rejections_again_stores_nothing(repo: Repository) -> None:
    batch = [rejection(f"seg.jsonl:{i}", f"bad {i}") for i in range(5)]
    assert repo.save_rejected_many(batch) == 5
    assert repo.save_rejected_many(batch) == 0  # a re-read of the same log
    assert repo.save_rejected_many([*batch, rejection("seg.jsonl:9", "new")]) == 1
    # the same twice in one batch, another stage, another run: each stored once
    twice = rejection("other.jsonl:1", "x")
    assert repo.save_rejected_many([twice, twice]) == 1
    assert repo.save_rejected_many([rejection("seg.jsonl:0", "bad 0", stage="replay")]) == 1
    assert repo.save_rejected_many([rejection("seg.jsonl:0", "bad 0", run_id="run-2")]) == 1
    assert sum(repo.count_rejected("run-1").values()) == 8
    # without a fingerprint, or without a run: always stored (never de-duplicated)
    plain = RejectedRecord(stage="capture_log", reason="x", location="a", run_id="run-1")
    assert repo.save_rejected_many([plain, plain]) == 2
    orphan = rejection("seg.jsonl:0", "bad 0", run_id=None)
    assert repo.save_rejected_many([orphan, orphan]) == 2
    stored = repo.list_rejected("run-1", limit=100)
    assert stored[0].fingerprint == batch[0].fingerprint


def test_save_rejected_with_a_fingerprint_returns_the_stored_row(repo: Repository) -> None:
    kwargs = {
        "run_id": "run-1",
        "stage": "label_import",
        "reason": "bad_label",
        "location": "samples.csv:4",
        "raw": "{}",
        "fingerprint": rejection_fingerprint("samples.csv:4", "{}"),
    }
    first = repo.save_rejected(**kwargs)  # type: ignore[arg-type]
    assert repo.save_rejected(**kwargs) == first  # type: ignore[arg-type]
    assert repo.count_rejected("run-1") == {"bad_label": 1}


def test_migration_0006_down_and_up_over_stored_rows(empty_url: str) -> None:
    """Rows stored at 0005 keep a NULL fingerprint (never de-duplicated); a downgrade
    drops the column and the index and keeps the rows."""
    db = Database(empty_url)
    try:
        db.upgrade("0005")
        with db.connect() as conn:
            table = sa.table(
                "rejected_record",
                *(sa.column(c) for c in ("run_id", "stage", "location", "reason", "raw")),
                sa.column("created_at", sa.DateTime(timezone=True)),
            )
            row = {"run_id": "run-1", "stage": "capture_log", "location": "a:1",
                   "reason": "invalid_json", "raw": "{", "created_at": T0}  # fmt: skip
            conn.execute(table.insert(), [row])
            conn.execute(table.insert(), [row])
        db.upgrade()
        assert db.current_revision() == head_revision() == "0011"
        assert db.schema_diff() == []
        repo = Repository(db)
        old = repo.list_rejected("run-1")
        assert [r.fingerprint for r in old] == [None, None]
        assert repo.save_rejected_many([rejection("a:1", "{")]) == 1
        assert repo.save_rejected_many([rejection("a:1", "{")]) == 0
        with db.connect() as conn:
            command.downgrade(alembic_config(conn), "0005")
        columns = {c["name"] for c in sa.inspect(db.engine).get_columns("rejected_record")}
        assert "fingerprint" not in columns
        with db.connect() as conn:
            count = conn.execute(sa.text("SELECT count(*) FROM rejected_record")).scalar_one()
        assert count == 3
        db.upgrade()
        assert db.schema_diff() == []
    finally:
        db.dispose()
