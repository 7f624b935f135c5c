"""The random label sample: human_label.sample (prediction-powered inference).

Revision ID: 0011
Revises: 0010
Create Date: 2027-04-20

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0010 removes the column again.

* ``human_label.sample`` (text, nullable): the id of the random sample of changed pairs
  the labelled pair was drawn in (``shadow-eval export --ppi-sample``, e.g.
  ``ppi-run-1-seed-1234``), which the net-harm estimator may use as the unbiased labelled
  sample of prediction-powered inference (PPI++, Angelopoulos, Duchi & Zrnic 2023);
  ``NULL`` for a label chosen by hand (the dashboard, a lowest-similarity or filtered
  export). Rows written before this revision keep ``NULL``: nothing recorded which
  sample, if any, they were drawn in, so they count as chosen by hand.

A plain ``ALTER TABLE … ADD COLUMN`` / ``DROP COLUMN`` on every database (no batch
"move and copy"; see 0006). The downgrade loses which labels were in a random sample;
the labels themselves stay.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add ``human_label.sample`` (``NULL`` on every existing label: chosen by hand)."""
    op.add_column("human_label", sa.Column("sample", sa.String(), nullable=True))


def downgrade() -> None:
    """Drop ``human_label.sample`` (the labels stay; which were sampled is lost)."""
    op.drop_column("human_label", "sample")
