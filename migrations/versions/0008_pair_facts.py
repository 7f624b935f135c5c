"""Pair facts: pair_score.facts and pair_score.uncovered_scripts (the pairs table without JSON).

Revision ID: 0008
Revises: 0007
Create Date: 2027-03-02

Hand-written to match ``shadoweval.storage.models`` exactly; the test suite checks that
autogenerate finds no difference on SQLite and PostgreSQL after upgrading to this
revision, and that a downgrade to 0007 keeps every pair score.

* ``pair_score.facts`` (binary, nullable): :func:`shadoweval.pair_facts.pack_pair_facts`
  of the row's record — the values the gate's pairs table is built from, packed
  (``PAIR_FACTS_BYTES`` bytes), so the dashboard reads a run's pairs without decoding and
  validating every record (the cold overview of 200,000 pairs: seconds, not tens).
* ``pair_score.uncovered_scripts`` (text, nullable): the answer scripts the embedding
  model does not cover, comma-separated; ``NULL`` for none.

**Backfill**: every existing row's ``record`` is read in batches of
:data:`BACKFILL_BATCH_ROWS` (keyset on ``id``), validated with ``PairScore.model_validate``
and packed, written back with one executemany ``UPDATE`` per batch. A record that no
longer validates keeps ``facts`` ``NULL`` (readers fall back to its record, as before) and
is kept as a ``rejected_record`` (stage ``migration``, reason ``pair_facts_backfill``,
location ``pair_score#<id>``). The columns stay nullable, so nothing needs SQLite's batch
"move and copy" of ``pair_score`` (which, with foreign keys on, would delete the labels and
judgements that reference it). Offline SQL (``--sql``) adds the columns without the
backfill; the reader then packs from the records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql

from shadoweval.pair_facts import pack_pair_facts, uncovered_scripts
from shadoweval.records import PairScore, utc_now

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger("migrations.0008")

BACKFILL_BATCH_ROWS = 2000
"""Pair-score rows read and updated per batch while backfilling ``facts``."""

_DETAIL_CHARS = 2000


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _backfill_facts(connection: sa.Connection) -> tuple[int, int]:
    """Pack ``facts`` of every pair-score row; returns (rows updated, rows rejected)."""
    pair_score = sa.table(
        "pair_score",
        sa.column("id", _id()),
        sa.column("run_id", sa.String()),
        sa.column("record", _json()),
        sa.column("facts", sa.LargeBinary()),
        sa.column("uncovered_scripts", sa.String()),
    )
    rejected = sa.table(
        "rejected_record",
        sa.column("run_id", sa.String()),
        sa.column("stage", sa.String()),
        sa.column("location", sa.String()),
        sa.column("reason", sa.String()),
        sa.column("detail", sa.Text()),
        sa.column("raw", sa.Text()),
        sa.column("created_at", sa.TIMESTAMP(timezone=True)),
    )
    update = (
        sa.update(pair_score)
        .where(pair_score.c.id == sa.bindparam("row_id"))
        .values(facts=sa.bindparam("row_facts"), uncovered_scripts=sa.bindparam("row_scripts"))
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
        params: list[dict[str, Any]] = []
        rejects: list[dict[str, Any]] = []
        for row in rows:
            try:
                score = PairScore.model_validate(row.record)
            except ValidationError as exc:
                rejects.append(
                    {
                        "run_id": row.run_id,
                        "stage": "migration",
                        "location": f"pair_score#{row.id}",
                        "reason": "pair_facts_backfill",
                        "detail": str(exc)[:_DETAIL_CHARS],
                        "raw": None,
                        "created_at": utc_now(),
                    }
                )
                continue
            params.append(
                {
                    "row_id": row.id,
                    "row_facts": pack_pair_facts(score),
                    "row_scripts": uncovered_scripts(score) or None,
                }
            )
        if params:
            connection.execute(update, params)
        if rejects:
            connection.execute(sa.insert(rejected), rejects)
        updated += len(params)
        refused += len(rejects)
        last_id = rows[-1].id
    return updated, refused


def upgrade() -> None:
    """Add ``pair_score.facts`` and ``pair_score.uncovered_scripts`` and backfill them."""
    op.add_column("pair_score", sa.Column("facts", sa.LargeBinary(), nullable=True))
    op.add_column("pair_score", sa.Column("uncovered_scripts", sa.String(), nullable=True))
    if not op.get_context().as_sql:
        updated, refused = _backfill_facts(op.get_bind())
        if updated or refused:
            logger.info(
                "pair_score.facts backfilled for %d row(s); %d rejected (stage migration)",
                updated,
                refused,
            )


def downgrade() -> None:
    """Drop the two columns (every value is still in each row's ``record``).

    Plain ``ALTER TABLE … DROP COLUMN`` on every database (SQLite ≥ 3.35), not a batch
    "move and copy" of ``pair_score``, which on SQLite with foreign keys on would delete the
    human labels and judgements that reference it.
    """
    op.drop_column("pair_score", "uncovered_scripts")
    op.drop_column("pair_score", "facts")
