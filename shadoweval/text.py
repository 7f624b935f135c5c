"""Text helpers every stage shares.

:func:`is_blank` is the one definition of an *empty answer*: nothing a reader can see.
"""

from __future__ import annotations

import unicodedata


def is_blank(text: str | None) -> bool:
    """True when ``text`` shows nothing: ``None``, empty, or only white space
    (:meth:`str.isspace`) and invisible format characters (Unicode category ``Cf``: zero
    width space U+200B, zero width (non-)joiner U+200C/U+200D, word joiner U+2060,
    byte-order mark U+FEFF, soft hyphen U+00AD, direction marks …).

    :meth:`str.strip` keeps the format characters, so an answer of one zero width space
    was not "empty" before this (issue 13).
    """
    if not text:
        return True
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)
