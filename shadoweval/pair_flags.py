"""Pair flags: what an operator filters divergent pairs by (errors, empties, format, leaks).

A :class:`PairFlag` is a yes/no fact about one :class:`~shadoweval.records.PairScore`,
derived from the score alone by :func:`pair_flags`. Each flag has a stable bit
(:data:`PAIR_FLAG_BITS`, powers of two) so that the set of a pair's flags is stored as one
integer bitmask (``pair_score.flags``) and a filter "has all of these flags" is the SQL
predicate ``(flags & mask) = mask`` on SQLite and PostgreSQL alike.

Bits are part of the stored data: never renumber a member; add new members with the next
free bit (and a migration that backfills them).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from functools import partial
from typing import Literal

from shadoweval.errors import InvalidDataError
from shadoweval.records import FinishReason, FormatFlags, PairScore, ToolCallFlags

__all__ = [
    "PAIR_FLAG_BITS",
    "FormatSuccessFlag",
    "PairFlag",
    "flags_from_mask",
    "flags_mask",
    "format_ok",
    "format_ok_pair",
    "pair_flags",
]


class PairFlag(enum.StrEnum):
    """One fact about a pair; see :func:`pair_flags` for each member's rule."""

    CANDIDATE_ERROR = "candidate_error"
    BASELINE_ERROR = "baseline_error"
    CANDIDATE_INFRA_ERROR = "candidate_infra_error"
    BASELINE_INFRA_ERROR = "baseline_infra_error"
    CANDIDATE_EMPTY = "candidate_empty"
    BASELINE_EMPTY = "baseline_empty"
    FORMAT_REGRESSION = "format_regression"
    FORMAT_FIXED = "format_fixed"
    TEMPLATE_LEAK = "template_leak"
    FINISH_REASON_CHANGED = "finish_reason_changed"
    BELOW_NOISE_FLOOR = "below_noise_floor"
    NO_SIMILARITY = "no_similarity"
    CANDIDATE_HARM = "candidate_harm"
    BASELINE_HARM = "baseline_harm"
    TOOL_CHANGED = "tool_changed"
    CACHE_HIT = "cache_hit"


PAIR_FLAG_BITS: dict[PairFlag, int] = {flag: 1 << i for i, flag in enumerate(PairFlag)}
"""Stable bit of each flag (``candidate_error`` = 1, ``baseline_error`` = 2, … 2**15)."""

_ALL_BITS = sum(PAIR_FLAG_BITS.values())
_FLAG_ORDER: tuple[PairFlag, ...] = tuple(PairFlag)
"""The members in definition order (iterating the enum class builds a new list each time:
tens of microseconds per pair written)."""

FormatSuccessFlag = Literal["strict", "fence_stripped", "extracted"]
"""Name of the :class:`~shadoweval.records.FormatFlags` field that counts as parsed."""

DEFAULT_SUCCESS_FLAG: FormatSuccessFlag = "fence_stripped"
"""The default policy's ``format_parse.success_flag`` (``stats/default_policy.yaml``)."""


def format_ok(
    *,
    format_expected: bool,
    errored: bool,
    empty: bool,
    flags: FormatFlags | None,
    tools: ToolCallFlags | None,
    infra_error: bool = False,
    success_flag: FormatSuccessFlag = DEFAULT_SUCCESS_FLAG,
) -> float:
    """Format-parse success of one side of a pair: 1.0, 0.0, or NaN when not applicable.

    The gate's rule (``shadoweval.stats.frame.pairs_frame`` uses it with the policy's success flag;
    the flags here with the default one).

    Rules, in order:

    0. the side had an infrastructure error ⇒ NaN (the model never answered: not a
       format failure; such pairs are gated by ``infra_error_rate``);
    1. the side errored and a format was expected ⇒ 0;
    2. the side made tool calls (``tools.calls > 0``) ⇒ ``tools.schema_valid``;
    3. the output was empty and a format was expected ⇒ 0 (an empty answer to a
       structured request is a format failure, not a missing value);
    4. format flags are present ⇒ the policy's ``success_flag`` and ``schema_valid`` is
       not False;
    5. otherwise NaN (not scored, or no format requested).

    Rule 2 comes before rule 3 because a tool-call-only answer has no text content.
    """
    if infra_error:
        return math.nan
    if errored and format_expected:
        return 0.0
    if tools is not None and tools.calls > 0:
        return 1.0 if tools.schema_valid else 0.0
    if empty and format_expected:
        return 0.0
    if flags is not None:
        parsed = bool(getattr(flags, success_flag))
        return 1.0 if parsed and flags.schema_valid is not False else 0.0
    return math.nan


def format_ok_pair(
    score: PairScore, success_flag: FormatSuccessFlag = DEFAULT_SUCCESS_FLAG
) -> tuple[float, float]:
    """The pair's ``(baseline, candidate)`` format-parse success: :func:`format_ok` of each
    side of ``score`` with ``success_flag``."""
    side_ok = partial(format_ok, format_expected=score.format_expected, success_flag=success_flag)
    sides = zip(
        (score.baseline_error, score.candidate_error),
        (score.baseline_empty, score.candidate_empty),
        (score.baseline_format, score.candidate_format),
        (score.baseline_tools, score.candidate_tools),
        (score.baseline_infra_error, score.candidate_infra_error),
        strict=True,
    )
    baseline, candidate = (
        side_ok(errored=errored, empty=empty, flags=flags, tools=tools, infra_error=infra)
        for errored, empty, flags, tools, infra in sides
    )
    return baseline, candidate


_FIELD_FLAGS: tuple[tuple[PairFlag, Callable[[PairScore], object]], ...] = (
    (PairFlag.CANDIDATE_ERROR, lambda score: score.candidate_error),
    (PairFlag.BASELINE_ERROR, lambda score: score.baseline_error),
    (PairFlag.CANDIDATE_INFRA_ERROR, lambda score: score.candidate_infra_error),
    (PairFlag.BASELINE_INFRA_ERROR, lambda score: score.baseline_infra_error),
    (PairFlag.CANDIDATE_EMPTY, lambda score: score.candidate_empty),
    (PairFlag.BASELINE_EMPTY, lambda score: score.baseline_empty),
    (PairFlag.TEMPLATE_LEAK, lambda score: score.template_leaks),
    (PairFlag.CANDIDATE_HARM, lambda score: score.candidate_harms),
    (PairFlag.BASELINE_HARM, lambda score: score.baseline_harms),
    (PairFlag.TOOL_CHANGED, lambda score: score.tool_changes),
)
"""The flags set by one field of the score alone: when the field is true (non-empty)."""


def pair_flags(score: PairScore) -> tuple[PairFlag, ...]:
    """Return the flags of one pair, in :class:`PairFlag` order.

    Rules:

    * ``candidate_error`` / ``baseline_error`` / ``*_infra_error`` / ``*_empty``: the
      score's own booleans.
    * ``format_regression``: a format was expected, the baseline's output parses and the
      candidate's does not, under the default policy's success flag (``fence_stripped``;
      tool-call answers by schema validity; see :func:`format_ok`). ``format_fixed``: the
      reverse. A side where the rule does not apply (infrastructure error, nothing scored)
      sets neither.
    * ``template_leak``: the candidate's output contains role markers
      (``score.template_leaks`` is not empty).
    * ``finish_reason_changed``: neither side errored, both normalized finish reasons are
      known, and they differ (``stop`` vs ``length``, …). ``unknown`` on either side (an
      imported baseline records none) is not a change.
    * ``below_noise_floor``: both ``similarity`` and ``noise_similarity`` are known and
      ``similarity < noise_similarity`` (the candidate diverges more than the baseline
      from itself).
    * ``no_similarity``: ``similarity`` is ``None`` (either side errored).
    * ``candidate_harm`` / ``baseline_harm``: a harm detector fired on that side
      (``score.candidate_harms`` / ``score.baseline_harms``, :class:`~shadoweval.records.HarmKind`).
    * ``tool_changed``: the tool behaviour differs (``score.tool_changes`` is not empty).
    * ``cache_hit``: either side's answer was served from a cache
      (``score.baseline_cache_hit`` / ``score.candidate_cache_hit``; the pair is left out
      of the latency checks).

    Records scored before the harm detectors existed have no harms and no tool changes,
    so the three harm/tool bits need no backfill (they are 0 there); records scored
    before cache-hit rules existed have no cache hits, so ``cache_hit`` needs none either.
    """
    found = {flag for flag, fired in _FIELD_FLAGS if fired(score)}
    if score.format_expected:
        baseline_ok, candidate_ok = format_ok_pair(score)
        if baseline_ok == 1.0 and candidate_ok == 0.0:
            found.add(PairFlag.FORMAT_REGRESSION)
        elif baseline_ok == 0.0 and candidate_ok == 1.0:
            found.add(PairFlag.FORMAT_FIXED)
    if (
        not score.baseline_error
        and not score.candidate_error
        and FinishReason.UNKNOWN
        not in (score.baseline_finish_reason, score.candidate_finish_reason)
        and score.baseline_finish_reason != score.candidate_finish_reason
    ):
        found.add(PairFlag.FINISH_REASON_CHANGED)
    if score.similarity is None:
        found.add(PairFlag.NO_SIMILARITY)
    elif score.noise_similarity is not None and score.similarity < score.noise_similarity:
        found.add(PairFlag.BELOW_NOISE_FLOOR)
    if score.baseline_cache_hit or score.candidate_cache_hit:
        found.add(PairFlag.CACHE_HIT)
    return tuple(flag for flag in _FLAG_ORDER if flag in found)


def flags_mask(flags: Iterable[PairFlag | str]) -> int:
    """Return the bitmask of ``flags`` (0 for none; repeats are harmless).

    Raises:
        InvalidDataError: (a ``ValueError``) a string that is not a :class:`PairFlag`
            value; the message names it and the known flags.
    """
    mask = 0
    for flag in flags:
        try:
            member = PairFlag(flag)
        except ValueError:
            known = ", ".join(f.value for f in PairFlag)
            raise InvalidDataError(
                f"unknown pair flag {flag!r}; known flags: {known}", name="flags", count=1
            ) from None
        mask |= PAIR_FLAG_BITS[member]
    return mask


def flags_from_mask(mask: int) -> tuple[PairFlag, ...]:
    """Return the flags whose bits are set in ``mask``, in :class:`PairFlag` order.

    Raises:
        InvalidDataError: (a ``ValueError``) ``mask`` is negative or has bits no flag uses.
    """
    if mask < 0 or mask & ~_ALL_BITS:
        raise InvalidDataError(
            f"pair flag mask {mask} has bits outside 0..{_ALL_BITS}", name="flags", count=1
        )
    return tuple(flag for flag, bit in PAIR_FLAG_BITS.items() if mask & bit)
