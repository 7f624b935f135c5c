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
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import pandas as pd

from shadoweval.records import FormatFlags, PairScore, ToolCallFlags
from stats.policy import GatePolicy, effective

__all__ = ["PAIRS_COLUMNS", "format_ok", "pairs_frame"]

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
    "format_expected": "bool",
    "baseline_format_ok": "float64",
    "candidate_format_ok": "float64",
    "baseline_e2e_ms": "float64",
    "candidate_e2e_ms": "float64",
    "baseline_ttft_ms": "float64",
    "candidate_ttft_ms": "float64",
    "candidate_warmup": "bool",
    "latency_baseline_source": "object",
    "baseline_output_tokens": "float64",
    "candidate_output_tokens": "float64",
}
"""Columns of :func:`pairs_frame` and their pandas dtypes (NaN marks a missing float)."""

SuccessFlag = Literal["strict", "fence_stripped", "extracted"]


def format_ok(
    *,
    format_expected: bool,
    errored: bool,
    empty: bool,
    flags: FormatFlags | None,
    tools: ToolCallFlags | None,
    success_flag: SuccessFlag,
    infra_error: bool = False,
) -> float:
    """Format-parse success of one side of a pair: 1.0, 0.0, or NaN when not applicable.

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


def _value(x: float | None) -> float:
    return math.nan if x is None else float(x)


def pairs_frame(scores: Iterable[PairScore], policy: GatePolicy) -> pd.DataFrame:
    """Return one row per pair with the columns of :data:`PAIRS_COLUMNS`.

    * ``baseline_infra_error`` / ``candidate_infra_error``: the side failed for
      infrastructure reasons (``PairScore.*_infra_error``).
    * ``baseline_fail`` / ``candidate_fail``: the side errored or its output was empty,
      and it was not an infrastructure error (an infrastructure error is never a model
      failure).
    * ``*_format_ok``: :func:`format_ok` with the task type's ``format_parse.success_flag``.
    * latencies in milliseconds, output tokens as counts; NaN where unknown.

    Args:
        scores: pair scores of one run (any order; each exchange once).
        policy: the gate policy (its per-task-type success flag is applied).

    Returns:
        A DataFrame sorted by ``captured_at`` then ``exchange_id``, index 0..n−1; an empty
        frame with the same columns and dtypes when ``scores`` is empty.
    """
    rows: list[dict[str, object]] = []
    flags_by_type: dict[str, SuccessFlag] = {}
    for score in scores:
        flag = flags_by_type.get(score.task_type)
        if flag is None:
            flag = effective(policy, score.task_type).format_parse.success_flag
            flags_by_type[score.task_type] = flag
        baseline_infra = score.baseline_infra_error
        candidate_infra = score.candidate_infra_error
        baseline_fail = (score.baseline_error or score.baseline_empty) and not baseline_infra
        candidate_fail = (score.candidate_error or score.candidate_empty) and not candidate_infra
        rows.append(
            {
                "exchange_id": score.exchange_id,
                "task_type": score.task_type,
                "captured_at": score.captured_at,
                "similarity": _value(score.similarity),
                "noise_similarity": _value(score.noise_similarity),
                "streamed": score.streamed,
                "baseline_fail": baseline_fail,
                "candidate_fail": candidate_fail,
                "baseline_infra_error": baseline_infra,
                "candidate_infra_error": candidate_infra,
                "format_expected": score.format_expected,
                "baseline_format_ok": format_ok(
                    format_expected=score.format_expected,
                    errored=score.baseline_error,
                    empty=score.baseline_empty,
                    flags=score.baseline_format,
                    tools=score.baseline_tools,
                    success_flag=flag,
                    infra_error=baseline_infra,
                ),
                "candidate_format_ok": format_ok(
                    format_expected=score.format_expected,
                    errored=score.candidate_error,
                    empty=score.candidate_empty,
                    flags=score.candidate_format,
                    tools=score.candidate_tools,
                    success_flag=flag,
                    infra_error=candidate_infra,
                ),
                "baseline_e2e_ms": _value(score.e2e_ms.baseline),
                "candidate_e2e_ms": _value(score.e2e_ms.candidate),
                "baseline_ttft_ms": _value(score.ttft_ms.baseline),
                "candidate_ttft_ms": _value(score.ttft_ms.candidate),
                "candidate_warmup": score.candidate_warmup,
                "latency_baseline_source": score.latency_baseline_source,
                "baseline_output_tokens": _value(score.output_tokens.baseline),
                "candidate_output_tokens": _value(score.output_tokens.candidate),
            }
        )
    frame = pd.DataFrame(rows, columns=list(PAIRS_COLUMNS))
    if frame.empty:
        return frame.astype(PAIRS_COLUMNS)
    frame["captured_at"] = pd.to_datetime(frame["captured_at"], utc=True)
    frame = frame.astype(PAIRS_COLUMNS)
    frame = frame.sort_values(["captured_at", "exchange_id"], kind="mergesort")
    return frame.reset_index(drop=True)
