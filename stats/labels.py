"""Human-label summary: per task type, how often analysts judged the candidate better or worse.

Analysts label pairs ``candidate_better``, ``candidate_worse``, ``same`` or ``both_bad``
(:class:`~shadoweval.records.LabelValue`). :func:`label_summary` counts them per task type
and over all task types, with the win rate (share labelled ``candidate_better``) and the
loss rate (share labelled ``candidate_worse``), each with a 95 % Wilson score interval
(Wilson 1927, "Probable inference, the law of succession, and statistical inference",
JASA 22:209–212; computed by ``statsmodels.stats.proportion.proportion_confint`` with
``method="wilson"``). The Wilson interval stays inside [0, 1] and keeps its coverage at
the small counts labelled samples have, where the Wald interval does not (Brown, Cai &
DasGupta 2001).

Labels are descriptive: they are shown next to the verdict, never gated on.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from shadoweval.records import POOLED, HumanLabel, LabelValue

__all__ = ["LABEL_SUMMARY_COLUMNS", "LABEL_SUMMARY_CONFIDENCE", "label_summary"]

LABEL_SUMMARY_CONFIDENCE = 0.95
"""Confidence level of the win and loss intervals."""

LABEL_SUMMARY_COLUMNS: dict[str, str] = {
    "task_type": "object",
    "n": "int64",
    "candidate_better": "int64",
    "candidate_worse": "int64",
    "same": "int64",
    "both_bad": "int64",
    "win_rate": "float64",
    "win_low": "float64",
    "win_high": "float64",
    "loss_rate": "float64",
    "loss_low": "float64",
    "loss_high": "float64",
}
"""Columns of :func:`label_summary` and their pandas dtypes."""


def _rate(count: int, n: int) -> tuple[float, float, float]:
    if n == 0:
        return math.nan, math.nan, math.nan
    low, high = proportion_confint(count, n, alpha=1 - LABEL_SUMMARY_CONFIDENCE, method="wilson")
    return count / n, float(low), float(high)


def _row(task_type: str, counts: Counter[LabelValue]) -> dict[str, object]:
    n = sum(counts.values())
    better = counts[LabelValue.CANDIDATE_BETTER]
    worse = counts[LabelValue.CANDIDATE_WORSE]
    win_rate, win_low, win_high = _rate(better, n)
    loss_rate, loss_low, loss_high = _rate(worse, n)
    return {
        "task_type": task_type,
        "n": n,
        "candidate_better": better,
        "candidate_worse": worse,
        "same": counts[LabelValue.SAME],
        "both_bad": counts[LabelValue.BOTH_BAD],
        "win_rate": win_rate,
        "win_low": win_low,
        "win_high": win_high,
        "loss_rate": loss_rate,
        "loss_low": loss_low,
        "loss_high": loss_high,
    }


def label_summary(labels: Sequence[HumanLabel]) -> pd.DataFrame:
    """Count labels per task type and pooled, with win and loss rates and Wilson intervals.

    Every label counts once: a pair labelled by several labellers contributes one count
    per label (so ``n`` is the number of labels, not of distinct pairs), which weighs each
    analyst's judgement equally. Pass one label per pair (e.g. each pair's latest) to count
    pairs instead.

    Args:
        labels: human labels of one run (any order, any labellers).

    Returns:
        A DataFrame with the columns of :data:`LABEL_SUMMARY_COLUMNS`: one row per task
        type that has labels, sorted by task type, then the pooled row
        (``task_type == shadoweval.records.POOLED``) over all labels. ``win_rate`` =
        ``candidate_better / n`` and ``loss_rate`` = ``candidate_worse / n``, with 95 %
        Wilson score bounds ``win_low``/``win_high`` and ``loss_low``/``loss_high``.
        Rates and bounds are NaN where ``n`` is 0 (with no labels, only the pooled row,
        with ``n`` = 0).
    """
    per_type: dict[str, Counter[LabelValue]] = {}
    pooled: Counter[LabelValue] = Counter()
    for label in labels:
        value = LabelValue(label.label)
        per_type.setdefault(label.task_type, Counter())[value] += 1
        pooled[value] += 1
    rows = [_row(task_type, per_type[task_type]) for task_type in sorted(per_type)]
    rows.append(_row(POOLED, pooled))
    return pd.DataFrame(rows, columns=list(LABEL_SUMMARY_COLUMNS)).astype(LABEL_SUMMARY_COLUMNS)
