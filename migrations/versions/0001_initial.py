"""Initial schema: run, exchange, run_exchange, replay_outcome, pair_score, verdict,
rejected_record.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Hand-written to match ``shadoweval.storage.models`` exactly (constraint names follow
its naming convention); the test suite checks that autogenerate finds no difference on
SQLite and PostgreSQL after upgrading to this revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.types.TypeEngine[Any]:
    return sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    """Create every table of schema version 1."""
    op.create_table(
        "run",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("baseline_model", _json(), nullable=False),
        sa.Column("candidate_model", _json(), nullable=False),
        sa.Column("candidate_base_url", sa.String(), nullable=True),
        sa.Column("policy_hash", sa.String(), nullable=False),
        sa.Column("policy_yaml", sa.Text(), nullable=False),
        sa.Column("source", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("settings", _json(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run")),
    )
    op.create_index(op.f("ix_run_status"), "run", ["status"])

    op.create_table(
        "exchange",
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("captured_at", _ts(), nullable=False),
        sa.Column("task_type", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=True),
        sa.Column("record", _json(), nullable=False),
        sa.PrimaryKeyConstraint("exchange_id", name=op.f("pk_exchange")),
    )
    op.create_index(op.f("ix_exchange_captured_at"), "exchange", ["captured_at"])
    op.create_index(op.f("ix_exchange_task_type"), "exchange", ["task_type"])

    op.create_table(
        "run_exchange",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_run_exchange_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchange.exchange_id"],
            name=op.f("fk_run_exchange_exchange_id_exchange"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "exchange_id", name=op.f("pk_run_exchange")),
    )
    op.create_index(op.f("ix_run_exchange_exchange_id"), "run_exchange", ["exchange_id"])

    op.create_table(
        "replay_outcome",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error_kind", sa.String(), nullable=True),
        sa.Column("warmup", sa.Boolean(), nullable=False),
        sa.Column("replayed_at", _ts(), nullable=False),
        sa.Column("e2e_ms", sa.Double(), nullable=True),
        sa.Column("ttft_ms", sa.Double(), nullable=True),
        sa.Column("record", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_replay_outcome_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchange.exchange_id"],
            name=op.f("fk_replay_outcome_exchange_id_exchange"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replay_outcome")),
        sa.UniqueConstraint(
            "run_id",
            "exchange_id",
            "target",
            name=op.f("uq_replay_outcome_run_id_exchange_id_target"),
        ),
    )
    op.create_index(op.f("ix_replay_outcome_exchange_id"), "replay_outcome", ["exchange_id"])

    op.create_table(
        "pair_score",
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
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_pair_score_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exchange_id"],
            ["exchange.exchange_id"],
            name=op.f("fk_pair_score_exchange_id_exchange"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pair_score")),
        sa.UniqueConstraint("run_id", "exchange_id", name=op.f("uq_pair_score_run_id_exchange_id")),
    )
    op.create_index(op.f("ix_pair_score_exchange_id"), "pair_score", ["exchange_id"])
    op.create_index(op.f("ix_pair_score_run_id_task_type"), "pair_score", ["run_id", "task_type"])

    op.create_table(
        "verdict",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("decided_at", _ts(), nullable=False),
        sa.Column("decision", sa.String(), nullable=False),
        sa.Column("look", sa.Integer(), nullable=False),
        sa.Column("policy_hash", sa.String(), nullable=False),
        sa.Column("command", sa.String(), nullable=False),
        sa.Column("record", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_verdict_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verdict")),
    )
    op.create_index(op.f("ix_verdict_run_id"), "verdict", ["run_id"])

    op.create_table(
        "rejected_record",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("stage", sa.String(), nullable=False),
        sa.Column("location", sa.String(), nullable=True),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("raw", sa.Text(), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rejected_record")),
    )
    op.create_index(op.f("ix_rejected_record_run_id_stage"), "rejected_record", ["run_id", "stage"])


def downgrade() -> None:
    """Drop every table (all data is lost)."""
    op.drop_index(op.f("ix_rejected_record_run_id_stage"), table_name="rejected_record")
    op.drop_table("rejected_record")
    op.drop_index(op.f("ix_verdict_run_id"), table_name="verdict")
    op.drop_table("verdict")
    op.drop_index(op.f("ix_pair_score_run_id_task_type"), table_name="pair_score")
    op.drop_index(op.f("ix_pair_score_exchange_id"), table_name="pair_score")
    op.drop_table("pair_score")
    op.drop_index(op.f("ix_replay_outcome_exchange_id"), table_name="replay_outcome")
    op.drop_table("replay_outcome")
    op.drop_index(op.f("ix_run_exchange_exchange_id"), table_name="run_exchange")
    op.drop_table("run_exchange")
    op.drop_index(op.f("ix_exchange_task_type"), table_name="exchange")
    op.drop_index(op.f("ix_exchange_captured_at"), table_name="exchange")
    op.drop_table("exchange")
    op.drop_index(op.f("ix_run_status"), table_name="run")
    op.drop_table("run")
