"""The mock server's tokenization: word-sized pieces.

A *piece* is a run of non-whitespace with the whitespace after it (regex ``\\S+\\s*``);
whitespace at the very start of a text is kept on the first piece, so joining the pieces
always gives the text back exactly. Text that is only whitespace is one piece; the empty
text has none.

Tool-call arguments are cut the same way and then into at most
:data:`MAX_ARGUMENT_PIECE` characters, because argument JSON is often one long
"word" (``{"base":10,"height":5}``) while real servers stream it in small fragments.

These pieces are the mock's tokens: stream deltas, inter-token delays and (when the
table has no token columns) the reported ``usage`` counts are all in pieces. They are
not any real model's tokens.
"""

from __future__ import annotations

import re

_PIECE = re.compile(r"\s*\S+\s*|\s+")

MAX_ARGUMENT_PIECE = 12
"""Longest tool-call argument fragment, in characters."""


def split_pieces(text: str) -> list[str]:
    """Split text into word pieces; ``"".join(split_pieces(t)) == t`` always holds."""
    return _PIECE.findall(text)


def split_argument_pieces(arguments: str) -> list[str]:
    """Split tool-call arguments into fragments of at most :data:`MAX_ARGUMENT_PIECE` chars."""
    out: list[str] = []
    for piece in split_pieces(arguments):
        out.extend(
            piece[i : i + MAX_ARGUMENT_PIECE] for i in range(0, len(piece), MAX_ARGUMENT_PIECE)
        )
    return out
