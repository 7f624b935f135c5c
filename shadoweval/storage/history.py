"""Verdict history and rejected records: what was decided, and what could not be processed.

:class:`HistoryStore` is the part of :class:`~shadoweval.storage.repository.Repository`
that appends to the two logs of a deployment: gate verdicts (with the command that asked
for each) and rejected records (kept with their reason and counted, never dropped).
Use it through ``Repository``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import func, insert, select

from shadoweval.records import Decision, Verdict, utc_now
from shadoweval.storage import rows as rows_
from shadoweval.storage.database import Database
from shadoweval.storage.models import RejectedRecordRow, VerdictRow
from shadoweval.storage.statements import insert_ignore
from shadoweval.storage.types import LatestDecision, RejectedRecord, VerdictEntry


class HistoryStore:
    """Append-only logs over one database: verdicts and rejected records."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @property
    def database(self) -> Database:
        """The database this store writes to."""
        return self._db

    # ---------------------------------------------------------------- rejected

    def save_rejected(
        self,
        *,
        stage: str,
        reason: str,
        location: str | None = None,
        detail: str | None = None,
        raw: str | None = None,
        run_id: str | None = None,
        created_at: datetime | None = None,
        fingerprint: str | None = None,
    ) -> int:
        """Store one record that could not be processed; returns its id.

        ``stage`` is one of :class:`~shadoweval.storage.types.RejectStage` (any string is
        accepted); ``raw`` is kept whole, however large. With a ``fingerprint``
        (:func:`~shadoweval.storage.types.rejection_fingerprint`) a record of the same run
        and stage already stored under it is kept and its id returned: nothing new is
        stored.
        """
        record = RejectedRecord(
            stage=stage,
            reason=reason,
            location=location,
            detail=detail,
            raw=raw,
            run_id=run_id,
            created_at=created_at or utc_now(),
            fingerprint=fingerprint,
        )
        with self._db.session() as session:
            if fingerprint is not None and run_id is not None:
                stored = session.scalar(
                    select(RejectedRecordRow.id).where(
                        RejectedRecordRow.run_id == run_id,
                        RejectedRecordRow.stage == str(stage),
                        RejectedRecordRow.fingerprint == fingerprint,
                    )
                )
                if stored is not None:
                    return int(stored)
            row = RejectedRecordRow(**rows_.rejected_row(record))
            session.add(row)
            session.flush()
            return row.id

    def save_rejected_many(self, records: Iterable[RejectedRecord]) -> int:
        """Store many rejected records in one batch; returns how many were newly stored.

        A record with a ``fingerprint`` already stored for its run and stage (or given
        twice here) is not stored again (insert-or-ignore on ``(run_id, stage,
        fingerprint)``); records without one are always stored.
        """
        rows = [rows_.rejected_row(r) for r in records]
        if not rows:
            return 0
        keyed = [r for r in rows if r["fingerprint"] is not None and r["run_id"] is not None]
        plain = [r for r in rows if r["fingerprint"] is None or r["run_id"] is None]
        stored = 0
        with self._db.session() as session:
            if plain:
                session.execute(insert(RejectedRecordRow), plain)
                stored += len(plain)
            if keyed:
                # Kept in the order found (a capture log's line order): the records of one
                # source have one writer (a partition's worker, a file's runner).
                stored += insert_ignore(
                    session,
                    RejectedRecordRow,
                    keyed,
                    ["run_id", "stage", "fingerprint"],
                    key_order=False,
                )
        return stored

    def count_rejected(self, run_id: str | None = None, stage: str | None = None) -> dict[str, int]:
        """Return ``{reason: count}`` of rejected records.

        ``run_id=None`` counts records of every run and of none; ``stage`` narrows to
        one stage.
        """
        stmt = select(RejectedRecordRow.reason, func.count()).group_by(RejectedRecordRow.reason)
        if run_id is not None:
            stmt = stmt.where(RejectedRecordRow.run_id == run_id)
        if stage is not None:
            stmt = stmt.where(RejectedRecordRow.stage == str(stage))
        with self._db.session() as session:
            return {reason: count for reason, count in session.execute(stmt)}

    def list_rejected(
        self,
        run_id: str | None = None,
        *,
        stage: str | None = None,
        reason: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RejectedRecord]:
        """Return rejected records in the order they were stored (filters as named)."""
        stmt = select(RejectedRecordRow).order_by(RejectedRecordRow.id)
        if run_id is not None:
            stmt = stmt.where(RejectedRecordRow.run_id == run_id)
        if stage is not None:
            stmt = stmt.where(RejectedRecordRow.stage == str(stage))
        if reason is not None:
            stmt = stmt.where(RejectedRecordRow.reason == reason)
        with self._db.session() as session:
            return [
                rows_.rejected_record(row)
                for row in session.scalars(stmt.limit(limit).offset(offset))
            ]

    # ---------------------------------------------------------------- verdicts

    def save_verdict(self, verdict: Verdict, command: str) -> int:
        """Append a verdict to its run's history; returns its id.

        ``command`` records what asked for it (``"shadow-eval gate --run ..."``, ``"api"``).

        Raises:
            StorageError: e.g. the verdict's run does not exist.
        """
        row = VerdictRow(
            run_id=verdict.run_id,
            decided_at=verdict.decided_at,
            decision=verdict.decision.value,
            look=verdict.look,
            policy_hash=verdict.policy_hash,
            command=command,
            record=verdict.model_dump(mode="json"),
        )
        with self._db.session() as session:
            session.add(row)
            session.flush()
            return row.id

    def latest_verdict(self, run_id: str) -> Verdict | None:
        """Return the run's most recent verdict (by ``decided_at``, then id), or ``None``."""
        stmt = (
            select(VerdictRow.record)
            .where(VerdictRow.run_id == run_id)
            .order_by(VerdictRow.decided_at.desc(), VerdictRow.id.desc())
            .limit(1)
        )
        with self._db.session() as session:
            record = session.scalars(stmt).first()
        return None if record is None else Verdict.model_validate(record)

    def verdict_history(self, run_id: str) -> list[VerdictEntry]:
        """Return the run's verdicts oldest first (by ``decided_at``, then id)."""
        stmt = (
            select(VerdictRow.id, VerdictRow.command, VerdictRow.record)
            .where(VerdictRow.run_id == run_id)
            .order_by(VerdictRow.decided_at, VerdictRow.id)
        )
        with self._db.session() as session:
            rows = session.execute(stmt).all()
        return [
            VerdictEntry(id=row.id, command=row.command, verdict=Verdict.model_validate(row.record))
            for row in rows
        ]

    def latest_decisions(self, run_ids: Sequence[str]) -> dict[str, LatestDecision]:
        """Return the latest decision of each run in ``run_ids`` that has a verdict.

        One query (``row_number()`` over each run's verdicts by ``decided_at`` then id,
        the order of :meth:`latest_verdict`); runs without a verdict are absent.
        """
        if not run_ids:
            return {}
        rank = (
            func.row_number()
            .over(
                partition_by=VerdictRow.run_id,
                order_by=(VerdictRow.decided_at.desc(), VerdictRow.id.desc()),
            )
            .label("rank")
        )
        ranked = (
            select(
                VerdictRow.run_id, VerdictRow.decision, VerdictRow.decided_at, VerdictRow.look, rank
            )
            .where(VerdictRow.run_id.in_(list(run_ids)))
            .subquery()
        )
        stmt = select(ranked.c.run_id, ranked.c.decision, ranked.c.decided_at, ranked.c.look).where(
            ranked.c.rank == 1
        )
        with self._db.session() as session:
            rows = session.execute(stmt).all()
        return {
            row.run_id: LatestDecision(
                run_id=row.run_id,
                decision=Decision(row.decision),
                decided_at=row.decided_at,
                look=row.look,
            )
            for row in rows
        }
