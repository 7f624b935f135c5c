"""Human labels per task type on the overview: win and loss rates with Wilson intervals.

The unit is the labelled pair (its most recent label); ``labels`` counts every label given.

The numbers are :func:`shadoweval.stats.labels.label_summary`'s, renamed for display; nothing is
recomputed here.
"""

from __future__ import annotations

import pandas as pd
from pandas.io.formats.style import Styler

from shadoweval.dashboard.formatting import task_type_label

__all__ = ["LABEL_COLUMNS", "labels_table", "style_labels_table"]

LABEL_COLUMNS: dict[str, str] = {
    "task type": "task_type",
    "pairs": "n",
    "labels": "labels",
    "better": "candidate_better",
    "worse": "candidate_worse",
    "same": "same",
    "both bad": "both_bad",
    "win rate": "win_rate",
    "win low": "win_low",
    "win high": "win_high",
    "loss rate": "loss_rate",
    "loss low": "loss_low",
    "loss high": "loss_high",
}
"""Shown column → :data:`shadoweval.stats.labels.LABEL_SUMMARY_COLUMNS` column it copies."""

_RATES = ("win rate", "win low", "win high", "loss rate", "loss low", "loss high")


def labels_table(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`shadoweval.stats.labels.label_summary`'s rows (pooled last) with display names.

    Rates are fractions in [0, 1] (NaN when a row has no labels); the ``low``/``high``
    columns bound the 95% Wilson score interval.
    """
    table = summary[list(LABEL_COLUMNS.values())].copy()
    table.columns = list(LABEL_COLUMNS)
    table["task type"] = [task_type_label(str(t)) for t in table["task type"]]
    return table.reset_index(drop=True)


def style_labels_table(table: pd.DataFrame) -> Styler:
    """:func:`labels_table` with rates as percentages."""
    return table.style.format(dict.fromkeys(_RATES, "{:.1%}"), na_rep="–")
