"""Degeneration: an answer caught in a repetition loop (its windows deflate too well)."""

from __future__ import annotations

import zlib
from typing import Final

from shadoweval.compare.harms.repetition import is_line_loop, is_word_loop

DEGENERATION_WINDOWS_CHARS: Final[tuple[int, ...]] = (512, 1024)
"""Window sizes (characters) scanned for a repetition loop; each slides by a quarter of
its size and the last window of each size ends at the end of the text."""
DEGENERATION_RATIO_MIN: Final = 6.0
"""A window whose UTF-8 bytes deflate to at most 1/6 of their size is a loop."""
DEGENERATION_MIN_CHARS: Final = 256
"""Answers shorter than this are never called degenerate (``Write "Test"`` → ``**TEST**``)."""


def window_compression_ratio(text: str) -> float:
    """The highest deflate compression ratio over the text's sliding windows.

    For each size W in :data:`DEGENERATION_WINDOWS_CHARS` the text is cut into windows of
    W characters starting every W/4 characters (plus one window ending at the last
    character); a text shorter than W is one window. The ratio of a window is
    ``len(utf8) / len(zlib.compress(utf8, 9))`` — how many times deflate (LZ77 + Huffman)
    shrinks it. Returns the maximum over all windows, ``0.0`` for a text shorter than
    :data:`DEGENERATION_MIN_CHARS`.

    Cost: about ``len(text) / 64`` deflate calls on ≤ 4 KiB each (a 15k-character answer
    takes a few milliseconds).
    """
    if len(text) < DEGENERATION_MIN_CHARS:
        return 0.0
    best = 0.0
    for size in DEGENERATION_WINDOWS_CHARS:
        step = size // 4
        last = max(len(text) - size, 0)
        starts = list(range(0, last + 1, step))
        if starts[-1] != last:
            starts.append(last)
        for start in starts:
            raw = text[start : start + size].encode("utf-8")
            best = max(best, len(raw) / len(zlib.compress(raw, 9)))
    return best


def is_degenerate(text: str | None) -> bool:
    """The answer contains a repetition loop (a degeneration of the decoder).

    Three measures, any one fires: the window compression ratio below (long loops, any
    script); a line or sentence, or a block of up to four, repeated 3+ times back to
    back (:func:`~shadoweval.compare.harms.repetition.is_line_loop`: short loops that
    never fill a window, ``Dear [Recipient]`` ×4); a word n-gram loop
    (:func:`~shadoweval.compare.harms.repetition.is_word_loop`). Precision and recall
    of the three together: docs/gate.md "Detectors measured".

    Compression: some window of 512 or 1024 characters of the answer deflates to at most
    1/6 of its UTF-8 size (:func:`window_compression_ratio` ≥
    :data:`DEGENERATION_RATIO_MIN`); answers under :data:`DEGENERATION_MIN_CHARS`
    characters are never flagged.

    Why compression and not word n-grams: the loops in real outputs are word loops
    (``one by one by one``, ``#. #. #.``), line loops (``**No-Ob Career Path:**``
    repeated for 10k characters), but also loops with no word boundary at all
    (``NTENTENTENT``, ``\\t\\t\\t``, ``=#=#=#``, ``暴风雪礼赞暴风雪礼赞``); a word n-gram
    measure such as seq-rep-n misses the last kind and fires on dotted tables of
    contents. Deflate finds any repeated substring within its 32 KiB window, whatever
    the script. A window (not the whole answer) is scored because loops usually take
    over the tail of an otherwise normal answer; two sizes catch short loops (a 600
    character ``a a a a``) and loops with a long period (a repeated 250-character YAML
    block).

    Threshold, measured on ``../shared/data`` (4 AlpacaEval files, 3,220 answers, and
    640 MT-Bench answers): normal answers — essays, markdown tables, code, numbered
    lists — peak at a ratio of 5.0; every answer at 6 or more is a loop (37 of 805
    Llama-3.1-8B-Instruct-Turbo answers, all ≥ 6.7; one Qwen1.5-72B answer, 62.7; one
    Vicuna-13B answer looping in its code, 9.8).

    Sources: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"
    (ICLR; repetition loops of likelihood decoding); Welleck et al. 2020, "Neural Text
    Generation with Unlikelihood Training" (ICLR; seq-rep-n, the share of repeated
    n-grams, the word-level form of the same measure); Radford et al. 2022, "Robust
    Speech Recognition via Large-Scale Weak Supervision" (Whisper: a gzip compression
    ratio above 2.4 marks a repetitive, failed decoding of a 30 s segment).
    """
    if window_compression_ratio(text or "") >= DEGENERATION_RATIO_MIN:
        return True
    return is_line_loop(text) or is_word_loop(text)
