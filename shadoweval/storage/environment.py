"""Replay failures of the environment in storage: find them, replay them again (issue 29).

A replay that failed for reasons of the environment (:mod:`shadoweval.records.environment`)
is not the candidate's answer, so a later pass of the same run sends it again and its new
outcome *replaces* the failed one; a stored answer (an outcome without error) is never
replaced (first write wins for answers). The pair score of a replaced outcome is marked
for rescoring (``scored_at`` = :data:`~shadoweval.storage.models.RESCORE_SCORED_AT`), not
deleted: the compare stage scores the exchange again and its upsert replaces the row in
place, so the labels and judgements of the pair (the user's ground truth, keyed by run
and exchange id) are kept. Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from sqlalchemy import and_, func, select, tuple_, update
from sqlalchemy.orm import Session

from shadoweval.outcome_redaction import OutcomeRedactor
from shadoweval.records import (
    STORED,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
    is_infra_failure,
    repeated_rejections,
)
from shadoweval.storage import rows as rows_
from shadoweval.storage.database import Database
from shadoweval.storage.models import RESCORE_SCORED_AT, PairScoreRow, ReplayOutcomeRow
from shadoweval.storage.statements import upsert

__all__ = ["EnvironmentStore", "rejection_key"]

_CHUNK = 500
"""Exchange ids per ``IN`` list."""

_SKIPPED = ReplayErrorKind.SKIPPED.value


def rejection_key(outcome: ReplayOutcome) -> tuple[int, str] | None:
    """``(status, error message)`` of an HTTP failure, the unit a repeated rejection is
    counted in (:func:`shadoweval.records.repeated_rejections`); ``None`` otherwise."""
    response = outcome.response
    if response is None or response.status_code < 400:
        return None
    return response.status_code, response.error_message or (response.body or "")[:200]


class EnvironmentStore:
    """Failed replays of a run, classified, and their replacement (a mixin of
    ``Repository``)."""

    _db: Database
    _outcome_redactor: OutcomeRedactor

    def _failed_outcomes(self, session: Session, run_id: str) -> list[ReplayOutcome]:
        """The run's sent outcomes (every target) with an error."""
        stmt = select(ReplayOutcomeRow.record).where(
            ReplayOutcomeRow.run_id == run_id,
            ReplayOutcomeRow.error_kind.is_not(None),
            ReplayOutcomeRow.error_kind != _SKIPPED,
        )
        return [ReplayOutcome.model_validate(r, context=STORED) for r in session.scalars(stmt)]

    def _sent_count(self, session: Session, run_id: str, target: ReplayTarget) -> int:
        stmt = select(func.count()).where(
            ReplayOutcomeRow.run_id == run_id,
            ReplayOutcomeRow.target == target.value,
            (ReplayOutcomeRow.error_kind.is_(None)) | (ReplayOutcomeRow.error_kind != _SKIPPED),
        )
        return int(session.scalar(stmt) or 0)

    def repeated_rejections(
        self, run_id: str, target: ReplayTarget = ReplayTarget.CANDIDATE
    ) -> frozenset[tuple[int, str]]:
        """The (status, message) rejections of ``target`` in ``run_id`` that repeat on
        most of its sent requests (:func:`shadoweval.records.repeated_rejections`)."""
        with self._db.session() as session:
            failed = self._failed_outcomes(session, run_id)
            sent = self._sent_count(session, run_id, target)
        counts: Counter[tuple[int, str]] = Counter(
            key for o in failed if o.target == target and (key := rejection_key(o)) is not None
        )
        return repeated_rejections(counts, sent)

    def environment_failed_ids(self, run_id: str, target: ReplayTarget) -> set[str]:
        """Exchange ids whose stored ``target`` outcome failed for reasons of the
        environment: an infrastructure or configuration failure
        (:func:`shadoweval.records.is_infra_failure`), a rejection repeated on most of the
        target's requests, or a failure the other shadow target shares on that exchange.
        A later pass of the run sends these again (:meth:`replace_failed_outcomes`)."""
        with self._db.session() as session:
            failed = self._failed_outcomes(session, run_id)
            sent = self._sent_count(session, run_id, target)
        mine = [o for o in failed if o.target == target]
        others = {o.exchange_id for o in failed if o.target != target}
        counts: Counter[tuple[int, str]] = Counter(
            key for o in mine if (key := rejection_key(o)) is not None
        )
        repeated = repeated_rejections(counts, sent)
        ids: set[str] = set()
        for o in mine:
            status = o.response.status_code if o.response is not None else None
            if (
                is_infra_failure(o.error_kind, status)
                or rejection_key(o) in repeated
                or o.exchange_id in others
            ):
                ids.add(o.exchange_id)
        return ids

    def replace_failed_outcomes(self, outcomes: Iterable[ReplayOutcome]) -> int:
        """Store outcomes, replacing a stored outcome of the same key only when that one
        failed (an error other than ``skipped``); a stored answer is kept (first write
        wins). The pair scores of replaced outcomes are marked for rescoring in the same
        transaction (kept, with their labels and judgements), so the compare stage scores
        those exchanges again. Returns the outcomes written (inserted or replaced).

        Raises:
            StorageError: the database failed, or an outcome names an unknown run or
                exchange.
        """
        given = list(outcomes)
        if not given:
            return 0
        rows = [rows_.outcome_row(o, self._outcome_redactor) for o in given]
        stored = ReplayOutcomeRow.__table__.c
        with self._db.session() as session:
            replaced = self._stored_failures(session, given)
            written = upsert(
                session,
                ReplayOutcomeRow,
                rows,
                ["run_id", "exchange_id", "target"],
                replace_where=and_(stored.error_kind.is_not(None), stored.error_kind != _SKIPPED),
            )
            keys = sorted(replaced)
            for start in range(0, len(keys), _CHUNK):
                session.execute(
                    update(PairScoreRow)
                    .where(
                        tuple_(PairScoreRow.run_id, PairScoreRow.exchange_id).in_(
                            keys[start : start + _CHUNK]
                        )
                    )
                    .values(scored_at=RESCORE_SCORED_AT)
                )
        return written

    def _stored_failures(
        self, session: Session, outcomes: Sequence[ReplayOutcome]
    ) -> set[tuple[str, str]]:
        """``(run_id, exchange_id)`` of the given outcomes whose stored outcome failed."""
        keys = sorted({(o.run_id, o.exchange_id, o.target.value) for o in outcomes})
        found: set[tuple[str, str]] = set()
        for start in range(0, len(keys), _CHUNK):
            stmt = select(ReplayOutcomeRow.run_id, ReplayOutcomeRow.exchange_id).where(
                tuple_(
                    ReplayOutcomeRow.run_id, ReplayOutcomeRow.exchange_id, ReplayOutcomeRow.target
                ).in_(keys[start : start + _CHUNK]),
                ReplayOutcomeRow.error_kind.is_not(None),
                ReplayOutcomeRow.error_kind != _SKIPPED,
            )
            found.update((r.run_id, r.exchange_id) for r in session.execute(stmt))
        return found

    def load_outcomes_of(
        self, run_id: str, target: ReplayTarget, exchange_ids: Iterable[str]
    ) -> dict[str, ReplayOutcome]:
        """The stored ``target`` outcomes of ``exchange_ids`` in ``run_id``, by exchange id."""
        ids = sorted(set(exchange_ids))
        found: dict[str, ReplayOutcome] = {}
        with self._db.session() as session:
            for start in range(0, len(ids), _CHUNK):
                stmt = select(ReplayOutcomeRow.record).where(
                    ReplayOutcomeRow.run_id == run_id,
                    ReplayOutcomeRow.target == target.value,
                    ReplayOutcomeRow.exchange_id.in_(ids[start : start + _CHUNK]),
                )
                for record in session.scalars(stmt):
                    outcome = ReplayOutcome.model_validate(record, context=STORED)
                    found[outcome.exchange_id] = outcome
        return found
