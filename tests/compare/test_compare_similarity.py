"""Similarity with the hashing encoder and fake encoders: chunking, pooling, edge rules."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from shadoweval.compare.encoders import Encoder, HashingEncoder
from shadoweval.compare.similarity import METHOD, embed_texts, pairwise_similarity


class CountingEncoder:
    """Wraps an encoder and records every text passed to embed."""

    def __init__(self, inner: HashingEncoder) -> None:
        self.inner = inner
        self.embedded: list[str] = []
        self.calls = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def window_tokens(self) -> int:
        return self.inner.window_tokens

    @property
    def cache_key(self) -> str:
        return self.inner.cache_key

    @property
    def special_tokens(self) -> int:
        return self.inner.special_tokens

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens(texts)

    def split(self, text: str) -> list[str]:
        return self.inner.split(text)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.embedded.extend(texts)
        return self.inner.embed(texts)


class NoSplitEncoder(CountingEncoder):
    """Breaks the contract: returns long texts whole (the encoder would truncate them)."""

    def split(self, text: str) -> list[str]:
        return [text]


class BadShapeEncoder(CountingEncoder):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.zeros((len(texts) + 1, 8), dtype=np.float32)


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


# ------------------------------------------------------------------ hashing


def test_hashing_encoder_satisfies_the_protocol() -> None:
    assert isinstance(HashingEncoder(), Encoder)
    assert isinstance(CountingEncoder(HashingEncoder()), Encoder)


def test_hashing_embeddings_are_deterministic_unit_float32() -> None:
    enc = HashingEncoder(64)
    a = enc.embed(["Hello, world!", "", "😺💕💤", "hello world"])
    b = HashingEncoder(64).embed(["Hello, world!", "", "😺💕💤", "hello world"])
    assert a.shape == (4, 64)
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    assert enc.count_tokens(["Hello, world!", "", "😺💕💤"]) == [4, 0, 3]


def test_hashing_is_a_bag_of_words_not_semantics() -> None:
    enc = HashingEncoder(1024)
    [same] = pairwise_similarity(enc, [("the cat sat", "sat the cat")])
    assert same.similarity == pytest.approx(1.0)
    [synonyms] = pairwise_similarity(enc, [("car", "automobile")])
    assert synonyms.similarity < 0.5


@pytest.mark.parametrize(("dimension", "window"), [(4, 10), (64, 0)])
def test_hashing_arguments_are_checked(dimension: int, window: int) -> None:
    with pytest.raises(ValueError, match="must be >="):
        HashingEncoder(dimension, window_tokens=window)


# -------------------------------------------------------------- edge rules


def test_blank_texts() -> None:
    enc = HashingEncoder()
    results = pairwise_similarity(enc, [("", ""), (" \n", ""), ("", "x"), ("x", "\t")])
    assert [r.similarity for r in results] == [1.0, 1.0, 0.0, 0.0]
    assert results[2].tokens == (0, 1)
    assert results[2].chunks == (0, 1)
    assert not any(r.truncated for r in results)


def test_identical_texts_score_one_and_record_method() -> None:
    [r] = pairwise_similarity(HashingEncoder(), [("a b c", "a b c")])
    assert r.similarity == pytest.approx(1.0)
    assert r.method == f"{METHOD}:hashing-256:v1"
    detail = r.detail()
    assert (detail.baseline_tokens, detail.candidate_tokens) == (3, 3)
    assert (detail.baseline_chunks, detail.candidate_chunks) == (1, 1)
    assert detail.truncated is False


def test_empty_input_list() -> None:
    assert pairwise_similarity(HashingEncoder(), []) == []


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        pairwise_similarity(HashingEncoder(), [("a", "b")], batch_size=0)


# ------------------------------------------------------- chunking + pooling


def test_long_texts_are_chunked_not_truncated() -> None:
    enc = HashingEncoder(4096, window_tokens=50)
    shared = words(60, "s")
    first = shared + " " + words(240, "a")
    second = shared + " " + words(240, "b")
    [r] = pairwise_similarity(enc, [(first, second)])
    assert r.tokens == (300, 300)
    assert r.chunks == (6, 6)
    assert not r.truncated
    # Only the shared 60 of 300 words agree: far from the 1.0 a 50-token window would give.
    assert r.similarity < 0.4
    [seen_by_truncation] = pairwise_similarity(enc, [(first[:200], second[:200])])
    assert seen_by_truncation.similarity == pytest.approx(1.0)


def test_pooling_is_token_weighted_mean_renormalized() -> None:
    enc = HashingEncoder(512, window_tokens=4)
    text = "a b c d e"  # pieces "a b c d " (4 tokens) and "e" (1 token)
    assert enc.split(text) == ["a b c d ", "e"]
    vectors = enc.embed(["a b c d ", "e"]).astype(np.float64)
    expected = 4 * vectors[0] + 1 * vectors[1]
    expected /= np.linalg.norm(expected)
    got = embed_texts(enc, [text])[text]
    assert got.vector is not None
    np.testing.assert_allclose(got.vector, expected, rtol=1e-5, atol=1e-6)
    assert (got.tokens, got.chunks, got.truncated) == (5, 2, False)


def test_identical_texts_and_pieces_are_embedded_once_in_batches() -> None:
    enc = CountingEncoder(HashingEncoder(window_tokens=10))
    long_text = words(35)
    pairs = [(long_text, long_text), ("x", long_text), ("x", "y"), ("y", "x")]
    results = pairwise_similarity(enc, pairs, batch_size=2)
    assert len(enc.embedded) == len(set(enc.embedded)) == 4 + 2
    assert enc.calls == 3
    assert results[0].similarity == pytest.approx(1.0)
    assert results[1].chunks == (1, 4)


def test_contract_breaking_encoder_is_reported_as_truncated() -> None:
    enc = NoSplitEncoder(HashingEncoder(window_tokens=10))
    [r] = pairwise_similarity(enc, [(words(30), "x")])
    assert r.truncated
    assert r.chunks == (1, 1)


def test_wrong_embedding_shape_raises() -> None:
    with pytest.raises(ValueError, match="shape"):
        pairwise_similarity(BadShapeEncoder(HashingEncoder()), [("a", "b")])
