"""Policy audit log: policy_audit (created / used / refused rows per run).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06

Hand-written to match ``shadoweval.storage.models.PolicyAuditRow`` exactly; the test
suite checks that autogenerate finds no difference on SQLite and PostgreSQL after
upgrading to this revision. Runs created before this revision get one ``created`` row
each (backfilled from ``run``: its policy hash and creation time, actor ``unknown``), so
every run has its creation in the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BACKFILL_COMMAND = "shadow-eval db upgrade (0002 backfill)"
"""``command`` of the rows written for runs that existed before this revision."""


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.types.TypeEngine[Any]:
    return sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    """Create ``policy_audit`` and backfill a ``created`` row for every existing run."""
    audit = op.create_table(
        "policy_audit",
        sa.Column("id", _id(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("policy_hash", sa.String(), nullable=False),
        sa.Column("recorded_at", _ts(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("command", sa.String(), nullable=False),
        sa.Column("actor", sa.String(), nullable=False),
        sa.Column("detail", _json(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["run.run_id"],
            name=op.f("fk_policy_audit_run_id_run"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_audit")),
    )
    op.create_index(op.f("ix_policy_audit_run_id"), "policy_audit", ["run_id"])
    if op.get_context().as_sql:
        return  # offline SQL: there are no rows to read
    run = sa.table(
        "run",
        sa.column("run_id", sa.String()),
        sa.column("policy_hash", sa.String()),
        sa.column("created_at", _ts()),
    )
    existing = op.get_bind().execute(
        sa.select(run.c.run_id, run.c.policy_hash, run.c.created_at).order_by(run.c.created_at)
    )
    rows = [
        {
            "run_id": row.run_id,
            "policy_hash": row.policy_hash,
            "recorded_at": row.created_at,
            "action": "created",
            "command": BACKFILL_COMMAND,
            "actor": "unknown",
            "detail": {"backfilled": True},
        }
        for row in existing
    ]
    if rows and audit is not None:
        op.bulk_insert(audit, rows)


def downgrade() -> None:
    """Drop ``policy_audit`` (the audit log is lost)."""
    op.drop_index(op.f("ix_policy_audit_run_id"), table_name="policy_audit")
    op.drop_table("policy_audit")
