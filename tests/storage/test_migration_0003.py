"""Migration 0003: pair_score.flags is backfilled from each stored record, batch by batch."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from shadoweval.pair_flags import flags_mask, pair_flags
from shadoweval.records import PairScore
from shadoweval.storage import Database, Repository, SampleFilter, head_revision
from shadoweval.storage.database import alembic_config

from .factories import BASELINE, CANDIDATE, make_exchange
from .sample_data import make_score

BACKFILL_BATCH_ROWS: int = importlib.import_module(
    "shadoweval.migrations.versions.0003_samples_and_labels"
).BACKFILL_BATCH_ROWS


def _tables() -> dict[str, sa.TableClause]:
    json = sa.JSON()
    ts = sa.TIMESTAMP(timezone=True)
    return {
        "exchange": sa.table(
            "exchange",
            sa.column("exchange_id", sa.String()),
            sa.column("captured_at", ts),
            sa.column("task_type", sa.String()),
            sa.column("route", sa.String()),
            sa.column("outcome", sa.String()),
            sa.column("record", json),
        ),
        "pair_score": sa.table(
            "pair_score",
            sa.column("run_id", sa.String()),
            sa.column("exchange_id", sa.String()),
            sa.column("task_type", sa.String()),
            sa.column("captured_at", ts),
            sa.column("similarity", sa.Double()),
            sa.column("candidate_error", sa.Boolean()),
            sa.column("baseline_error", sa.Boolean()),
            sa.column("scored_at", ts),
            sa.column("record", json),
        ),
    }


def _score_row(score: PairScore, record: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "run_id": score.run_id,
        "exchange_id": score.exchange_id,
        "task_type": score.task_type,
        "captured_at": score.captured_at,
        "similarity": score.similarity,
        "candidate_error": score.candidate_error,
        "baseline_error": score.baseline_error,
        "scored_at": score.scored_at,
        "record": record if record is not None else score.model_dump(mode="json"),
    }


@pytest.mark.slow
def test_upgrade_from_0002_backfills_flags(empty_url: str) -> None:
    """Rows written at 0002 (more than one backfill batch) get the flags of their record."""
    n = BACKFILL_BATCH_ROWS + 234
    db = Database(empty_url)
    try:
        db.upgrade("0002")
        Repository(db).create_run(
            run_id="old",
            name="old",
            baseline=BASELINE,
            candidate=CANDIDATE,
            policy_hash="sha256:p",
            policy_yaml="",
        )
        exchanges = [make_exchange(i, task_type=("chat", "code")[i % 2]) for i in range(1, n + 1)]
        scores = [make_score("old", ex, i) for i, ex in enumerate(exchanges, start=1)]
        broken = scores[-1].model_dump(mode="json") | {"similarity": "not a number"}
        tables = _tables()
        with db.connect() as conn:
            conn.execute(
                tables["exchange"].insert(),
                [
                    {
                        "exchange_id": ex.exchange_id,
                        "captured_at": ex.captured_at,
                        "task_type": ex.task_type,
                        "route": ex.route,
                        "outcome": ex.outcome.value,
                        "record": ex.model_dump(mode="json"),
                    }
                    for ex in exchanges
                ],
            )
            conn.execute(
                tables["pair_score"].insert(),
                [_score_row(s) for s in scores[:-1]] + [_score_row(scores[-1], broken)],
            )
        db.upgrade()
        assert db.current_revision() == head_revision()
        assert db.schema_diff() == []
        with db.connect() as conn:
            stored = {
                row.exchange_id: row.flags
                for row in conn.execute(sa.text("SELECT exchange_id, flags FROM pair_score"))
            }
            rejected = conn.execute(
                sa.text(
                    "SELECT run_id, stage, reason, location, detail"
                    " FROM rejected_record ORDER BY id"
                )
            ).all()
        assert len(stored) == n
        expected = {s.exchange_id: flags_mask(pair_flags(s)) for s in scores[:-1]}
        assert {k: v for k, v in stored.items() if k in expected} == expected
        assert len(set(expected.values())) > 5  # the data really has varied flags
        # The record that no longer validates is kept, flagged 0, and counted as rejected.
        assert stored[scores[-1].exchange_id] == 0
        # 0008's backfill of the packed facts meets the same record and keeps it too.
        assert [row.reason for row in rejected] == ["pair_flags_backfill", "pair_facts_backfill"]
        for row in rejected:
            assert row.run_id == "old"
            assert row.stage == "migration"
            assert row.location.startswith("pair_score#")
            assert "similarity" in row.detail
        # Paging works on the backfilled data.
        repo = Repository(db)
        assert repo.count_samples("old", SampleFilter()) == n
        first = repo.sample_page("old", SampleFilter(), limit=5).samples
        assert [s.flags for s in first] == [
            pair_flags(next(x for x in scores if x.exchange_id == s.exchange_id)) for s in first
        ]
    finally:
        db.dispose()


def test_downgrade_to_0002_and_back(empty_url: str) -> None:
    db = Database(empty_url)
    try:
        db.upgrade()
        with db.connect() as conn:
            command.downgrade(alembic_config(conn), "0002")
        assert db.current_revision() == "0002"
        inspector = sa.inspect(db.engine)
        assert "human_label" not in inspector.get_table_names()
        assert "flags" not in {c["name"] for c in inspector.get_columns("pair_score")}
        indexes = {ix["name"] for ix in inspector.get_indexes("pair_score")}
        assert {name for name in indexes if name and name.startswith("ix_")} == {
            "ix_pair_score_exchange_id",
            "ix_pair_score_run_id_task_type",
        }
        db.upgrade()
        assert db.schema_diff() == []
    finally:
        db.dispose()
