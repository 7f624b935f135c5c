"""Migration 0011: ``human_label.sample`` (the random label sample of PPI), on SQLite and
PostgreSQL: labels stored before it read back as chosen by hand, a downgrade drops the
column and keeps the labels, and an upgrade over them adds it again."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from shadoweval.records import HumanLabel, LabelValue
from shadoweval.storage import Database, Repository, head_revision
from shadoweval.storage.database import alembic_config

from .factories import T0
from .sample_data import seed_run

RUN = "run-0011"


def _columns(db: Database) -> set[str]:
    return {c["name"] for c in sa.inspect(db.engine).get_columns("human_label")}


def test_migration_0011_up_over_old_labels_and_down_again(empty_url: str) -> None:
    db = Database(empty_url)
    try:
        db.upgrade("0010")
        assert "sample" not in _columns(db)
        repo = Repository(db)
        scores = seed_run(repo, RUN, 4)
        with db.connect() as conn:  # a label written by the 0010 code: no sample column
            conn.execute(
                sa.text(
                    "INSERT INTO human_label (run_id, exchange_id, task_type, label, note, "
                    "labeller, labelled_at, source) VALUES (:r, :e, :t, 'same', '', 'ana', "
                    ":at, 'import')"
                ),
                {"r": RUN, "e": scores[0].exchange_id, "t": scores[0].task_type, "at": T0},
            )
            conn.commit()
        db.upgrade()
        assert db.current_revision() == head_revision() == "0011"
        assert db.schema_diff() == []
        (old,) = repo.load_labels(RUN)
        assert old.sample is None  # nothing recorded a sample: chosen by hand
        sampled = HumanLabel(
            run_id=RUN,
            exchange_id=scores[1].exchange_id,
            task_type=scores[1].task_type,
            label=LabelValue.CANDIDATE_WORSE,
            labeller="ana",
            labelled_at=T0,
            source="import",
            sample="ppi-seed-1-n-2",
        )
        repo.save_labels([sampled])
        stored = {x.exchange_id: x.sample for x in repo.load_labels(RUN)}
        assert stored == {scores[0].exchange_id: None, scores[1].exchange_id: "ppi-seed-1-n-2"}
        with db.connect() as conn:
            command.downgrade(alembic_config(conn), "0010")
        assert db.current_revision() == "0010"
        assert "sample" not in _columns(db)
        with db.connect() as conn:
            kept = conn.execute(sa.text("SELECT count(*) FROM human_label")).scalar_one()
        assert kept == 2  # the labels stay; which were sampled is lost
        db.upgrade()
        assert db.schema_diff() == []
        assert {x.exchange_id: x.sample for x in repo.load_labels(RUN)} == {
            scores[0].exchange_id: None,
            scores[1].exchange_id: None,
        }
    finally:
        db.dispose()
