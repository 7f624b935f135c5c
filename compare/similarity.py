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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from compare.encoders import Encoder
from shadoweval.records import SimilarityDetail
from shadoweval.text import is_blank

__all__ = ["METHOD", "SimilarityResult", "embed_texts", "pairwise_similarity"]

METHOD = "cosine_mean_pooled_chunks"
"""Method label; :attr:`SimilarityResult.method` appends ``:<encoder name>``."""


@dataclass(frozen=True, slots=True)
class SimilarityResult:
    """Similarity of one ``(first, second)`` text pair.

    Attributes:
        similarity: cosine in [-1, 1] (1.0 for two blank texts, 0.0 for one).
        tokens: encoder tokens of (first, second), special tokens excluded, uncut.
        chunks: encoder passes of (first, second); 0 for a blank text.
        truncated: some piece of either text exceeded the encoder window.
        method: ``cosine_mean_pooled_chunks:<encoder name>``.
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


def pairwise_similarity(
    encoder: Encoder, pairs: Sequence[tuple[str, str]], batch_size: int = 64
) -> list[SimilarityResult]:
    """Cosine similarity of each pair of texts, long texts chunked and pooled.

    Args:
        encoder: any :class:`~compare.encoders.Encoder`.
        pairs: ``(first, second)`` texts; results come back in the same order.
        batch_size: most pieces per :meth:`Encoder.embed` call (memory bound); ≥ 1.

    Returns:
        One :class:`SimilarityResult` per pair.

    Raises:
        ValueError: ``batch_size`` < 1, or the encoder returned embeddings of the wrong
            shape or with non-finite values.

    Identical texts (across all pairs) and identical pieces are embedded once.
    """
    texts = list(dict.fromkeys(text for pair in pairs for text in pair))
    embedded = embed_texts(encoder, texts, batch_size=batch_size)
    method = f"{METHOD}:{encoder.name}"
    results: list[SimilarityResult] = []
    for first, second in pairs:
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


def embed_texts(
    encoder: Encoder, texts: Sequence[str], batch_size: int = 64
) -> dict[str, TextEmbedding]:
    """Embed distinct texts, each as the token-weighted mean of its pieces (unit norm).

    Returns a mapping text → :class:`TextEmbedding`. Raises as :func:`pairwise_similarity`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    capacity = encoder.window_tokens - encoder.special_tokens
    unique = [text for text in dict.fromkeys(texts) if not is_blank(text)]
    counts = encoder.count_tokens(unique)

    plans: dict[str, tuple[list[str], list[int], int]] = {}
    for text, count in zip(unique, counts, strict=True):
        if count <= capacity:
            plans[text] = ([text], [count], count)
        else:
            pieces = [piece for piece in encoder.split(text) if piece]
            plans[text] = (pieces, encoder.count_tokens(pieces), count)

    rows: dict[str, int] = {}
    for pieces, _, _ in plans.values():
        for piece in pieces:
            rows.setdefault(piece, len(rows))
    matrix = _embed_batched(encoder, list(rows), batch_size)

    out: dict[str, TextEmbedding] = {}
    for text in texts:
        if text in out:
            continue
        plan = plans.get(text)
        if plan is None:
            out[text] = TextEmbedding(vector=None, tokens=0, chunks=0, truncated=False)
            continue
        pieces, piece_counts, count = plan
        truncated = "".join(pieces) != text or any(c > capacity for c in piece_counts)
        weights = np.array([max(c, 1) for c in piece_counts], dtype=np.float64)
        stacked = matrix[[rows[piece] for piece in pieces]].astype(np.float64)
        pooled = weights @ stacked
        norm = float(np.linalg.norm(pooled))
        vector = (pooled / norm if norm > 0.0 else pooled).astype(np.float32)
        out[text] = TextEmbedding(
            vector=vector, tokens=count, chunks=len(pieces), truncated=truncated
        )
    return out


def _embed_batched(encoder: Encoder, pieces: list[str], batch_size: int) -> npt.NDArray[np.float32]:
    blocks: list[npt.NDArray[np.float32]] = []
    for start in range(0, len(pieces), batch_size):
        batch = pieces[start : start + batch_size]
        block = np.asarray(encoder.embed(batch), dtype=np.float32)
        if block.ndim != 2 or block.shape[0] != len(batch):
            raise ValueError(
                f"encoder {encoder.name} returned shape {block.shape} for {len(batch)} texts"
            )
        if blocks and block.shape[1] != blocks[0].shape[1]:
            raise ValueError(f"encoder {encoder.name} changed embedding width mid-run")
        if not np.all(np.isfinite(block)):
            raise ValueError(f"encoder {encoder.name} returned non-finite embeddings")
        blocks.append(block)
    if not blocks:
        return np.zeros((0, 0), dtype=np.float32)
    return np.concatenate(blocks, axis=0)
