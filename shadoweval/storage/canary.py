"""Canary rollouts: the canary, its steps, the live requests seen and the spot checks.

A canary (issue 16, docs/canary.md) belongs to a run; every change to it — start, a step
advanced, a step's decision turned to HOLD, rollback, completion — is written in the same
transaction as a row of that run's ``policy_audit`` (who: ``actor``; what: ``action`` and
``detail``; why: ``detail["why"]``). Changes of step are guarded: :meth:`CanaryStore.move_canary`
locks the canary row and refuses to move a canary that is no longer at the step the caller
judged (two controllers, or an operator's rollback beside a running controller, cannot
both move it). Observations are insert-or-ignore on ``(canary_id, exchange_id)``; ratings
upsert on ``(canary_id, exchange_id, rater)``. Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shadoweval.errors import StorageError
from shadoweval.records import StepVerdict, utc_now
from shadoweval.storage.audit import add_audit_row, audit_row
from shadoweval.storage.database import Database
from shadoweval.storage.models import (
    CanaryObservationRow,
    CanaryRatingRow,
    CanaryRow,
    CanaryStepRow,
    RunRow,
)
from shadoweval.storage.rows import (
    canary_info,
    canary_observation,
    canary_observation_row,
    canary_rating,
    canary_rating_row,
    canary_step_info,
)
from shadoweval.storage.statements import insert_ignore, upsert
from shadoweval.storage.types import (
    CanaryInfo,
    CanaryObservation,
    CanaryRating,
    CanaryState,
    CanaryStepInfo,
    PolicyAuditAction,
)

__all__ = ["AuditNote", "CanaryStore"]


@dataclass(frozen=True, slots=True)
class AuditNote:
    """Who asked for a canary change and why, for its ``policy_audit`` row.

    ``command``: what ran (``"shadow-eval canary rollback"``); ``actor``: who (the OS user
    when ``None``); ``detail``: free JSON (the controller puts ``why``, shares, revision
    and the verdict's reasons there).
    """

    action: PolicyAuditAction
    command: str
    actor: str | None = None
    detail: Mapping[str, JsonValue] | None = None


def _audit(session: Session, canary: CanaryRow, note: AuditNote, at: datetime) -> int:
    detail: dict[str, JsonValue] = {"canary_id": canary.canary_id}
    detail.update(dict(note.detail or {}))
    return add_audit_row(
        session,
        audit_row(
            run_id=canary.run_id,
            policy_hash=canary.policy_hash,
            action=note.action,
            command=note.command,
            actor=note.actor,
            detail=detail,
            recorded_at=at,
        ),
    )


class CanaryStore:
    """Write and read canaries (a mixin of ``Repository``)."""

    _db: Database

    def create_canary(
        self,
        *,
        canary_id: str,
        run_id: str,
        name: str,
        policy_hash: str,
        policy_yaml: str,
        split_dir: str,
        first_share: float,
        split_revision: int,
        note: AuditNote,
        started_at: datetime | None = None,
    ) -> CanaryInfo:
        """Create a running canary at step 0 with ``first_share``, its step row and its
        ``canary_started`` audit row, in one transaction.

        Raises:
            StorageError: the run does not exist, the canary id is taken, or a canary of
                the same run is still running (one live split per run).
        """
        at = started_at or utc_now()
        with self._db.session() as session:
            if session.get(RunRow, run_id) is None:
                raise StorageError(f"unknown run {run_id!r}")
            if session.get(CanaryRow, canary_id) is not None:
                raise StorageError(f"canary {canary_id!r} already exists")
            running = session.scalar(
                select(CanaryRow.canary_id).where(
                    CanaryRow.run_id == run_id, CanaryRow.state == CanaryState.RUNNING.value
                )
            )
            if running is not None:
                raise StorageError(
                    f"run {run_id!r} already has a running canary {running!r}; "
                    "roll it back or let it complete first"
                )
            row = CanaryRow(
                canary_id=canary_id,
                run_id=run_id,
                name=name,
                created_at=at,
                updated_at=at,
                policy_hash=policy_hash,
                policy_yaml=policy_yaml,
                split_dir=split_dir,
                state=CanaryState.RUNNING.value,
                step_index=0,
                candidate_share=first_share,
                split_revision=split_revision,
                step_started_at=at,
                error_breach_since=None,
                ingest_state={},
            )
            session.add(row)
            session.add(
                CanaryStepRow(
                    canary_id=canary_id,
                    step_index=0,
                    share=first_share,
                    started_at=at,
                    ended_at=None,
                    outcome=None,
                    evaluations=0,
                    last_decision=None,
                    last_verdict=None,
                    last_evaluated_at=None,
                )
            )
            session.flush()
            _audit(session, row, note, at)
            return canary_info(row)

    def get_canary(self, canary_id: str) -> CanaryInfo | None:
        """Return the canary, or ``None`` when there is none with this id."""
        with self._db.session() as session:
            row = session.get(CanaryRow, canary_id)
            return None if row is None else canary_info(row)

    def list_canaries(
        self,
        *,
        run_id: str | None = None,
        state: CanaryState | None = None,
        limit: int | None = None,
    ) -> list[CanaryInfo]:
        """Return canaries, newest first, optionally of one run and/or in one state, at most
        ``limit`` of them (``None``: all)."""
        stmt = select(CanaryRow).order_by(CanaryRow.created_at.desc(), CanaryRow.canary_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        if run_id is not None:
            stmt = stmt.where(CanaryRow.run_id == run_id)
        if state is not None:
            stmt = stmt.where(CanaryRow.state == state.value)
        with self._db.session() as session:
            return [canary_info(row) for row in session.scalars(stmt)]

    def canary_steps(self, canary_id: str) -> list[CanaryStepInfo]:
        """Return the canary's steps reached so far, in step order."""
        stmt = (
            select(CanaryStepRow)
            .where(CanaryStepRow.canary_id == canary_id)
            .order_by(CanaryStepRow.step_index)
        )
        with self._db.session() as session:
            return [canary_step_info(row) for row in session.scalars(stmt)]

    def _locked(
        self, session: Session, canary_id: str, step_index: int, *, completed_ok: bool = False
    ) -> CanaryRow:
        row = session.get(CanaryRow, canary_id, with_for_update=True)
        if row is None:
            raise StorageError(f"unknown canary {canary_id!r}")
        movable = {CanaryState.RUNNING.value}
        if completed_ok:
            movable.add(CanaryState.COMPLETED.value)
        if row.state not in movable:
            raise StorageError(f"canary {canary_id!r} is {row.state}; it can no longer change")
        if row.step_index != step_index:
            raise StorageError(
                f"canary {canary_id!r} is at step {row.step_index}, not {step_index}: "
                "another controller or an operator moved it"
            )
        return row

    def record_canary_evaluation(
        self,
        canary_id: str,
        *,
        step_index: int,
        decision: str,
        verdict: StepVerdict,
        error_breach_since: datetime | None,
        note: AuditNote | None = None,
        evaluated_at: datetime | None = None,
    ) -> CanaryStepInfo:
        """Store the latest verdict of the canary's current step (and its audit row, if any).

        ``verdict`` is stored as its JSON form (:meth:`~shadoweval.records.StepVerdict.to_json`)
        and read back typed (:attr:`CanaryStepInfo.last_verdict`).

        Raises:
            StorageError: unknown canary, not running, or no longer at ``step_index``.
        """
        at = evaluated_at or utc_now()
        with self._db.session() as session:
            canary = self._locked(session, canary_id, step_index)
            step = session.scalars(
                select(CanaryStepRow).where(
                    CanaryStepRow.canary_id == canary_id, CanaryStepRow.step_index == step_index
                )
            ).one()
            step.evaluations += 1
            step.last_decision = decision
            step.last_verdict = verdict.to_json()
            step.last_evaluated_at = at
            canary.error_breach_since = error_breach_since
            canary.updated_at = at
            if note is not None:
                _audit(session, canary, note, at)
            session.flush()
            return canary_step_info(step)

    def move_canary(
        self,
        canary_id: str,
        *,
        from_step: int,
        state: CanaryState,
        share: float,
        split_revision: int,
        step_outcome: str,
        note: AuditNote,
        to_step: int | None = None,
        at: datetime | None = None,
    ) -> CanaryInfo:
        """Move a running canary: end its current step with ``step_outcome``, start step
        ``to_step`` at ``share`` (when given), set its state and split revision, and audit
        it — one transaction, the canary row locked. A completed canary can still be
        moved to ``rolled_back`` (the old version is still deployed: rolling a finished
        rollout back is an operator's right).

        Raises:
            StorageError: unknown canary, already final (rolled back; or completed for any
                move but a rollback), or not at ``from_step`` (someone else moved it: the
                caller re-reads and decides again).
        """
        when = at or utc_now()
        with self._db.session() as session:
            canary = self._locked(
                session, canary_id, from_step, completed_ok=state is CanaryState.ROLLED_BACK
            )
            current = session.scalars(
                select(CanaryStepRow).where(
                    CanaryStepRow.canary_id == canary_id, CanaryStepRow.step_index == from_step
                )
            ).one()
            current.ended_at = when
            current.outcome = step_outcome
            if to_step is not None:
                session.add(
                    CanaryStepRow(
                        canary_id=canary_id,
                        step_index=to_step,
                        share=share,
                        started_at=when,
                        ended_at=None if state is CanaryState.RUNNING else when,
                        outcome=None if state is CanaryState.RUNNING else state.value,
                        evaluations=0,
                        last_decision=None,
                        last_verdict=None,
                        last_evaluated_at=None,
                    )
                )
                canary.step_index = to_step
                canary.step_started_at = when
            canary.state = state.value
            canary.candidate_share = share
            canary.split_revision = split_revision
            canary.error_breach_since = None
            canary.updated_at = when
            session.flush()
            _audit(session, canary, note, when)
            return canary_info(canary)

    def save_canary_observations(
        self,
        canary_id: str,
        observations: Iterable[CanaryObservation],
        *,
        ingest_state: Mapping[str, JsonValue] | None = None,
    ) -> int:
        """Store observations (insert-or-ignore per exchange) and, in the same transaction,
        how far the capture log was read. Returns the number of new observations.

        Raises:
            StorageError: unknown canary, or on database failure.
        """
        rows = [canary_observation_row(canary_id, o) for o in observations]
        with self._db.session() as session:
            canary = session.get(CanaryRow, canary_id)
            if canary is None:
                raise StorageError(f"unknown canary {canary_id!r}")
            written = (
                insert_ignore(session, CanaryObservationRow, rows, ["canary_id", "exchange_id"])
                if rows
                else 0
            )
            if ingest_state is not None:
                canary.ingest_state = dict(ingest_state)
            return written

    def canary_observations(
        self, canary_id: str, *, step_index: int | None = None
    ) -> list[CanaryObservation]:
        """Return the canary's observations (of one step when given), oldest first."""
        stmt = select(CanaryObservationRow).where(CanaryObservationRow.canary_id == canary_id)
        if step_index is not None:
            stmt = stmt.where(CanaryObservationRow.step_index == step_index)
        stmt = stmt.order_by(CanaryObservationRow.observed_at, CanaryObservationRow.id)
        with self._db.session() as session:
            return [canary_observation(row) for row in session.scalars(stmt)]

    def canary_sessions_before(self, canary_id: str, step_index: int) -> set[str]:
        """The session keys (hashes) observed in the canary's steps before ``step_index``
        (sessions a step inherits, pinned earlier, as opposed to those first seen in it)."""
        stmt = (
            select(CanaryObservationRow.session)
            .where(
                CanaryObservationRow.canary_id == canary_id,
                CanaryObservationRow.step_index < step_index,
                CanaryObservationRow.session.is_not(None),
            )
            .distinct()
        )
        with self._db.session() as session:
            return {str(key) for key in session.scalars(stmt)}

    def count_canary_observations(self, canary_id: str) -> dict[str, int]:
        """Observations per arm of the whole canary (``{"baseline": n, "candidate": m}``)."""
        stmt = (
            select(CanaryObservationRow.arm, func.count())
            .where(CanaryObservationRow.canary_id == canary_id)
            .group_by(CanaryObservationRow.arm)
        )
        with self._db.session() as session:
            return {str(arm): int(n) for arm, n in session.execute(stmt)}

    def save_canary_ratings(self, ratings: Iterable[CanaryRating]) -> int:
        """Store spot-check ratings, one per ``(canary_id, exchange_id, rater)`` (a repeat
        replaces). Returns the number written.

        Raises:
            StorageError: a rating names an exchange the canary never observed (the
                message names canary and exchange), or on database failure.
        """
        given = list(ratings)
        if not given:
            return 0
        with self._db.session() as session:
            for canary_id in {r.canary_id for r in given}:
                wanted = {r.exchange_id for r in given if r.canary_id == canary_id}
                seen = set(
                    session.scalars(
                        select(CanaryObservationRow.exchange_id).where(
                            CanaryObservationRow.canary_id == canary_id,
                            CanaryObservationRow.exchange_id.in_(sorted(wanted)),
                        )
                    )
                )
                missing = sorted(wanted - seen)
                if missing:
                    raise StorageError(
                        f"canary {canary_id!r} observed no exchange {missing[0]!r} "
                        f"({len(missing)} rating(s) name unobserved exchanges)"
                    )
            rows = [canary_rating_row(r) for r in given]
            return upsert(session, CanaryRatingRow, rows, ["canary_id", "exchange_id", "rater"])

    def canary_ratings(self, canary_id: str) -> list[CanaryRating]:
        """Return the canary's ratings, oldest first."""
        stmt = (
            select(CanaryRatingRow)
            .where(CanaryRatingRow.canary_id == canary_id)
            .order_by(CanaryRatingRow.rated_at, CanaryRatingRow.id)
        )
        with self._db.session() as session:
            return [canary_rating(row) for row in session.scalars(stmt)]
