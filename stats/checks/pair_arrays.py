"""The gate's columns as typed numpy arrays: one analysis unit's pairs, read once.

The gate reads the pairs table (:data:`shadoweval.stats.frame.PAIRS_COLUMNS`) into
:class:`PairArrays` once per evaluation, orders it by task type and slices it per task
type, so a verdict over 1,000,000 pairs stays a few vectorised passes. Each field of
:class:`PairArrays` is declared once, with the table column it is read from and how
(``field(metadata=_column(...))``, or ``_columns(...)`` for a block of flag columns read
into one 2-D array); reading, slicing and reordering iterate those declarations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.stats.frame import (
    BASELINE_HARM_COLUMNS,
    CANDIDATE_HARM_COLUMNS,
    TOOL_CHANGE_COLUMNS,
)

__all__ = [
    "INFRA_COLUMNS",
    "LATENCY_BASELINE_SOURCES",
    "BoolArray",
    "FlagMatrix",
    "FloatArray",
    "IntArray",
    "PairArrays",
    "SourceArray",
    "infra_pairs",
]

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
FlagMatrix = npt.NDArray[np.bool_]
"""A block of boolean flag columns, shape ``(n, k)`` (one column per detector or change)."""
SourceArray = npt.NDArray[np.int8]
"""Codes of ``latency_baseline_source``: indexes into :data:`LATENCY_BASELINE_SOURCES`."""

LATENCY_BASELINE_SOURCES = ("baseline_repeat", "live", "recorded", "missing", "co_timed")
"""Where a pair's baseline latency comes from; any other value reads as ``missing``.
``co_timed``: the baseline replica's replay, sent together with the candidate's (the one
control timed under the same conditions); ``baseline_repeat``: a replica replay that was
not (sent alone: one stored before co-timing, or resent without the other side)."""

INFRA_COLUMNS = ("baseline_infra_error", "candidate_infra_error")
"""The pairs-table columns flagging an infrastructure error on each side."""


def infra_pairs(rows: pd.DataFrame) -> pd.Series:
    """Mask of pairs with an infrastructure error on either side (a DataFrame view).

    ``rows`` has the columns :data:`INFRA_COLUMNS`; the result is a boolean Series on
    its index. A missing (NaN) flag counts as an infrastructure error here, so the pair
    is left out of the quality checks; ``infra_error_rate`` then reports the missing
    flags and cannot pass.
    """
    mask = pd.Series(False, index=rows.index)
    for column in INFRA_COLUMNS:
        flags = rows[column]
        mask |= flags.isna() | flags.eq(True)
    return mask


def _flags(series: pd.Series) -> FloatArray:
    """A boolean column as floats: 1.0 true, 0.0 false, NaN missing."""
    if series.dtype == bool:
        return series.to_numpy(dtype=np.float64)
    return pd.to_numeric(series.astype(object).map(_flag_value), errors="coerce").to_numpy(
        dtype=np.float64
    )


def _flag_value(value: object) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.nan
    return 1.0 if bool(value) else 0.0


def _floats(series: pd.Series) -> FloatArray:
    """A numeric column as floats, NaN where missing or not a number."""
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)


def _bools(series: pd.Series) -> BoolArray:
    """A boolean column as booleans; a missing flag reads as false."""
    flags: BoolArray = _flags(series) == 1.0
    return flags


def _strings(series: pd.Series) -> npt.NDArray[np.object_]:
    """A text column as an object array; a missing value reads as ``""``."""
    values = series.to_numpy(dtype=object)
    missing = pd.isna(values)
    if missing.any():
        values = np.where(missing, "", values)
    return values


def _source_codes(series: pd.Series) -> SourceArray:
    """``latency_baseline_source`` as codes of :data:`LATENCY_BASELINE_SOURCES`."""
    source = series.astype(str).to_numpy()
    codes = np.full(len(series), LATENCY_BASELINE_SOURCES.index("missing"), dtype=np.int8)
    for i, name in enumerate(LATENCY_BASELINE_SOURCES):
        codes[source == name] = i
    return codes


_COLUMN = "column"
_READ = "read"


def _column(name: str, read: Callable[[pd.Series], npt.NDArray[Any]]) -> dict[str, Any]:
    """Field metadata of a :class:`PairArrays` array read from pairs-table column ``name``."""
    return {_COLUMN: name, _READ: read}


def _columns(names: tuple[str, ...]) -> dict[str, Any]:
    """Field metadata of a ``(n, len(names))`` boolean block read from flag columns ``names``
    (a missing flag reads as false)."""

    def read(frame: pd.DataFrame) -> FlagMatrix:
        if not names:
            return np.zeros((len(frame), 0), dtype=bool)
        return np.column_stack([_bools(frame[name]) for name in names]).reshape(
            len(frame), len(names)
        )

    return {_COLUMN: names, _READ: read}


def _optional_floats(name: str) -> dict[str, Any]:
    """Field metadata of a float column that a pairs table may lack (read as all NaN):
    the prediction-powered columns, which tables built before them do not carry."""

    def read(frame: pd.DataFrame) -> FloatArray:
        if name not in frame.columns:
            return np.full(len(frame), np.nan)
        return _floats(frame[name])

    return {_COLUMN: (name,), _READ: read}


def _read(frame: pd.DataFrame, metadata: Any) -> npt.NDArray[Any]:
    column = metadata[_COLUMN]
    if isinstance(column, tuple):
        return metadata[_READ](frame)  # type: ignore[no-any-return]
    return metadata[_READ](frame[column])  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PairArrays:
    """The gate's columns as numpy arrays, for one analysis unit (shape ``(n,)`` each).

    Flags are float arrays (1.0, 0.0, NaN = missing); latencies in ms, token counts and
    answer lengths in characters are floats with NaN when unknown; ``base_harm`` /
    ``cand_harm`` are ``(n, len(HarmKind))`` boolean blocks in
    :class:`~shadoweval.records.HarmKind` order and ``tool_change`` an
    ``(n, len(ToolChange))`` block in :class:`~shadoweval.records.ToolChange` order;
    ``quality`` is +1 candidate worse, −1 better, 0 tie, NaN not judged; ``ppi_prediction``
    the predictor's quality for prediction-powered net harm (NaN: none) and ``ppi_label``
    the pair's random-sample label (NaN: not in the sample); ``base_cache_hit`` /
    ``cand_cache_hit`` are true where that side was served from a cache; ``source`` codes index
    :data:`LATENCY_BASELINE_SOURCES` (``latency_baseline_source``); ``prompt_ratio`` is the
    prompt-token ratio candidate/baseline and ``*_finish_length`` whether that side ended
    with ``finish_reason: length`` (the cause attribution's columns); ``cand_sent_at_s``
    when the candidate's replay was sent (Unix seconds, NaN unknown: the replay order). Build with
    :meth:`from_frame`; :meth:`slice` gives a task type's rows when the frame was
    ordered by task type (:meth:`take`). ``infra`` is derived: an infrastructure error
    (or a missing flag) on either side.
    """

    n: int
    base_fail: FloatArray = field(metadata=_column("baseline_fail", _flags))
    cand_fail: FloatArray = field(metadata=_column("candidate_fail", _flags))
    base_infra: FloatArray = field(metadata=_column("baseline_infra_error", _flags))
    cand_infra: FloatArray = field(metadata=_column("candidate_infra_error", _flags))
    format_expected: BoolArray = field(metadata=_column("format_expected", _bools))
    base_format_ok: FloatArray = field(metadata=_column("baseline_format_ok", _floats))
    cand_format_ok: FloatArray = field(metadata=_column("candidate_format_ok", _floats))
    similarity: FloatArray = field(metadata=_column("similarity", _floats))
    noise_similarity: FloatArray = field(metadata=_column("noise_similarity", _floats))
    streamed: BoolArray = field(metadata=_column("streamed", _bools))
    warmup: BoolArray = field(metadata=_column("candidate_warmup", _bools))
    source: SourceArray = field(metadata=_column("latency_baseline_source", _source_codes))
    cand_e2e_ms: FloatArray = field(metadata=_column("candidate_e2e_ms", _floats))
    base_e2e_ms: FloatArray = field(metadata=_column("baseline_e2e_ms", _floats))
    cand_ttft_ms: FloatArray = field(metadata=_column("candidate_ttft_ms", _floats))
    base_ttft_ms: FloatArray = field(metadata=_column("baseline_ttft_ms", _floats))
    cand_ttfc_ms: FloatArray = field(metadata=_column("candidate_ttfc_ms", _floats))
    base_ttfc_ms: FloatArray = field(metadata=_column("baseline_ttfc_ms", _floats))
    base_cache_hit: BoolArray = field(metadata=_column("baseline_cache_hit", _bools))
    cand_cache_hit: BoolArray = field(metadata=_column("candidate_cache_hit", _bools))
    base_tokens: FloatArray = field(metadata=_column("baseline_output_tokens", _floats))
    cand_tokens: FloatArray = field(metadata=_column("candidate_output_tokens", _floats))
    prompt_ratio: FloatArray = field(metadata=_column("prompt_token_ratio", _floats))
    cand_sent_at_s: FloatArray = field(metadata=_column("candidate_sent_at_s", _floats))
    base_finish_length: BoolArray = field(metadata=_column("baseline_finish_length", _bools))
    cand_finish_length: BoolArray = field(metadata=_column("candidate_finish_length", _bools))
    base_harm: FlagMatrix = field(metadata=_columns(BASELINE_HARM_COLUMNS))
    cand_harm: FlagMatrix = field(metadata=_columns(CANDIDATE_HARM_COLUMNS))
    base_chars: FloatArray = field(metadata=_column("baseline_output_chars", _floats))
    cand_chars: FloatArray = field(metadata=_column("candidate_output_chars", _floats))
    base_tool_text: FloatArray = field(metadata=_column("baseline_tool_text", _floats))
    cand_tool_text: FloatArray = field(metadata=_column("candidate_tool_text", _floats))
    tool_change: FlagMatrix = field(metadata=_columns(TOOL_CHANGE_COLUMNS))
    sampled: FloatArray = field(metadata=_column("sampled", _floats))
    noise_identical: FloatArray = field(metadata=_column("noise_identical", _floats))
    exact_differs: FloatArray = field(metadata=_column("exact_differs", _floats))
    quality: FloatArray = field(metadata=_column("quality", _floats))
    quality_source: npt.NDArray[np.object_] = field(metadata=_column("quality_source", _strings))
    ppi_prediction: FloatArray = field(metadata=_optional_floats("ppi_prediction"))
    ppi_label: FloatArray = field(metadata=_optional_floats("ppi_label"))
    infra: BoolArray = field(init=False)

    def __post_init__(self) -> None:
        infra = (
            np.isnan(self.base_infra)
            | (self.base_infra == 1.0)
            | np.isnan(self.cand_infra)
            | (self.cand_infra == 1.0)
        )
        object.__setattr__(self, "infra", infra)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> PairArrays:
        """Columns of a pairs table (:data:`shadoweval.stats.frame.PAIRS_COLUMNS`) as arrays.

        Raises:
            KeyError: the frame lacks a column (the gate checks the columns first).
        """
        columns = {f.name: _read(frame, f.metadata) for f in fields(cls) if _COLUMN in f.metadata}
        return cls(n=len(frame), **columns)

    def _rows(self, n: int, rows: slice | npt.NDArray[np.intp]) -> PairArrays:
        columns = {
            f.name: getattr(self, f.name)[rows] for f in fields(self) if _COLUMN in f.metadata
        }
        return PairArrays(n=n, **columns)

    def slice(self, start: int, stop: int) -> PairArrays:
        """Rows ``start:stop`` (views, no copies)."""
        return self._rows(stop - start, slice(start, stop))

    def take(self, index: npt.NDArray[np.intp]) -> PairArrays:
        """Rows at ``index`` (copies), e.g. to reorder by task type."""
        return self._rows(int(index.size), index)

    @property
    def latency(self) -> dict[str, tuple[FloatArray, FloatArray]]:
        """``{metric: (candidate, baseline)}`` latencies in ms, for ``e2e_ms``, ``ttft_ms``
        and ``ttfc_ms``."""
        return {
            "e2e_ms": (self.cand_e2e_ms, self.base_e2e_ms),
            "ttft_ms": (self.cand_ttft_ms, self.base_ttft_ms),
            "ttfc_ms": (self.cand_ttfc_ms, self.base_ttfc_ms),
        }

    @property
    def cache_hit(self) -> BoolArray:
        """Either side's answer was served from a cache (left out of latency)."""
        hit: BoolArray = self.base_cache_hit | self.cand_cache_hit
        return hit

    @property
    def model_failed(self) -> BoolArray:
        """Either side failed for a model reason (NaN flags count as failed)."""
        failed: BoolArray = ~((self.base_fail == 0.0) & (self.cand_fail == 0.0))
        return failed
