"""Time to first content and cache hits: replay_outcome.ttfc_ms, *.cache_hit.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-20

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0004 removes the columns again.

* ``replay_outcome.ttfc_ms`` (double, nullable): time to first visible content of the
  replayed response (``record.timings.ttfc_ms``). Rows written before this revision keep
  ``NULL``: their records carry no TTFC, and the column copies the record (no backfill).
* ``exchange.cache_hit`` and ``replay_outcome.cache_hit`` (boolean, not null, server
  default false): the answer was served from a cache (``record.response.cache_hit``).
  Existing rows read false, as their records (written before cache-hit rules existed)
  do; the server default fills them without a table rewrite on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``replay_outcome.ttfc_ms`` and the two ``cache_hit`` columns."""
    op.add_column("replay_outcome", sa.Column("ttfc_ms", sa.Double(), nullable=True))
    op.add_column(
        "replay_outcome",
        sa.Column("cache_hit", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column(
        "exchange",
        sa.Column("cache_hit", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    """Drop the columns again (TTFC and cache-hit flags stay in each row's ``record``).

    Plain ``ALTER TABLE … DROP COLUMN`` on every database (SQLite has it since 3.35), not
    Alembic's batch "move and copy": on SQLite that drops and re-creates ``exchange``, and
    with ``PRAGMA foreign_keys=ON`` dropping it deletes every ``ON DELETE CASCADE`` row
    that references it (run membership, outcomes, scores).
    """
    op.drop_column("exchange", "cache_hit")
    op.drop_column("replay_outcome", "cache_hit")
    op.drop_column("replay_outcome", "ttfc_ms")
