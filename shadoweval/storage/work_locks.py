"""Work buckets for several long-running compare workers on one run (``compare run --follow``).

A run's exchanges fall into :data:`WORK_BUCKETS` fixed buckets (the caller computes the
bucket of an exchange id: :func:`shadoweval.compare.worker.shard_of` with ``count=64``). A worker
scores a bucket only while it holds that bucket's lock, so two workers never score the
same pair at once, and it re-reads the bucket's unscored pairs *after* taking the lock,
so what another worker wrote before letting go is never scored again.

On PostgreSQL the lock is a session-level advisory lock,
``pg_try_advisory_lock(run_key, bucket)``, taken on one connection this object keeps for
its whole life (``run_key``: a signed 32-bit number from the SHA-256 of the run id, see
:func:`run_lock_key`). PostgreSQL drops a session's advisory locks when its connection
ends, so when a worker dies (SIGKILL, out of memory, a lost machine) its buckets are free
again and a survivor takes them on its next poll. Two runs whose keys collide only
serialize each other's buckets; nothing is lost.

On SQLite there are no advisory locks: :meth:`WorkLocks.try_acquire` always succeeds.
Follow mode on SQLite is meant for one worker; a second one is not refused, and stays
correct (pair scores are upserts on ``(run_id, exchange_id)``: one row per pair) but may
score some pairs twice.
"""

from __future__ import annotations

import contextlib
import hashlib

from sqlalchemy import Connection, text
from sqlalchemy.exc import SQLAlchemyError

from shadoweval.errors import StorageError
from shadoweval.lifecycle import Closing
from shadoweval.storage.database import Database, describe_error

__all__ = ["WORK_BUCKETS", "WorkLocks", "run_lock_key"]

WORK_BUCKETS = 64
"""Buckets a run's exchanges are split into for follow workers (by a hash of the id)."""

_LOCK_NAMESPACE = "shadoweval.compare.follow:"


def run_lock_key(run_id: str) -> int:
    """The advisory-lock key of ``run_id``: the first 4 bytes of SHA-256 of
    ``"shadoweval.compare.follow:" + run_id`` as a big-endian signed 32-bit integer."""
    digest = hashlib.sha256((_LOCK_NAMESPACE + run_id).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class WorkLocks(Closing):
    """The bucket locks one follow worker holds on one run (see the module docstring).

    Use as a context manager (or call :meth:`close`): closing releases every lock and
    closes the dedicated connection. ``advisory`` is ``True`` on PostgreSQL (real locks),
    ``False`` on SQLite (every :meth:`try_acquire` succeeds).

    Raises (from every method on PostgreSQL):
        StorageError: the lock connection failed (the locks it held are gone with it).
    """

    def __init__(self, db: Database, run_id: str) -> None:
        self._db = db
        self._key = run_lock_key(run_id)
        self._held: set[int] = set()
        self._connection: Connection | None = None
        self.advisory = db.dialect == "postgresql"

    @property
    def held(self) -> frozenset[int]:
        """The buckets this worker holds now."""
        return frozenset(self._held)

    def _conn(self) -> Connection:
        if self._connection is None:
            try:
                connection = self._db.engine.connect()
                self._connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            except SQLAlchemyError as exc:
                raise StorageError(
                    f"cannot open the compare lock connection on {self._db.safe_url}: "
                    f"{describe_error(exc)}"
                ) from exc
        return self._connection

    def _check_bucket(self, bucket: int) -> None:
        if not 0 <= bucket < WORK_BUCKETS:
            raise ValueError(f"bucket must be in 0..{WORK_BUCKETS - 1}, got {bucket}")

    def try_acquire(self, bucket: int) -> bool:
        """Take ``bucket``'s lock without waiting; ``True`` when this worker holds it now.

        Taking a bucket already held by this worker succeeds (it is held once).

        Raises:
            ValueError: ``bucket`` is not in ``0 … WORK_BUCKETS-1``.
            StorageError: the lock connection failed; the connection is dropped, so
                every lock this worker held is gone (the next call opens a new one).
        """
        self._check_bucket(bucket)
        if not self.advisory or bucket in self._held:
            self._held.add(bucket)
            return True
        got = self._execute("select pg_try_advisory_lock(:key, :bucket)", bucket)
        if got:
            self._held.add(bucket)
        return bool(got)

    def release(self, bucket: int) -> None:
        """Let go of ``bucket`` (nothing happens when it is not held).

        Raises:
            ValueError: ``bucket`` is not in ``0 … WORK_BUCKETS-1``.
            StorageError: the lock connection failed (its locks are gone with it).
        """
        self._check_bucket(bucket)
        if bucket not in self._held:
            return
        self._held.discard(bucket)
        if self.advisory:
            self._execute("select pg_advisory_unlock(:key, :bucket)", bucket)

    def _execute(self, sql: str, bucket: int) -> object:
        try:
            return self._conn().execute(text(sql), {"key": self._key, "bucket": bucket}).scalar()
        except SQLAlchemyError as exc:
            self._drop()
            raise StorageError(
                f"the compare lock connection on {self._db.safe_url} failed "
                f"(its bucket locks are gone): {describe_error(exc)}"
            ) from exc

    def _drop(self) -> None:
        self._held.clear()
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(SQLAlchemyError):
                connection.invalidate()  # never back to the pool: the session ends here

    def close(self) -> None:
        """Release every lock and close the lock connection (idempotent).

        The connection is invalidated rather than returned to the pool, so no pooled
        session keeps an advisory lock.
        """
        if self._connection is not None and self._held:
            with contextlib.suppress(SQLAlchemyError):  # the session ends just below anyway
                self._connection.execute(text("select pg_advisory_unlock_all()"))
        self._drop()
