"""Text helpers every stage shares.

:func:`is_blank` is the one definition of an *empty answer*: nothing a reader can see.
:func:`held_invalid_utf8` tells a text read with ``surrogateescape`` that was not UTF-8.
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


def held_invalid_utf8(text: str) -> bool:
    """Whether ``text``, read with ``errors="surrogateescape"``, held bytes that are not
    UTF-8 (they are its lone surrogates, which UTF-8 cannot encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# ------------------------------------------------------------------ scripts

SCRIPT_MIN_LETTERS = 20
"""Fewest letters from which :func:`dominant_script` names a script (shorter: ``None``)."""

SCRIPT_SAMPLE_CHARS = 4000
"""Characters of a text :func:`dominant_script` reads (the first ones)."""

# First word of a letter's Unicode character name → the script's name (Unicode Standard
# Annex #24 script names). Names whose first word is not the script are mapped here;
# every other letter is named by the first word of its character name, title-cased.
_NAME_TO_SCRIPT: dict[str, str] = {
    "CJK": "Han",
    "IDEOGRAPHIC": "Han",
    "HIRAGANA": "Kana",
    "KATAKANA": "Kana",
    "HALFWIDTH": "Kana",  # NFKC folds half-width forms; the rest are katakana
    "HANGUL": "Hangul",
    "LATIN": "Latin",
}


def _script_of(ch: str) -> str | None:
    """The script of one letter (category ``L*``), ``None`` for anything else."""
    if ch.isascii():
        return "Latin" if ch.isalpha() else None
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    if not name:
        return None
    first = name.split(" ", 1)[0]
    return _NAME_TO_SCRIPT.get(first, first.title())


def script_letter_counts(text: str) -> dict[str, int]:
    """Letters per script in the first :data:`SCRIPT_SAMPLE_CHARS` characters of ``text``.

    Args:
        text: any text; NFKC-normalized first (full-width Latin ``Ａ`` counts as Latin).

    Returns:
        Script name → number of letters (Unicode category ``L*``), most frequent first.
        Script names follow Unicode Standard Annex #24 (``Latin``, ``Han``, ``Cyrillic``,
        ``Arabic``, ``Devanagari``, ``Hangul``, ``Greek``, ``Hebrew``, ``Thai`` …), except
        that Hiragana and Katakana are one ``Kana``. Digits, punctuation, symbols and
        emoji are not letters and count for no script.

    Method: the script of a letter is read off its Unicode character name (``CJK UNIFIED
    IDEOGRAPH-4E2D`` → Han, ``CYRILLIC SMALL LETTER A`` → Cyrillic): Python's
    :mod:`unicodedata` has no Script property, and for letters the name's first word is
    the script except for the few mapped explicitly.
    """
    sample = unicodedata.normalize("NFKC", text[:SCRIPT_SAMPLE_CHARS])
    counts: dict[str, int] = {}
    for ch in sample:
        script = _script_of(ch)
        if script is not None:
            counts[script] = counts.get(script, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def dominant_script(text: str | None) -> str | None:
    """The script most of ``text``'s letters are written in, or ``None`` when unknown.

    ``None`` when the text has fewer than :data:`SCRIPT_MIN_LETTERS` letters (a number,
    a code fragment, a one-word answer: too little to tell). Ties go to the name first in
    alphabetical order, so the answer is deterministic. See :func:`script_letter_counts`.
    """
    if not text:
        return None
    counts = script_letter_counts(text)
    if sum(counts.values()) < SCRIPT_MIN_LETTERS:
        return None
    return next(iter(counts))
