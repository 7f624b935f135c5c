"""Pair facts: the values of a pair score that the gate's pairs table is built from, packed.

Reading and validating every stored :class:`~shadoweval.records.PairScore` record costs
about 100 µs per pair (21 s for the dashboard's cold overview of 200,000 pairs); the
pairs table (:func:`shadoweval.stats.frame.pairs_frame`) needs only a few dozen numbers and flags of
each. :func:`pack_pair_facts` packs them into one fixed-layout little-endian record
(:data:`PAIR_FACTS_DTYPE`, :data:`PAIR_FACTS_BYTES` bytes), stored with the score in
``pair_score.facts`` (migration 0008) and written by the same upsert, so a rescored pair's
facts are replaced with its record. :func:`unpack_pair_facts` turns a run's packed rows
into one numpy structured array without a Python loop per pair, and
:func:`shadoweval.stats.frame.pairs_frame_from_facts` builds exactly the table
:func:`~shadoweval.stats.frame.pairs_frame` builds from the records.

Policy-dependent values are stored for every choice the policy may make: format-parse
success for each :data:`FORMAT_SUCCESS_FLAGS` entry. The runaway length ratio is computed
by the table builder from the stored answer lengths.

Encodings: a missing float (``None``) is NaN; a tri-state (``True`` / ``False`` /
unknown, or 1.0 / 0.0 / NaN) is the int8 1 / 0 / −1 (:data:`TRI_MISSING`); boolean
fields are the bits :data:`FACT_BITS` of ``bits``; harm kinds and tool changes are bit
``i`` for the ``i``-th member of :class:`~shadoweval.records.HarmKind` /
:class:`~shadoweval.records.ToolChange` (append new members only, as with
:data:`shadoweval.pair_flags.PAIR_FLAG_BITS`). ``layout`` is :data:`PAIR_FACTS_LAYOUT`; a
reader treats a row of another layout as missing and reads its record instead.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from shadoweval.pair_flags import FormatSuccessFlag
from shadoweval.records import (
    FinishReason,
    FormatFlags,
    HarmKind,
    PairScore,
    ToolCallFlags,
    ToolChange,
)

__all__ = [
    "DERIVED_BITS",
    "FACT_BITS",
    "FLOAT_FACTS",
    "FORMAT_SUCCESS_FLAGS",
    "LATENCY_SOURCES",
    "PAIR_FACTS_BYTES",
    "PAIR_FACTS_DTYPE",
    "PAIR_FACTS_LAYOUT",
    "TRI_FACTS",
    "TRI_MISSING",
    "PairFacts",
    "epoch_s",
    "pack_pair_facts",
    "tool_text",
    "uncovered_scripts",
    "unpack_pair_facts",
]

PAIR_FACTS_LAYOUT = 4
"""Layout number stored in each packed row's first byte (4: ``candidate_sent_at_s`` added;
an older row is read from its record, where the field is unknown)."""

FORMAT_SUCCESS_FLAGS: tuple[FormatSuccessFlag, ...] = get_args(FormatSuccessFlag)
"""The policy's possible ``format_parse.success_flag`` values, in the stored order."""

LATENCY_SOURCES: tuple[str, ...] = ("live", "recorded", "baseline_repeat", "missing", "co_timed")
"""``PairScore.latency_baseline_source`` values; the stored code is the index (append new
values only: a stored code keeps its meaning)."""

TRI_MISSING = -1
"""The int8 code of an unknown tri-state (NaN)."""

FACT_BITS: dict[str, int] = {
    name: 1 << i
    for i, name in enumerate(
        (
            "streamed",
            "baseline_error",
            "candidate_error",
            "baseline_empty",
            "candidate_empty",
            "baseline_infra_error",
            "candidate_infra_error",
            "format_expected",
            "baseline_cache_hit",
            "candidate_cache_hit",
            "candidate_warmup",
            "baseline_interrupted",
            "candidate_interrupted",
            "candidate_context_length",
            "baseline_finish_length",
            "candidate_finish_length",
        )
    )
}
"""Bit of each boolean :class:`~shadoweval.records.PairScore` field in ``bits``, and of the
derived flags :data:`DERIVED_BITS` (append new names only)."""

DERIVED_BITS: dict[str, Callable[[PairScore], bool]] = {
    "baseline_finish_length": lambda s: s.baseline_finish_reason == FinishReason.LENGTH,
    "candidate_finish_length": lambda s: s.candidate_finish_reason == FinishReason.LENGTH,
}
"""Flags of :data:`FACT_BITS` that are not a :class:`~shadoweval.records.PairScore` field:
that side's answer ended with ``finish_reason: length`` (its token budget; the cause
attribution of :mod:`shadoweval.stats.gate.attribution` reads them)."""

FLOAT_FACTS: tuple[str, ...] = (
    "similarity",
    "noise_similarity",
    "baseline_e2e_ms",
    "candidate_e2e_ms",
    "baseline_ttft_ms",
    "candidate_ttft_ms",
    "baseline_ttfc_ms",
    "candidate_ttfc_ms",
    "baseline_output_tokens",
    "candidate_output_tokens",
    "baseline_output_chars",
    "candidate_output_chars",
    "prompt_token_ratio",
    "candidate_sent_at_s",
)
TRI_FACTS: tuple[str, ...] = (
    "baseline_tool_text",
    "candidate_tool_text",
    "sampled",
    "noise_identical",
    "exact_differs",
)
"""The float and three-valued :class:`~shadoweval.records.PairScore` fields a packed row holds
(in this order); readers of the packed rows (``shadoweval.stats.frame``) iterate the same tuples.
``candidate_sent_at_s`` is ``PairScore.candidate_sent_at`` in seconds since the Unix epoch
(NaN unknown): the replay order."""

PAIR_FACTS_DTYPE = np.dtype(
    [
        ("layout", "u1"),
        ("captured_at_us", "<i8"),
        *((name, "<f8") for name in FLOAT_FACTS),
        ("bits", "<i8"),
        ("baseline_harms", "<i4"),
        ("candidate_harms", "<i4"),
        ("tool_changes", "<i4"),
        ("baseline_format_ok", "i1", (len(FORMAT_SUCCESS_FLAGS),)),
        ("candidate_format_ok", "i1", (len(FORMAT_SUCCESS_FLAGS),)),
        *((name, "i1") for name in TRI_FACTS),
        ("latency_baseline_source", "i1"),
    ]
)
"""One packed row (no padding): ``captured_at_us`` is microseconds since the Unix epoch
(UTC); the float fields are the score's values (NaN for ``None``); ``*_format_ok`` is
:func:`~shadoweval.pair_flags.format_ok` of that side under each
:data:`FORMAT_SUCCESS_FLAGS` flag (tri-state codes); ``*_tool_text`` is :func:`tool_text`
of that side; ``latency_baseline_source`` indexes :data:`LATENCY_SOURCES`."""

_STRUCT = struct.Struct(
    "<Bq"
    + "d" * len(FLOAT_FACTS)
    + "q"
    + "iii"
    + "b" * (2 * len(FORMAT_SUCCESS_FLAGS))
    + "b" * len(TRI_FACTS)
    + "b"
)
PAIR_FACTS_BYTES = _STRUCT.size
"""Bytes of one packed row (``PAIR_FACTS_DTYPE.itemsize``)."""
if PAIR_FACTS_DTYPE.itemsize != PAIR_FACTS_BYTES:  # pragma: no cover - a layout typo
    raise AssertionError("PAIR_FACTS_DTYPE and its struct format disagree")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HARM_BIT: dict[HarmKind, int] = {kind: 1 << i for i, kind in enumerate(HarmKind)}
_TOOL_BIT: dict[ToolChange, int] = {change: 1 << i for i, change in enumerate(ToolChange)}


def _float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def epoch_s(value: datetime | None) -> float:
    """``value`` in seconds since the Unix epoch, a float (NaN for ``None``)."""
    return math.nan if value is None else (value - _EPOCH) / timedelta(seconds=1)


def _tri(value: bool | float | None) -> int:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return TRI_MISSING
    return 1 if value else 0


def tool_text(tools: ToolCallFlags | None, empty: bool) -> float:
    """1.0 the side answered in text where tools were offered, 0.0 it called a tool, NaN
    otherwise (no tool flags: no tools offered or the side errored; or an empty answer)."""
    calls = getattr(tools, "calls", None)
    if calls is None:
        return math.nan
    if calls > 0:
        return 0.0
    return math.nan if empty else 1.0


def _format_codes(
    *,
    format_expected: bool,
    errored: bool,
    empty: bool,
    flags: FormatFlags | None,
    tools: ToolCallFlags | None,
    infra_error: bool,
) -> tuple[int, ...]:
    """:func:`~shadoweval.pair_flags.format_ok` of one side under every
    :data:`FORMAT_SUCCESS_FLAGS` flag, as tri-state codes.

    The same rules in the same order; only the last (format flags present) depends on the
    flag, so the others are decided once (this runs for every pair written; the tests
    compare the result with ``format_ok`` on every branch).
    """
    if infra_error:
        return _ALL_MISSING
    if errored and format_expected:
        return _ALL_FAILED
    if tools is not None and tools.calls > 0:
        return _ALL_PASSED if tools.schema_valid else _ALL_FAILED
    if empty and format_expected:
        return _ALL_FAILED
    if flags is not None:
        valid = flags.schema_valid is not False
        return tuple(1 if valid and getattr(flags, name) else 0 for name in FORMAT_SUCCESS_FLAGS)
    return _ALL_MISSING


_ALL_MISSING = (TRI_MISSING,) * len(FORMAT_SUCCESS_FLAGS)
_ALL_FAILED = (0,) * len(FORMAT_SUCCESS_FLAGS)
_ALL_PASSED = (1,) * len(FORMAT_SUCCESS_FLAGS)


def _mask(values: Iterable[object], table: Mapping[Any, int]) -> int:
    mask = 0
    for value in values:
        mask |= table[value]
    return mask


def pack_pair_facts(score: PairScore) -> bytes:
    """The packed facts of ``score`` (:data:`PAIR_FACTS_DTYPE`, :data:`PAIR_FACTS_BYTES`).

    Raises:
        ValueError: ``score.latency_baseline_source`` is not one of
            :data:`LATENCY_SOURCES` (the record model allows no other).
    """
    values = score.__dict__  # the fields' values (pydantic keeps them there)
    bits = 0
    for name, bit in FACT_BITS.items():
        derived = DERIVED_BITS.get(name)
        if derived(score) if derived is not None else values[name]:
            bits |= bit
    captured_us = (score.captured_at - _EPOCH) // timedelta(microseconds=1)
    return _STRUCT.pack(
        PAIR_FACTS_LAYOUT,
        captured_us,
        _float(score.similarity),
        _float(score.noise_similarity),
        _float(score.e2e_ms.baseline),
        _float(score.e2e_ms.candidate),
        _float(score.ttft_ms.baseline),
        _float(score.ttft_ms.candidate),
        _float(score.ttfc_ms.baseline),
        _float(score.ttfc_ms.candidate),
        _float(score.output_tokens.baseline),
        _float(score.output_tokens.candidate),
        _float(score.output_chars.baseline),
        _float(score.output_chars.candidate),
        _float(score.prompt_token_ratio),
        epoch_s(score.candidate_sent_at),
        bits,
        _mask(score.baseline_harms, _HARM_BIT),
        _mask(score.candidate_harms, _HARM_BIT),
        _mask(score.tool_changes, _TOOL_BIT),
        *_format_codes(
            format_expected=score.format_expected,
            errored=score.baseline_error,
            empty=score.baseline_empty,
            flags=score.baseline_format,
            tools=score.baseline_tools,
            infra_error=score.baseline_infra_error,
        ),
        *_format_codes(
            format_expected=score.format_expected,
            errored=score.candidate_error,
            empty=score.candidate_empty,
            flags=score.candidate_format,
            tools=score.candidate_tools,
            infra_error=score.candidate_infra_error,
        ),
        _tri(tool_text(score.baseline_tools, score.baseline_empty)),
        _tri(tool_text(score.candidate_tools, score.candidate_empty)),
        _tri(score.sampled),
        _tri(score.noise_identical),
        _tri(score.exact_differs),
        LATENCY_SOURCES.index(score.latency_baseline_source),
    )


def unpack_pair_facts(packed: Sequence[bytes]) -> npt.NDArray[np.void]:
    """Packed rows as one structured array of :data:`PAIR_FACTS_DTYPE`, shape ``(n,)``.

    Raises:
        ValueError: a row is not :data:`PAIR_FACTS_BYTES` long or not of layout
            :data:`PAIR_FACTS_LAYOUT` (naming the first such row's position).
    """
    for i, row in enumerate(packed):
        if len(row) != PAIR_FACTS_BYTES:
            raise ValueError(
                f"packed pair facts row {i} has {len(row)} bytes, expected {PAIR_FACTS_BYTES}"
            )
    values = np.frombuffer(b"".join(packed), dtype=PAIR_FACTS_DTYPE)
    wrong = np.flatnonzero(values["layout"] != PAIR_FACTS_LAYOUT)
    if wrong.size:
        raise ValueError(
            f"packed pair facts row {int(wrong[0])} has layout "
            f"{int(values['layout'][wrong[0]])}, expected {PAIR_FACTS_LAYOUT}"
        )
    return values


@dataclass(frozen=True)
class PairFacts:
    """One run's pairs as columns: what :func:`shadoweval.stats.frame.pairs_frame_from_facts` reads.

    Attributes:
        exchange_ids: one per pair, in storage order.
        task_types: the pair's task type, same order.
        uncovered_scripts: the pair's ``similarity_detail.uncovered_scripts`` joined with
            commas (``""`` none), same order.
        values: the packed facts, :data:`PAIR_FACTS_DTYPE`, shape ``(n,)``.

    Raises:
        ValueError: the four do not have one length.
    """

    exchange_ids: tuple[str, ...]
    task_types: tuple[str, ...]
    uncovered_scripts: tuple[str, ...]
    values: npt.NDArray[np.void]

    def __post_init__(self) -> None:
        n = len(self.exchange_ids)
        lengths = (len(self.task_types), len(self.uncovered_scripts), len(self.values))
        if any(length != n for length in lengths):
            raise ValueError(
                f"PairFacts columns differ in length: exchange_ids {n}, task_types "
                f"{lengths[0]}, uncovered_scripts {lengths[1]}, values {lengths[2]}"
            )

    def __len__(self) -> int:
        return len(self.exchange_ids)

    @classmethod
    def of_scores(cls, scores: Sequence[PairScore]) -> PairFacts:
        """The facts of ``scores`` (in their order), packed and unpacked in memory."""
        return cls(
            exchange_ids=tuple(s.exchange_id for s in scores),
            task_types=tuple(s.task_type for s in scores),
            uncovered_scripts=tuple(uncovered_scripts(s) for s in scores),
            values=unpack_pair_facts([pack_pair_facts(s) for s in scores]),
        )


def uncovered_scripts(score: PairScore) -> str:
    """``"Cyrillic,Han"``: the pair's answer scripts the embedding model does not cover."""
    detail = score.similarity_detail
    return "" if detail is None else ",".join(detail.uncovered_scripts)
