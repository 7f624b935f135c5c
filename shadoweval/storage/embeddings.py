"""The embedding cache: pooled text vectors by (encoder identity, text hash).

Compare embeds every distinct side text; the same answer text recurs across batches, runs
and baseline repeats, and embedding is ~90% of compare's time. Rows are keyed by the
encoder's ``cache_key`` (model name + weights hash + backend) and the SHA-256 of the text,
so a model or weights swap never serves stale vectors. Writes are insert-or-ignore
(``INSERT … ON CONFLICT DO NOTHING``): the first write wins, and several compare processes
storing the same text at once never fail on the duplicate. Storage knows nothing of numpy:
vectors are the raw float32 little-endian bytes. Use it through
:class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select

from shadoweval.records import same_named, utc_now
from shadoweval.storage.database import Database
from shadoweval.storage.models import EmbeddingCacheRow
from shadoweval.storage.statements import insert_ignore
from shadoweval.storage.types import CachedEmbedding

__all__ = ["EmbeddingStore"]

LOOKUP_CHUNK = 500
"""Hashes per ``IN (...)`` lookup (well under SQLite's 32,766 bound parameters)."""

_CACHED_FIELDS = ("text_sha256", "dimension", "tokens", "chunks", "truncated")
"""The cache row's columns a :class:`CachedEmbedding` holds as they are."""


class EmbeddingStore:
    """Look up and store cached embeddings (a mixin of ``Repository``)."""

    _db: Database

    def lookup_embeddings(
        self, cache_key: str, text_hashes: Sequence[str]
    ) -> dict[str, CachedEmbedding]:
        """Return the cached embeddings of ``text_hashes`` under ``cache_key``, by hash.

        Hashes not cached are absent from the result. Read in chunks of
        :data:`LOOKUP_CHUNK` hashes, in one transaction.

        Raises:
            StorageError: on database failure.
        """
        wanted = list(dict.fromkeys(text_hashes))
        found: dict[str, CachedEmbedding] = {}
        if not wanted:
            return found
        with self._db.session() as session:
            for start in range(0, len(wanted), LOOKUP_CHUNK):
                chunk = wanted[start : start + LOOKUP_CHUNK]
                stmt = select(EmbeddingCacheRow).where(
                    EmbeddingCacheRow.cache_key == cache_key,
                    EmbeddingCacheRow.text_sha256.in_(chunk),
                )
                for row in session.scalars(stmt):
                    found[row.text_sha256] = CachedEmbedding(
                        **same_named(row, _CACHED_FIELDS), vector_f32le=bytes(row.vector)
                    )
        return found

    def save_embeddings(self, cache_key: str, items: Iterable[CachedEmbedding]) -> int:
        """Store embeddings under ``cache_key``, insert-or-ignore on the text hash.

        Each item's ``vector_f32le`` must be ``4 * dimension`` bytes.

        A hash already stored (by this or another process) keeps its first value. Returns
        the number of rows newly inserted.

        Raises:
            ValueError: an item's vector is not ``4 * dimension`` bytes.
            StorageError: on database failure.
        """
        items = list(items)
        for item in items:
            if item.dimension < 1 or len(item.vector_f32le) != 4 * item.dimension:
                raise ValueError(
                    f"embedding {item.text_sha256}: {len(item.vector_f32le)} vector bytes "
                    f"for dimension {item.dimension} (expected {4 * item.dimension})"
                )
        now = utc_now()
        rows = [
            {
                "cache_key": cache_key,
                "text_sha256": item.text_sha256,
                "dimension": item.dimension,
                "vector": item.vector_f32le,
                "tokens": item.tokens,
                "chunks": item.chunks,
                "truncated": item.truncated,
                "created_at": now,
            }
            for item in sorted(items, key=lambda item: item.text_sha256)
        ]
        # Sorted by key: two PostgreSQL writers inserting overlapping texts take the row
        # locks in the same order, so one waits for the other instead of deadlocking.
        if not rows:
            return 0
        with self._db.session() as session:
            return insert_ignore(session, EmbeddingCacheRow, rows, ["cache_key", "text_sha256"])

    def count_embeddings(self, cache_key: str | None = None) -> int:
        """Number of cached embeddings (under ``cache_key``, or all).

        Raises:
            StorageError: on database failure.
        """
        stmt = select(func.count()).select_from(EmbeddingCacheRow)
        if cache_key is not None:
            stmt = stmt.where(EmbeddingCacheRow.cache_key == cache_key)
        with self._db.session() as session:
            return int(session.scalar(stmt) or 0)
