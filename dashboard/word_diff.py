"""Word-level diff of a baseline and a candidate answer, as safe HTML.

Tokens are words and the whitespace between them (so line breaks survive); the
alignment is :class:`difflib.SequenceMatcher`'s (Ratcliff/Obershelp "gestalt pattern
matching", without its automatic junk heuristic). Every piece of text is HTML-escaped
before ``<del>``/``<ins>`` markup is added, so model output can never inject markup.
"""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass

__all__ = ["MAX_DIFF_TOKENS", "WordDiff", "word_diff"]

MAX_DIFF_TOKENS = 6000
"""Tokens (words and whitespace runs) per side that are aligned; the rest is listed after.

``SequenceMatcher`` is quadratic in the worst case: this keeps one diff well under a
second."""

_TOKENS = re.compile(r"\s+|\S+")

_DEL = '<del style="background-color:#f8d7da;color:#721c24;">'
_INS = '<ins style="background-color:#d4edda;color:#155724;text-decoration:none;">'


@dataclass(frozen=True)
class WordDiff:
    """A diff as HTML (``html``) and its counts of words removed, added and kept."""

    html: str
    removed: int
    added: int
    kept: int
    truncated: bool


def _words(tokens: list[str]) -> int:
    return sum(1 for t in tokens if not t.isspace())


def word_diff(baseline: str, candidate: str) -> WordDiff:
    """Diff ``baseline`` → ``candidate`` word by word.

    Returns:
        A :class:`WordDiff` whose ``html`` is one ``<div>`` (``white-space: pre-wrap``):
        kept text plain, baseline-only words in ``<del>``, candidate-only words in
        ``<ins>``. Beyond :data:`MAX_DIFF_TOKENS` tokens per side the remainders are not
        aligned: they follow as one deletion and one insertion, and ``truncated`` is true.
    """
    a = _TOKENS.findall(baseline)
    b = _TOKENS.findall(candidate)
    truncated = len(a) > MAX_DIFF_TOKENS or len(b) > MAX_DIFF_TOKENS
    a_head, a_tail = a[:MAX_DIFF_TOKENS], a[MAX_DIFF_TOKENS:]
    b_head, b_tail = b[:MAX_DIFF_TOKENS], b[MAX_DIFF_TOKENS:]
    parts: list[str] = []
    removed = added = kept = 0
    matcher = difflib.SequenceMatcher(None, a_head, b_head, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            parts.append(html.escape("".join(a_head[i1:i2])))
            kept += _words(a_head[i1:i2])
            continue
        if i2 > i1:
            parts.append(_DEL + html.escape("".join(a_head[i1:i2])) + "</del>")
            removed += _words(a_head[i1:i2])
        if j2 > j1:
            parts.append(_INS + html.escape("".join(b_head[j1:j2])) + "</ins>")
            added += _words(b_head[j1:j2])
    if a_tail:
        parts.append(_DEL + html.escape("".join(a_tail)) + "</del>")
        removed += _words(a_tail)
    if b_tail:
        parts.append(_INS + html.escape("".join(b_tail)) + "</ins>")
        added += _words(b_tail)
    body = "".join(parts)
    return WordDiff(
        html=f'<div style="white-space:pre-wrap;line-height:1.5;">{body}</div>',
        removed=removed,
        added=added,
        kept=kept,
        truncated=truncated,
    )
