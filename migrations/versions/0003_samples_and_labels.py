"""Samples and labels: pair_score.flags, keyset-paging indexes, human_label.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-13

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision.

* ``pair_score.flags`` (integer, not null): the bitmask of
  :func:`shadoweval.pair_flags.pair_flags` (bits in ``PAIR_FLAG_BITS``).
  **Backfill**: the column is added nullable, then every existing row's ``record`` JSON is
  read in batches of :data:`BACKFILL_BATCH_ROWS` (keyset on ``id``), validated with
  ``PairScore.model_validate`` and its flags computed with ``pair_flags``, written back
  with one executemany ``UPDATE`` per batch; then the column becomes ``NOT NULL`` (on
  SQLite by Alembic's batch "move and copy"). A stored record that no longer validates
  is not skipped silently: its flags become 0 and it is kept as a ``rejected_record``
  (stage ``migration``, reason ``pair_flags_backfill``, location ``pair_score#<id>``).
  The backfill uses the record models of the installed shadow-eval. Offline SQL
  (``--sql``) cannot compute flags: it applies only to a database without pair scores
  (the ``NOT NULL`` step fails loudly otherwise).
* indexes ``(run_id, similarity, exchange_id, flags)`` and
  ``(run_id, task_type, similarity, exchange_id, flags)`` for keyset paging of samples
  (``flags`` last, so a flag filter is checked on the index without reading rows); the
  old ``(run_id, task_type)`` index is a prefix of the second and is dropped.
* ``human_label``: analysts' labels, unique per ``(run_id, exchange_id, labeller)``, with
  a composite foreign key to ``pair_score (run_id, exchange_id)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql

from shadoweval.pair_flags import flags_mask, pair_flags
from shadoweval.records import PairScore, utc_now

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger("migrations.0003")

BACKFILL_BATCH_ROWS = 1000
"""Pair-score rows read and updated per batch while backfilling ``flags``."""

_DETAIL_CHARS = 2000


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.types.TypeEngine[Any]:
    return sa.TIMESTAMP(timezone=True)


def _pair_score_table(*, flags_nullable: bool) -> sa.Table:
    """``pair_score`` as of this revision (the structure batch mode copies offline)."""
    metadata = sa.MetaData()
    sa.Table("run", metadata, sa.Column("run_id", sa.String(), primary_key=True))
    sa.Table("exchange", metadata, sa.Column("exchange_id", sa.String(), primary_key=True))
    return sa.Table(
        "pair_score",
        metadata,
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("task_type", sa.String(), nullable=False),
        sa.Column("captured_at", _ts(), nullable=False),
        sa.Column("similarity", sa.Double(), nullable=True),
        sa.Column("candidate_error", sa.Boolean(), nullable=False),
        sa.Column("baseline_error", sa.Boolean(), nullable=False),
        sa.Column("scored_at", _ts(), nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.Column("flags", sa.Integer(), nullable=flags_nullable),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.run_id"], name="fk_pair_score_run_id_run", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchange.exchange_id"],
            name="fk_pair_score_exchange_id_exchange",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_pair_score"),
        sa.UniqueConstraint("run_id", "exchange_id", name="uq_pair_score_run_id_exchange_id"),
        sa.Index("ix_pair_score_exchange_id", "exchange_id"),
    )


def _backfill_flags(connection: sa.Connection) -> tuple[int, int]:
    """Compute ``flags`` of every pair-score row; returns (rows updated, rows rejected)."""
    pair_score = sa.table(
        "pair_score",
        sa.column("id", _id()),
        sa.column("run_id", sa.String()),
        sa.column("record", _json()),
        sa.column("flags", sa.Integer()),
    )
    rejected = sa.table(
        "rejected_record",
        sa.column("run_id", sa.String()),
        sa.column("stage", sa.String()),
        sa.column("location", sa.String()),
        sa.column("reason", sa.String()),
        sa.column("detail", sa.Text()),
        sa.column("raw", sa.Text()),
        sa.column("created_at", _ts()),
    )
    update = (
        sa.update(pair_score)
        .where(pair_score.c.id == sa.bindparam("row_id"))
        .values(flags=sa.bindparam("row_flags"))
    )
    updated = 0
    refused = 0
    last_id: int | None = None
    while True:
        stmt = sa.select(pair_score.c.id, pair_score.c.run_id, pair_score.c.record)
        if last_id is not None:
            stmt = stmt.where(pair_score.c.id > last_id)
        rows = connection.execute(stmt.order_by(pair_score.c.id).limit(BACKFILL_BATCH_ROWS)).all()
        if not rows:
            break
        params: list[dict[str, int]] = []
        rejects: list[dict[str, Any]] = []
        for row in rows:
            try:
                mask = flags_mask(pair_flags(PairScore.model_validate(row.record)))
            except ValidationError as exc:
                mask = 0
                rejects.append(
                    {
                        "run_id": row.run_id,
                        "stage": "migration",
                        "location": f"pair_score#{row.id}",
                        "reason": "pair_flags_backfill",
                        "detail": str(exc)[:_DETAIL_CHARS],
                        "raw": None,
                        "created_at": utc_now(),
                    }
                )
            params.append({"row_id": row.id, "row_flags": mask})
        connection.execute(update, params)
        if rejects:
            connection.execute(sa.insert(rejected), rejects)
        updated += len(params)
        refused += len(rejects)
        last_id = rows[-1].id
    return updated, refused


def upgrade() -> None:
    """Add and backfill ``pair_score.flags``, swap the indexes, create ``human_label``."""
    op.add_column("pair_score", sa.Column("flags", sa.Integer(), nullable=True))
    if not op.get_context().as_sql:
        updated, refused = _backfill_flags(op.get_bind())
        if updated:
            logger.info(
                "pair_score.flags backfilled for %d row(s); %d rejected (stage migration)",
                updated,
                refused,
            )
    op.drop_index(op.f("ix_pair_score_run_id_task_type"), table_name="pair_score")
    copy_from = _pair_score_table(flags_nullable=True) if op.get_context().as_sql else None
    with op.batch_alter_table("pair_score", copy_from=copy_from) as batch:
        batch.alter_column("flags", existing_type=sa.Integer(), nullable=False)
    op.create_index(
        op.f("ix_pair_score_run_id_similarity_exchange_id_flags"),
        "pair_score",
        ["run_id", "similarity", "exchange_id", "flags"],
    )
    op.create_index(
        op.f("ix_pair_score_run_id_task_type_similarity_exchange_id_flags"),
        "pair_score",
        ["run_id", "task_type", "similarity", "exchange_id", "flags"],
    )

    op.create_table(
        "human_label",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("task_type", sa.String(), nullable=False),
        sa.Column("label", sa.String(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("labeller", sa.String(), nullable=False),
        sa.Column("labelled_at", _ts(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id", "exchange_id"],
            ["pair_score.run_id", "pair_score.exchange_id"],
            name=op.f("fk_human_label_run_id_pair_score"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_human_label")),
        sa.UniqueConstraint(
            "run_id",
            "exchange_id",
            "labeller",
            name=op.f("uq_human_label_run_id_exchange_id_labeller"),
        ),
    )


def downgrade() -> None:
    """Drop ``human_label`` (labels are lost), the paging indexes and ``pair_score.flags``."""
    op.drop_table("human_label")
    op.drop_index(
        op.f("ix_pair_score_run_id_task_type_similarity_exchange_id_flags"),
        table_name="pair_score",
    )
    op.drop_index(
        op.f("ix_pair_score_run_id_similarity_exchange_id_flags"), table_name="pair_score"
    )
    copy_from = _pair_score_table(flags_nullable=False) if op.get_context().as_sql else None
    with op.batch_alter_table("pair_score", copy_from=copy_from) as batch:
        batch.drop_column("flags")
    op.create_index(op.f("ix_pair_score_run_id_task_type"), "pair_score", ["run_id", "task_type"])
