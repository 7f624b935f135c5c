"""Doing less work (issue 14): identical pairs, duplicate texts, length buckets, the cache.

Pure: a counting encoder through the :class:`Encoder` seam and an in-memory
:class:`EmbeddingCache` (the storage-backed one is tested in ``test_compare_worker_cache``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.similarity import (
    EmbeddingCache,
    TextEmbedding,
    embed_texts,
    pairwise_similarity,
    text_sha256,
)
from tests.compare.test_compare_similarity import CountingEncoder, words


class BatchRecordingEncoder(CountingEncoder):
    """Also records each embed call's batch (to check the length buckets)."""

    def __init__(self, inner: HashingEncoder) -> None:
        super().__init__(inner)
        self.batches: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.batches.append(list(texts))
        return super().embed(texts)


class DictCache:
    """An :class:`EmbeddingCache` in a dict, counting lookups and stores."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], TextEmbedding] = {}
        self.looked_up: list[str] = []
        self.stored: list[str] = []

    def lookup(self, cache_key: str, text_hashes: Sequence[str]) -> dict[str, TextEmbedding]:
        self.looked_up.extend(text_hashes)
        return {h: self.rows[(cache_key, h)] for h in text_hashes if (cache_key, h) in self.rows}

    def store(self, cache_key: str, items: Mapping[str, TextEmbedding]) -> None:
        for h, emb in items.items():
            self.stored.append(h)
            self.rows.setdefault((cache_key, h), emb)


def test_dict_cache_is_an_embedding_cache() -> None:
    cache: EmbeddingCache = DictCache()  # mypy checks the protocol
    assert cache.lookup("k", []) == {}


def test_an_identical_pair_scores_one_without_calling_embed() -> None:
    encoder = CountingEncoder(HashingEncoder(window_tokens=8))
    long_text = words(20)  # 20 tokens: 3 passes of 8
    results = pairwise_similarity(encoder, [(long_text, long_text), ("same", "same")])
    assert encoder.calls == 0
    assert [r.similarity for r in results] == [1.0, 1.0]
    assert results[0].tokens == (20, 20)
    assert results[0].chunks == (3, 3)
    assert results[0].truncated is False
    assert results[1].tokens == (1, 1)
    assert results[1].chunks == (1, 1)


def test_an_identical_pair_is_exactly_one_where_the_embedded_cosine_is_not() -> None:
    encoder = CountingEncoder(HashingEncoder())
    text = words(37)
    (identical,) = pairwise_similarity(encoder, [(text, text)])
    (near,) = pairwise_similarity(encoder, [(text, text + " w36")])
    assert identical.similarity == 1.0
    assert near.similarity < 1.0


def test_a_text_in_an_identical_pair_and_another_pair_is_embedded_once() -> None:
    encoder = CountingEncoder(HashingEncoder())
    results = pairwise_similarity(encoder, [("a b", "a b"), ("a b", "c d"), ("c d", "a b")])
    assert sorted(encoder.embedded) == ["a b", "c d"]
    assert results[0].similarity == 1.0
    assert results[1].similarity == results[2].similarity


def test_blank_identical_pair_keeps_the_blank_rule() -> None:
    encoder = CountingEncoder(HashingEncoder())
    (result,) = pairwise_similarity(encoder, [(" \u200b", " \u200b")])
    assert (result.similarity, result.tokens, result.chunks) == (1.0, (0, 0), (0, 0))
    assert encoder.calls == 0


def test_pieces_are_embedded_in_length_buckets() -> None:
    encoder = BatchRecordingEncoder(HashingEncoder(window_tokens=16))
    rng = random.Random(7)
    texts = [words(rng.randint(1, 40), prefix=f"t{i}x") for i in range(60)]
    embed_texts(encoder, texts, batch_size=8)
    counts = [encoder.count_tokens(batch) for batch in encoder.batches]
    flat = [c for batch in counts for c in batch]
    assert flat == sorted(flat)  # batches cut from pieces sorted by token count
    assert all(len(batch) <= 8 for batch in encoder.batches)


def test_shuffled_input_gives_identical_vectors_and_batches() -> None:
    rng = random.Random(11)
    texts = [words(rng.randint(1, 40), prefix=f"t{i}x") for i in range(50)] + ["", "dup", "dup"]
    first = BatchRecordingEncoder(HashingEncoder(window_tokens=16))
    ordered = embed_texts(first, texts, batch_size=7)
    shuffled_texts = texts[:]
    rng.shuffle(shuffled_texts)
    second = BatchRecordingEncoder(HashingEncoder(window_tokens=16))
    shuffled = embed_texts(second, shuffled_texts, batch_size=7)
    assert first.batches == second.batches
    assert ordered.keys() == shuffled.keys()
    for text, emb in ordered.items():
        other = shuffled[text]
        assert (emb.tokens, emb.chunks, emb.truncated) == (
            other.tokens,
            other.chunks,
            other.truncated,
        )
        if emb.vector is None:
            assert other.vector is None
        else:
            assert other.vector is not None
            assert emb.vector.tobytes() == other.vector.tobytes()


def test_the_cache_serves_a_second_pass_without_embedding_bit_for_bit() -> None:
    cache = DictCache()
    pairs = [(words(30, "a"), words(25, "b")), ("x y", "x z"), ("", "q"), ("p", "p")]
    encoder = CountingEncoder(HashingEncoder(window_tokens=8))
    cold = pairwise_similarity(encoder, pairs, cache=cache)
    embedded_cold = encoder.calls
    assert embedded_cold > 0
    # stored: the distinct non-blank texts of non-identical pairs, once each
    assert sorted(cache.stored) == sorted(
        text_sha256(t) for t in {words(30, "a"), words(25, "b"), "x y", "x z", "q"}
    )
    warm_encoder = CountingEncoder(HashingEncoder(window_tokens=8))
    warm = pairwise_similarity(warm_encoder, pairs, cache=cache)
    assert warm_encoder.calls == 0
    assert warm == cold  # similarity floats equal bit for bit, counts and flags too
    uncached = pairwise_similarity(CountingEncoder(HashingEncoder(window_tokens=8)), pairs)
    assert uncached == cold


def test_another_encoder_identity_never_reads_the_cached_vectors() -> None:
    cache = DictCache()
    pairwise_similarity(HashingEncoder(dimension=64), [("a", "b")], cache=cache)
    other = CountingEncoder(HashingEncoder(dimension=32))
    pairwise_similarity(other, [("a", "b")], cache=cache)
    assert sorted(other.embedded) == ["a", "b"]
    assert HashingEncoder(dimension=64).cache_key == "hashing-64:v1"
    assert HashingEncoder(window_tokens=8).cache_key == "hashing-256:v1:w8"


def test_duplicate_texts_across_calls_are_embedded_once_with_a_cache() -> None:
    cache = DictCache()
    encoder = CountingEncoder(HashingEncoder())
    pairwise_similarity(encoder, [("shared answer", "one")], cache=cache)
    pairwise_similarity(encoder, [("shared answer", "two")], cache=cache)
    assert sorted(encoder.embedded) == ["one", "shared answer", "two"]


def test_text_hash_is_sha256_of_utf8_and_survives_lone_surrogates() -> None:
    assert text_sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert len(text_sha256("\ud800")) == 64


def test_batch_size_is_checked_before_anything_is_embedded() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        pairwise_similarity(HashingEncoder(), [("a", "a")], batch_size=0)
