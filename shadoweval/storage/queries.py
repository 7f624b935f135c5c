"""Read-side queries shared by the repository and read-only consumers (dashboard).

Functions here build ``SELECT`` statements or run them on a given session; they never
commit and never return ORM rows to callers outside :mod:`shadoweval.storage`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from shadoweval.records import Coverage, ReplayErrorKind, ReplayTarget
from shadoweval.storage.models import (
    ExchangeRow,
    PairScoreRow,
    RejectedRecordRow,
    ReplayOutcomeRow,
    RunExchangeRow,
)
from shadoweval.storage.types import RejectStage


def pair_inputs(
    run_id: str, *, only_unscored: bool, after: tuple[datetime, str] | None
) -> Select[*tuple[Any, ...]]:
    """Build the pair-input query: exchange, candidate and baseline-repeat records.

    Only exchanges with a candidate outcome that was *sent* are pairs: a skipped replay
    (never sent) is not, and lowers coverage instead.

    Result columns: ``exchange``, ``candidate``, ``baseline`` (JSON records, ``baseline``
    may be ``None``), ``captured_at``, ``exchange_id``; ordered by
    ``(captured_at, exchange_id)`` and starting strictly after ``after`` (keyset).
    """
    candidate = aliased(ReplayOutcomeRow, name="candidate_outcome")
    baseline = aliased(ReplayOutcomeRow, name="baseline_outcome")
    stmt = (
        select(
            ExchangeRow.record.label("exchange"),
            candidate.record.label("candidate"),
            baseline.record.label("baseline"),
            ExchangeRow.captured_at,
            ExchangeRow.exchange_id,
        )
        .join(
            candidate,
            and_(
                candidate.exchange_id == ExchangeRow.exchange_id,
                candidate.run_id == run_id,
                candidate.target == ReplayTarget.CANDIDATE.value,
                or_(
                    candidate.error_kind.is_(None),
                    candidate.error_kind != ReplayErrorKind.SKIPPED.value,
                ),
            ),
        )
        .outerjoin(
            baseline,
            and_(
                baseline.exchange_id == ExchangeRow.exchange_id,
                baseline.run_id == run_id,
                baseline.target == ReplayTarget.BASELINE_REPEAT.value,
            ),
        )
        .order_by(ExchangeRow.captured_at, ExchangeRow.exchange_id)
    )
    if only_unscored:
        scored = exists().where(
            PairScoreRow.run_id == run_id, PairScoreRow.exchange_id == ExchangeRow.exchange_id
        )
        stmt = stmt.where(~scored)
    if after is not None:
        captured_at, exchange_id = after
        stmt = stmt.where(
            or_(
                ExchangeRow.captured_at > captured_at,
                and_(ExchangeRow.captured_at == captured_at, ExchangeRow.exchange_id > exchange_id),
            )
        )
    return stmt


def coverage(session: Session, run_id: str) -> Coverage:
    """Count a run's members, undecodable log lines, candidate outcomes and pair scores."""
    per_task_type = {
        task_type: count
        for task_type, count in session.execute(
            select(ExchangeRow.task_type, func.count())
            .join(RunExchangeRow, RunExchangeRow.exchange_id == ExchangeRow.exchange_id)
            .where(RunExchangeRow.run_id == run_id)
            .group_by(ExchangeRow.task_type)
            .order_by(ExchangeRow.task_type)
        )
    }
    skipped = ReplayErrorKind.SKIPPED.value
    outcome_counts = session.execute(
        select(
            func.count(),
            func.count().filter(
                ReplayOutcomeRow.error_kind.is_not(None), ReplayOutcomeRow.error_kind != skipped
            ),
            func.count().filter(ReplayOutcomeRow.error_kind == skipped),
            func.count().filter(ReplayOutcomeRow.warmup.is_(True)),
        ).where(
            ReplayOutcomeRow.run_id == run_id,
            ReplayOutcomeRow.target == ReplayTarget.CANDIDATE.value,
        )
    ).one()
    replayed, errored, skipped_count, warmup = (int(v) for v in outcome_counts)
    paired = session.scalar(
        select(func.count()).select_from(PairScoreRow).where(PairScoreRow.run_id == run_id)
    )
    rejected = int(
        session.scalar(
            select(func.count())
            .select_from(RejectedRecordRow)
            .where(
                RejectedRecordRow.run_id == run_id,
                RejectedRecordRow.stage == RejectStage.CAPTURE_LOG.value,
            )
        )
        or 0
    )
    captured = sum(per_task_type.values()) + rejected
    paired_count = int(paired or 0)
    return Coverage(
        rejected=rejected,
        captured=captured,
        replayed=replayed,
        paired=paired_count,
        errored=errored,
        warmup=warmup,
        skipped=skipped_count,
        share=paired_count / captured if captured else 0.0,
        per_task_type=per_task_type,
    )
