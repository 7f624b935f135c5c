"""Pair judgements (LLM judge, reference checker, human) and the judge frozen with a run.

A judgement belongs to one scored pair (``pair_score (run_id, exchange_id)``, enforced by
a foreign key) and one :class:`~shadoweval.records.JudgementSource`; there is at most one
per ``(run_id, exchange_id, source)``. Writes (:meth:`JudgementStore.save_judgements`):

* source ``judge``: the first *successful* judgement of a pair wins; a failed one
  (``outcome`` ``None``, kept as data) is replaced by a later write, so a retry of the
  failed pairs fills them in, and a repeated ``judge run`` never overwrites a verdict;
* sources ``reference`` and ``human``: a write replaces (importing the same score files
  again gives the same rows; a corrected file replaces them).

The judge of a run is frozen by its first ``judge run`` (:meth:`JudgementStore.freeze_judge`),
like the gate policy: later runs must present the same
:class:`~shadoweval.records.JudgeIdentity` (endpoint, model, prompt hash, sampling), and
every use and refusal is appended to the run's ``policy_audit`` log (actions
``judge_frozen``, ``judge_used``, ``judge_refused``). Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby

import orjson
from pydantic import JsonValue
from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from shadoweval.errors import StorageError
from shadoweval.records import JudgeIdentity, JudgementSource, PairJudgement, utc_now
from shadoweval.storage import rows as rows_
from shadoweval.storage.audit import add_audit_row, audit_row
from shadoweval.storage.database import Database
from shadoweval.storage.models import (
    ExchangeRow,
    PairJudgementRow,
    PairScoreRow,
    RunJudgeRow,
    RunRow,
)
from shadoweval.storage.queries import check_scored_pairs
from shadoweval.storage.statements import insert_ignore, upsert
from shadoweval.storage.types import JudgeFreeze, PolicyAuditAction

__all__ = ["JudgementStore", "ScoredPairOrigin", "judge_identity_sha256"]


def judge_identity_sha256(identity: JudgeIdentity) -> str:
    """SHA-256 (hex) of the identity's canonical JSON (keys sorted): what a freeze compares."""
    canonical = orjson.dumps(identity.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class ScoredPairOrigin:
    """Where a scored pair's exchange came from: its task type and ``Exchange.source``
    (``"import:<file>#<row>"`` for a table import, ``None`` when unknown)."""

    exchange_id: str
    task_type: str
    source: str | None


class JudgementStore:
    """Write and read pair judgements and the run's frozen judge (a mixin of ``Repository``)."""

    _db: Database

    def save_judgements(self, judgements: Iterable[PairJudgement]) -> int:
        """Store judgements, one per ``(run_id, exchange_id, source)``.

        Source ``judge``: a stored successful judgement is kept (first success wins), a
        stored failed one is replaced. Other sources: a repeat replaces. All are written
        in one transaction, or none; within ``judgements`` a key given twice keeps its
        last occurrence. Returns the number of rows written (inserted or replaced).

        Raises:
            StorageError: a judgement names an exchange that has no pair score in its run
                (the message names run and exchange id), or a task type other than the
                pair's (names both); on database failure.
        """
        given = list(judgements)
        if not given:
            return 0
        ordered = sorted(given, key=lambda item: item.run_id)
        judge_rows = [
            rows_.judgement_row(item) for item in given if item.source is JudgementSource.JUDGE
        ]
        other_rows = [
            rows_.judgement_row(item) for item in given if item.source is not JudgementSource.JUDGE
        ]
        table: Table = PairJudgementRow.__table__  # type: ignore[assignment]
        key = ["run_id", "exchange_id", "source"]
        with self._db.session() as session:
            for run_id, group in groupby(ordered, key=lambda item: item.run_id):
                _check_pairs(session, run_id, list(group))
            written = 0
            if judge_rows:
                written += upsert(
                    session,
                    PairJudgementRow,
                    judge_rows,
                    key,
                    replace_where=table.c.outcome.is_(None),
                )
            if other_rows:
                written += upsert(session, PairJudgementRow, other_rows, key)
            return written

    def list_judgements(
        self, run_id: str, source: JudgementSource | str | None = None
    ) -> list[PairJudgement]:
        """Return the run's judgements (optionally of one source), oldest first.

        Ordered by ``judged_at``, then by when the row was first written. An unknown run
        has none.

        Raises:
            ValueError: ``source`` is not a :class:`JudgementSource`.
        """
        stmt = select(PairJudgementRow.record).where(PairJudgementRow.run_id == run_id)
        if source is not None:
            stmt = stmt.where(PairJudgementRow.source == JudgementSource(source).value)
        stmt = stmt.order_by(PairJudgementRow.judged_at, PairJudgementRow.id)
        with self._db.session() as session:
            records = list(session.scalars(stmt))
        return [PairJudgement.model_validate(record) for record in records]

    def run_judge(self, run_id: str) -> JudgeIdentity | None:
        """The judge frozen with ``run_id``, or ``None`` before its first ``judge run``."""
        with self._db.session() as session:
            row = session.get(RunJudgeRow, run_id)
            return None if row is None else JudgeIdentity.model_validate(row.judge)

    def freeze_judge(
        self,
        run_id: str,
        identity: JudgeIdentity,
        *,
        command: str,
        actor: str | None = None,
        detail: Mapping[str, JsonValue] | None = None,
    ) -> JudgeFreeze:
        """Present ``identity`` as the judge of ``run_id``: freeze it, accept it, or refuse it.

        The first call for a run stores the identity (audit ``judge_frozen``); a call with
        the same identity is audited ``judge_used``; one with another identity is audited
        ``judge_refused`` with both identities in ``detail`` (``run_judge``,
        ``presented_judge``) and returned with ``accepted`` false — the caller must then
        refuse to judge. The audit row is written in the same transaction as the freeze
        and is committed in every case (a refusal is recorded, not rolled back). Two
        concurrent first calls are safe: the first insert wins and the other is compared
        against it. ``policy_hash`` of the audit row is the run's policy hash (the judge
        is frozen with the run's policy); ``detail`` adds free JSON.

        Raises:
            StorageError: unknown run; on database failure.
        """
        digest = judge_identity_sha256(identity)
        presented = identity.model_dump(mode="json")
        with self._db.session() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                raise StorageError(f"unknown run {run_id!r}")
            frozen_now = insert_ignore(
                session,
                RunJudgeRow,
                [
                    {
                        "run_id": run_id,
                        "judge": presented,
                        "judge_sha256": digest,
                        "frozen_at": utc_now(),
                        "command": command,
                    }
                ],
                ["run_id"],
            )
            stored = session.execute(
                select(RunJudgeRow.judge, RunJudgeRow.judge_sha256).where(
                    RunJudgeRow.run_id == run_id
                )
            ).one()
            extra: dict[str, JsonValue] = {"judge": presented, "judge_sha256": digest}
            if frozen_now:
                action = PolicyAuditAction.JUDGE_FROZEN
            elif stored.judge_sha256 == digest:
                action = PolicyAuditAction.JUDGE_USED
            else:
                action = PolicyAuditAction.JUDGE_REFUSED
                extra = {
                    "run_judge": dict(stored.judge),
                    "run_judge_sha256": stored.judge_sha256,
                    "presented_judge": presented,
                    "presented_judge_sha256": digest,
                }
            extra |= dict(detail or {})
            audit_id = add_audit_row(
                session,
                audit_row(
                    run_id=run_id,
                    policy_hash=run.policy_hash,
                    action=action,
                    command=command,
                    actor=actor,
                    detail=extra,
                ),
            )
            frozen = JudgeIdentity.model_validate(stored.judge)
        return JudgeFreeze(
            run_id=run_id, frozen=frozen, presented=identity, action=action, audit_id=audit_id
        )

    def release_judge(
        self,
        run_id: str,
        identity: JudgeIdentity,
        *,
        command: str,
        reason: str,
        actor: str | None = None,
    ) -> bool:
        """Unfreeze the run's judge if it is ``identity`` and has judged nothing.

        A first ``judge run`` freezes its judge before the first call (so two concurrent
        runs cannot freeze two judges); when every call then fails (a wrong URL, model name
        or key) the judge gave no outcome, and keeping it frozen would refuse the corrected
        judge. The freeze is removed only while no judgement of source ``judge`` with an
        outcome exists for the run, in one transaction with the audit row
        (``judge_released``, ``detail["reason"]``).

        Returns:
            True when the freeze was removed; False when another judge is frozen or a
            judgement with an outcome exists (nothing is changed or audited).

        Raises:
            StorageError: unknown run; on database failure.
        """
        digest = judge_identity_sha256(identity)
        with self._db.session() as session:
            run = session.get(RunRow, run_id)
            if run is None:
                raise StorageError(f"unknown run {run_id!r}")
            frozen = session.get(RunJudgeRow, run_id)
            if frozen is None or frozen.judge_sha256 != digest:
                return False
            judged = session.scalar(
                select(PairJudgementRow.id)
                .where(
                    PairJudgementRow.run_id == run_id,
                    PairJudgementRow.source == JudgementSource.JUDGE.value,
                    PairJudgementRow.outcome.is_not(None),
                )
                .limit(1)
            )
            if judged is not None:
                return False
            session.delete(frozen)
            add_audit_row(
                session,
                audit_row(
                    run_id=run_id,
                    policy_hash=run.policy_hash,
                    action=PolicyAuditAction.JUDGE_RELEASED,
                    command=command,
                    actor=actor,
                    detail={"judge": identity.model_dump(mode="json"), "reason": reason},
                ),
            )
        return True

    def scored_pair_origins(self, run_id: str) -> list[ScoredPairOrigin]:
        """Every scored pair of ``run_id`` with its exchange's task type and ``source``.

        Ordered by ``exchange_id``; reads two plain columns, no JSON (for mapping pairs to
        an outside reference, e.g. BFCL items by the imported table row).
        """
        stmt = (
            select(PairScoreRow.exchange_id, PairScoreRow.task_type, ExchangeRow.source)
            .join(ExchangeRow, ExchangeRow.exchange_id == PairScoreRow.exchange_id)
            .where(PairScoreRow.run_id == run_id)
            .order_by(PairScoreRow.exchange_id)
        )
        with self._db.session() as session:
            return [
                ScoredPairOrigin(row.exchange_id, row.task_type, row.source)
                for row in session.execute(stmt)
            ]


def _check_pairs(session: Session, run_id: str, judgements: list[PairJudgement]) -> None:
    """Raise unless every judgement's exchange is a scored pair of ``run_id`` of its task type."""
    if judgements:
        check_scored_pairs(
            session,
            run_id,
            [(x.exchange_id, x.task_type) for x in judgements],
            f"a {judgements[0].source.value} judgement",
        )
