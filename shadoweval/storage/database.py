"""The database handle: engine, sessions and in-process Alembic migrations.

:class:`Database` is the only place that creates SQLAlchemy engines. It wraps every
SQLAlchemy and Alembic error in :class:`~shadoweval.errors.StorageError` (``raise ... from
exc``), so callers never import SQLAlchemy exception types.

Migrations run in-process from the installed ``migrations`` package (found with
:mod:`importlib`, so it works from a wheel, not only from a source checkout); no
``alembic.ini`` is read. Usage::

    db = Database("sqlite:///shadow-eval.db")
    db.upgrade()          # to head
    db.check_schema()     # StorageError if the schema is behind head
    with db.session() as session:
        ...
    db.dispose()
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from shadoweval.errors import StorageError
from shadoweval.lifecycle import Closing
from shadoweval.storage.models import Base

logger = logging.getLogger(__name__)

MIGRATIONS_PACKAGE = "shadoweval.migrations"
"""Import name of the package that holds ``env.py``, ``script.py.mako`` and ``versions/``."""

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite connection waits for another process's write lock before failing.

With WAL, readers never block writers; writers queue on one lock. Several compare
processes writing scores and cached embeddings to one file wait their turn (each write
transaction is short) instead of failing with ``database is locked``."""

_MAX_ERROR_CHARS = 500
_UPGRADE_LOCK_KEY = 0x5E_0A1E_3B1C
"""PostgreSQL advisory-lock key held while migrations run (any fixed 64-bit number)."""


def migrations_location() -> str:
    """Return the file-system directory of the installed ``migrations`` package.

    Raises:
        StorageError: the package is not installed or not on the file system.
    """
    try:
        root = resources.files(MIGRATIONS_PACKAGE)
    except ModuleNotFoundError as exc:
        raise StorageError(
            f"the {MIGRATIONS_PACKAGE!r} package is not installed; reinstall shadow-eval"
        ) from exc
    location = str(root)
    if not (root / "env.py").is_file():
        raise StorageError(f"Alembic env.py not found in {location}; reinstall shadow-eval")
    return location


def alembic_config(connection: Connection | None = None) -> Config:
    """Build an Alembic :class:`~alembic.config.Config` in code (no ``alembic.ini``).

    ``connection``, when given, is handed to ``env.py`` through
    ``config.attributes["connection"]`` so migrations run on it, in-process.
    """
    config = Config()
    config.set_main_option("script_location", migrations_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """Return the single head revision of the shipped migrations.

    Raises:
        StorageError: there is more than one head (a branch that was never merged).
    """
    script = ScriptDirectory.from_config(alembic_config())
    heads = script.get_heads()
    if len(heads) != 1:
        raise StorageError(f"migrations must have exactly one head, found {sorted(heads)}")
    return heads[0]


def _is_known_revision(revision: str) -> bool:
    script = ScriptDirectory.from_config(alembic_config())
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def require_existing_sqlite(database_url: str) -> None:
    """Refuse a SQLite URL whose file does not exist (other URLs and ``:memory:`` pass).

    Reading commands use this so they never create an empty SQLite file by accident.

    Raises:
        StorageError: the URL does not parse, or names a SQLite file that does not exist.
    """
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise StorageError(f"invalid database URL {database_url!r}: {exc}") from exc
    path = url.database
    in_a_file = url.get_backend_name() == "sqlite" and path and path != ":memory:"
    if in_a_file and not Path(str(path)).exists():
        raise StorageError(
            f"database file {path} does not exist (nothing has been replayed into it; "
            "run `shadow-eval evaluate` or `replay run` first, or check --database-url)"
        )


def is_memory_sqlite_url(database_url: str) -> bool:
    """True for an in-memory SQLite URL (one process's private database).

    Raises:
        StorageError: the URL does not parse.
    """
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise StorageError(f"invalid database URL {database_url!r}: {exc}") from exc
    return url.get_backend_name() == "sqlite" and _is_memory_sqlite(url)


def describe_error(exc: BaseException) -> str:
    """One line describing a database error, without the (possibly huge) parameters."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    first = text[0] if text else ""
    line = f"{type(orig or exc).__name__}: {first}"
    return line if len(line) <= _MAX_ERROR_CHARS else line[: _MAX_ERROR_CHARS - 1] + "…"


def _json_serializer(value: Any) -> str:
    # orjson writes NaN and ±Infinity as null (strict JSON; PostgreSQL rejects NaN tokens).
    return orjson.dumps(value).decode("utf-8")


# A JSON ``\u0000`` escape that is not itself an escaped backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _pg_json_serializer(value: Any) -> str:
    # JSONB cannot hold U+0000 ("unsupported Unicode escape sequence"); store U+FFFD.
    text = _json_serializer(value)
    if "\\u0000" in text:
        text = _NUL_ESCAPE.sub(lambda m: m.group(1) + "\\ufffd", text)
    return text


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    finally:
        cursor.close()


def _is_memory_sqlite(url: URL) -> bool:
    database = url.database or ""
    return database in ("", ":memory:") or "mode=memory" in database


class Database(Closing):
    """A database reached through one SQLAlchemy engine.

    SQLite (the default, ``sqlite:///path.db``) gets ``PRAGMA foreign_keys=ON``, WAL
    journaling and a busy timeout (:data:`SQLITE_BUSY_TIMEOUT_MS`, so several processes
    may write one file: multi-process compare) on every connection; an in-memory SQLite
    URL shares one connection so that every session sees the same data.
    PostgreSQL URLs use psycopg 3 (``postgresql+psycopg://user@host/db``).

    Raises:
        StorageError: the URL cannot be parsed or names an unavailable driver.
    """

    def __init__(self, url: str, echo: bool = False) -> None:
        try:
            parsed = make_url(url)
            kwargs: dict[str, Any] = {
                "echo": echo,
                "json_serializer": _json_serializer,
                "json_deserializer": orjson.loads,
            }
            if parsed.get_backend_name() == "sqlite" and _is_memory_sqlite(parsed):
                kwargs["poolclass"] = StaticPool
                kwargs["connect_args"] = {"check_same_thread": False}
            elif parsed.get_backend_name() == "postgresql":
                kwargs["pool_pre_ping"] = True
                kwargs["json_serializer"] = _pg_json_serializer
            engine = create_engine(parsed, **kwargs)
        except (ArgumentError, SQLAlchemyError, ImportError, ValueError) as exc:
            raise StorageError(f"cannot open database {url!r}: {describe_error(exc)}") from exc
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_on_connect)
        self._url = parsed
        self._engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    # ------------------------------------------------------------------ basics

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for storage modules; other packages use the repository)."""
        return self._engine

    @property
    def dialect(self) -> str:
        """Dialect name: ``"sqlite"`` or ``"postgresql"``."""
        return self._engine.dialect.name

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for messages and logs."""
        return self._url.render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"Database({self.safe_url!r})"

    @contextmanager
    def session(self) -> Iterator[Session]:
        """Yield a session inside one transaction: commit on success, roll back on error.

        Raises:
            StorageError: wrapping any SQLAlchemy error (other exceptions pass through
                after the rollback).
        """
        try:
            with self._sessions() as session, session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise StorageError(
                f"database operation failed on {self.safe_url}: {describe_error(exc)}"
            ) from exc

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """Yield a connection inside one transaction (commit on success).

        Raises:
            StorageError: wrapping SQLAlchemy errors, as :meth:`session` does.
        """
        try:
            with self._engine.begin() as connection:
                yield connection
        except SQLAlchemyError as exc:
            raise StorageError(
                f"database operation failed on {self.safe_url}: {describe_error(exc)}"
            ) from exc

    def dispose(self) -> None:
        """Close every pooled connection. The object may be used again afterwards."""
        self._engine.dispose()

    def close(self) -> None:
        """:meth:`dispose` (what leaving ``with Database(...)`` calls)."""
        self.dispose()

    # -------------------------------------------------------------- migrations

    def upgrade(self, revision: str = "head") -> None:
        """Run Alembic migrations up to ``revision`` (default: head), in-process.

        All migrations run in one transaction. On PostgreSQL a transaction-scoped
        advisory lock serializes concurrent upgrades (several workers starting at once):
        the later ones wait, then find the schema at head and do nothing.

        Raises:
            StorageError: the database cannot be reached or a migration failed.
        """
        try:
            with self.connect() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK_KEY}
                    )
                command.upgrade(alembic_config(connection), revision)
        except CommandError as exc:
            raise StorageError(f"cannot upgrade {self.safe_url}: {exc}") from exc
        logger.info("database %s upgraded to %s", self.safe_url, revision)

    def current_revision(self) -> str | None:
        """Return the database's Alembic revision, ``None`` for an unmigrated database.

        Raises:
            StorageError: the database cannot be reached.
        """
        with self.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()

    def check_schema(self) -> None:
        """Make sure the database is at the head revision.

        Raises:
            StorageError: "database at <url> is at revision X, expected head Y; run
                `shadow-eval db upgrade`" when it is behind (or at an unknown revision).
        """
        head = head_revision()
        current = self.current_revision()
        if current == head:
            return
        shown = current if current is not None else "none (empty database)"
        if current is not None and not _is_known_revision(current):
            shown = f"{current} (unknown to this shadow-eval; is it newer?)"
        raise StorageError(
            f"database at {self.safe_url} is at revision {shown}, expected head {head}; "
            "run `shadow-eval db upgrade`"
        )

    def schema_diff(self) -> list[str]:
        """Compare the live schema with the models, as ``alembic check`` does.

        Returns one readable line per difference (empty when the schema matches).

        Raises:
            StorageError: the database cannot be reached.
        """
        with self.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            diffs = compare_metadata(context, Base.metadata)
        return [_describe_diff(diff) for diff in diffs]


def _describe_diff(diff: Any) -> str:
    if isinstance(diff, list):
        return "; ".join(_describe_diff(item) for item in diff)
    if isinstance(diff, tuple) and diff:
        parts = [str(diff[0])]
        for item in diff[1:]:
            name = getattr(item, "name", None)
            parts.append(str(name) if isinstance(name, str) else repr(item))
        return " ".join(parts)
    return repr(diff)


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database at ``url`` to ``revision`` (default head) and dispose the engine.

    Raises:
        StorageError: as :meth:`Database.upgrade`.
    """
    db = Database(url)
    try:
        db.upgrade(revision)
    finally:
        db.dispose()
