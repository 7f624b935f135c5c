"""Alembic migrations: one head, empty → head, no autogenerate diff, clean downgrade."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from shadoweval.errors import StorageError
from shadoweval.storage import Database, head_revision
from shadoweval.storage.database import alembic_config, migrations_location
from shadoweval.storage.models import Base

TABLES = {
    "run",
    "exchange",
    "run_exchange",
    "replay_outcome",
    "pair_score",
    "verdict",
    "rejected_record",
    "policy_audit",
    "human_label",
    "pair_judgement",
    "run_judge",
    "embedding_cache",
}


def test_exactly_one_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == ["0007"]
    assert head_revision() == "0007"


def test_script_location_is_the_installed_package() -> None:
    location = Path(migrations_location())
    assert (location / "__init__.py").is_file()
    assert (location / "env.py").is_file()
    assert (location / "script.py.mako").is_file()
    assert (location / "versions" / "0001_initial.py").is_file()
    assert (location / "versions" / "0002_policy_audit.py").is_file()
    assert (location / "versions" / "0003_samples_and_labels.py").is_file()
    assert (location / "versions" / "0004_pair_judgements.py").is_file()
    assert (location / "versions" / "0005_ttfc_and_cache_hits.py").is_file()
    assert (location / "versions" / "0006_rejected_fingerprint.py").is_file()
    assert (location / "versions" / "0007_embedding_cache.py").is_file()


def test_models_cover_every_table() -> None:
    assert set(Base.metadata.tables) == TABLES


def test_upgrade_empty_database_to_head(empty_url: str) -> None:
    db = Database(empty_url)
    try:
        assert db.current_revision() is None
        db.upgrade()
        assert db.current_revision() == head_revision()
        tables = set(sa.inspect(db.engine).get_table_names())
        assert tables >= TABLES | {"alembic_version"}
        db.check_schema()
        db.upgrade()  # a second upgrade is a no-op
        assert db.current_revision() == head_revision()
    finally:
        db.dispose()


def test_autogenerate_finds_no_difference_after_upgrade(database: Database) -> None:
    assert database.schema_diff() == []


def test_schema_diff_reports_drift(database: Database) -> None:
    with database.connect() as conn:
        conn.execute(sa.text("DROP INDEX ix_exchange_task_type"))
    diffs = database.schema_diff()
    assert len(diffs) == 1
    assert "add_index" in diffs[0]
    assert "ix_exchange_task_type" in diffs[0]


def test_check_schema_names_revisions_and_the_fix(empty_url: str) -> None:
    db = Database(empty_url)
    try:
        with pytest.raises(StorageError) as info:
            db.check_schema()
        message = str(info.value)
        assert "is at revision none (empty database), expected head 0007" in message
        assert "run `shadow-eval db upgrade`" in message
        assert db.safe_url in message
    finally:
        db.dispose()


def test_check_schema_flags_an_unknown_revision(database: Database) -> None:
    with database.connect() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(StorageError, match=r"revision 9999 \(unknown to this shadow-eval"):
        database.check_schema()
    with pytest.raises(StorageError, match="cannot upgrade"):
        database.upgrade()


def test_downgrade_to_base_and_back(database: Database) -> None:
    with database.connect() as conn:
        command.downgrade(alembic_config(conn), "base")
    assert set(sa.inspect(database.engine).get_table_names()) <= {"alembic_version"}
    assert database.current_revision() is None
    database.upgrade()
    assert database.schema_diff() == []


def test_env_keeps_application_loggers_enabled(tmp_path: Path, empty_url: str) -> None:
    """With an ini file, env.py runs fileConfig without disabling existing loggers."""
    ini = tmp_path / "alembic.ini"
    ini.write_text(
        "[alembic]\n"
        f"script_location = {migrations_location()}\n"
        "[loggers]\nkeys = root\n"
        "[handlers]\nkeys = null\n"
        "[formatters]\nkeys =\n"
        "[logger_root]\nlevel = WARNING\nhandlers = null\n"
        "[handler_null]\nclass = NullHandler\nargs = ()\n",
        encoding="utf-8",
    )
    app_logger = logging.getLogger("shadoweval.test_app_logger")
    app_logger.info("exists before the migration runs")
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    db = Database(empty_url)
    try:
        with db.connect() as conn:
            config = Config(str(ini))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
        assert not app_logger.disabled
        assert db.current_revision() == head_revision()
    finally:
        db.dispose()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


@pytest.mark.parametrize(
    ("url", "json_type"),
    [("sqlite:///offline.db", "JSON"), ("postgresql+psycopg://u@h/db", "JSONB")],
)
def test_offline_sql(url: str, json_type: str) -> None:
    buffer = io.StringIO()
    config = alembic_config()
    config.output_buffer = buffer
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "head", sql=True)
    sql = buffer.getvalue()
    assert "CREATE TABLE run (" in sql
    assert f"record {json_type} NOT NULL" in sql
    assert "CONSTRAINT uq_replay_outcome_run_id_exchange_id_target UNIQUE" in sql
    assert "CREATE TABLE human_label (" in sql
    assert "CONSTRAINT uq_human_label_run_id_exchange_id_labeller UNIQUE" in sql
    assert "CREATE INDEX ix_pair_score_run_id_similarity_exchange_id_flags" in sql


_RACE = """
import os, pathlib, sys, time
from shadoweval.storage import Database
db = Database(sys.argv[1])
db.current_revision()  # connected and imported
barrier, workers = pathlib.Path(sys.argv[2]), int(sys.argv[3])
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 120  # bounds a hang
while len(list(barrier.iterdir())) < workers and time.monotonic() < deadline:
    time.sleep(0.001)
db.upgrade()  # every worker is ready: now start together
"""


@pytest.mark.postgres
@pytest.mark.slow
def test_concurrent_upgrades_on_postgresql_are_serialized(
    pg_schema_url: str, tmp_path: Path
) -> None:
    """Workers that all run ``upgrade`` at start-up (separate processes) do not collide.

    Without the advisory lock most of these processes fail with duplicate-table errors.
    They start together at a barrier (each waits until all are connected), not at a clock
    time that a loaded machine could pass before the last one has imported.
    """
    import subprocess
    import sys

    url = pg_schema_url
    workers = 6
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, url, str(tmp_path), str(workers)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    with Database(url) as db:
        assert db.current_revision() == head_revision()
        assert db.schema_diff() == []
