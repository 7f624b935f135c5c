"""The Database handle: connection settings, error wrapping, module-level upgrade."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from shadoweval.errors import StorageError
from shadoweval.records import utc_now
from shadoweval.storage import Database, Repository, head_revision, upgrade
from shadoweval.storage.models import RunRow

from .factories import BASELINE, CANDIDATE, make_exchange


def test_sqlite_gets_foreign_keys_and_wal(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'x.db'}") as db, db.connect() as conn:
        assert conn.execute(sa.text("PRAGMA foreign_keys")).scalar_one() == 1
        assert conn.execute(sa.text("PRAGMA journal_mode")).scalar_one() == "wal"


def test_in_memory_sqlite_is_shared_between_sessions() -> None:
    with Database("sqlite://") as db:
        db.upgrade()
        repo = Repository(db)
        repo.create_run(
            run_id="r", name="n", baseline=BASELINE, candidate=CANDIDATE, policy_hash="h",
            policy_yaml="",
        )  # fmt: skip
        assert repo.save_exchanges("r", [make_exchange(1)]) == 1
        assert repo.coverage_counts("r").captured == 1


def test_module_level_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'y.db'}"
    upgrade(url)
    with Database(url) as db:
        assert db.current_revision() == head_revision()
        db.check_schema()


@pytest.mark.parametrize(
    "url",
    ["not a url", "nosuchdialect://x/y", "postgresql+nosuchdriver://u@h/db"],
)
def test_unusable_urls_raise_storage_error(url: str) -> None:
    with pytest.raises(StorageError, match="cannot open database"):
        Database(url)


def test_unreachable_server_is_a_storage_error() -> None:
    db = Database("postgresql+psycopg://nobody:s3cret@127.0.0.1:1/none?connect_timeout=2")
    try:
        assert "s3cret" not in db.safe_url
        assert "***" in db.safe_url
        with pytest.raises(StorageError, match=r"127\.0\.0\.1:1") as info:
            db.current_revision()
        assert "s3cret" not in str(info.value)
        with pytest.raises(StorageError):
            db.upgrade()
    finally:
        db.dispose()


def _run_row(run_id: str) -> RunRow:
    return RunRow(
        run_id=run_id,
        name="n",
        created_at=utc_now(),
        baseline_model={},
        candidate_model={},
        policy_hash="h",
        policy_yaml="",
        status="open",
        settings={},
    )


def _add_then_fail(database: Database) -> None:
    with database.session() as session:
        session.add(_run_row("b"))
        session.flush()
        raise RuntimeError("boom")


def _add(database: Database, run_id: str) -> None:
    with database.session() as session:
        session.add(_run_row(run_id))


def test_session_commits_rolls_back_and_wraps(database: Database) -> None:
    _add(database, "a")
    with pytest.raises(RuntimeError, match="boom"):
        _add_then_fail(database)  # other errors pass through, after a rollback
    with pytest.raises(StorageError, match="database operation failed") as info:
        _add(database, "a")
    assert isinstance(info.value.__cause__, sa.exc.IntegrityError)
    with database.session() as session:
        assert [r.run_id for r in session.scalars(sa.select(RunRow))] == ["a"]
