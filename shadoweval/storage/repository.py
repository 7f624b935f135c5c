"""Typed access to the shadow-eval database: records in, records out.

:class:`Repository` is the only API other packages use to read and write results. Every
method takes or returns :mod:`shadoweval.records` models (or the storage value types of
:mod:`shadoweval.storage.types`), never ORM rows, and runs in one transaction. Batch
writes are chunked multi-row ``INSERT`` statements.

Idempotence (DESIGN §6: consumers commit after persisting, so every write may be
repeated):

* exchanges: insert-or-ignore on ``exchange_id``;
* replay outcomes: insert-or-ignore on ``(run_id, exchange_id, target)``; the first write
  wins and a repeat is counted as a duplicate;
* pair scores: upsert on ``(run_id, exchange_id)``; rescoring replaces;
* human labels: upsert on ``(run_id, exchange_id, labeller)``; relabelling replaces;
* cached embeddings: insert-or-ignore on ``(cache_key, text_sha256)``; the first wins;
* pair judgements: one per ``(run_id, exchange_id, source)``; a judge's first successful
  judgement wins (a failed one is replaced), reference and human ones replace.

Errors: every database failure raises :class:`~shadoweval.errors.StorageError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from pydantic import JsonValue
from sqlalchemy import select
from sqlalchemy.orm import Session
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from shadoweval.errors import StorageError
from shadoweval.pair_facts import (
    PAIR_FACTS_BYTES,
    PAIR_FACTS_LAYOUT,
    PairFacts,
    pack_pair_facts,
    uncovered_scripts,
    unpack_pair_facts,
)
from shadoweval.records import (
    STORED,
    Coverage,
    Exchange,
    ModelIdentity,
    PairScore,
    ReplayOutcome,
    ReplayPass,
    ReplayTarget,
    new_exchange_id,
    utc_now,
)
from shadoweval.storage import queries
from shadoweval.storage import rows as rows_
from shadoweval.storage.audit import PolicyAuditLog, add_audit_row, audit_row
from shadoweval.storage.canary import CanaryStore
from shadoweval.storage.database import describe_error
from shadoweval.storage.embeddings import EmbeddingStore
from shadoweval.storage.history import HistoryStore
from shadoweval.storage.judgements import JudgementStore
from shadoweval.storage.labels import LabelStore
from shadoweval.storage.models import (
    ExchangeRow,
    PairScoreRow,
    ReplayOutcomeRow,
    RunExchangeRow,
    RunRow,
)
from shadoweval.storage.samples import SampleStore
from shadoweval.storage.statements import insert_ignore, upsert
from shadoweval.storage.types import PolicyAuditAction, RunInfo, RunStatus

logger = logging.getLogger(__name__)

MAX_REPLAY_PASSES = 200
"""Replay passes kept per run (the latest; a long-lived Kafka deployment restarts workers)."""

PairInput = tuple[Exchange, ReplayOutcome, ReplayOutcome | None]
"""(captured exchange, candidate outcome, baseline-repeat outcome if any)."""

PAIR_ID_CHUNK = 500
"""Exchange ids per ``IN (...)`` read of :meth:`Repository.pair_inputs_for`."""


def _pair_input(row: Any) -> PairInput:
    """One row of :func:`queries.pair_inputs` as a :data:`PairInput`."""
    return (
        Exchange.model_validate(row.exchange, context=STORED),
        ReplayOutcome.model_validate(row.candidate, context=STORED),
        None
        if row.baseline is None
        else ReplayOutcome.model_validate(row.baseline, context=STORED),
    )


_STALE_CHUNK_ROWS = 1000
"""Records read per query for rows without current facts (bind-parameter limits)."""


def _current(packed: bytes) -> bool:
    """True when ``packed`` is a facts row of the current layout."""
    return len(packed) == PAIR_FACTS_BYTES and packed[0] == PAIR_FACTS_LAYOUT


def _driver_rows(session: Session, stmt: ClauseElement) -> list[tuple[Any, ...]]:
    """``stmt``'s rows as the driver's tuples (no SQLAlchemy row objects or processors).

    At 200,000 rows SQLAlchemy's result rows cost more than the query; the statement is
    compiled for the session's dialect (its paramstyle) and run on the DBAPI cursor.
    Only for columns whose driver values are already the Python values wanted (text,
    integers, bytes).

    Raises:
        StorageError: the driver's error, described.
    """
    connection = session.connection()
    compiled = cast(
        SQLCompiler,
        stmt.compile(dialect=connection.dialect, compile_kwargs={"render_postcompile": True}),
    )
    dbapi = connection.connection.dbapi_connection
    if dbapi is None:  # pragma: no cover - a connection just checked out has one
        raise StorageError("the database connection was closed")
    driver_error = connection.dialect.loaded_dbapi.Error
    # psycopg: the binary protocol sends bytea as bytes, not as hex text to decode
    cursor = (
        dbapi.cursor(binary=True) if connection.dialect.name == "postgresql" else dbapi.cursor()
    )
    try:
        params = compiled.params
        if compiled.positional:  # SQLite's qmark style
            cursor.execute(str(compiled), [params[name] for name in compiled.positiontup or ()])
        else:
            cursor.execute(str(compiled), params)
        return list(cursor.fetchall())
    except driver_error as exc:
        raise StorageError(f"reading pair facts failed: {describe_error(exc)}") from exc
    finally:
        cursor.close()


class Repository(
    HistoryStore,
    PolicyAuditLog,
    SampleStore,
    LabelStore,
    JudgementStore,
    EmbeddingStore,
    CanaryStore,
):
    """Records in, records out, over one :class:`~shadoweval.storage.database.Database`.

    The database must already be at the head revision (``db.upgrade()`` or
    ``shadow-eval db upgrade``); the repository never creates tables. Verdict and
    rejected-record methods come from :class:`~shadoweval.storage.history.HistoryStore`,
    the policy audit log from :class:`~shadoweval.storage.audit.PolicyAuditLog`, sample
    paging (``sample_page``, ``count_samples``, ``sample_ids``, ``samples_by_ids``,
    ``task_types``) from :class:`~shadoweval.storage.samples.SampleStore` and human labels
    (``save_labels``, ``load_labels``) from :class:`~shadoweval.storage.labels.LabelStore`;
    pair judgements and the run's frozen judge (``save_judgements``, ``list_judgements``,
    ``freeze_judge``, ``run_judge``, ``scored_pair_origins``) from
    :class:`~shadoweval.storage.judgements.JudgementStore`; the embedding cache
    (``lookup_embeddings``, ``save_embeddings``, ``count_embeddings``) from
    :class:`~shadoweval.storage.embeddings.EmbeddingStore`.
    """

    # ------------------------------------------------------------------- runs

    def create_run(
        self,
        *,
        name: str,
        baseline: ModelIdentity,
        candidate: ModelIdentity,
        policy_hash: str,
        policy_yaml: str,
        candidate_base_url: str | None = None,
        source: str | None = None,
        settings: Mapping[str, JsonValue] | None = None,
        run_id: str | None = None,
        created_at: datetime | None = None,
        command: str = "create_run",
        actor: str | None = None,
        audit_detail: Mapping[str, JsonValue] | None = None,
    ) -> RunInfo:
        """Create a run in status ``open``; ``run_id`` defaults to a new ULID.

        The policy is frozen into the run, and a ``created`` row is added to its policy
        audit log in the same transaction (``command``: what created it, e.g.
        ``"shadow-eval evaluate"``; ``actor``: the OS user by default; ``audit_detail``:
        free JSON such as the policy file path). So every run has its creation audited.

        Raises:
            StorageError: a run with this ``run_id`` already exists.
        """
        row = RunRow(
            run_id=run_id or new_exchange_id(),
            name=name,
            created_at=created_at or utc_now(),
            baseline_model=baseline.model_dump(mode="json"),
            candidate_model=candidate.model_dump(mode="json"),
            candidate_base_url=candidate_base_url,
            policy_hash=policy_hash,
            policy_yaml=policy_yaml,
            source=source,
            status=RunStatus.OPEN.value,
            settings=dict(settings or {}),
        )
        with self._db.session() as session:
            if session.get(RunRow, row.run_id) is not None:
                raise StorageError(f"run {row.run_id!r} already exists")
            session.add(row)
            session.flush()
            audit = audit_row(
                run_id=row.run_id,
                policy_hash=policy_hash,
                action=PolicyAuditAction.CREATED,
                command=command,
                actor=actor,
                detail=audit_detail,
                recorded_at=row.created_at,
            )
            add_audit_row(session, audit)
        logger.info("created run %s (%s)", row.run_id, name)
        return rows_.run_info(row)

    def get_run(self, run_id: str) -> RunInfo | None:
        """Return the run, or ``None`` when there is no such run."""
        with self._db.session() as session:
            row = session.get(RunRow, run_id)
            return None if row is None else rows_.run_info(row)

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int | None = None
    ) -> list[RunInfo]:
        """Return runs, newest first, optionally only those in ``status``."""
        stmt = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.run_id.desc())
        if status is not None:
            stmt = stmt.where(RunRow.status == status.value)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._db.session() as session:
            return [rows_.run_info(row) for row in session.scalars(stmt)]

    def set_run_status(self, run_id: str, status: RunStatus) -> RunInfo:
        """Set a run's status and return the updated run.

        Setting the status a run already has is a no-op.

        Raises:
            StorageError: unknown run, or the run is in a terminal status
                (promoted, rolled_back, aborted) and ``status`` differs.
        """
        with self._db.session() as session:
            row = session.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise StorageError(f"unknown run {run_id!r}")
            current = RunStatus(row.status)
            if current is not status:
                if current.terminal:
                    raise StorageError(
                        f"run {run_id!r} is {current.value}, a terminal status; "
                        f"it cannot become {status.value}"
                    )
                row.status = status.value
                logger.info("run %s: %s -> %s", run_id, current.value, status.value)
            return rows_.run_info(row)

    # -------------------------------------------------------------- exchanges

    def save_exchanges(self, run_id: str | None, exchanges: Iterable[Exchange]) -> int:
        """Store exchanges (insert-or-ignore on ``exchange_id``).

        When ``run_id`` is given, every exchange (new or already stored) also becomes a
        member of that run's population. Returns the number of exchanges newly stored.

        Raises:
            StorageError: e.g. ``run_id`` names no run.
        """
        rows = [rows_.exchange_row(ex) for ex in exchanges]
        if not rows:
            return 0
        with self._db.session() as session:
            inserted = insert_ignore(session, ExchangeRow, rows, ["exchange_id"])
            if run_id is not None:
                members = [{"run_id": run_id, "exchange_id": r["exchange_id"]} for r in rows]
                insert_ignore(session, RunExchangeRow, members, ["run_id", "exchange_id"])
        if inserted < len(rows):
            logger.debug("save_exchanges: %d of %d already stored", len(rows) - inserted, len(rows))
        return inserted

    def conflicting_exchanges(self, exchanges: Iterable[Exchange]) -> dict[str, str]:
        """Exchanges whose id is already stored with *different* content.

        Exchanges are insert-or-ignore on ``exchange_id`` (first write wins), so a log line
        that reuses an id with other content would otherwise be silently replaced by the
        stored one. Returns ``{exchange_id: reason}`` for each such exchange; identical
        re-deliveries (at-least-once) are not conflicts. The comparison is on the stored
        form (on PostgreSQL U+0000 is stored as U+FFFD).
        """
        wanted = {ex.exchange_id: ex for ex in exchanges}
        if not wanted:
            return {}
        with self._db.session() as session:
            stored = session.execute(
                select(ExchangeRow.exchange_id, ExchangeRow.record).where(
                    ExchangeRow.exchange_id.in_(list(wanted))
                )
            ).all()
        conflicts: dict[str, str] = {}
        for exchange_id, record in stored:
            given = rows_.nul_safe(wanted[exchange_id].model_dump(mode="json"))
            if rows_.nul_safe(record) != given:
                conflicts[exchange_id] = (
                    f"exchange_id {exchange_id} is already stored with different content; "
                    "the stored exchange is kept (first write wins)"
                )
        return conflicts

    def get_exchange(self, exchange_id: str) -> Exchange | None:
        """Return one stored exchange, or ``None``."""
        with self._db.session() as session:
            row = session.get(ExchangeRow, exchange_id)
            return None if row is None else Exchange.model_validate(row.record, context=STORED)

    # --------------------------------------------------------------- outcomes

    def save_outcomes(self, outcomes: Iterable[ReplayOutcome]) -> int:
        """Store replay outcomes, idempotent on ``(run_id, exchange_id, target)``.

        The first write of a key wins; later writes of the same key are ignored and
        counted as duplicates (logged). Returns the number of outcomes newly stored.

        Raises:
            StorageError: e.g. an outcome names an unknown run or exchange.
        """
        rows = [rows_.outcome_row(o) for o in outcomes]
        if not rows:
            return 0
        with self._db.session() as session:
            inserted = insert_ignore(
                session, ReplayOutcomeRow, rows, ["run_id", "exchange_id", "target"]
            )
        duplicates = len(rows) - inserted
        if duplicates:
            logger.info(
                "save_outcomes: %d duplicate outcome(s) ignored (first write wins)", duplicates
            )
        return inserted

    def completed_exchange_ids(self, run_id: str, target: ReplayTarget) -> set[str]:
        """Return ids of exchanges that already have an outcome (any, errors included)."""
        stmt = select(ReplayOutcomeRow.exchange_id).where(
            ReplayOutcomeRow.run_id == run_id, ReplayOutcomeRow.target == target.value
        )
        with self._db.session() as session:
            return set(session.scalars(stmt))

    def load_outcomes(self, run_id: str, target: ReplayTarget | None = None) -> list[ReplayOutcome]:
        """Return a run's outcomes (optionally for one target), in insertion order."""
        stmt = select(ReplayOutcomeRow.record).where(ReplayOutcomeRow.run_id == run_id)
        if target is not None:
            stmt = stmt.where(ReplayOutcomeRow.target == target.value)
        with self._db.session() as session:
            records = list(session.scalars(stmt.order_by(ReplayOutcomeRow.id)))
        return [ReplayOutcome.model_validate(r, context=STORED) for r in records]

    # ------------------------------------------------------------ pair scores

    def save_pair_scores(self, scores: Iterable[PairScore]) -> int:
        """Upsert pair scores on ``(run_id, exchange_id)``: rescoring replaces.

        Each row's ``flags`` column is the bitmask of
        :func:`shadoweval.pair_flags.pair_flags` of the score. Returns the number of
        scores written (inserted or replaced).
        """
        rows = [rows_.pair_score_row(s) for s in scores]
        if not rows:
            return 0
        with self._db.session() as session:
            return upsert(session, PairScoreRow, rows, ["run_id", "exchange_id"])

    def iter_pair_inputs(
        self,
        run_id: str,
        *,
        only_unscored: bool = False,
        batch_size: int = 256,
        exchange_ids: tuple[str, str] | None = None,
    ) -> Iterator[list[PairInput]]:
        """Yield batches of (exchange, candidate outcome, baseline-repeat outcome or None).

        Only exchanges with a candidate outcome in this run are yielded, ordered by
        ``(captured_at, exchange_id)``. Each batch is read in its own short transaction
        (keyset pagination), so the caller may write scores between batches; with
        ``only_unscored`` exchanges that already have a pair score are left out; with
        ``exchange_ids`` ``(first, last)`` only ids in that inclusive range (the ranges of
        :meth:`pair_exchange_ids`: one per compare process).

        Raises:
            ValueError: ``batch_size`` < 1.
            StorageError: on database failure.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return self._pair_input_batches(run_id, only_unscored, batch_size, exchange_ids)

    def pair_exchange_ids(self, run_id: str, *, only_unscored: bool = False) -> list[str]:
        """The exchange ids :meth:`iter_pair_inputs` would yield, in the database's order.

        Ordered by ``exchange_id`` as the database compares strings (its collation), so
        consecutive slices of this list are disjoint ``(first, last)`` ranges for
        ``iter_pair_inputs(exchange_ids=...)``.

        Raises:
            StorageError: on database failure.
        """
        stmt = (
            queries.pair_inputs(run_id, only_unscored=only_unscored, after=None)
            .with_only_columns(ExchangeRow.exchange_id)
            .order_by(None)
            .order_by(ExchangeRow.exchange_id)
        )
        with self._db.session() as session:
            return list(session.scalars(stmt))

    def pair_inputs_for(
        self, run_id: str, exchange_ids: Sequence[str], *, only_unscored: bool = True
    ) -> list[PairInput]:
        """The pairs of ``run_id`` among ``exchange_ids`` (unscored ones by default).

        Same tuples and order as :meth:`iter_pair_inputs` (``(captured_at,
        exchange_id)``); ids that are not pairs of the run (no sent candidate outcome) or
        already scored (with ``only_unscored``) are left out. Read in chunks of
        :data:`PAIR_ID_CHUNK` ids, each in its own transaction. A follow worker calls it
        after taking a bucket's lock (:class:`~shadoweval.storage.work_locks.WorkLocks`),
        so it reads what is unscored *now*.

        Raises:
            StorageError: on database failure.
        """
        ids = list(dict.fromkeys(exchange_ids))
        rows: list[Any] = []
        for start in range(0, len(ids), PAIR_ID_CHUNK):
            stmt = queries.pair_inputs(
                run_id,
                only_unscored=only_unscored,
                after=None,
                id_list=ids[start : start + PAIR_ID_CHUNK],
            )
            with self._db.session() as session:
                rows.extend(session.execute(stmt).all())
        rows.sort(key=lambda row: (row.captured_at, row.exchange_id))
        return [_pair_input(row) for row in rows]

    def _pair_input_batches(
        self,
        run_id: str,
        only_unscored: bool,
        batch_size: int,
        exchange_ids: tuple[str, str] | None,
    ) -> Iterator[list[PairInput]]:
        after: tuple[datetime, str] | None = None
        while True:
            stmt = queries.pair_inputs(
                run_id, only_unscored=only_unscored, after=after, exchange_ids=exchange_ids
            )
            with self._db.session() as session:
                rows = session.execute(stmt.limit(batch_size)).all()
            if not rows:
                return
            after = (rows[-1].captured_at, rows[-1].exchange_id)
            yield [_pair_input(row) for row in rows]
            if len(rows) < batch_size:
                return

    def load_pair_scores(self, run_id: str) -> list[PairScore]:
        """Return a run's pair scores ordered by ``(captured_at, exchange_id)``."""
        stmt = (
            select(PairScoreRow.record)
            .where(PairScoreRow.run_id == run_id)
            .order_by(PairScoreRow.captured_at, PairScoreRow.exchange_id)
        )
        with self._db.session() as session:
            records = list(session.scalars(stmt))
        return [PairScore.model_validate(r) for r in records]

    def load_pair_scores_after(
        self, run_id: str, after_row_id: int = 0
    ) -> tuple[list[PairScore], int]:
        """Return the run's pair scores stored after row ``after_row_id``, and the last row id.

        For incremental readers (the dashboard keeps a run's table and reads only what
        is new): rows in storage order (``pair_score.id``); the second element is the
        highest id read, or ``after_row_id`` when nothing is new. A pair rescored in place
        keeps its row id and is not returned again: readers re-read everything now and
        then. Order the result by capture time yourself.
        """
        stmt = (
            select(PairScoreRow.id, PairScoreRow.record)
            .where(PairScoreRow.run_id == run_id, PairScoreRow.id > after_row_id)
            .order_by(PairScoreRow.id)
        )
        with self._db.session() as session:
            rows = session.execute(stmt).all()
        if not rows:
            return [], after_row_id
        return [PairScore.model_validate(r.record) for r in rows], int(rows[-1].id)

    def load_pair_facts_after(self, run_id: str, after_row_id: int = 0) -> tuple[PairFacts, int]:
        """The run's pairs stored after row ``after_row_id`` as packed facts, and the last id.

        What :func:`shadoweval.stats.frame.pairs_frame_from_facts` builds the pairs table from: the
        columns ``exchange_id``, ``task_type``, ``uncovered_scripts`` and ``facts``
        (:mod:`shadoweval.pair_facts`), never the ``record`` JSON — except for a row
        whose ``facts`` is ``NULL`` or of another layout, whose record is read and
        packed here (the table is the same either way). Rows in no particular order (the
        table builder sorts them; a sort here would cost a tenth of a second at 200,000
        pairs); the second element is the highest id read, or ``after_row_id`` when
        nothing is new.

        Raises:
            StorageError: on database failure.
            pydantic.ValidationError: a row without facts whose record does not validate
                (as :meth:`load_pair_scores_after` would raise).
        """
        stmt = select(
            PairScoreRow.id,
            PairScoreRow.exchange_id,
            PairScoreRow.task_type,
            PairScoreRow.uncovered_scripts,
            PairScoreRow.facts,
        ).where(PairScoreRow.run_id == run_id, PairScoreRow.id > after_row_id)
        with self._db.session() as session:
            rows = _driver_rows(session, stmt)
            if not rows:
                return PairFacts.of_scores([]), after_row_id
            row_ids = [row[0] for row in rows]
            exchange_ids = tuple(row[1] for row in rows)
            task_types = tuple(row[2] for row in rows)
            scripts = [row[3] for row in rows]
            packed = [bytes(row[4]) if row[4] is not None else None for row in rows]
            stale = [i for i, blob in enumerate(packed) if blob is None or not _current(blob)]
            if stale:
                wanted = [row_ids[i] for i in stale]
                records: dict[int, Any] = {}
                for start in range(0, len(wanted), _STALE_CHUNK_ROWS):
                    ids = wanted[start : start + _STALE_CHUNK_ROWS]
                    found = session.execute(
                        select(PairScoreRow.id, PairScoreRow.record).where(PairScoreRow.id.in_(ids))
                    )
                    records.update((row.id, row.record) for row in found)
                for i in stale:
                    score = PairScore.model_validate(records[row_ids[i]])
                    packed[i] = pack_pair_facts(score)
                    scripts[i] = uncovered_scripts(score)
        facts = PairFacts(
            exchange_ids=exchange_ids,
            task_types=task_types,
            uncovered_scripts=tuple(text or "" for text in scripts),
            values=unpack_pair_facts(cast(list[bytes], packed)),  # every None was packed
        )
        return facts, int(max(row_ids))

    # ---------------------------------------------------------------- coverage

    def coverage_counts(self, run_id: str) -> Coverage:
        """Count how much of the run's population was replayed and compared.

        * ``captured``: exchanges that are members of the run, plus ``rejected``: lines of
          the run's capture log that could not be decoded (stage ``capture_log``);
        * ``replayed``: candidate outcomes (errors, skips and warm-ups included);
        * ``errored``: candidate outcomes with an error other than ``skipped``;
        * ``skipped``, ``warmup``: candidate outcomes skipped / flagged warm-up;
        * ``paired``: pair scores; ``share`` = paired / captured (0.0 when nothing was
          captured); ``per_task_type``: members per task type;
        * ``baseline_repeat_replayed`` / ``baseline_repeat_errored``: baseline-repeat
          outcomes sent (not skipped) / failed — the run's design: when it sent any, the
          gate judges similarity against the noise floor, never the absolute limit;
        * ``per_route``: members, candidate replays sent and skipped (with the skip
          reasons) and pairs per route; ``paired_per_task_type``: pairs per task type;
        * ``replay_passes``: the passes recorded by :meth:`record_replay_pass`.
        """
        with self._db.session() as session:
            return queries.coverage(session, run_id)

    def record_replay_pass(self, run_id: str, replay_pass: ReplayPass) -> None:
        """Append one replay pass (its pacing and achieved load) to the run.

        Kept in the run's ``settings`` (key ``replay_passes``, the latest
        :data:`MAX_REPLAY_PASSES`), read back by :meth:`coverage_counts`; the row is locked
        while it is updated, so concurrent Kafka workers do not lose each other's passes.

        Raises:
            StorageError: unknown run.
        """
        with self._db.session() as session:
            row = session.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise StorageError(f"unknown run {run_id!r}")
            settings = dict(row.settings or {})
            stored = settings.get(queries.REPLAY_PASSES_KEY)
            passes = list(stored) if isinstance(stored, list) else []
            passes.append(replay_pass.model_dump(mode="json"))
            settings[queries.REPLAY_PASSES_KEY] = passes[-MAX_REPLAY_PASSES:]
            row.settings = settings
