"""Read-side queries shared by the repository and read-only consumers (dashboard).

Functions here build ``SELECT`` statements or run them on a given session; they never
commit and never return ORM rows to callers outside :mod:`shadoweval.storage`.

Sample paging (:func:`sample_keys`) is keyset pagination over the
``(run_id, similarity, exchange_id, flags)`` and
``(run_id, task_type, similarity, exchange_id, flags)`` indexes of ``pair_score``: never
``OFFSET``, so a page deep into a run of hundreds of thousands of pairs costs what the
first page costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from shadoweval.errors import StorageError
from shadoweval.records import (
    Coverage,
    ReplayErrorKind,
    ReplayPass,
    ReplayTarget,
    RouteCoverage,
)
from shadoweval.routes import normalize_route
from shadoweval.storage.models import (
    RESCORE_SCORED_AT,
    ExchangeRow,
    HumanLabelRow,
    PairScoreRow,
    RejectedRecordRow,
    ReplayOutcomeRow,
    RunExchangeRow,
    RunRow,
)
from shadoweval.storage.types import CONFLICTING_DUPLICATE, RejectStage


def pair_inputs(
    run_id: str,
    *,
    only_unscored: bool,
    after: tuple[datetime, str] | None,
    exchange_ids: tuple[str, str] | None = None,
    id_list: Sequence[str] | None = None,
) -> Select[*tuple[Any, ...]]:
    """Build the pair-input query: exchange, candidate and baseline-repeat records.

    Only exchanges with a candidate outcome that was *sent* are pairs: a skipped replay
    (never sent) is not, and lowers coverage instead.

    Result columns: ``exchange``, ``candidate``, ``baseline`` (JSON records, ``baseline``
    may be ``None``), ``captured_at``, ``exchange_id``; ordered by
    ``(captured_at, exchange_id)`` and starting strictly after ``after`` (keyset); with
    ``exchange_ids`` ``(first, last)`` only exchange ids in that inclusive range (in the
    database's own string order); with ``id_list`` only those exchange ids. With
    ``only_unscored`` a pair whose score is marked for rescoring
    (:data:`~shadoweval.storage.models.RESCORE_SCORED_AT`) counts as unscored.
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
            _outcome_of(
                candidate,
                ExchangeRow.exchange_id,
                run_id,
                ReplayTarget.CANDIDATE,
                or_(
                    candidate.error_kind.is_(None),
                    candidate.error_kind != ReplayErrorKind.SKIPPED.value,
                ),
            ),
        )
        .outerjoin(
            baseline,
            _outcome_of(baseline, ExchangeRow.exchange_id, run_id, ReplayTarget.BASELINE_REPEAT),
        )
        .order_by(ExchangeRow.captured_at, ExchangeRow.exchange_id)
    )
    if only_unscored:  # a score marked for rescoring (a replaced outcome) is not one
        scored = exists().where(
            PairScoreRow.run_id == run_id,
            PairScoreRow.exchange_id == ExchangeRow.exchange_id,
            PairScoreRow.scored_at != RESCORE_SCORED_AT,
        )
        stmt = stmt.where(~scored)
    if exchange_ids is not None:
        stmt = stmt.where(ExchangeRow.exchange_id.between(*exchange_ids))
    if id_list is not None:
        stmt = stmt.where(ExchangeRow.exchange_id.in_(list(id_list)))
    if after is not None:
        captured_at, exchange_id = after
        stmt = stmt.where(
            or_(
                ExchangeRow.captured_at > captured_at,
                and_(ExchangeRow.captured_at == captured_at, ExchangeRow.exchange_id > exchange_id),
            )
        )
    return stmt


def _outcome_of(
    outcome: type[ReplayOutcomeRow],
    exchange_id: InstrumentedAttribute[str],
    run_id: str,
    target: ReplayTarget,
    *also: ColumnElement[bool],
) -> ColumnElement[bool]:
    """The condition that joins ``outcome`` (an alias of the outcome table) to the exchange
    whose id is ``exchange_id``: that exchange's outcome for ``target`` in run ``run_id``,
    and ``also``."""
    return and_(
        outcome.exchange_id == exchange_id,
        outcome.run_id == run_id,
        outcome.target == target.value,
        *also,
    )


def baseline_model_name() -> ColumnElement[str]:
    """The baseline (live) model name an exchange recorded (``record.baseline_model.name``)."""
    name: ColumnElement[str] = ExchangeRow.record["baseline_model"]["name"].as_string()
    return name


def baseline_model_scope(
    column: Any, run_id: str, baseline_model: str | None
) -> tuple[ColumnElement[bool], ...]:
    """``column IN`` the run's members of ``baseline_model`` (nothing when ``None``)."""
    if baseline_model is None:
        return ()
    members = (
        select(RunExchangeRow.exchange_id)
        .join(ExchangeRow, ExchangeRow.exchange_id == RunExchangeRow.exchange_id)
        .where(RunExchangeRow.run_id == run_id, baseline_model_name() == baseline_model)
    )
    return (column.in_(members),)


def baseline_model_counts(session: Session, run_id: str) -> dict[str, int]:
    """The run's members by the baseline model name their exchange recorded, by name."""
    # Grouped in an outer query: PostgreSQL does not match a JSON path in GROUP BY to the
    # same path in the select list when each binds its own parameters.
    names = (
        select(baseline_model_name().label("name"))
        .join(RunExchangeRow, RunExchangeRow.exchange_id == ExchangeRow.exchange_id)
        .where(RunExchangeRow.run_id == run_id)
        .subquery()
    )
    return {
        str(name): int(count)
        for name, count in session.execute(
            select(names.c.name, func.count()).group_by(names.c.name).order_by(names.c.name)
        )
    }


def capture_log_rejections(session: Session, run_id: str) -> tuple[int, int]:
    """Lines of the run's capture log that were rejected (stage ``capture_log``), and how
    many of them were conflicting duplicates (same exchange id, other content)."""
    is_log_line = and_(
        RejectedRecordRow.run_id == run_id,
        RejectedRecordRow.stage == RejectStage.CAPTURE_LOG.value,
    )
    rejected, conflicting = session.execute(
        select(
            func.count(),
            func.count().filter(RejectedRecordRow.reason == CONFLICTING_DUPLICATE),
        ).where(is_log_line)
    ).one()
    return int(rejected or 0), int(conflicting or 0)


def coverage(session: Session, run_id: str, *, baseline_model: str | None = None) -> Coverage:
    """Count a run's members, undecodable log lines, replay outcomes and pair scores.

    ``replayed``, ``errored``, ``skipped`` and ``warmup`` count candidate outcomes;
    ``baseline_repeat_replayed`` counts baseline-repeat outcomes that were sent (not
    ``skipped``) and ``baseline_repeat_errored`` those with another error kind.
    ``baseline_model``: count only the members whose exchange recorded that baseline model
    (the policy's choice when the live model changed while capturing);
    ``per_baseline_model`` always counts all members.
    """
    per_task_type = {
        task_type: count
        for task_type, count in session.execute(
            select(ExchangeRow.task_type, func.count())
            .join(RunExchangeRow, RunExchangeRow.exchange_id == ExchangeRow.exchange_id)
            .where(
                RunExchangeRow.run_id == run_id,
                *baseline_model_scope(ExchangeRow.exchange_id, run_id, baseline_model),
            )
            .group_by(ExchangeRow.task_type)
            .order_by(ExchangeRow.task_type)
        )
    }
    skipped = ReplayErrorKind.SKIPPED.value
    is_candidate = ReplayOutcomeRow.target == ReplayTarget.CANDIDATE.value
    is_repeat = ReplayOutcomeRow.target == ReplayTarget.BASELINE_REPEAT.value
    was_sent = or_(ReplayOutcomeRow.error_kind.is_(None), ReplayOutcomeRow.error_kind != skipped)
    has_error = and_(
        ReplayOutcomeRow.error_kind.is_not(None), ReplayOutcomeRow.error_kind != skipped
    )
    outcome_counts = session.execute(
        select(
            func.count().filter(is_candidate),
            func.count().filter(is_candidate, has_error),
            func.count().filter(is_candidate, ReplayOutcomeRow.error_kind == skipped),
            func.count().filter(is_candidate, ReplayOutcomeRow.warmup.is_(True)),
            func.count().filter(is_repeat, was_sent),
            func.count().filter(is_repeat, has_error),
        ).where(
            ReplayOutcomeRow.run_id == run_id,
            *baseline_model_scope(ReplayOutcomeRow.exchange_id, run_id, baseline_model),
        )
    ).one()
    replayed, errored, skipped_count, warmup, repeat_replayed, repeat_errored = (
        int(v) for v in outcome_counts
    )
    paired = session.scalar(
        select(func.count())
        .select_from(PairScoreRow)
        .where(
            PairScoreRow.run_id == run_id,
            *baseline_model_scope(PairScoreRow.exchange_id, run_id, baseline_model),
        )
    )
    rejected, conflicting = capture_log_rejections(session, run_id)
    captured = sum(per_task_type.values()) + rejected
    paired_count = int(paired or 0)
    paired_per_task_type = {
        str(task_type): int(count)
        for task_type, count in session.execute(
            select(PairScoreRow.task_type, func.count())
            .where(
                PairScoreRow.run_id == run_id,
                *baseline_model_scope(PairScoreRow.exchange_id, run_id, baseline_model),
            )
            .group_by(PairScoreRow.task_type)
            .order_by(PairScoreRow.task_type)
        )
    }
    return Coverage(
        rejected=rejected,
        conflicting_duplicates=conflicting,
        captured=captured,
        replayed=replayed,
        paired=paired_count,
        errored=errored,
        warmup=warmup,
        skipped=skipped_count,
        share=paired_count / captured if captured else 0.0,
        per_task_type=per_task_type,
        baseline_repeat_replayed=repeat_replayed,
        baseline_repeat_errored=repeat_errored,
        per_route=route_coverage(session, run_id, baseline_model=baseline_model),
        paired_per_task_type=paired_per_task_type,
        replay_passes=replay_passes(session, run_id),
        per_baseline_model=baseline_model_counts(session, run_id),
    )


def skip_reason_code(detail: str | None) -> str:
    """What groups skip details: the text before the first ``": "`` (``size``,
    ``route not replayable``, ``offload_unavailable``…), the whole detail without one."""
    text = detail or "skipped"
    return text.split(": ", 1)[0]


def route_coverage(
    session: Session, run_id: str, *, baseline_model: str | None = None
) -> dict[str, RouteCoverage]:
    """:class:`~shadoweval.records.RouteCoverage` of each route of the run's members (of
    ``baseline_model``'s exchanges only, when given).

    Routes are named without a trailing slash (:func:`shadoweval.routes.normalize_route`).
    Skip details are grouped by :func:`skip_reason_code`; each group is named by its most
    frequent detail (so the reason says, e.g., ``route not replayable: /v1/responses
    (…)``).
    """
    skipped = ReplayErrorKind.SKIPPED.value
    candidate = aliased(ReplayOutcomeRow, name="route_candidate")
    scored = aliased(PairScoreRow, name="route_scored")
    rows = session.execute(
        select(
            ExchangeRow.route,
            func.count(),
            func.count(candidate.id).filter(
                or_(candidate.error_kind.is_(None), candidate.error_kind != skipped)
            ),
            func.count(candidate.id).filter(candidate.error_kind == skipped),
            func.count(scored.id),
        )
        .select_from(RunExchangeRow)
        .join(ExchangeRow, ExchangeRow.exchange_id == RunExchangeRow.exchange_id)
        .outerjoin(
            candidate,
            _outcome_of(candidate, RunExchangeRow.exchange_id, run_id, ReplayTarget.CANDIDATE),
        )
        .outerjoin(
            scored,
            and_(scored.exchange_id == RunExchangeRow.exchange_id, scored.run_id == run_id),
        )
        .where(
            RunExchangeRow.run_id == run_id,
            *baseline_model_scope(RunExchangeRow.exchange_id, run_id, baseline_model),
        )
        .group_by(ExchangeRow.route)
    ).all()
    counts: dict[str, list[int]] = {}
    for route, captured, replayed, skip_count, paired in rows:
        total = counts.setdefault(normalize_route(str(route)), [0, 0, 0, 0])
        for i, value in enumerate((captured, replayed, skip_count, paired)):
            total[i] += int(value)
    details: dict[str, dict[str, Counter[str]]] = {}
    detail_column = candidate.record["error_detail"].as_string()
    for route, detail, count in session.execute(
        select(ExchangeRow.route, detail_column, func.count())
        .select_from(candidate)
        .join(ExchangeRow, ExchangeRow.exchange_id == candidate.exchange_id)
        .where(
            candidate.run_id == run_id,
            candidate.target == ReplayTarget.CANDIDATE.value,
            candidate.error_kind == skipped,
            *baseline_model_scope(candidate.exchange_id, run_id, baseline_model),
        )
        .group_by(ExchangeRow.route, detail_column)
    ):
        by_code = details.setdefault(normalize_route(str(route)), {})
        by_code.setdefault(skip_reason_code(detail), Counter())[detail or "skipped"] += int(count)
    result: dict[str, RouteCoverage] = {}
    for route in sorted(counts):
        captured, replayed, skip_count, paired = counts[route]
        reasons = {
            group.most_common(1)[0][0]: sum(group.values())
            for group in details.get(route, {}).values()
        }
        result[route] = RouteCoverage(
            captured=captured,
            replayed=replayed,
            skipped=skip_count,
            paired=paired,
            skip_reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        )
    return result


REPLAY_PASSES_KEY = "replay_passes"
"""Key of a run's ``settings`` under which its replay passes are kept
(:meth:`~shadoweval.storage.Repository.record_replay_pass`)."""


def replay_passes(session: Session, run_id: str) -> tuple[ReplayPass, ...]:
    """The run's recorded replay passes, oldest first (a stored pass that no longer
    validates is left out)."""
    settings = session.scalar(select(RunRow.settings).where(RunRow.run_id == run_id)) or {}
    stored = settings.get(REPLAY_PASSES_KEY) if isinstance(settings, dict) else None
    passes: list[ReplayPass] = []
    for item in stored if isinstance(stored, list) else ():
        try:
            passes.append(ReplayPass.model_validate(item))
        except ValidationError:
            continue
    return tuple(passes)


# ------------------------------------------------------------------ samples


def sample_conditions(
    run_id: str,
    *,
    task_types: Sequence[str],
    flags_mask: int,
    min_similarity: float | None,
    max_similarity: float | None,
) -> list[ColumnElement[bool]]:
    """``WHERE`` terms of a sample filter on ``pair_score``.

    One task type is an equality, several an ``IN``; flags match when the pair has all of
    them (``(flags & mask) = mask``, the same on SQLite and PostgreSQL); the similarity
    bounds are inclusive and exclude pairs without similarity.
    """
    terms: list[ColumnElement[bool]] = [PairScoreRow.run_id == run_id]
    if len(task_types) == 1:
        terms.append(PairScoreRow.task_type == task_types[0])
    elif task_types:
        terms.append(PairScoreRow.task_type.in_(list(task_types)))
    if flags_mask:
        terms.append(PairScoreRow.flags.op("&")(flags_mask) == flags_mask)
    if min_similarity is not None:
        terms.append(PairScoreRow.similarity >= min_similarity)
    if max_similarity is not None:
        terms.append(PairScoreRow.similarity <= max_similarity)
    return terms


def sample_keys(
    conditions: Sequence[ColumnElement[bool]],
    *,
    with_similarity: bool,
    after: tuple[float | None, str] | None,
) -> Select[*tuple[Any, ...]]:
    """Keys of matching pairs of one paging phase, in page order (add ``.limit``).

    ``with_similarity=False`` is the first phase (pairs whose similarity is NULL, by
    ``exchange_id``); ``True`` the second (by ``similarity, exchange_id``). ``after`` is
    the keyset position inside that phase: the results start strictly after it. The
    similarity bound is written ``similarity >= s AND (similarity > s OR exchange_id > e)``
    so both SQLite and PostgreSQL use it as an index range.

    Result columns: ``id``, ``exchange_id``, ``task_type``, ``captured_at``,
    ``similarity``, ``flags``.
    """
    stmt = select(
        PairScoreRow.id,
        PairScoreRow.exchange_id,
        PairScoreRow.task_type,
        PairScoreRow.captured_at,
        PairScoreRow.similarity,
        PairScoreRow.flags,
    ).where(*conditions)
    if not with_similarity:
        stmt = stmt.where(PairScoreRow.similarity.is_(None))
        if after is not None:
            stmt = stmt.where(PairScoreRow.exchange_id > after[1])
        return stmt.order_by(PairScoreRow.exchange_id)
    stmt = stmt.where(PairScoreRow.similarity.is_not(None))
    if after is not None and after[0] is not None:
        similarity, exchange_id = after
        stmt = stmt.where(
            PairScoreRow.similarity >= similarity,
            or_(PairScoreRow.similarity > similarity, PairScoreRow.exchange_id > exchange_id),
        )
    return stmt.order_by(PairScoreRow.similarity, PairScoreRow.exchange_id)


def sample_count(conditions: Sequence[ColumnElement[bool]]) -> Select[int]:
    """``SELECT count(*)`` of the pairs matching ``conditions``."""
    return select(func.count()).select_from(PairScoreRow).where(*conditions)


def sample_records(run_id: str, exchange_ids: Sequence[str]) -> Select[*tuple[Any, ...]]:
    """JSON records of the given pairs of a run.

    Result columns: ``exchange_id``, ``similarity``, ``flags``, ``score`` (the PairScore
    record), ``exchange`` (the Exchange record), ``candidate`` (the candidate
    ReplayOutcome record, ``None`` when there is none).

    The id list is repeated on every joined table so each is read through its own index
    whatever the planner's row estimates (with stale statistics PostgreSQL otherwise
    hashes every outcome of the run).
    """
    candidate = aliased(ReplayOutcomeRow, name="candidate_outcome")
    ids = list(exchange_ids)
    return (
        select(
            PairScoreRow.exchange_id,
            PairScoreRow.similarity,
            PairScoreRow.flags,
            PairScoreRow.record.label("score"),
            ExchangeRow.record.label("exchange"),
            candidate.record.label("candidate"),
        )
        .join(
            ExchangeRow,
            and_(
                ExchangeRow.exchange_id == PairScoreRow.exchange_id,
                ExchangeRow.exchange_id.in_(ids),
            ),
        )
        .outerjoin(
            candidate,
            and_(
                candidate.run_id == run_id,
                candidate.exchange_id == PairScoreRow.exchange_id,
                candidate.exchange_id.in_(ids),
                candidate.target == ReplayTarget.CANDIDATE.value,
            ),
        )
        .where(PairScoreRow.run_id == run_id, PairScoreRow.exchange_id.in_(ids))
    )


def latest_labels(run_id: str, exchange_ids: Sequence[str] | None) -> Select[HumanLabelRow]:
    """Labels of a run (of the given pairs when ``exchange_ids`` is not ``None``), newest first.

    Newest is by ``labelled_at`` then ``id``; the first row per ``exchange_id`` is that
    pair's latest label, whoever gave it.
    """
    where = true() if exchange_ids is None else HumanLabelRow.exchange_id.in_(list(exchange_ids))
    return (
        select(HumanLabelRow)
        .where(HumanLabelRow.run_id == run_id, where)
        .order_by(HumanLabelRow.labelled_at.desc(), HumanLabelRow.id.desc())
    )


_IN_CHUNK = 500
"""Exchange ids per ``IN (...)`` list (well below SQLite's bound-parameter limit)."""


def check_scored_pairs(
    session: Session, run_id: str, items: Sequence[tuple[str, str]], what: str
) -> None:
    """Raise unless every ``(exchange_id, task_type)`` of ``items`` is a scored pair of
    ``run_id`` with that task type (labels and judgements refer to pair scores).

    ``what`` names the record in the message (``"a label"``, ``"a judge judgement"``).

    Raises:
        StorageError: an exchange without a pair score in the run, or a task type that is
            not the pair's; the message names the exchange, the run and both task types.
    """
    wanted = sorted({exchange_id for exchange_id, _ in items})
    task_types: dict[str, str] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        stmt = select(PairScoreRow.exchange_id, PairScoreRow.task_type).where(
            PairScoreRow.run_id == run_id, PairScoreRow.exchange_id.in_(chunk)
        )
        task_types.update({row.exchange_id: row.task_type for row in session.execute(stmt)})
    for exchange_id, task_type in items:
        stored = task_types.get(exchange_id)
        if stored is None:
            raise StorageError(
                f"cannot store {what} of exchange {exchange_id!r} in run {run_id!r}: it has "
                "no pair score in that run"
            )
        if stored != task_type:
            raise StorageError(
                f"{what} of exchange {exchange_id!r} in run {run_id!r} has task_type "
                f"{task_type!r}, but the pair's task type is {stored!r}"
            )
