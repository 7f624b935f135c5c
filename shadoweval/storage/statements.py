"""Dialect-specific batch writes: ``INSERT ... ON CONFLICT`` for SQLite and PostgreSQL.

Both dialects spell insert-or-ignore and upsert the same way in SQLAlchemy
(``insert().on_conflict_do_nothing`` / ``on_conflict_do_update``), but the statement
classes live in each dialect's module. Rows are sent in chunks of :data:`CHUNK_ROWS` as
one cached statement executed with many parameter sets, which SQLAlchemy turns into
multi-row ``INSERT ... VALUES`` batches ("insertmanyvalues"); ``RETURNING`` tells which
rows were written, so the counts are exact on both dialects.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from shadoweval.errors import StorageError
from shadoweval.storage.models import Base

CHUNK_ROWS = 500
"""Rows per INSERT statement (well under SQLite's and PostgreSQL's bind-parameter limits)."""

Row = dict[str, Any]


def _table(entity: type[Base]) -> Table:
    return cast(Table, entity.__table__)


def _chunks(rows: Sequence[Row]) -> Iterator[Sequence[Row]]:
    for start in range(0, len(rows), CHUNK_ROWS):
        yield rows[start : start + CHUNK_ROWS]


def _insert(session: Session, table: Table) -> postgresql.Insert | sqlite.Insert:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise StorageError(f"unsupported database dialect {dialect!r}; use SQLite or PostgreSQL")


def _sort_key(key: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    """A total order on conflict keys (``None`` first; values compared as text)."""
    return tuple((value is not None, "" if value is None else str(value)) for value in key)


def insert_ignore(
    session: Session,
    entity: type[Base],
    rows: Sequence[Row],
    conflict: Sequence[str],
    *,
    key_order: bool = True,
) -> int:
    """Insert ``rows``, skipping those whose ``conflict`` columns already exist.

    Returns the number of rows newly inserted (rows repeated inside ``rows`` count once).
    Rows are inserted in key order (see :func:`upsert`: concurrent writers do not
    deadlock); ``key_order=False`` keeps the given order, for rows whose stored order
    means something (rejected records: the order they were found in) and that one writer
    owns.
    """
    table = _table(entity)
    marker = table.c[conflict[0]]
    inserted = 0
    stmt = (
        _insert(session, table)
        .on_conflict_do_nothing(index_elements=list(conflict))
        .returning(marker)
    )
    ordered = (
        sorted(rows, key=lambda row: _sort_key(tuple(row[name] for name in conflict)))
        if key_order
        else list(rows)
    )
    for chunk in _chunks(ordered):
        inserted += len(session.execute(stmt, list(chunk)).all())
    return inserted


def upsert(
    session: Session,
    entity: type[Base],
    rows: Sequence[Row],
    conflict: Sequence[str],
    *,
    replace_where: ColumnElement[bool] | None = None,
) -> int:
    """Insert ``rows``; where the ``conflict`` columns exist, replace every other column.

    A key repeated inside ``rows`` keeps its last occurrence (PostgreSQL refuses to
    update one row twice in one statement). Rows are written in key order, so two
    writers upserting overlapping keys at once (two compare processes, a re-run beside
    a running pass) take the rows' locks in one order and wait for each other instead of
    deadlocking; the later one's values win and each key keeps one row. With
    ``replace_where`` (a condition on the stored row's columns, e.g.
    ``table.c.outcome.is_(None)``) a stored row is replaced only when it holds;
    otherwise it is kept (``ON CONFLICT ... DO UPDATE ... WHERE``).
    Returns the number of rows written (inserted or replaced).
    """
    table = _table(entity)
    unique: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        unique[tuple(row[name] for name in conflict)] = row
    deduplicated = [unique[key] for key in sorted(unique, key=_sort_key)]
    if not deduplicated:
        return 0
    columns = [name for name in deduplicated[0] if name not in conflict]
    base = _insert(session, table)
    stmt = base.on_conflict_do_update(
        index_elements=list(conflict),
        set_={name: base.excluded[name] for name in columns},
        where=replace_where,
    )
    if replace_where is None:
        # Every row is inserted or replaced, so the count needs no RETURNING, and without
        # it the driver's own executemany runs (psycopg 3: one prepared statement, rows
        # pipelined) instead of SQLAlchemy's multi-row VALUES, whose long query text
        # psycopg re-parses for every chunk (a third of the write time at 5,000 rows).
        for chunk in _chunks(deduplicated):
            session.execute(stmt, list(chunk))
        return len(deduplicated)
    marker = table.c[conflict[0]]
    written = 0
    for chunk in _chunks(deduplicated):
        written += len(session.execute(stmt.returning(marker), list(chunk)).all())
    return written
