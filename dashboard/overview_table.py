"""The overview's per-task-type table: descriptive numbers beside the gate's checks.

Descriptive columns come from :func:`shadoweval.stats.summary.task_type_summary` over all pairs of
the run (rates in [0, 1]; quality numbers without the pairs that had an infrastructure
error, as the summary defines them). Check columns are the stored verdict's checks
(:mod:`shadoweval.dashboard.check_cells`): the look's estimate and interval, coloured by outcome.
The verdict may judge a prefix of the pairs (its checkpoint), so a check's ``n`` can be
smaller than the row's ``n``.

Column order (:data:`COLUMNS`): ``task type``, ``outcome``, ``n``, then the coloured check
cells, then the other descriptive columns — so the checks are on screen without
scrolling sideways.

The second table of the overview, :func:`direction_view`, is the *direction* of the
change beside the verdict's ``net_harm`` check: per task type the changed share, the
judged pairs by source, better / tie / worse with win, tie and loss rates and their
Wilson intervals, and the net-harm estimate with its interval
(:func:`shadoweval.application.run_views.direction_summary`, never recomputed here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from shadoweval.dashboard.check_cells import check_cell, outcome_css
from shadoweval.dashboard.formatting import is_missing, md_escape, task_type_label
from shadoweval.records import Check, Verdict

__all__ = [
    "CHECK_COLUMNS",
    "COLUMNS",
    "DIRECTION_COUNTS",
    "DIRECTION_VIEW_COLUMNS",
    "SUMMARY_COLUMNS",
    "OverviewTable",
    "checks_heading",
    "direction_view",
    "net_harm_cell",
    "noise_floor_warning",
    "overview_table",
    "rate_cell",
    "style_direction_view",
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
"""Shown column → :data:`shadoweval.stats.summary.SUMMARY_COLUMNS` column it copies."""

CHECK_COLUMNS: dict[str, str] = {
    "net harm check": "net_harm",
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
    "TTFC p50 ×": "latency_ttfc_ms_p50",
    "TTFC p95 ×": "latency_ttfc_ms_p95",
    "TTFC p99 ×": "latency_ttfc_ms_p99",
    "tokens check": "output_tokens",
}
"""Shown column → check metric name (:mod:`shadoweval.stats.checks`)."""

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
        summary: :func:`shadoweval.stats.summary.task_type_summary` of the run's pairs (pooled row
            last, ``task_type = POOLED``).
        verdict: the run's stored latest verdict, or ``None`` (check cells show ``–``).

    Returns:
        An :class:`OverviewTable` with the summary's row order.
    """
    checks = _checks_by_cell(verdict)
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
            outcome_row[shown] = (
                "" if found is None or verdict is None else verdict.check_status(found)
            )
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


DIRECTION_COUNTS: dict[str, str] = {
    "pairs": "pairs",
    "changed": "changed",
    "judged": "judged",
    "by judge": "judged_judge",
    "by human": "judged_human",
    "by reference": "judged_reference",
    "to judge": "unjudged",
    "failed": "failed",
    "better": "better",
    "tie": "tie",
    "worse": "worse",
    "truth/exact changed": "similarity_found",
    "missed by similarity": "similarity_missed",
}
"""Shown count column → :data:`shadoweval.application.run_views.DIRECTION_COLUMNS` column it
copies."""

DIRECTION_VIEW_COLUMNS: tuple[str, ...] = (
    "task type",
    "net harm check",
    "changed share",
    "net harm",
    "win rate",
    "tie rate",
    "loss rate",
    *DIRECTION_COUNTS,
)
"""Columns of :func:`direction_view` in the order shown."""


def rate_cell(rate: float, low: float, high: float) -> str:
    """A rate with its interval in percent: ``41.7% [19.3, 68.0]``; ``–`` when NaN (nothing
    judged)."""
    if is_missing(rate) or math.isnan(rate):
        return "–"
    return f"{100 * rate:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def net_harm_cell(estimate: float, low: float, high: float) -> str:
    """Net harm in percentage points with its interval: ``+2.10 pp [-1.30, +5.50]``
    (positive: the candidate is worse more often than better); the estimate alone when
    the interval is unknown; ``–`` without an estimate."""
    if is_missing(estimate) or math.isnan(estimate):
        return "–"
    text = f"{100 * estimate:+.2f} pp"
    if not (math.isnan(low) or math.isnan(high)):
        text += f" [{100 * low:+.2f}, {100 * high:+.2f}]"
    return text


def direction_view(direction: pd.DataFrame, verdict: Verdict | None) -> OverviewTable:
    """The direction table shown beside the verdict's ``net_harm`` checks.

    Args:
        direction: :attr:`shadoweval.application.run_views.RunDirection.table` (task types sorted,
            the pooled row last).
        verdict: the run's stored latest verdict, or ``None`` (the check cells show ``–``).

    Returns:
        An :class:`OverviewTable` with :data:`DIRECTION_VIEW_COLUMNS`: ``task type``;
        ``net harm check`` (the verdict's :func:`check_cell`, coloured by its outcome);
        ``changed share`` (changed / pairs, a fraction); ``net harm`` (:func:`net_harm_cell`
        of the estimate and its interval); ``win rate`` / ``tie rate`` / ``loss rate``
        (:func:`rate_cell` over the judged changed pairs); then the counts of
        :data:`DIRECTION_COUNTS`.
    """
    checks = _checks_by_cell(verdict)
    values: list[dict[str, object]] = []
    outcomes: list[dict[str, str]] = []
    for record in direction.to_dict(orient="records"):
        task_type = str(record["task_type"])
        found = checks.get((task_type, "net_harm"))
        row: dict[str, object] = {
            "task type": task_type_label(task_type),
            "net harm check": check_cell(found),
            "changed share": record["changed_share"],
            "net harm": net_harm_cell(
                record["net_harm"], record["net_harm_low"], record["net_harm_high"]
            ),
        }
        for name in ("win", "tie", "loss"):
            row[f"{name} rate"] = rate_cell(
                record[f"{name}_rate"], record[f"{name}_low"], record[f"{name}_high"]
            )
        for shown, column in DIRECTION_COUNTS.items():
            row[shown] = int(record[column])
        values.append(row)
        outcome_row = dict.fromkeys(DIRECTION_VIEW_COLUMNS, "")
        outcome_row["net harm check"] = "" if found is None else found.outcome.value
        outcomes.append(outcome_row)
    columns = list(DIRECTION_VIEW_COLUMNS)
    frame = pd.DataFrame(values, columns=columns)
    frame["changed share"] = pd.to_numeric(frame["changed share"], errors="coerce")
    for shown in DIRECTION_COUNTS:
        frame[shown] = frame[shown].astype("int64")
    return OverviewTable(frame, pd.DataFrame(outcomes, columns=columns), checks)


def style_direction_view(table: OverviewTable) -> Styler:
    """:func:`direction_view` for ``st.dataframe``: the check cell coloured by outcome,
    the changed share as a percentage."""
    styles = table.outcomes.map(outcome_css)
    formats: dict[Any, str | Callable[[object], str] | None] = {"changed share": "{:.1%}"}
    formats.update(dict.fromkeys(DIRECTION_COUNTS, "{:,.0f}"))
    return table.values.style.apply(lambda _: styles, axis=None).format(formats, na_rep="–")


def noise_floor_warning(sentence: str | None) -> str | None:
    """The overview's warning banner for a degenerate noise floor (Markdown, escaped), or
    ``None`` when none was detected (``sentence`` is
    :attr:`shadoweval.application.run_views.RunDirection.degenerate`)."""
    if not sentence:
        return None
    return (
        "**The noise floor is degenerate.** "
        + md_escape(sentence[0].upper() + sentence[1:])
        + ". The similarity check cannot tell sampling noise from change here: judge the "
        "changed pairs (or export them for the analysts) to learn the direction."
    )


def _checks_by_cell(verdict: Verdict | None) -> dict[tuple[str, str], Check]:
    """The first check of ``verdict`` for each ``(task type, metric)`` (none without a
    verdict)."""
    checks: dict[tuple[str, str], Check] = {}
    if verdict is not None:
        for check in verdict.checks:
            checks.setdefault((check.task_type, check.metric), check)
    return checks
