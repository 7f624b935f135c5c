"""The overview's per-task-type table: descriptive numbers beside the gate's checks.

Descriptive columns come from :func:`stats.summary.task_type_summary` over all pairs of
the run (rates in [0, 1]; quality numbers without the pairs that had an infrastructure
error, as the summary defines them). Check columns are the stored verdict's checks
(:mod:`faces.dashboard.check_cells`): the look's estimate and interval, coloured by outcome.
The verdict may judge a prefix of the pairs (its checkpoint), so a check's ``n`` can be
smaller than the row's ``n``.

Column order (:data:`COLUMNS`): ``task type``, ``outcome``, ``n``, then the coloured check
cells, then the other descriptive columns — so the checks are on screen without
scrolling sideways.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from faces.dashboard.check_cells import check_cell, outcome_css
from faces.dashboard.formatting import task_type_label
from shadoweval.records import Check, Verdict

__all__ = [
    "CHECK_COLUMNS",
    "COLUMNS",
    "SUMMARY_COLUMNS",
    "OverviewTable",
    "checks_heading",
    "overview_table",
    "style_overview_table",
]

SUMMARY_COLUMNS: dict[str, str] = {
    "n": "n",
    "similarity mean": "similarity_mean",
    "noise floor": "noise_similarity_mean",
    "fail base": "baseline_fail_rate",
    "fail cand": "candidate_fail_rate",
    "infra base": "baseline_infra_error_rate",
    "infra cand": "candidate_infra_error_rate",
    "format n": "format_n",
    "format ok base": "baseline_format_ok_rate",
    "format ok cand": "candidate_format_ok_rate",
}
"""Shown column → :data:`stats.summary.SUMMARY_COLUMNS` column it copies."""

CHECK_COLUMNS: dict[str, str] = {
    "similarity check": "similarity",
    "error check": "error_rate",
    "infra check": "infra_error_rate",
    "format check": "format_parse",
    "e2e p50 ×": "latency_e2e_ms_p50",
    "e2e p95 ×": "latency_e2e_ms_p95",
    "e2e p99 ×": "latency_e2e_ms_p99",
    "TTFT p50 ×": "latency_ttft_ms_p50",
    "TTFT p95 ×": "latency_ttft_ms_p95",
    "TTFT p99 ×": "latency_ttft_ms_p99",
    "tokens check": "output_tokens",
}
"""Shown column → check metric name (:mod:`stats.checks`)."""

COLUMNS: tuple[str, ...] = (
    "task type",
    "outcome",
    "n",
    *CHECK_COLUMNS,
    *(c for c in SUMMARY_COLUMNS if c != "n"),
)
"""The table's columns in the order shown: identity, checks, then descriptive numbers."""

_RATE_COLUMNS = (
    "fail base",
    "fail cand",
    "infra base",
    "infra cand",
    "format ok base",
    "format ok cand",
)


@dataclass(frozen=True)
class OverviewTable:
    """The table shown (``values``) and, cell by cell, the check outcome that colours it.

    ``values`` has one row per task type and a pooled row last, columns :data:`COLUMNS`:
    ``task type``, ``outcome`` (worst check outcome), ``n``, the :data:`CHECK_COLUMNS`
    (text from :func:`check_cell`) and the other :data:`SUMMARY_COLUMNS` (numbers as in
    the summary).
    ``outcomes`` has the same shape: the outcome of the check behind each cell ("" for
    descriptive cells). ``checks`` maps ``(task_type, metric)`` to the check shown.
    """

    values: pd.DataFrame
    outcomes: pd.DataFrame
    checks: dict[tuple[str, str], Check]


def overview_table(summary: pd.DataFrame, verdict: Verdict | None) -> OverviewTable:
    """Join the summary's rows with the verdict's checks.

    Args:
        summary: :func:`stats.summary.task_type_summary` of the run's pairs (pooled row
            last, ``task_type = POOLED``).
        verdict: the run's stored latest verdict, or ``None`` (check cells show ``–``).

    Returns:
        An :class:`OverviewTable` with the summary's row order.
    """
    checks: dict[tuple[str, str], Check] = {}
    if verdict is not None:
        for check in verdict.checks:
            checks.setdefault((check.task_type, check.metric), check)
    values: list[dict[str, object]] = []
    outcomes: list[dict[str, str]] = []
    for record in summary.to_dict(orient="records"):
        task_type = str(record["task_type"])
        row: dict[str, object] = {
            "task type": task_type_label(task_type),
            "outcome": str(record["outcome"]),
        }
        outcome_row = {"task type": "", "outcome": str(record["outcome"])}
        for shown, column in SUMMARY_COLUMNS.items():
            row[shown] = record[column]
            outcome_row[shown] = ""
        for shown, metric in CHECK_COLUMNS.items():
            found = checks.get((task_type, metric))
            row[shown] = check_cell(found)
            outcome_row[shown] = "" if found is None else found.outcome.value
        values.append(row)
        outcomes.append(outcome_row)
    columns = list(COLUMNS)
    frame = pd.DataFrame(values, columns=columns)
    for shown in SUMMARY_COLUMNS:
        frame[shown] = pd.to_numeric(frame[shown], errors="coerce")
    return OverviewTable(frame, pd.DataFrame(outcomes, columns=columns), checks)


def checks_heading(count: int) -> str:
    """The title of the expander that lists the verdict's ``count`` checks."""
    if count == 0:
        return "Checks with their reasons (the verdict has none)"
    if count == 1:
        return "The 1 check with its reason"
    return f"All {count:,} checks with their reasons"


def style_overview_table(table: OverviewTable) -> Styler:
    """The table for ``st.dataframe``: check cells coloured by outcome, rates as percent."""
    styles = table.outcomes.map(outcome_css)
    formats: dict[Any, str | Callable[[object], str] | None] = dict.fromkeys(
        _RATE_COLUMNS, "{:.1%}"
    )
    formats.update(
        {
            "similarity mean": "{:.3f}",
            "noise floor": "{:.3f}",
            "n": "{:,.0f}",
            "format n": "{:,.0f}",
        }
    )
    # One format() call: a second call with na_rep would reset the other columns' formats.
    return table.values.style.apply(lambda _: styles, axis=None).format(formats, na_rep="–")
