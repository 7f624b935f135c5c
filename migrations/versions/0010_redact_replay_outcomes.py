"""Redact stored replay outcomes: the candidate's and the replica's answers (issue 30).

Revision ID: 0010
Revises: 0009
Create Date: 2027-04-12

Replay outcomes written before issue 30 hold the candidate's and the baseline replica's
answers as the targets sent them; from now on the repository redacts them before they are
written (:class:`shadoweval.outcome_redaction.OutcomeRedactor`, the capture sidecar's body
rules). This migration passes what a database already holds through the same redactor:
every ``replay_outcome.record`` is read in batches of :data:`BATCH_ROWS` (keyset on
``id``), validated, redacted (answer text, reasoning text, tool-call arguments, raw body,
error message, ``error_detail``, sensitive response headers) and written back with its
``redaction`` report and rules version (a record already stamped with this version is left
as it is, so a second pass writes nothing). A record that no longer
validates has every string value of its JSON redacted instead. No schema change.

The rules are the defaults of :class:`shadoweval.config.BodyRedactionSettings` (a migration
does not read the deployment's settings; ``extra_patterns`` of a deployment apply to new
writes, and each record names the rules version it passed). It logs (logger
``migrations.0010``) how many fields it changed, in how many outcomes, and how many records
it rewrote; :func:`redact_outcomes` returns the same counts.

Downgrade changes nothing: a redacted value cannot be restored (the old code reads the
redacted records; the ``redaction`` field is optional).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql

from shadoweval.body_redaction import RedactionHits
from shadoweval.outcome_redaction import OutcomeRedactor
from shadoweval.records import STORED, ReplayOutcome

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger("migrations.0010")

BATCH_ROWS = 1000
"""Replay-outcome rows read and updated per batch."""


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _id() -> sa.types.TypeEngine[Any]:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _redacted(record: Any, redactor: OutcomeRedactor) -> tuple[Any, int]:
    """``record`` redacted and stamped, and the number of fields whose value changed."""
    try:
        outcome = ReplayOutcome.model_validate(record, context=STORED)
    except ValidationError:
        hits = RedactionHits()
        out = redactor.redactor.redact_json(record, "record", hits)
        return out, len({hit.location for hit in hits.to_hits()})
    redacted = redactor.redact(outcome)
    assert redacted.redaction is not None
    before = 0 if outcome.redaction is None else redactor.fields_changed(outcome.redaction)
    changed = redactor.fields_changed(redacted.redaction) - before
    return redacted.model_dump(mode="json"), changed


def redact_outcomes(connection: sa.Connection) -> tuple[int, int, int]:
    """Redact every stored replay outcome; returns (outcomes rewritten, outcomes whose
    values changed, fields changed)."""
    table = sa.table("replay_outcome", sa.column("id", _id()), sa.column("record", _json()))
    update = (
        sa.update(table)
        .where(table.c.id == sa.bindparam("row_id"))
        .values(record=sa.bindparam("row_record"))
    )
    redactor = OutcomeRedactor()
    rewritten = outcomes = fields = 0
    last_id: int | None = None
    while True:
        stmt = sa.select(table.c.id, table.c.record)
        if last_id is not None:
            stmt = stmt.where(table.c.id > last_id)
        rows = connection.execute(stmt.order_by(table.c.id).limit(BATCH_ROWS)).all()
        if not rows:
            break
        params: list[dict[str, Any]] = []
        for row in rows:
            record, changed = _redacted(row.record, redactor)
            if record != row.record:
                params.append({"row_id": row.id, "row_record": record})
            outcomes += bool(changed)
            fields += changed
        if params:
            connection.execute(update, params)
        rewritten += len(params)
        last_id = rows[-1].id
    return rewritten, outcomes, fields


def upgrade() -> None:
    """Redact what ``replay_outcome`` holds (online only; offline SQL has no rows to read)."""
    if op.get_context().as_sql:
        return
    rewritten, outcomes, fields = redact_outcomes(op.get_bind())
    logger.info(
        "replay_outcome redacted: %d field(s) changed in %d outcome(s); %d outcome(s) "
        "stamped with rules %s",
        fields,
        outcomes,
        rewritten,
        OutcomeRedactor().version,
    )


def downgrade() -> None:
    """Nothing to undo: redacted values cannot be restored, and old code reads them."""
