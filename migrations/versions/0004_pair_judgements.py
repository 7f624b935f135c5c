"""Pair judgements and the run's frozen judge: pair_judgement, run_judge.

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-10

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision. Both tables are new, so there is nothing to backfill.

* ``pair_judgement``: one quality judgement per ``(run_id, exchange_id, source)`` (source
  ``judge``, ``reference`` or ``human``), the whole
  :class:`~shadoweval.records.PairJudgement` in ``record``; ``outcome`` is ``NULL`` for a
  failed judgement. A composite foreign key to ``pair_score (run_id, exchange_id)`` (as
  ``human_label`` has) deletes a pair's judgements with the pair.
* ``run_judge``: the :class:`~shadoweval.records.JudgeIdentity` frozen with a run by its
  first ``shadow-eval judge run`` (one row per run; its uses and refusals are audited in
  ``policy_audit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.types.TypeEngine[Any]:
    return sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    """Create ``pair_judgement`` and ``run_judge``."""
    op.create_table(
        "pair_judgement",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("task_type", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=True),
        sa.Column("judged_at", _ts(), nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id", "exchange_id"],
            ["pair_score.run_id", "pair_score.exchange_id"],
            name=op.f("fk_pair_judgement_run_id_pair_score"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pair_judgement")),
        sa.UniqueConstraint(
            "run_id",
            "exchange_id",
            "source",
            name=op.f("uq_pair_judgement_run_id_exchange_id_source"),
        ),
    )
    op.create_table(
        "run_judge",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("judge", _json(), nullable=False),
        sa.Column("judge_sha256", sa.String(), nullable=False),
        sa.Column("frozen_at", _ts(), nullable=False),
        sa.Column("command", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_run_judge_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_judge")),
    )


def downgrade() -> None:
    """Drop ``run_judge`` and ``pair_judgement`` (judgements and frozen judges are lost)."""
    op.drop_table("run_judge")
    op.drop_table("pair_judgement")
