"""Human-label summary: per task type, how often analysts judged the candidate better or worse.

Analysts label pairs ``candidate_better``, ``candidate_worse``, ``same`` or ``both_bad``
(:class:`~shadoweval.records.LabelValue`). :func:`label_summary` counts labelled *pairs* per
task type and over all task types — a pair labelled by several analysts, or several times,
counts once with its most recent label — with the win rate (share of pairs labelled
``candidate_better``) and the loss rate (share labelled ``candidate_worse``), each with a
95 % Wilson score interval
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
from collections.abc import Iterable, Sequence

import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from shadoweval.records import POOLED, HumanLabel, LabelValue

__all__ = [
    "LABEL_SUMMARY_COLUMNS",
    "LABEL_SUMMARY_CONFIDENCE",
    "label_summary",
    "latest_per_pair",
]

LABEL_SUMMARY_CONFIDENCE = 0.95
"""Confidence level of the win and loss intervals."""

LABEL_SUMMARY_COLUMNS: dict[str, str] = {
    "task_type": "object",
    "n": "int64",
    "labels": "int64",
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


def _row(task_type: str, counts: Counter[LabelValue], labels: int) -> dict[str, object]:
    n = sum(counts.values())
    better = counts[LabelValue.CANDIDATE_BETTER]
    worse = counts[LabelValue.CANDIDATE_WORSE]
    win_rate, win_low, win_high = _rate(better, n)
    loss_rate, loss_low, loss_high = _rate(worse, n)
    return {
        "task_type": task_type,
        "n": n,
        "labels": labels,
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


def _newer(label: HumanLabel, than: HumanLabel) -> bool:
    """Whether ``label`` wins over ``than`` as its pair's label: later ``labelled_at``;
    at the same time, the labeller name that sorts first."""
    if label.labelled_at != than.labelled_at:
        return label.labelled_at > than.labelled_at
    return label.labeller < than.labeller


def latest_per_pair(labels: Iterable[HumanLabel]) -> list[HumanLabel]:
    """One label per pair ``(run_id, exchange_id)``: the most recent (by ``labelled_at``,
    any labeller; at equal times the labeller name that sorts first), in the order the
    pairs first appear."""
    chosen: dict[tuple[str, str], HumanLabel] = {}
    for label in labels:
        key = (label.run_id, label.exchange_id)
        current = chosen.get(key)
        if current is None or _newer(label, current):
            chosen[key] = label
    return list(chosen.values())


def label_summary(labels: Sequence[HumanLabel]) -> pd.DataFrame:
    """Count labelled pairs per task type and pooled, with win and loss rates and Wilson
    intervals.

    The unit is the pair: each ``(run_id, exchange_id)`` counts once, with its most recent
    label (:func:`latest_per_pair`: latest ``labelled_at`` of any labeller; at equal times
    the labeller name that sorts first). Labels of one pair are not independent
    observations of the candidate, so counting each label would make the intervals
    narrower than the data allow. ``labels`` still counts every label given.

    Args:
        labels: human labels of one run (any order, any labellers).

    Returns:
        A DataFrame with the columns of :data:`LABEL_SUMMARY_COLUMNS`: one row per task
        type that has labels, sorted by task type, then the pooled row
        (``task_type == shadoweval.records.POOLED``) over all pairs. ``n`` is the number of
        labelled pairs, ``labels`` the number of labels given (>= ``n``), and
        ``candidate_better`` … ``both_bad`` count pairs by their chosen label (they sum to
        ``n``). ``win_rate`` = ``candidate_better / n`` and ``loss_rate`` =
        ``candidate_worse / n``, with 95 % Wilson score bounds ``win_low``/``win_high`` and
        ``loss_low``/``loss_high`` computed on pairs. Rates and bounds are NaN where ``n``
        is 0 (with no labels, only the pooled row, with ``n`` = ``labels`` = 0).
    """
    given = list(labels)
    per_type: dict[str, Counter[LabelValue]] = {}
    pooled: Counter[LabelValue] = Counter()
    for label in latest_per_pair(given):
        value = LabelValue(label.label)
        per_type.setdefault(label.task_type, Counter())[value] += 1
        pooled[value] += 1
    given_per_type = Counter(label.task_type for label in given)
    rows = [
        _row(task_type, per_type[task_type], given_per_type[task_type])
        for task_type in sorted(per_type)
    ]
    rows.append(_row(POOLED, pooled, len(given)))
    return pd.DataFrame(rows, columns=list(LABEL_SUMMARY_COLUMNS)).astype(LABEL_SUMMARY_COLUMNS)
