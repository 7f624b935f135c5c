"""Alembic migrations: one head, empty → head, no autogenerate diff, clean downgrade."""

from __future__ import annotations

import io
import logging
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from shadoweval.errors import StorageError
from shadoweval.storage import Database, Repository, head_revision
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
    "canary",
    "canary_step",
    "canary_observation",
    "canary_rating",
}


def test_exactly_one_head() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    assert script.get_heads() == ["0011"]
    assert head_revision() == "0011"


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
    assert (location / "versions" / "0008_pair_facts.py").is_file()


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
        assert "is at revision none (empty database), expected head 0011" in message
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


# --- every step down and up, with data ---------------------------------------------------

REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011")
"""Every revision, oldest first (the last is head)."""

KEPT_FROM: dict[str, str] = {
    "run": "0001",
    "exchange": "0001",
    "run_exchange": "0001",
    "replay_outcome": "0001",
    "pair_score": "0001",
    "verdict": "0001",
    "rejected_record": "0001",
    "policy_audit": "0002",
    "human_label": "0003",
    "pair_judgement": "0004",
    "embedding_cache": "0007",
    "canary": "0009",
    "canary_step": "0009",
    "canary_observation": "0009",
    "canary_rating": "0009",
}
"""Table → the revision that creates it: at that revision and above its rows must survive
every downgrade step (below it the table is gone)."""


def _seed_every_table(repo: Repository) -> str:
    from shadoweval.records import JudgementSource, PairJudgement, QualityOutcome
    from shadoweval.storage import CachedEmbedding
    from shadoweval.testing.pair_seeding import add_labels, seed_run
    from tests.storage.factories import make_verdict

    run = seed_run(
        repo,
        policy_yaml="{}\n",
        policy_hash="sha256:policy",
        mix={"chat": 30, "extraction": 20, "code": 10},
    )
    add_labels(repo, run, stride=5)
    scores = repo.load_pair_scores(run.run_id)
    repo.save_judgements(
        [
            PairJudgement(
                run_id=run.run_id,
                exchange_id=s.exchange_id,
                task_type=s.task_type,
                source=JudgementSource.REFERENCE,
                outcome=QualityOutcome.TIE,
                baseline_pass=True,
                candidate_pass=True,
                checker="exact",
            )
            for s in scores[:7]
        ]
    )
    first = scores[0].captured_at
    repo.save_verdict(make_verdict(run.run_id, decided_at=first), command="shadow-eval gate")
    repo.save_rejected(stage="capture_log", reason="invalid_json", raw="{", run_id=run.run_id)
    repo.save_embeddings(
        "model@sha:backend",
        [
            CachedEmbedding(
                text_sha256="ab" * 32,
                dimension=2,
                vector_f32le=b"\x00" * 8,
                tokens=1,
                chunks=1,
                truncated=False,
            )
        ],
    )
    _seed_canary(repo, run.run_id, first)
    return run.run_id


def _seed_canary(repo: Repository, run_id: str, at: datetime) -> None:
    from shadoweval.storage import (
        AuditNote,
        CanaryObservation,
        CanaryRating,
        PolicyAuditAction,
    )

    repo.create_canary(
        canary_id="canary-1",
        run_id=run_id,
        name="seeded",
        policy_hash="sha256:canary",
        policy_yaml="steps: []\n",
        split_dir="/tmp/split",
        first_share=0.05,
        split_revision=1,
        note=AuditNote(PolicyAuditAction.CANARY_STARTED, "test"),
        started_at=at,
    )
    repo.save_canary_observations(
        "canary-1",
        [
            CanaryObservation(
                exchange_id="ex-1",
                step_index=0,
                arm="candidate",
                observed_at=at,
                session=None,
                error=False,
                format_expected=False,
                format_ok=None,
                harmed=False,
                cache_hit=False,
                e2e_ms=12.5,
                ttft_ms=None,
            )
        ],
    )
    repo.save_canary_ratings(
        [CanaryRating(canary_id="canary-1", exchange_id="ex-1", rater="a", rating=7, rated_at=at)]
    )


def _counts(db: Database) -> dict[str, int]:
    present = set(sa.inspect(db.engine).get_table_names())
    with db.connect() as conn:
        return {
            table: int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
            for table in KEPT_FROM
            if table in present
        }


def _flags(db: Database) -> dict[str, int]:
    with db.connect() as conn:
        rows = conn.execute(sa.text("SELECT exchange_id, flags FROM pair_score"))
        return {row.exchange_id: row.flags for row in rows}


def _step(db: Database, direction: str, target: str) -> None:
    with db.connect() as conn:
        config = alembic_config(conn)
        if direction == "down":
            command.downgrade(config, target)
        else:
            command.upgrade(config, target)


def test_every_step_down_keeps_the_data_and_up_again_restores_it(database: Database) -> None:
    """Head → each revision in turn → 0001 with data, then back to head over that data,
    then → base (empty) → head: every ``downgrade()`` runs on SQLite and PostgreSQL, rows
    survive wherever their table still exists, and the upgrade over kept rows backfills
    them again (flags, facts) so that the models match and the pairs table is the same."""
    import pandas as pd

    from shadoweval.stats.frame import pairs_frame, pairs_frame_from_facts
    from shadoweval.stats.policy import parse_policy_yaml

    repo = Repository(database)
    run_id = _seed_every_table(repo)
    seeded = _counts(database)
    assert all(seeded[table] > 0 for table in KEPT_FROM), seeded
    flags_before = _flags(database)

    for below, revision in zip(REVISIONS[-2::-1], REVISIONS[:0:-1], strict=True):
        _step(database, "down", below)
        assert database.current_revision() == below, f"downgrade of {revision}"
        kept = {t: n for t, n in seeded.items() if KEPT_FROM[t] <= below}
        assert _counts(database) == kept, f"after the downgrade of {revision}"

    _step(database, "up", "head")
    assert database.current_revision() == head_revision()
    assert database.schema_diff() == []
    after = _counts(database)
    for table, created in KEPT_FROM.items():
        if created == "0001":
            assert after[table] == seeded[table], table
        elif table != "policy_audit":  # 0002 may audit the kept runs again
            assert after[table] == 0, table
    flags_after = _flags(database)
    assert flags_after == flags_before
    policy = parse_policy_yaml("{}\n")
    facts, _ = repo.load_pair_facts_after(run_id, 0)
    pd.testing.assert_frame_equal(
        pairs_frame_from_facts(facts, policy),
        pairs_frame(repo.load_pair_scores(run_id), policy),
        check_exact=True,
    )
    with database.connect() as conn:
        missing = conn.execute(sa.text("SELECT count(*) FROM pair_score WHERE facts IS NULL"))
        assert missing.scalar_one() == 0

    _step(database, "down", "base")
    assert set(sa.inspect(database.engine).get_table_names()) <= {"alembic_version"}
    _step(database, "up", "head")
    assert database.schema_diff() == []
    assert set(_counts(database).values()) == {0}
