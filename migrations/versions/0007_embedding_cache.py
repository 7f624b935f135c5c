"""The embedding cache: embedding_cache, one pooled text vector per (encoder, text hash).

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-17

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0006 removes the table again.

* ``embedding_cache`` — primary key ``(cache_key, text_sha256)``: the encoder's identity
  (model name, weights hash, backend: ``Encoder.cache_key``) and the hex SHA-256 of the
  text's UTF-8 bytes. ``vector`` holds the pooled unit vector as ``dimension`` float32
  values, little-endian; ``tokens``, ``chunks`` and ``truncated`` are the text's counts
  and flag; ``created_at`` when it was first stored. A new table only: nothing existing
  changes, and a cache that is dropped is rebuilt by the next compare pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create ``embedding_cache``."""
    op.create_table(
        "embedding_cache",
        sa.Column("cache_key", sa.String(), nullable=False),
        sa.Column("text_sha256", sa.String(), nullable=False),
        sa.Column("dimension", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cache_key", "text_sha256", name=op.f("pk_embedding_cache")),
    )


def downgrade() -> None:
    """Drop ``embedding_cache`` (the cached vectors are lost; scores are not)."""
    op.drop_table("embedding_cache")
