"""Flatten :class:`~shadoweval.records.PairScore` records into the gate's input table.

One row per pair, ordered by capture time (ties by exchange id), so a poll over the same
pairs always sees the same table. Failures are data and nothing is dropped here
(gate-statistics.md §2.1), but they come in two kinds (reference failure case 11):

* an *infrastructure* error (``*_infra_error``: timeout, connection failure, HTTP
  408/429/5xx, undecodable body, cancelled live request) says nothing about the model; the
  gate leaves such pairs out of every quality check and gates them as
  ``infra_error_rate``;
* any other error, or an empty answer, is the model's (or its serving config's) failure
  (``*_fail``) and, where a structured output was requested, a format failure too.

The direction of a change (issue 11) comes from per-side harm flags
(``baseline_harm_<kind>`` / ``candidate_harm_<kind>`` for each
:class:`~shadoweval.records.HarmKind`), tool behaviour (``*_tool_text``, ``tool_<change>``
for each :class:`~shadoweval.records.ToolChange`) and a pair's resolved quality judgement
(``quality``, ``quality_source``), read by :mod:`shadoweval.stats.change`,
:mod:`shadoweval.stats.checks.harms`,
:mod:`shadoweval.stats.checks.tools` and :mod:`shadoweval.stats.net_harm`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.pair_facts import (
    DERIVED_BITS,
    FACT_BITS,
    FLOAT_FACTS,
    FORMAT_SUCCESS_FLAGS,
    LATENCY_SOURCES,
    TRI_FACTS,
    TRI_MISSING,
    PairFacts,
    epoch_s,
    tool_text,
    uncovered_scripts,
)
from shadoweval.pair_flags import FormatSuccessFlag, format_ok, format_ok_pair
from shadoweval.records import (
    HarmKind,
    PairJudgement,
    PairScore,
    QualityOutcome,
    ToolChange,
)
from shadoweval.stats.policy import GatePolicy, effective

__all__ = [
    "BASELINE_HARM_COLUMNS",
    "CANDIDATE_HARM_COLUMNS",
    "FAILED_QUALITY_SOURCE",
    "OPTIONAL_PAIRS_COLUMNS",
    "PAIRS_COLUMNS",
    "QUALITY_VALUES",
    "TOOL_CHANGE_COLUMNS",
    "PPIColumns",
    "format_ok",
    "harm_column",
    "pairs_frame",
    "pairs_frame_from_facts",
    "tool_change_column",
]


def harm_column(side: str, kind: HarmKind) -> str:
    """The pairs-table column of one side's harm flag: ``candidate_harm_degeneration``."""
    return f"{side}_harm_{kind.value}"


def tool_change_column(change: ToolChange) -> str:
    """The pairs-table column of one tool change: ``tool_text_instead_of_call``."""
    return f"tool_{change.value}"


BASELINE_HARM_COLUMNS: tuple[str, ...] = tuple(harm_column("baseline", k) for k in HarmKind)
"""The baseline's harm-flag columns, in :class:`~shadoweval.records.HarmKind` order."""
CANDIDATE_HARM_COLUMNS: tuple[str, ...] = tuple(harm_column("candidate", k) for k in HarmKind)
"""The candidate's harm-flag columns, in :class:`~shadoweval.records.HarmKind` order."""
TOOL_CHANGE_COLUMNS: tuple[str, ...] = tuple(tool_change_column(c) for c in ToolChange)
"""The tool-change flag columns, in :class:`~shadoweval.records.ToolChange` order."""

QUALITY_VALUES: dict[QualityOutcome, float] = {
    QualityOutcome.CANDIDATE_WORSE: 1.0,
    QualityOutcome.CANDIDATE_BETTER: -1.0,
    QualityOutcome.TIE: 0.0,
}
"""``quality`` of a judged pair: +1 candidate worse, −1 candidate better, 0 tie (so that
the mean over pairs is the net harm P(worse) − P(better))."""

PAIRS_COLUMNS: dict[str, str] = {
    "exchange_id": "object",
    "task_type": "object",
    "captured_at": "datetime64[ns, UTC]",
    "similarity": "float64",
    "noise_similarity": "float64",
    "streamed": "bool",
    "baseline_fail": "bool",
    "candidate_fail": "bool",
    "baseline_infra_error": "bool",
    "candidate_infra_error": "bool",
    "baseline_interrupted": "bool",
    "candidate_interrupted": "bool",
    "candidate_context_length": "bool",
    "format_expected": "bool",
    "baseline_format_ok": "float64",
    "candidate_format_ok": "float64",
    "baseline_e2e_ms": "float64",
    "candidate_e2e_ms": "float64",
    "baseline_ttft_ms": "float64",
    "candidate_ttft_ms": "float64",
    "baseline_ttfc_ms": "float64",
    "candidate_ttfc_ms": "float64",
    "baseline_cache_hit": "bool",
    "candidate_cache_hit": "bool",
    "candidate_warmup": "bool",
    "latency_baseline_source": "object",
    "baseline_output_tokens": "float64",
    "candidate_output_tokens": "float64",
    "prompt_token_ratio": "float64",
    "candidate_sent_at_s": "float64",
    "baseline_finish_length": "bool",
    "candidate_finish_length": "bool",
    **dict.fromkeys(BASELINE_HARM_COLUMNS, "bool"),
    **dict.fromkeys(CANDIDATE_HARM_COLUMNS, "bool"),
    "baseline_output_chars": "float64",
    "candidate_output_chars": "float64",
    "baseline_tool_text": "float64",
    "candidate_tool_text": "float64",
    **dict.fromkeys(TOOL_CHANGE_COLUMNS, "bool"),
    "sampled": "float64",
    "noise_identical": "float64",
    "exact_differs": "float64",
    "quality": "float64",
    "quality_source": "object",
    "ppi_prediction": "float64",
    "ppi_label": "float64",
    "uncovered_scripts": "object",
}
"""Columns of :func:`pairs_frame` and their pandas dtypes (NaN marks a missing float).

Latency columns: ``baseline_/candidate_`` ``e2e_ms``, ``ttft_ms`` and ``ttfc_ms`` (time to
first visible content; equals e2e for a non-streamed response), NaN when unknown;
``baseline_cache_hit`` / ``candidate_cache_hit``: that side's answer was served from a
cache (``PairScore.*_cache_hit``), so the pair is left out of every latency check.
``candidate_sent_at_s``: when the candidate's replay was sent, seconds since the Unix epoch
(``PairScore.candidate_sent_at``; NaN unknown), the replay order the latency checks read.

The cause columns (issue 29 item 9; :mod:`shadoweval.stats.gate.attribution`):
``prompt_token_ratio`` (``PairScore.prompt_token_ratio``: candidate/baseline prompt tokens
of the same request, NaN when either side did not report them) and
``baseline_finish_length`` / ``candidate_finish_length`` (that side ended with
``finish_reason: length``).

The direction columns (issue 11):

* ``baseline_harm_<kind>`` / ``candidate_harm_<kind>`` (one per
  :class:`~shadoweval.records.HarmKind`): the detector fired on that side
  (``PairScore.*_harms``; false on an errored side). ``*_harm_runaway_length`` also holds
  when the side's answer is longer than the task type's ``harm.length_ratio_max`` times
  the other side's and at least ``harm.min_runaway_chars`` characters.
* ``baseline_interrupted`` / ``candidate_interrupted``: that side was an interrupted
  stream (HTTP 200 cut before its finish_reason; infrastructure);
  ``candidate_context_length``: the candidate failed at its context window. Under
  ``infra_error_rate.context_length: rollback`` such a pair is the candidate's failure
  (``candidate_fail``), not an infrastructure error.
* ``baseline_output_chars`` / ``candidate_output_chars``: answer length in characters
  (``PairScore.output_chars``), NaN when unknown.
* ``uncovered_scripts``: the scripts of the pair's answers that the embedding model is not
  declared to cover, comma-separated (``SimilarityDetail.uncovered_scripts``; ``""``
  none): the gate warns, as such a pair's similarity may not measure change (issue 14).
* ``baseline_tool_text`` / ``candidate_tool_text``: where the request offered tools and
  the side answered (it has tool flags: not errored), 1.0 when it answered in text without
  a call, 0.0 when it called a tool; NaN where no tools were offered, the side errored,
  or its answer was empty.
* ``tool_<change>`` (one per :class:`~shadoweval.records.ToolChange`): the candidate's
  tool behaviour differs that way (``PairScore.tool_changes``).
* ``sampled``: 1.0 the request sampled (temperature > 0 or not given), 0.0 temperature 0,
  NaN unknown. ``noise_identical``: 1.0 the baseline repeat returned exactly the captured
  answer, 0.0 it did not, NaN without a usable repeat. ``exact_differs``: 1.0 the
  normalised exact forms of a structured or short pair differ
  (``PairScore.exact_differs``), 0.0 they are equal, NaN not compared.
* ``quality``: the pair's resolved judgement, :data:`QUALITY_VALUES` (+1 candidate worse,
  −1 better, 0 tie), NaN when not judged or the judgement failed; ``quality_source`` its
  :class:`~shadoweval.records.JudgementSource` value (``judge``, ``human``,
  ``reference``), :data:`FAILED_QUALITY_SOURCE` (``"failed"``, quality NaN) when the
  resolved judgement failed (only LLM judge calls fail), ``""`` when the pair has none.
* ``ppi_prediction`` / ``ppi_label``: the prediction-powered net harm's inputs
  (:mod:`shadoweval.stats.net_harm.ppi`), from :class:`PPIColumns`: the pair's predictor
  quality (an analyst's label chosen by hand, else a reference, else the judge; NaN when
  none — the gate then predicts from the detectors) and its random-sample label (NaN when
  the pair is not in a PPI sample or not labelled). All NaN without a sample.
"""

OPTIONAL_PAIRS_COLUMNS: tuple[str, ...] = ("ppi_prediction", "ppi_label")
"""Columns a pairs table handed to the gate may lack (read as all NaN): tables built before
prediction-powered net harm, e.g. by a simulation, stay valid."""

PPIColumns = Mapping[str, tuple[float, float]]
"""Exchange id → ``(ppi_prediction, ppi_label)`` (:data:`PAIRS_COLUMNS`; NaN for none)."""

SuccessFlag = FormatSuccessFlag
_Flag = TypeVar("_Flag", HarmKind, ToolChange)

_HARM_BIT: dict[HarmKind, int] = {kind: 1 << i for i, kind in enumerate(HarmKind)}
_TOOL_BIT: dict[ToolChange, int] = {change: 1 << i for i, change in enumerate(ToolChange)}
_RUNAWAY = list(HarmKind).index(HarmKind.RUNAWAY_LENGTH)
_FLAGS = frozenset(BASELINE_HARM_COLUMNS + CANDIDATE_HARM_COLUMNS + TOOL_CHANGE_COLUMNS)
"""The flag columns, built apart from the rest (:func:`_with_flags`)."""


def _value(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _tristate(x: bool | None) -> float:
    return math.nan if x is None else (1.0 if x else 0.0)


def _bits(values: Iterable[_Flag], table: Mapping[_Flag, int]) -> int:
    mask = 0
    for value in values:
        mask |= table[value]
    return mask


def _unpack(masks: list[int] | npt.NDArray[np.int32], width: int) -> npt.NDArray[np.bool_]:
    """Bit masks (one per row) as a boolean array of shape ``(n, width)``."""
    packed = np.asarray(masks, dtype=np.int64)
    bits: npt.NDArray[np.bool_] = (packed[:, None] >> np.arange(width, dtype=np.int64)) & 1 == 1
    return bits


FAILED_QUALITY_SOURCE = "failed"
"""``quality_source`` of a pair whose resolved judgement failed (``quality`` is NaN)."""


def _quality(judgement: PairJudgement | None) -> tuple[float, str]:
    if judgement is None:
        return math.nan, ""
    if judgement.outcome is None:
        return math.nan, FAILED_QUALITY_SOURCE
    return QUALITY_VALUES[judgement.outcome], judgement.source.value


def pairs_frame(
    scores: Iterable[PairScore],
    policy: GatePolicy,
    judgements: Mapping[str, PairJudgement] | None = None,
    ppi: PPIColumns | None = None,
) -> pd.DataFrame:
    """Return one row per pair with the columns of :data:`PAIRS_COLUMNS`.

    * ``baseline_infra_error`` / ``candidate_infra_error``: the side failed for
      infrastructure reasons (``PairScore.*_infra_error``).
    * ``baseline_fail`` / ``candidate_fail``: the side errored or its output was empty,
      and it was not an infrastructure error (an infrastructure error is never a model
      failure).
    * ``*_format_ok``: :func:`format_ok` with the task type's ``format_parse.success_flag``.
    * latencies in milliseconds, output tokens as counts; NaN where unknown.
    * the direction columns, documented at :data:`PAIRS_COLUMNS`; the runaway length
      ratio uses the task type's ``harm`` block.

    Args:
        scores: pair scores of one run (any order; each exchange once).
        policy: the gate policy (its per-task-type success flag and harm block apply).
        judgements: exchange id → the pair's *resolved* judgement (one per pair, already
            chosen by source priority: :func:`shadoweval.stats.judgements.resolve_judgements`);
            pairs not in it are not judged (``quality`` NaN). ``None``: no judgements.
        ppi: the prediction-powered columns by exchange id (:data:`PPIColumns`);
            ``None``: all NaN.

    Returns:
        A DataFrame sorted by ``captured_at`` then ``exchange_id``, index 0..n−1; an empty
        frame with the same columns and dtypes when ``scores`` is empty.
    """
    judged = judgements or {}
    ppi_columns = ppi or {}
    columns: dict[str, list[object]] = {name: [] for name in PAIRS_COLUMNS if name not in _FLAGS}
    base_harms: list[int] = []
    cand_harms: list[int] = []
    tool_changes: list[int] = []
    flags_by_type: dict[str, SuccessFlag] = {}
    for score in scores:
        flag = flags_by_type.get(score.task_type)
        if flag is None:
            flag = effective(policy, score.task_type).format_parse.success_flag
            flags_by_type[score.task_type] = flag
        row = _row(score, flag, judged.get(score.exchange_id), _context_rollback(policy))
        row["ppi_prediction"], row["ppi_label"] = ppi_columns.get(
            score.exchange_id, (math.nan, math.nan)
        )
        for name, value in row.items():
            columns[name].append(value)
        base_harms.append(_bits(score.baseline_harms, _HARM_BIT) if score.baseline_harms else 0)
        cand_harms.append(_bits(score.candidate_harms, _HARM_BIT) if score.candidate_harms else 0)
        tool_changes.append(_bits(score.tool_changes, _TOOL_BIT) if score.tool_changes else 0)
    frame = _with_flags(pd.DataFrame(columns), policy, base_harms, cand_harms, tool_changes)
    frame = frame[list(PAIRS_COLUMNS)]
    if frame.empty:
        return frame.astype(PAIRS_COLUMNS)
    frame["captured_at"] = pd.to_datetime(frame["captured_at"], utc=True)
    frame = frame.astype(PAIRS_COLUMNS)
    frame = frame.sort_values(["captured_at", "exchange_id"], kind="mergesort")
    return frame.reset_index(drop=True)


def _context_rollback(policy: GatePolicy) -> bool:
    """The policy counts failures at the candidate's context length as the candidate's
    errors (``infra_error_rate.context_length: rollback``), not as infrastructure."""
    return policy.infra_error_rate.context_length == "rollback"


def _row(
    score: PairScore, flag: SuccessFlag, judgement: PairJudgement | None, context_rollback: bool
) -> dict[str, object]:
    """One pair's values of the :data:`PAIRS_COLUMNS` that are not flag columns."""
    baseline_infra = score.baseline_infra_error
    candidate_infra = score.candidate_infra_error and not (
        context_rollback and score.candidate_context_length
    )
    quality, source = _quality(judgement)
    baseline_format_ok, candidate_format_ok = format_ok_pair(score, flag)
    return {
        "exchange_id": score.exchange_id,
        "task_type": score.task_type,
        "captured_at": score.captured_at,
        "similarity": _value(score.similarity),
        "noise_similarity": _value(score.noise_similarity),
        "uncovered_scripts": uncovered_scripts(score),
        "streamed": score.streamed,
        "baseline_fail": (score.baseline_error or score.baseline_empty) and not baseline_infra,
        "candidate_fail": (score.candidate_error or score.candidate_empty) and not candidate_infra,
        "baseline_infra_error": baseline_infra,
        "candidate_infra_error": candidate_infra,
        "baseline_interrupted": score.baseline_interrupted,
        "candidate_interrupted": score.candidate_interrupted,
        "candidate_context_length": score.candidate_context_length,
        "format_expected": score.format_expected,
        "baseline_format_ok": baseline_format_ok,
        "candidate_format_ok": candidate_format_ok,
        "baseline_e2e_ms": _value(score.e2e_ms.baseline),
        "candidate_e2e_ms": _value(score.e2e_ms.candidate),
        "baseline_ttft_ms": _value(score.ttft_ms.baseline),
        "candidate_ttft_ms": _value(score.ttft_ms.candidate),
        "baseline_ttfc_ms": _value(score.ttfc_ms.baseline),
        "candidate_ttfc_ms": _value(score.ttfc_ms.candidate),
        "baseline_cache_hit": score.baseline_cache_hit,
        "candidate_cache_hit": score.candidate_cache_hit,
        "candidate_warmup": score.candidate_warmup,
        "latency_baseline_source": score.latency_baseline_source,
        "baseline_output_tokens": _value(score.output_tokens.baseline),
        "candidate_output_tokens": _value(score.output_tokens.candidate),
        "prompt_token_ratio": _value(score.prompt_token_ratio),
        "candidate_sent_at_s": epoch_s(score.candidate_sent_at),
        **{name: derived(score) for name, derived in DERIVED_BITS.items()},
        "baseline_output_chars": _value(score.output_chars.baseline),
        "candidate_output_chars": _value(score.output_chars.candidate),
        "baseline_tool_text": tool_text(score.baseline_tools, score.baseline_empty),
        "candidate_tool_text": tool_text(score.candidate_tools, score.candidate_empty),
        "sampled": _tristate(score.sampled),
        "noise_identical": _tristate(score.noise_identical),
        "exact_differs": _tristate(score.exact_differs),
        "quality": quality,
        "quality_source": source,
    }


def _with_flags(
    frame: pd.DataFrame,
    policy: GatePolicy,
    base_harms: list[int] | npt.NDArray[np.int32],
    cand_harms: list[int] | npt.NDArray[np.int32],
    tool_changes: list[int] | npt.NDArray[np.int32],
) -> pd.DataFrame:
    """``frame`` with the harm and tool-change flag columns appended, from one bit mask per
    row and side (:data:`_HARM_BIT`, :data:`_TOOL_BIT`); the runaway length ratio
    (:func:`_runaway_by_ratio`) adds to each side's ``*_harm_runaway_length``."""
    base = _unpack(base_harms, len(HarmKind))
    cand = _unpack(cand_harms, len(HarmKind))
    if len(frame):
        base_long, cand_long = _runaway_by_ratio(frame, policy)
        base[:, _RUNAWAY] |= base_long
        cand[:, _RUNAWAY] |= cand_long
    tools = _unpack(tool_changes, len(ToolChange))
    flags = {
        **{name: base[:, j] for j, name in enumerate(BASELINE_HARM_COLUMNS)},
        **{name: cand[:, j] for j, name in enumerate(CANDIDATE_HARM_COLUMNS)},
        **{name: tools[:, j] for j, name in enumerate(TOOL_CHANGE_COLUMNS)},
    }
    return pd.concat([frame, pd.DataFrame(flags, index=frame.index)], axis=1)


def _runaway_by_ratio(
    frame: pd.DataFrame, policy: GatePolicy
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Each side longer than ``length_ratio_max`` × the other and ≥ ``min_runaway_chars``.

    Vectorised over the frame with the task type's ``harm`` block; a side whose length
    or the other side's is unknown (NaN) is not flagged by the ratio. Returns the
    baseline's and the candidate's masks, shape ``(n,)``.
    """
    codes, names = pd.factorize(frame["task_type"].astype(str))
    ratio = np.array([effective(policy, str(t)).harm.length_ratio_max for t in names])[codes]
    floor = np.array([effective(policy, str(t)).harm.min_runaway_chars for t in names])[codes]
    base = frame["baseline_output_chars"].to_numpy(dtype=np.float64)
    cand = frame["candidate_output_chars"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore"):
        base_long = (base >= floor) & (base > ratio * cand)
        cand_long = (cand >= floor) & (cand > ratio * base)
    return base_long, cand_long


def _tri_floats(codes: npt.NDArray[np.int8]) -> npt.NDArray[np.float64]:
    out = codes.astype(np.float64)
    out[codes == TRI_MISSING] = math.nan
    return out


def pairs_frame_from_facts(
    facts: PairFacts,
    policy: GatePolicy,
    judgements: Mapping[str, PairJudgement] | None = None,
    ppi: PPIColumns | None = None,
) -> pd.DataFrame:
    """:func:`pairs_frame` from packed pair facts, without reading a record.

    The same table :func:`pairs_frame` builds from the pairs' records (the same columns,
    dtypes, values and order; ``tests/storage/test_pair_facts.py`` compares the
    two), vectorised: one numpy pass per column instead of one Python dict per pair.
    ``*_format_ok`` takes, per task type, the stored result under its
    ``format_parse.success_flag``; the runaway length ratio is applied as in
    :func:`pairs_frame`.

    Args:
        facts: the run's pairs (:meth:`Repository.load_pair_facts_after`; any order).
        policy: the gate policy (success flag and harm block per task type).
        judgements: exchange id → resolved judgement, as in :func:`pairs_frame`.
        ppi: the prediction-powered columns, as in :func:`pairs_frame`.

    Returns:
        A DataFrame sorted by ``captured_at`` then ``exchange_id``, index 0..n−1.
    """
    if len(facts) == 0:
        return pairs_frame([], policy)
    order = _table_order(facts)
    values = facts.values[order]
    exchange_ids = np.asarray(facts.exchange_ids, dtype=object)[order]
    task_types = np.asarray(facts.task_types, dtype=object)[order]
    scripts = np.asarray(facts.uncovered_scripts, dtype=object)[order]
    quality, source = _quality_columns(exchange_ids, judgements or {})
    nan_pair = (math.nan, math.nan)
    ppi_values = np.array(
        [(ppi or {}).get(e, nan_pair) for e in exchange_ids], dtype=float
    ).reshape(-1, 2)
    columns: dict[str, object] = {
        "exchange_id": pd.Series(exchange_ids, dtype=object),
        "task_type": pd.Series(task_types, dtype=object),
        "captured_at": pd.to_datetime(
            values["captured_at_us"].astype(np.int64), unit="us", utc=True
        ),
        **_fact_columns(values, task_types, policy),
        "quality": quality,
        "quality_source": pd.Series(source, dtype=object),
        "ppi_prediction": ppi_values[:, 0],
        "ppi_label": ppi_values[:, 1],
        "uncovered_scripts": pd.Series(scripts, dtype=object),
    }
    frame = _with_flags(
        pd.DataFrame(columns),
        policy,
        values["baseline_harms"],
        values["candidate_harms"],
        values["tool_changes"],
    )
    return frame[list(PAIRS_COLUMNS)].astype(PAIRS_COLUMNS)


def _table_order(facts: PairFacts) -> npt.NDArray[np.intp]:
    """The packed rows' positions in table order: by capture time, then exchange id.

    The rows are put in this order first (one take of the packed records), so the frame is
    built sorted instead of reordering its 50-odd columns afterwards.
    """
    order: npt.NDArray[np.intp] = (
        pd.DataFrame(
            {
                "captured_at": facts.values["captured_at_us"].astype(np.int64),
                "exchange_id": pd.Series(
                    np.asarray(facts.exchange_ids, dtype=object), dtype=object
                ),
            }
        )
        .sort_values(["captured_at", "exchange_id"], kind="mergesort")
        .index.to_numpy()
    )
    return order


def _fact_columns(
    values: npt.NDArray[np.void], task_types: npt.NDArray[np.object_], policy: GatePolicy
) -> dict[str, object]:
    """The columns read from the packed facts (``values``, in table order): the floats,
    the side flags and failures, ``*_format_ok`` under each task type's success flag, the
    cache and warm-up flags, the latency baseline's source and the tri-state facts."""
    n = len(values)
    codes, names = pd.factorize(task_types)
    bits = values["bits"].astype(np.int64)

    def bit(name: str) -> npt.NDArray[np.bool_]:
        flags: npt.NDArray[np.bool_] = (bits & FACT_BITS[name]) != 0
        return flags

    columns: dict[str, object] = {}
    for name in FLOAT_FACTS:
        columns[name] = values[name].astype(np.float64)
    columns["streamed"] = bit("streamed")
    base_infra = bit("baseline_infra_error")
    cand_infra = bit("candidate_infra_error")
    if _context_rollback(policy):
        cand_infra = cand_infra & ~bit("candidate_context_length")
    columns["baseline_fail"] = (bit("baseline_error") | bit("baseline_empty")) & ~base_infra
    columns["candidate_fail"] = (bit("candidate_error") | bit("candidate_empty")) & ~cand_infra
    columns["baseline_infra_error"] = base_infra
    columns["candidate_infra_error"] = cand_infra
    for name in ("baseline_interrupted", "candidate_interrupted", "candidate_context_length"):
        columns[name] = bit(name)
    columns["format_expected"] = bit("format_expected")
    flag_index = np.array(
        [
            FORMAT_SUCCESS_FLAGS.index(effective(policy, str(t)).format_parse.success_flag)
            for t in names
        ],
        dtype=np.int64,
    )[codes]
    rows = np.arange(n)
    for side in ("baseline", "candidate"):
        chosen = values[f"{side}_format_ok"][rows, flag_index]
        columns[f"{side}_format_ok"] = _tri_floats(chosen)
    columns["baseline_cache_hit"] = bit("baseline_cache_hit")
    columns["candidate_cache_hit"] = bit("candidate_cache_hit")
    columns["candidate_warmup"] = bit("candidate_warmup")
    for name in DERIVED_BITS:
        columns[name] = bit(name)
    columns["latency_baseline_source"] = pd.Series(
        np.asarray(LATENCY_SOURCES, dtype=object)[
            values["latency_baseline_source"].astype(np.int64)
        ],
        dtype=object,
    )
    for name in TRI_FACTS:
        columns[name] = _tri_floats(values[name])
    return columns


def _quality_columns(
    exchange_ids: npt.NDArray[np.object_], judged: Mapping[str, PairJudgement]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.object_]]:
    """``quality`` and ``quality_source`` of each pair (:func:`_quality`), in row order."""
    n = len(exchange_ids)
    quality = np.full(n, math.nan)
    source = np.full(n, "", dtype=object)
    if judged:
        for i, exchange_id in enumerate(exchange_ids):
            found = judged.get(exchange_id)
            if found is not None:
                quality[i], source[i] = _quality(found)
    return quality, source
