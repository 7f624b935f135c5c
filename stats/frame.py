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

import pandas as pd

from shadoweval.pair_flags import FormatSuccessFlag, format_ok
from shadoweval.records import PairScore
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

SuccessFlag = FormatSuccessFlag


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
