"""Pair scores: written by the compare stage, read as pairs to score and as packed facts.

Pair scores are upserted on ``(run_id, exchange_id)`` (rescoring replaces). The compare
worker reads the pairs to score (:data:`PairInput`) in keyset batches, by exchange-id
range or by id list; the dashboard and the gate read the scores back, incrementally, as
records or as the packed facts the pairs table is built from. Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, cast

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
    Exchange,
    PairScore,
    ReplayOutcome,
)
from shadoweval.storage import queries
from shadoweval.storage import rows as rows_
from shadoweval.storage.database import Database, describe_error
from shadoweval.storage.models import (
    ExchangeRow,
    PairScoreRow,
)
from shadoweval.storage.statements import upsert

__all__ = ["PAIR_ID_CHUNK", "PairInput", "PairScoreStore"]

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


class PairScoreStore:
    """Write pair scores and read pairs to score and scores back (a mixin of ``Repository``)."""

    _db: Database

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

    def load_pair_scores(
        self, run_id: str, *, baseline_model: str | None = None
    ) -> list[PairScore]:
        """Return a run's pair scores ordered by ``(captured_at, exchange_id)``; with
        ``baseline_model``, only those whose exchange recorded that baseline model."""
        stmt = (
            select(PairScoreRow.record)
            .where(
                PairScoreRow.run_id == run_id,
                *queries.baseline_model_scope(PairScoreRow.exchange_id, run_id, baseline_model),
            )
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
