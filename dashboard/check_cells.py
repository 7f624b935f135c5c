"""Gate checks as table cells: the estimate with its interval, coloured by outcome.

The numbers are the stored verdict's (:class:`~shadoweval.records.Check`), never
recomputed: ``estimate`` and ``[ci_low, ci_high]`` on the metric's own scale
(:mod:`shadoweval.stats.checks`):

* ``error_rate``, ``infra_error_rate``, ``format_parse``, the harm detectors'
  ``harm_<kind>`` and ``tool_text_answer``: a difference of failure proportions,
  candidate − baseline, shown in percentage points;
* ``net_harm``: P(candidate worse) − P(candidate better), also in percentage points;
* ``similarity``: a mean divergence (or the noise-floor linearisation ``e``);
* ``latency_<metric>_<q>``: a quantile ratio candidate / baseline;
* ``output_tokens``: the token linearisation ``e = c − k·b``.

One checks table (:func:`check_rows_table`) renders the gate's checks (:func:`checks_table`)
and the canary step's (:func:`shadoweval.dashboard.canary_view.check_table`): a row per
check, the caller's columns, numbers as float64 (missing or not a number → NaN).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import pandas as pd
from pandas.io.formats.style import Styler

from shadoweval.dashboard.formatting import is_missing, task_type_label
from shadoweval.records import NOT_POWERED, POOLED, REPORT_ONLY, Check, CheckOutcome

__all__ = [
    "BINARY_METRICS",
    "CHECKS_COLUMNS",
    "HARM_PREFIX",
    "LATENCY_METRICS",
    "OUTCOME_CSS",
    "check_cell",
    "check_rows_table",
    "checks_table",
    "is_proportion_metric",
    "outcome_css",
    "style_checks_table",
]

BINARY_METRICS: frozenset[str] = frozenset(
    {"error_rate", "infra_error_rate", "format_parse", "tool_text_answer", "net_harm"}
)
"""Checks whose estimates are differences of proportions (shown in percentage points);
every ``harm_<kind>`` check too (:func:`is_proportion_metric`)."""

HARM_PREFIX = "harm_"
"""Prefix of the harm detectors' check names (``harm_degeneration``, ``harm_refusal`` …)."""


def is_proportion_metric(metric: str) -> bool:
    """True for a check whose estimate is a difference of proportions (shown in pp)."""
    return metric in BINARY_METRICS or metric.startswith(HARM_PREFIX)


LATENCY_METRICS: tuple[str, ...] = tuple(
    f"latency_{metric}_{q}"
    for metric in ("e2e_ms", "ttft_ms", "ttfc_ms")
    for q in ("p50", "p95", "p99")
)
"""Latency check names of :func:`shadoweval.stats.checks.latency_checks`, e2e first."""

OUTCOME_CSS: dict[str, str] = {
    CheckOutcome.PASS.value: "background-color: #d4edda; color: #155724",
    CheckOutcome.FAIL.value: "background-color: #f8d7da; color: #721c24; font-weight: bold",
    CheckOutcome.INCONCLUSIVE.value: "background-color: #fff3cd; color: #856404",
    REPORT_ONLY: "color: #6c757d",
    NOT_POWERED: "color: #6c757d",
}
"""Cell style per check outcome: pass green, fail red, inconclusive amber; in a PROMOTE a
check that did not decide (report only, not powered yet) grey
(:meth:`~shadoweval.records.Verdict.check_status`)."""

CHECKS_COLUMNS: tuple[str, ...] = (
    "task type",
    "metric",
    "outcome",
    "estimate",
    "ci low",
    "ci high",
    "margin",
    "n",
    "p value",
    "critical",
    "reason",
)
"""Columns of :func:`checks_table`."""


def outcome_css(outcome: str) -> str:
    """The CSS of a cell whose check ended in ``outcome`` ("" for no check)."""
    return OUTCOME_CSS.get(outcome, "")


def _number(metric: str, value: float) -> str:
    if is_proportion_metric(metric):
        return f"{100.0 * value:+.2f}"
    if metric.startswith("latency_"):
        return f"{value:.3f}"
    return f"{value:.4f}"


def check_cell(check: Check | None) -> str:
    """One check as a cell: ``estimate [ci_low, ci_high]`` on the metric's scale.

    Binary metrics are in percentage points (``+0.42 pp [-0.31, +1.15]``), latency
    ratios with three decimals (``1.031× [0.982, 1.074]``), the similarity and token
    checks with four decimals (``0.0266 [0.0001, 0.0531]``, never scientific
    notation). ``–`` when there is no check; the outcome alone (e.g. ``inconclusive``)
    when the check has no estimate (too few pairs).
    """
    if check is None:
        return "–"
    if is_missing(check.estimate):
        return check.outcome.value
    assert check.estimate is not None
    metric = check.metric
    unit = " pp" if is_proportion_metric(metric) else ("×" if metric.startswith("latency_") else "")
    text = f"{_number(metric, check.estimate)}{unit}"
    if not is_missing(check.ci_low) and not is_missing(check.ci_high):
        assert check.ci_low is not None
        assert check.ci_high is not None
        text += f" [{_number(metric, check.ci_low)}, {_number(metric, check.ci_high)}]"
    return text


def _unit_order(task_type: str) -> tuple[int, str]:
    return (1, "") if task_type == POOLED else (0, task_type)


def checks_table(
    checks: Iterable[Check],
    *,
    task_types: Sequence[str] | None = None,
    status: Callable[[Check], str] | None = None,
) -> pd.DataFrame:
    """Every check as one row (task types sorted, pooled last; checks in verdict order).

    Args:
        checks: the verdict's checks.
        task_types: keep only these analysis units (``POOLED`` for the pooled one).
        status: what the ``outcome`` column shows for a check, e.g.
            :meth:`~shadoweval.records.Verdict.check_status` (in a PROMOTE, ``report only``
            or ``not powered yet`` rather than ``inconclusive``); by default its outcome.

    Returns:
        A DataFrame with :data:`CHECKS_COLUMNS`; numbers as stored (``None`` → NaN).
    """
    kept = [c for c in checks if task_types is None or c.task_type in task_types]
    order = sorted(range(len(kept)), key=lambda i: (_unit_order(kept[i].task_type), i))
    rows = [
        {
            "task type": task_type_label(c.task_type),
            "metric": c.metric,
            "outcome": c.outcome.value if status is None else status(c),
            "estimate": c.estimate,
            "ci low": c.ci_low,
            "ci high": c.ci_high,
            "margin": c.margin,
            "n": c.n,
            "p value": c.p_value,
            "critical": c.critical,
            "reason": c.reason,
        }
        for c in (kept[i] for i in order)
    ]
    return check_rows_table(
        rows, CHECKS_COLUMNS, numeric=("estimate", "ci low", "ci high", "margin", "p value")
    )


def check_rows_table(
    rows: Iterable[Mapping[str, object]], columns: Sequence[str], *, numeric: Sequence[str]
) -> pd.DataFrame:
    """The one checks table: one row per check (a mapping of column → value) with
    ``columns`` in order; the ``numeric`` columns as float64 (anything not a number → NaN).
    """
    frame = pd.DataFrame(list(rows), columns=list(columns))
    for column in numeric:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def style_checks_table(table: pd.DataFrame) -> Styler:
    """:func:`checks_table` with its ``outcome`` cells coloured and numbers rounded."""

    def colours(column: pd.Series) -> list[str]:
        return [outcome_css(str(v)) for v in column]

    return table.style.apply(colours, subset=["outcome"]).format(
        {
            "estimate": "{:.4f}",
            "ci low": "{:.4f}",
            "ci high": "{:.4f}",
            "margin": "{:.4f}",
            "p value": "{:.3g}",
        },
        na_rep="–",
    )
