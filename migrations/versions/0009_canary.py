"""Canary rollouts: canary, canary_step, canary_observation, canary_rating (issue 16).

Revision ID: 0009
Revises: 0008
Create Date: 2027-03-20

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0008 removes the tables again.

* ``canary`` — one rollout of a run's candidate on live traffic: its frozen canary policy
  (YAML and hash), the split directory the Envoy front watches, its state, current step,
  share and split revision, when the step began, when an error-rate excess was first
  seen, and how far each capture-log file was read.
* ``canary_step`` — one row per step reached: share, start and end, outcome, the latest
  verdict (JSON) and how many evaluations judged it.
* ``canary_observation`` — one row per live request seen during a step (unique per
  canary and exchange): the arm that served it and the facts the step verdict reads.
* ``canary_rating`` — spot-check ratings (1–10) of canary-served outputs, one per rater.

New tables only: nothing existing changes. The audit trail of a canary is in the
existing ``policy_audit`` table, under the canary's run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.types.TypeEngine[Any]:
    return sa.TIMESTAMP(timezone=True)


def _canary_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["canary_id"],
        ["canary.canary_id"],
        name=op.f(f"fk_{table}_canary_id_canary"),
        ondelete="CASCADE",
    )


def upgrade() -> None:
    """Create the four canary tables."""
    op.create_table(
        "canary",
        sa.Column("canary_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
        sa.Column("policy_hash", sa.String(), nullable=False),
        sa.Column("policy_yaml", sa.Text(), nullable=False),
        sa.Column("split_dir", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("candidate_share", sa.Double(), nullable=False),
        sa.Column("split_revision", sa.Integer(), nullable=False),
        sa.Column("step_started_at", _ts(), nullable=False),
        sa.Column("error_breach_since", _ts(), nullable=True),
        sa.Column("ingest_state", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.run_id"], name=op.f("fk_canary_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("canary_id", name=op.f("pk_canary")),
    )
    op.create_index(op.f("ix_canary_run_id"), "canary", ["run_id"], unique=False)
    op.create_index(op.f("ix_canary_state"), "canary", ["state"], unique=False)
    op.create_table(
        "canary_step",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("canary_id", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("share", sa.Double(), nullable=False),
        sa.Column("started_at", _ts(), nullable=False),
        sa.Column("ended_at", _ts(), nullable=True),
        sa.Column("outcome", sa.String(), nullable=True),
        sa.Column("evaluations", sa.Integer(), nullable=False),
        sa.Column("last_decision", sa.String(), nullable=True),
        sa.Column("last_verdict", _json(), nullable=True),
        sa.Column("last_evaluated_at", _ts(), nullable=True),
        _canary_fk("canary_step"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canary_step")),
        sa.UniqueConstraint(
            "canary_id", "step_index", name=op.f("uq_canary_step_canary_id_step_index")
        ),
    )
    op.create_table(
        "canary_observation",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("canary_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(), nullable=False),
        sa.Column("observed_at", _ts(), nullable=False),
        sa.Column("session", sa.String(), nullable=True),
        sa.Column("error", sa.Boolean(), nullable=False),
        sa.Column("format_expected", sa.Boolean(), nullable=False),
        sa.Column("format_ok", sa.Boolean(), nullable=True),
        sa.Column("harmed", sa.Boolean(), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("e2e_ms", sa.Double(), nullable=True),
        sa.Column("ttft_ms", sa.Double(), nullable=True),
        sa.Column("detail", _json(), nullable=False),
        _canary_fk("canary_observation"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canary_observation")),
        sa.UniqueConstraint(
            "canary_id", "exchange_id", name=op.f("uq_canary_observation_canary_id_exchange_id")
        ),
    )
    op.create_index(
        "ix_canary_observation_canary_id_step_index",
        "canary_observation",
        ["canary_id", "step_index"],
        unique=False,
    )
    op.create_table(
        "canary_rating",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("canary_id", sa.String(), nullable=False),
        sa.Column("exchange_id", sa.String(), nullable=False),
        sa.Column("rater", sa.String(), nullable=False),
        sa.Column("rating", sa.Double(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("rated_at", _ts(), nullable=False),
        _canary_fk("canary_rating"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canary_rating")),
        sa.UniqueConstraint(
            "canary_id",
            "exchange_id",
            "rater",
            name=op.f("uq_canary_rating_canary_id_exchange_id_rater"),
        ),
    )


def downgrade() -> None:
    """Drop the canary tables (the audit rows in ``policy_audit`` stay)."""
    op.drop_table("canary_rating")
    op.drop_index("ix_canary_observation_canary_id_step_index", table_name="canary_observation")
    op.drop_table("canary_observation")
    op.drop_table("canary_step")
    op.drop_index(op.f("ix_canary_state"), table_name="canary")
    op.drop_index(op.f("ix_canary_run_id"), table_name="canary")
    op.drop_table("canary")
