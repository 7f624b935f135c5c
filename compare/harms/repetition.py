"""Repetition loops too short to deflate: a line or sentence said 3+ times in a row, a word loop.

:mod:`shadoweval.compare.harms.degeneration` scores 512- and 1024-character windows by their
deflate ratio; a small model that says the same 60-character line three times and stops
(Gemma-3-270M on 13 of 60 answers, issue 29 item 8d) never fills such a window. The two
measures here look at the units instead: the answer's lines and sentences, normalised, and
its words. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Final

from shadoweval.compare.harms.language import code_fence_segments

LOOP_MIN_REPEATS: Final = 3
"""A block of lines or sentences repeated back to back this many times is a loop."""
LOOP_MAX_PERIOD_UNITS: Final = 4
"""Longest block (in lines or sentences) whose back-to-back repeats are looked for."""
WORD_LOOP_MIN_REPEATS: Final = 5
"""A word n-gram repeated back to back this many times (and covering
:data:`WORD_LOOP_MIN_WORDS` words) is a loop."""
WORD_LOOP_MIN_WORDS: Final = 10
"""Fewest words a word loop covers (``no, no, no`` is emphasis; ten ``celda`` are not)."""
WORD_LOOP_MAX_N: Final = 8
"""Longest word n-gram whose back-to-back repeats are looked for."""

_LIST_MARKER: Final = re.compile(r"^(?:[-*+•>]|\d{1,3}[.)]|[a-z][.)]|#{1,6})\s+", re.IGNORECASE)
_EMPHASIS: Final = re.compile(r"[*_`~]+")
_SENTENCE_END: Final = re.compile(r"(?<=[.!?。！？])\s+")
_WORD: Final = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def repetition_units(text: str | None, *, sentences: bool = True) -> list[str]:
    """The answer's lines and sentences, normalised, in order: what a line loop repeats.

    Code blocks (fenced with ```` ``` ```` or ``~~~``) are left out and each is replaced by
    a unit of its own that matches nothing, so a label repeated around code blocks
    (``Example:`` / code / ``Example:``) is not back to back. Each line loses its list
    marker (``-``, ``*``, ``1.``, ``a)``, ``#``), markdown emphasis and case; whitespace is
    collapsed; a line with no letter or digit (blank, ``---``, a table separator
    ``|---|:--|``, ``____``) is no unit. With ``sentences`` (the default) a line is then
    split into sentences after ``.``, ``!``, ``?`` (and their CJK forms) followed by
    whitespace; without, each line is one unit (a paragraph of many sentences).
    """
    if not text:
        return []
    units: list[str] = []
    for index, (segment, is_code) in enumerate(code_fence_segments(text)):
        if is_code:
            units.append(f"\x00code{index}")
            continue
        for raw in segment.splitlines():
            line = _EMPHASIS.sub("", _LIST_MARKER.sub("", raw.strip()))
            line = " ".join(line.lower().split())
            if not any(char.isalnum() for char in line):
                continue
            if sentences:
                units.extend(part for part in _SENTENCE_END.split(line) if part)
            else:
                units.append(line)
    return units


def longest_tandem_repeat(items: list[str], max_period: int) -> tuple[int, int]:
    """The most back-to-back repeats of one block in ``items``, as ``(repeats, period)``.

    A block of ``p`` consecutive items (1 ≤ p ≤ ``max_period``) followed directly by
    itself ``r - 1`` more times is a tandem repeat with ``r`` repeats; a partial last copy
    does not count. Returns the largest ``r`` over all blocks (ties: the shortest
    period), ``(1, 1)`` for a list with no repeat and ``(0, 0)`` for an empty one.
    Cost: O(len(items) × max_period).
    """
    if not items:
        return (0, 0)
    best = (1, 1)
    for period in range(1, max_period + 1):
        run = 0
        for index in range(period, len(items)):
            run = run + 1 if items[index] == items[index - period] else 0
            repeats = run // period + 1
            if repeats > best[0]:
                best = (repeats, period)
    return best


def is_line_loop(text: str | None) -> bool:
    """A line or sentence (or a block of up to four) repeated 3+ times back to back.

    Definition: :func:`longest_tandem_repeat` of :func:`repetition_units` — split into
    sentences, or whole lines (a repeated paragraph of five sentences has a period of
    five sentences but one line) — has at least :data:`LOOP_MIN_REPEATS` repeats with a
    period of at most :data:`LOOP_MAX_PERIOD_UNITS` units.

    Back to back, not anywhere: a song's chorus, a recipe's ``Prep time: 15 minutes`` or
    a questionnaire's ``If yes, please describe:`` recur between other lines by design
    (4 to 23 of 805 AlpacaEval answers per model, loops aside, repeat a 3-word line 3+
    times somewhere; docs/gate.md "Detectors measured", ``scripts/detector_recall.py``).
    """
    return any(
        longest_tandem_repeat(repetition_units(text, sentences=split), LOOP_MAX_PERIOD_UNITS)[0]
        >= LOOP_MIN_REPEATS
        for split in (True, False)
    )


def is_word_loop(text: str | None) -> bool:
    """A word n-gram repeated back to back: ``celda celda celda …``, ``a 0 a 0 a 0 …``.

    Definition: over the answer's words (runs of letters and digits, lower case; code
    blocks left out, punctuation skipped), some n-gram with
    1 ≤ n ≤ :data:`WORD_LOOP_MAX_N` repeats back to back at least
    :data:`WORD_LOOP_MIN_REPEATS` times and the repeats cover at least
    :data:`WORD_LOOP_MIN_WORDS` words. ``who wears short shorts`` three times (a quoted
    jingle) is not a loop, nor ``4 (columns) * 4 (columns) * 4 (columns) * 4 (columns)``
    (a product written out, Qwen1.5-72B-Chat on AlpacaEval row 272).

    Source: Welleck et al. 2020, "Neural Text Generation with Unlikelihood Training"
    (ICLR; seq-rep-n, repeated n-grams as the signature of degenerate decoding).
    """
    if not text:
        return False
    prose = " ".join(segment for segment, is_code in code_fence_segments(text) if not is_code)
    words = [word.lower() for word in _WORD.findall(prose)]
    for n in range(1, WORD_LOOP_MAX_N + 1):
        run = 0
        for index in range(n, len(words)):
            run = run + 1 if words[index] == words[index - n] else 0
            repeats = run // n + 1
            if repeats >= WORD_LOOP_MIN_REPEATS and repeats * n >= WORD_LOOP_MIN_WORDS:
                return True
    return False
