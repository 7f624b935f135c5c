"""Lossless splitting: pieces concatenate to the text and each fits the window."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from shadoweval.compare.chunking import Tokenized, split_to_fit

_WORD = re.compile(r"\S+")


def word_tokenizer(text: str) -> Tokenized:
    starts = [m.start() for m in _WORD.finditer(text)]
    return Tokenized(starts=starts, word_starts=[True] * len(starts))


def right_aligned_pieces(text: str) -> Tokenized:
    """A tokenizer whose pieces are not prefix-stable: each word is cut into 3-character
    pieces from its *end*, so a cut inside a word changes how the rest re-tokenizes."""
    starts: list[int] = []
    word_starts: list[bool] = []
    for match in _WORD.finditer(text):
        begin, end = match.span()
        first = begin + (end - begin) % 3 or begin + 3
        bounds = [begin, *range(first, end, 3)] if first < end else [begin]
        for i, start in enumerate(dict.fromkeys(bounds)):
            starts.append(start)
            word_starts.append(i == 0)
    return Tokenized(starts=starts, word_starts=word_starts)


def count(tokenize: Callable[[str], Tokenized], text: str) -> int:
    return len(tokenize(text).starts)


def test_text_that_fits_is_one_piece() -> None:
    assert split_to_fit("a b c", 3, word_tokenizer) == ["a b c"]
    assert split_to_fit("", 3, word_tokenizer) == [""]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        split_to_fit("a", 0, word_tokenizer)


def test_words_are_cut_at_token_starts_with_whitespace_kept() -> None:
    text = "  one two  three\nfour five "
    assert split_to_fit(text, 2, word_tokenizer) == ["  one two  ", "three\nfour ", "five "]


def test_cut_prefers_a_word_start_within_half_a_window() -> None:
    text = "ab abcdefghi xy"  # tokens: ab | abc def ghi | xy
    pieces = split_to_fit(text, 3, right_aligned_pieces)
    assert pieces == ["ab ", "abcdefghi ", "xy"]


def test_single_word_longer_than_the_window_is_cut_between_pieces() -> None:
    text = "x" * 30
    pieces = split_to_fit(text, 4, right_aligned_pieces)
    assert "".join(pieces) == text
    assert all(count(right_aligned_pieces, p) <= 4 for p in pieces)
    assert len(pieces) >= 3


@pytest.mark.parametrize("seed", range(40))
def test_random_texts_roundtrip_and_fit(seed: int) -> None:
    rng = random.Random(seed)
    words = [
        "".join(rng.choice("abcdé😺") for _ in range(rng.randint(1, 14)))
        for _ in range(rng.randint(0, 120))
    ]
    text = "".join(w + rng.choice([" ", "  ", "\n", "\t "]) for w in words)
    capacity = rng.randint(1, 12)
    for tokenize in (word_tokenizer, right_aligned_pieces):
        pieces = split_to_fit(text, capacity, tokenize)
        assert "".join(pieces) == text
        assert all(count(tokenize, p) <= capacity for p in pieces)
        assert all(pieces) or pieces == [""]


def test_tokens_that_share_one_start_do_not_loop_forever() -> None:
    def one_char_many_tokens(text: str) -> Tokenized:
        return Tokenized(starts=[0] * 5 * len(text), word_starts=[True] * 5 * len(text))

    assert split_to_fit("x", 2, one_char_many_tokens) == ["x"]
