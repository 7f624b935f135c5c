"""Cut a long text into pieces that each fit an encoder window, losing nothing.

Sentence encoders read a bounded number of wordpieces per pass (all-MiniLM-L6-v2: 256
including ``[CLS]``/``[SEP]``) and silently drop the rest
(https://github.com/huggingface/sentence-transformers/issues/4060). This module cuts the
*original* text at token start offsets, so that ``"".join(pieces) == text`` always holds
and every piece re-tokenizes to at most ``capacity`` tokens.

Cuts prefer word starts (a token that begins a pre-tokenizer word, not a ``##``
continuation), looking back at most half a window; a single word longer than that is cut
between its wordpieces. Because a piece that starts mid-word re-tokenizes differently,
every piece is re-counted and shortened until it fits. Pieces do not overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["Tokenized", "split_to_fit"]


class Tokenized(NamedTuple):
    """Token positions of one text.

    ``starts[i]`` is the character offset in the text where token ``i`` begins (offsets
    increase); ``word_starts[i]`` is true when token ``i`` begins a new word, so a cut
    just before it re-tokenizes both sides exactly as before.
    """

    starts: Sequence[int]
    word_starts: Sequence[bool]


def split_to_fit(text: str, capacity: int, tokenize: Callable[[str], Tokenized]) -> list[str]:
    """Split ``text`` into consecutive pieces of at most ``capacity`` tokens each.

    Args:
        text: the text; pieces are slices of it and concatenate back to it exactly.
        capacity: most content tokens per piece (the window minus special tokens), ≥ 1.
        tokenize: the encoder's tokenizer, as token start offsets and word-start flags.

    Returns:
        ``[text]`` when it fits (also for ``""``), else two or more non-empty pieces.
        Whitespace before a cut stays at the end of the previous piece.

    Raises:
        ValueError: ``capacity`` < 1.

    Cost: one tokenization of the remaining text per piece plus one per fit check,
    i.e. O(n²/capacity) token work for n tokens; negligible next to embedding.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    pieces: list[str] = []
    rest = text
    while True:
        tokens = tokenize(rest)
        n = len(tokens.starts)
        if n <= capacity:
            pieces.append(rest)
            return pieces
        cut = _choose_cut(tokens, capacity)
        # A piece that begins mid-word re-tokenizes differently: shorten until it fits.
        while cut > 1:
            overflow = len(tokenize(rest[: tokens.starts[cut]]).starts) - capacity
            if overflow <= 0:
                break
            cut = max(1, cut - overflow)
        position = tokens.starts[cut]
        if position <= 0:  # several tokens from one character: move past it
            later = [i for i in range(cut + 1, n) if tokens.starts[i] > 0]
            if not later:
                pieces.append(rest)
                return pieces
            position = tokens.starts[later[0]]
        pieces.append(rest[:position])
        rest = rest[position:]


def _choose_cut(tokens: Tokenized, capacity: int) -> int:
    """Index of the first token of the next piece: a word start as late as possible."""
    limit = capacity  # tokens[0:capacity] fill the window exactly
    floor = max(1, capacity // 2)
    for index in range(limit, floor - 1, -1):
        if tokens.word_starts[index]:
            return index
    return limit
