"""Idempotent rejections: rejected_record.fingerprint, unique per (run_id, stage).

Revision ID: 0006
Revises: 0005
Create Date: 2027-02-03

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0005 removes the column and the index again.

* ``rejected_record.fingerprint`` (text, nullable): SHA-256 (hex) of what was rejected —
  its location and raw text (``shadoweval.storage.types.rejection_fingerprint``). Rows
  written before this revision keep ``NULL`` (there is nothing to fingerprint them by that
  later reads would reproduce; they are never de-duplicated).
* a unique index on ``(run_id, stage, fingerprint)``: storing the same rejection of the
  same run again is ignored (``INSERT … ON CONFLICT DO NOTHING``), so reading the same
  capture log, topic or labelled file again stores no new rejected rows. SQL unique
  indexes treat ``NULL`` as distinct, so rows without a fingerprint or a run never clash.

Both are plain ``ALTER TABLE … ADD COLUMN`` / ``CREATE UNIQUE INDEX`` on every database,
not Alembic's batch "move and copy" (see 0005: on SQLite that would re-create the table).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_rejected_record_run_id_stage_fingerprint"


def upgrade() -> None:
    """Add ``rejected_record.fingerprint`` and its unique index."""
    op.add_column("rejected_record", sa.Column("fingerprint", sa.String(), nullable=True))
    op.create_index(INDEX, "rejected_record", ["run_id", "stage", "fingerprint"], unique=True)


def downgrade() -> None:
    """Drop the index and the column (the rejected rows themselves stay)."""
    op.drop_index(INDEX, table_name="rejected_record")
    op.drop_column("rejected_record", "fingerprint")
