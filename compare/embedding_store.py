"""The embedding cache of the compare worker, kept in the results database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from shadoweval.compare.similarity import TextEmbedding
from shadoweval.storage import CachedEmbedding, Repository

_F32LE = np.dtype("<f4")


class StorageEmbeddingCache:
    """:class:`~shadoweval.compare.similarity.EmbeddingCache` over the results database.

    Vectors are stored as float32 little-endian bytes and read back with
    ``np.frombuffer``, so a cached vector is bit-identical to the one stored. Counts
    ``hits`` and ``misses`` over every lookup.

    Raises (from ``lookup``/``store``):
        StorageError: the database failed.
    """

    def __init__(self, repo: Repository) -> None:
        self._repo = repo
        self.hits = 0
        self.misses = 0

    def lookup(self, cache_key: str, text_hashes: Sequence[str]) -> dict[str, TextEmbedding]:
        """Return the cached embeddings among ``text_hashes`` (by hash), counting hits."""
        found = self._repo.lookup_embeddings(cache_key, text_hashes)
        out = {
            h: TextEmbedding(
                vector=np.frombuffer(item.vector_f32le, dtype=_F32LE).astype(np.float32),
                tokens=item.tokens,
                chunks=item.chunks,
                truncated=item.truncated,
            )
            for h, item in found.items()
        }
        distinct = len(set(text_hashes))
        self.hits += len(out)
        self.misses += distinct - len(out)
        return out

    def store(self, cache_key: str, items: Mapping[str, TextEmbedding]) -> None:
        """Store embeddings with a vector (blank texts have none); first write wins."""
        rows = [
            CachedEmbedding(
                text_sha256=h,
                dimension=int(emb.vector.shape[0]),
                vector_f32le=emb.vector.astype(_F32LE).tobytes(),
                tokens=emb.tokens,
                chunks=emb.chunks,
                truncated=emb.truncated,
            )
            for h, emb in items.items()
            if emb.vector is not None
        ]
        self._repo.save_embeddings(cache_key, rows)
