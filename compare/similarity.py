"""Embedding cosine similarity of text pairs, with long texts chunked, never truncated.

Method: every distinct text is counted in the encoder's tokens; a text longer than one
encoder pass is cut into consecutive pieces on token boundaries (:meth:`Encoder.split`),
each piece is embedded, and the text's embedding is the token-count-weighted mean of its
piece embeddings, renormalized to unit length. The similarity of a pair is the cosine of
the two text embeddings (a dot product of unit vectors), clipped to [-1, 1].

This is the fix for silent truncation (reference §4 case 8,
https://github.com/huggingface/sentence-transformers/issues/4060): two ~1,500-token
answers that share their first 300 tokens and then diverge no longer score ≈1.0 because
the encoder saw only the shared prefix. :class:`SimilarityResult` carries the token and
piece counts; ``truncated`` is true only if a piece still exceeds the window (an encoder
whose ``split`` breaks its contract), so truncation is reported, never silent.

Edge rules (documented choices): a *blank* text is empty or white space and invisible
format characters only (:func:`shadoweval.text.is_blank`). Two blank texts are identical
(similarity 1.0); exactly one blank text gives 0.0 (nothing in common, and a cosine with
a zero vector is undefined). Blank texts are not embedded (0 tokens, 0 pieces). Mean
pooling follows the sentence-transformers recipe for long documents (chunk, embed,
average); the token weighting keeps a short trailing piece from counting as much as a
full one.

Doing less work (issue 14): an *identical pair* (both texts equal, character for character)
scores exactly 1.0 without being embedded — its token and piece counts are still computed
(``count_tokens``/``split``, cheap). Distinct texts are embedded once per call
(``dict.fromkeys``) and, with an :class:`EmbeddingCache`, once per encoder identity
(:attr:`Encoder.cache_key`) across calls and runs: the cache is keyed by that identity and
the SHA-256 of the text's UTF-8 bytes, and a cached :class:`TextEmbedding` is used as is
(same vector bytes, so a cached score equals the uncached one bit for bit). Pieces are
embedded in *length buckets*: sorted by (token count, text) before being cut into batches,
so a batch pads to similar lengths, and mapped back to their texts afterwards; the batches
depend only on the set of pieces, not on the order the texts came in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from shadoweval.compare.encoders import Encoder
from shadoweval.records import SimilarityDetail
from shadoweval.text import is_blank

__all__ = [
    "METHOD",
    "EmbeddingCache",
    "SimilarityResult",
    "TextEmbedding",
    "embed_texts",
    "pairwise_similarity",
    "text_sha256",
]

METHOD = "cosine_mean_pooled_chunks"
"""Method label; :attr:`SimilarityResult.method` appends ``:<encoder cache key>``."""


@dataclass(frozen=True, slots=True)
class SimilarityResult:
    """Similarity of one ``(first, second)`` text pair.

    Attributes:
        similarity: cosine in [-1, 1] (1.0 for two blank texts, 0.0 for one).
        tokens: encoder tokens of (first, second), special tokens excluded, uncut.
        chunks: encoder passes of (first, second); 0 for a blank text.
        truncated: some piece of either text exceeded the encoder window.
        method: ``cosine_mean_pooled_chunks:<encoder cache key>`` (model, weights hash and
            backend: which vectors scored the pair).
    """

    similarity: float
    tokens: tuple[int, int]
    chunks: tuple[int, int]
    truncated: bool
    method: str

    def detail(self) -> SimilarityDetail:
        """Return the record form, reading the pair as (baseline, candidate)."""
        return SimilarityDetail(
            baseline_tokens=self.tokens[0],
            candidate_tokens=self.tokens[1],
            baseline_chunks=self.chunks[0],
            candidate_chunks=self.chunks[1],
            truncated=self.truncated,
            method=self.method,
        )


@dataclass(frozen=True, slots=True)
class TextEmbedding:
    """The pooled embedding of one text.

    ``vector`` has shape ``(d,)`` and unit norm, or is ``None`` for a blank text;
    ``tokens`` and ``chunks`` are as in :class:`SimilarityResult`.
    """

    vector: npt.NDArray[np.float32] | None
    tokens: int
    chunks: int
    truncated: bool


class EmbeddingCache(Protocol):
    """Where pooled text embeddings are kept between calls (the results database in
    :mod:`shadoweval.compare.worker`; a dict in tests).

    Keys are ``(cache_key, text_hash)``: :attr:`Encoder.cache_key` and
    :func:`text_sha256` of the text. Only non-blank texts (``vector`` not ``None``) are
    stored. Implementations must return exactly what was stored (vector bytes included).
    """

    def lookup(self, cache_key: str, text_hashes: Sequence[str]) -> dict[str, TextEmbedding]:
        """Return the stored embeddings of those ``text_hashes`` that are cached."""
        ...

    def store(self, cache_key: str, items: Mapping[str, TextEmbedding]) -> None:
        """Keep ``items`` (text hash → embedding); an already stored hash keeps its value."""
        ...


def text_sha256(text: str) -> str:
    """SHA-256 (hex) of ``text`` as UTF-8 (lone surrogates passed through, never an error)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def pairwise_similarity(
    encoder: Encoder,
    pairs: Sequence[tuple[str, str]],
    batch_size: int = 64,
    *,
    cache: EmbeddingCache | None = None,
) -> list[SimilarityResult]:
    """Cosine similarity of each pair of texts, long texts chunked and pooled.

    Args:
        encoder: any :class:`~shadoweval.compare.encoders.Encoder`.
        pairs: ``(first, second)`` texts; results come back in the same order.
        batch_size: most pieces per :meth:`Encoder.embed` call (memory bound); ≥ 1.
        cache: pooled embeddings kept between calls (``None``: embed every text).

    Returns:
        One :class:`SimilarityResult` per pair.

    Raises:
        ValueError: ``batch_size`` < 1, or the encoder returned embeddings of the wrong
            shape or with non-finite values.

    Identical texts (across all pairs) and identical pieces are embedded once; a pair of
    two equal texts scores 1.0 and its texts are not embedded (unless another pair needs
    them), only counted.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    needed = list(
        dict.fromkeys(t for first, second in pairs if first != second for t in (first, second))
    )
    embedded = embed_texts(encoder, needed, batch_size=batch_size, cache=cache)
    identical_only = [
        text
        for text in dict.fromkeys(first for first, second in pairs if first == second)
        if text not in embedded
    ]
    measured = _measure(encoder, identical_only)
    method = f"{METHOD}:{encoder.cache_key}"
    results: list[SimilarityResult] = []
    for first, second in pairs:
        if first == second:
            a = embedded.get(first) or measured[first]
            results.append(
                SimilarityResult(
                    similarity=1.0,
                    tokens=(a.tokens, a.tokens),
                    chunks=(a.chunks, a.chunks),
                    truncated=a.truncated,
                    method=method,
                )
            )
            continue
        a, b = embedded[first], embedded[second]
        if a.vector is None or b.vector is None:
            value = 1.0 if a.vector is None and b.vector is None else 0.0
        else:
            value = float(np.clip(np.dot(a.vector, b.vector), -1.0, 1.0))
        results.append(
            SimilarityResult(
                similarity=value,
                tokens=(a.tokens, b.tokens),
                chunks=(a.chunks, b.chunks),
                truncated=a.truncated or b.truncated,
                method=method,
            )
        )
    return results


_BLANK = TextEmbedding(vector=None, tokens=0, chunks=0, truncated=False)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one non-blank text is embedded: its pieces, their token counts, its count."""

    pieces: list[str]
    piece_tokens: list[int]
    tokens: int
    truncated: bool


def _plans(encoder: Encoder, texts: Sequence[str]) -> dict[str, _Plan]:
    """Count and (when longer than one pass) split each distinct non-blank text."""
    capacity = encoder.window_tokens - encoder.special_tokens
    unique = [text for text in dict.fromkeys(texts) if not is_blank(text)]
    plans: dict[str, _Plan] = {}
    for text, count in zip(unique, encoder.count_tokens(unique), strict=True):
        if count <= capacity:
            pieces, piece_tokens = [text], [count]
        else:
            pieces = [piece for piece in encoder.split(text) if piece]
            piece_tokens = encoder.count_tokens(pieces)
        truncated = "".join(pieces) != text or any(c > capacity for c in piece_tokens)
        plans[text] = _Plan(pieces, piece_tokens, count, truncated)
    return plans


def _measure(encoder: Encoder, texts: Sequence[str]) -> dict[str, TextEmbedding]:
    """Token and piece counts of texts, without embedding them (``vector`` is ``None``)."""
    plans = _plans(encoder, texts)
    out: dict[str, TextEmbedding] = {}
    for text in texts:
        plan = plans.get(text)
        out[text] = (
            _BLANK
            if plan is None
            else TextEmbedding(
                vector=None, tokens=plan.tokens, chunks=len(plan.pieces), truncated=plan.truncated
            )
        )
    return out


def embed_texts(
    encoder: Encoder,
    texts: Sequence[str],
    batch_size: int = 64,
    *,
    cache: EmbeddingCache | None = None,
) -> dict[str, TextEmbedding]:
    """Embed distinct texts, each as the token-weighted mean of its pieces (unit norm).

    Returns a mapping text → :class:`TextEmbedding` (``vector`` ``None`` for a blank
    text). With ``cache``, texts found under ``encoder.cache_key`` are not embedded, and
    those embedded here are stored. Raises as :func:`pairwise_similarity`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    unique = [text for text in dict.fromkeys(texts) if not is_blank(text)]
    cached: dict[str, TextEmbedding] = {}
    hashes: dict[str, str] = {}
    if cache is not None and unique:
        hashes = {text: text_sha256(text) for text in unique}
        found = cache.lookup(encoder.cache_key, list(hashes.values()))
        cached = {text: found[h] for text, h in hashes.items() if h in found}
    plans = _plans(encoder, [text for text in unique if text not in cached])

    rows: dict[str, int] = {}
    row_tokens: list[int] = []
    for plan in plans.values():
        for piece, tokens in zip(plan.pieces, plan.piece_tokens, strict=True):
            if piece not in rows:
                rows[piece] = len(rows)
                row_tokens.append(tokens)
    matrix = _embed_batched(encoder, list(rows), row_tokens, batch_size)

    fresh: dict[str, TextEmbedding] = {}
    for text, plan in plans.items():
        weights = np.array([max(c, 1) for c in plan.piece_tokens], dtype=np.float64)
        stacked = matrix[[rows[piece] for piece in plan.pieces]].astype(np.float64)
        pooled = weights @ stacked
        norm = float(np.linalg.norm(pooled))
        vector = (pooled / norm if norm > 0.0 else pooled).astype(np.float32)
        fresh[text] = TextEmbedding(
            vector=vector, tokens=plan.tokens, chunks=len(plan.pieces), truncated=plan.truncated
        )
    if cache is not None and fresh:
        cache.store(encoder.cache_key, {hashes[text]: emb for text, emb in fresh.items()})

    out: dict[str, TextEmbedding] = {}
    for text in texts:
        if text not in out:
            out[text] = cached.get(text) or fresh.get(text) or _BLANK
    return out


def _embed_batched(
    encoder: Encoder, pieces: list[str], piece_tokens: list[int], batch_size: int
) -> npt.NDArray[np.float32]:
    """Embed ``pieces`` in length buckets; row ``i`` of the result is ``pieces[i]``.

    Pieces are sorted by (token count, text) and cut into batches of ``batch_size``, so a
    batch pads to nearly one length and the batches do not depend on the input order.
    """
    order = sorted(range(len(pieces)), key=lambda i: (piece_tokens[i], pieces[i]))
    matrix: npt.NDArray[np.float32] | None = None
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = [pieces[i] for i in index]
        block = np.asarray(encoder.embed(batch), dtype=np.float32)
        if block.ndim != 2 or block.shape[0] != len(batch):
            raise ValueError(
                f"encoder {encoder.name} returned shape {block.shape} for {len(batch)} texts"
            )
        if matrix is None:
            matrix = np.zeros((len(pieces), block.shape[1]), dtype=np.float32)
        elif block.shape[1] != matrix.shape[1]:
            raise ValueError(f"encoder {encoder.name} changed embedding width mid-run")
        if not np.all(np.isfinite(block)):
            raise ValueError(f"encoder {encoder.name} returned non-finite embeddings")
        matrix[index] = block
    if matrix is None:
        return np.zeros((0, 0), dtype=np.float32)
    return matrix
