"""Latency page: baseline and candidate quantile curves and a p50/p95/p99 table.

The pairs used are those of the summary's latency ratios
(:func:`shadoweval.application.run_views.task_summary`): no infrastructure error on either side
(:func:`shadoweval.application.run_views.judged_pairs`), neither side failed, the candidate not
warming up, neither answer served from a cache; each side's known latencies, linear
quantiles (``numpy.quantile``). So the table's p50 e2e ratio is the summary's
``e2e_p50_ratio``. The gate's own latency checks (paired, baseline-repeat control, their
intervals) are the verdict's and are shown beside, not recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import altair as alt
import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.application.run_views import judged_pairs
from shadoweval.records import Check, CheckOutcome

__all__ = [
    "CURVE_QUANTILES",
    "LATENCY_METRICS",
    "TABLE_QUANTILES",
    "default_task_type",
    "latency_rows",
    "latency_table",
    "quantile_chart",
    "quantile_curves",
]

LATENCY_METRICS: dict[str, str] = {
    "e2e_ms": "end-to-end",
    "ttft_ms": "time to first token",
    "ttfc_ms": "time to first content",
}
"""Latency columns of :data:`shadoweval.stats.frame.PAIRS_COLUMNS` (``baseline_<m>``,
``candidate_<m>``)."""

CURVE_QUANTILES: npt.NDArray[np.float64] = np.round(np.arange(1, 100) / 100.0, 2)
"""The curves' quantile levels: 0.01, 0.02, …, 0.99."""

TABLE_QUANTILES: dict[str, float] = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


_SEVERITY = {CheckOutcome.FAIL: 2, CheckOutcome.INCONCLUSIVE: 1}


def default_task_type(options: Sequence[str], checks: Iterable[Check]) -> str:
    """The task type the Latency page opens on: the worst latency check outcome first.

    Among ``options`` (in their order), the first with a failed latency check, else the
    first with an inconclusive one, else ``options[0]``. ``checks`` are the stored
    verdict's; only ``latency_*`` checks count.

    Raises:
        ValueError: ``options`` is empty.
    """
    if not options:
        raise ValueError("default_task_type: no task types to choose from (options is empty)")
    worst: dict[str, int] = {}
    for check in checks:
        if check.metric.startswith("latency_"):
            severity = _SEVERITY.get(check.outcome, 0)
            worst[check.task_type] = max(worst.get(check.task_type, 0), severity)
    best = max(worst.get(option, 0) for option in options)
    return next(option for option in options if worst.get(option, 0) == best)


def latency_rows(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """The pairs whose latencies are shown (the summary's selection, see the module)."""
    rows = judged_pairs(pairs, task_type)
    ok = ~(
        rows["baseline_fail"]
        | rows["candidate_fail"]
        | rows["candidate_warmup"]
        | rows["baseline_cache_hit"]
        | rows["candidate_cache_hit"]
    )
    return rows[ok]


def _side(rows: pd.DataFrame, side: str, metric: str) -> npt.NDArray[np.float64]:
    values: npt.NDArray[np.float64] = rows[f"{side}_{metric}"].dropna().to_numpy(dtype=np.float64)
    return values


def quantile_curves(pairs: pd.DataFrame, task_type: str, metric: str) -> pd.DataFrame:
    """Long table of the quantile curves: ``quantile``, ``side``, ``latency_ms``.

    One row per level of :data:`CURVE_QUANTILES` and side (``baseline``,
    ``candidate``) that has values; empty when neither side has a latency.
    """
    rows = latency_rows(pairs, task_type)
    parts = []
    for side in ("baseline", "candidate"):
        values = _side(rows, side, metric)
        if values.size:
            parts.append(
                pd.DataFrame(
                    {
                        "quantile": CURVE_QUANTILES,
                        "side": side,
                        "latency_ms": np.quantile(values, CURVE_QUANTILES),
                    }
                )
            )
    if not parts:
        return pd.DataFrame(
            {
                "quantile": pd.Series(dtype="float64"),
                "side": pd.Series(dtype="object"),
                "latency_ms": pd.Series(dtype="float64"),
            }
        )
    return pd.concat(parts, ignore_index=True)


def latency_table(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """p50/p95/p99 per side (ms) and their ratio candidate / baseline, per metric.

    Columns ``metric``, ``quantile``, ``baseline n``, ``candidate n``, ``baseline ms``,
    ``candidate ms``, ``ratio``; one row per metric × quantile, NaN where a side has no
    value (ratio NaN when the baseline quantile is not > 0).
    """
    rows = latency_rows(pairs, task_type)
    records = []
    for metric in LATENCY_METRICS:
        base = _side(rows, "baseline", metric)
        cand = _side(rows, "candidate", metric)
        for name, q in TABLE_QUANTILES.items():
            b = float(np.quantile(base, q)) if base.size else math.nan
            c = float(np.quantile(cand, q)) if cand.size else math.nan
            records.append(
                {
                    "metric": metric,
                    "quantile": name,
                    "baseline n": int(base.size),
                    "candidate n": int(cand.size),
                    "baseline ms": b,
                    "candidate ms": c,
                    "ratio": c / b if b > 0 else math.nan,
                }
            )
    return pd.DataFrame(records)


def quantile_chart(curves: pd.DataFrame, title: str) -> alt.Chart:
    """Quantile plot (x: quantile level, y: latency ms, one line per side)."""
    chart: alt.Chart = (
        alt.Chart(curves, title=title)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=alt.X("quantile:Q", title="quantile", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("latency_ms:Q", title="latency (ms)"),
            color=alt.Color(
                "side:N",
                scale=alt.Scale(domain=["baseline", "candidate"], range=["#4c78a8", "#f58518"]),
            ),
            tooltip=[
                alt.Tooltip("side:N"),
                alt.Tooltip("quantile:Q", format=".2f"),
                alt.Tooltip("latency_ms:Q", format=",.1f", title="ms"),
            ],
        )
    )
    return chart
