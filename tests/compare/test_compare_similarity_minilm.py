"""Similarity with the real all-MiniLM-L6-v2 weights (reference §4 case 8, data README §1)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import tokenizers

from shadoweval.compare.encoders import Encoder, MiniLMEncoder
from shadoweval.compare.similarity import embed_texts, pairwise_similarity
from shadoweval.errors import ConfigError

pytestmark = pytest.mark.model

LLAMA3, LLAMA31 = "Meta-Llama-3-8B-Instruct", "Meta-Llama-3.1-8B-Instruct-Turbo"
QWEN15, QWEN2 = "Qwen1.5-72B-Chat", "Qwen2-72B-Instruct"


def offsets(encoder: MiniLMEncoder, text: str) -> list[tuple[int, int]]:
    """Wordpiece character spans, from an independent copy of the model's tokenizer."""
    path = encoder.model_path / "tokenizer.json"
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    return list(tok.encode(text, add_special_tokens=False).offsets)


def test_runs_offline_with_the_bundled_weights(minilm: MiniLMEncoder) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert isinstance(minilm, Encoder)
    assert minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert (minilm.window_tokens, minilm.special_tokens, minilm.dimension) == (256, 2, 384)


def test_embeddings_are_unit_float32(minilm: MiniLMEncoder) -> None:
    vectors = minilm.embed(["Hello world.", "Yes.", "😺💕💤"])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_single_piece_text_equals_the_direct_embedding(minilm: MiniLMEncoder) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    pooled = embed_texts(minilm, [text])[text]
    assert pooled.vector is not None
    np.testing.assert_allclose(pooled.vector, minilm.embed([text])[0], atol=1e-6)


def test_counts_are_not_truncated_by_the_tokenizer_config(minilm: MiniLMEncoder) -> None:
    # tokenizer.json of this model truncates at 128; counting must not.
    text = " ".join(["word"] * 1000)
    assert minilm.count_tokens([text, ""]) == [1000, 0]


def test_short_texts_rank_sensibly(minilm: MiniLMEncoder) -> None:
    results = pairwise_similarity(
        minilm,
        [
            ("The cat sat on the mat.", "A cat was sitting on the mat."),
            ("The cat sat on the mat.", "Stock markets fell sharply on Tuesday."),
        ],
    )
    close, far = (r.similarity for r in results)
    assert close > 0.8
    assert far < 0.3
    assert all(-1.0 <= r.similarity <= 1.0 and r.chunks == (1, 1) for r in results)


def test_identical_long_texts_score_one_with_several_chunks(
    minilm: MiniLMEncoder, alpaca: dict[str, list[dict[str, Any]]]
) -> None:
    text = alpaca[LLAMA31][127]["output"]
    [r] = pairwise_similarity(minilm, [(text, str(text))])
    assert r.similarity == pytest.approx(1.0, abs=1e-5)
    assert r.tokens[0] == r.tokens[1] > 4000
    assert r.chunks[0] == r.chunks[1] > 1
    assert not r.truncated


def test_shared_prefix_then_divergence_is_not_silently_one(
    minilm: MiniLMEncoder, alpaca: dict[str, list[dict[str, Any]]]
) -> None:
    """Two ~1,500-token answers, identical for 300 tokens, then different (case 8)."""
    comfort = alpaca[LLAMA31][127]["output"]  # comforting a friend whose dog died
    code = alpaca[LLAMA31][410]["output"]  # HTML/JS code for a fake chatbot
    a, b = offsets(minilm, comfort), offsets(minilm, code)
    first = comfort[: a[1500][0]]
    second = comfort[: a[300][0]] + code[b[300][0] : b[1500][0]]
    assert minilm.count_tokens([first, second]) == [1500, 1500]

    # What silent truncation reports: the model sees the shared 254 wordpieces only.
    naive = minilm.embed([first, second])
    assert float(naive[0] @ naive[1]) > 0.99

    [r] = pairwise_similarity(minilm, [(first, second)])
    assert r.similarity < 0.8
    assert r.tokens == (1500, 1500)
    assert r.chunks[0] > 1
    assert r.chunks[1] > 1
    assert not r.truncated
    detail = r.detail()
    assert (detail.baseline_chunks, detail.candidate_chunks) == r.chunks
    assert detail.truncated is False


def test_tiny_and_emoji_outputs_from_alpaca(
    minilm: MiniLMEncoder, alpaca: dict[str, list[dict[str, Any]]]
) -> None:
    """Rows 199 (Test), 262 (Yes.), 537 (emoji only): defined, finite, one piece each."""
    pairs = [
        (alpaca[old][row]["output"], alpaca[new][row]["output"])
        for row in (199, 262, 537)
        for old, new in ((LLAMA3, LLAMA31), (QWEN15, QWEN2))
    ]
    results = pairwise_similarity(minilm, pairs)
    by_pair = dict(zip(pairs, results, strict=True))
    for (first, second), r in by_pair.items():
        assert -1.0 <= r.similarity <= 1.0 + 1e-6
        assert r.chunks == (1, 1)
        assert min(r.tokens) >= 1, (first, second)
    assert by_pair[("Yes.", "Yes.")].similarity == pytest.approx(1.0, abs=1e-6)
    assert by_pair[("Test", "Test")].similarity == pytest.approx(1.0, abs=1e-6)
    assert 0.5 < by_pair[("**TEST**", "TEST")].similarity < 1.0
    # Known limitation: the MiniLM vocabulary has no emoji; every emoji word is [UNK], so
    # two different emoji-only answers look the same to the encoder.
    assert by_pair[("😺💕💤", "🐱😻👶💤")].similarity == pytest.approx(1.0, abs=1e-5)
    [vs_text] = pairwise_similarity(minilm, [("😺💕💤", "The cat is sleeping.")])
    assert vs_text.similarity < 0.3


def test_split_is_lossless_and_fits_on_all_long_alpaca_outputs(
    minilm: MiniLMEncoder, alpaca: dict[str, list[dict[str, Any]]]
) -> None:
    """Every output over one window (incl. CJK, LaTeX, code and U+FFFD rows) splits exactly."""
    texts = [row["output"] for model in (LLAMA31, QWEN2) for row in alpaca[model]]
    counts = minilm.count_tokens(texts)
    long_texts = [t for t, n in zip(texts, counts, strict=True) if n > 254]
    assert len(long_texts) > 1000
    for text in long_texts:
        pieces = minilm.split(text)
        assert "".join(pieces) == text
        assert len(pieces) > 1
        assert max(minilm.count_tokens(pieces)) <= 254


def test_unloadable_model_is_a_config_error(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="cannot load"):
        MiniLMEncoder(tmp_path)
