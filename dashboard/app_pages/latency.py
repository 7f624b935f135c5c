"""Latency: baseline vs candidate quantile curves (TTFT, e2e) and p50/p95/p99 per task type."""

from __future__ import annotations

import streamlit as st

from shadoweval.dashboard import loaders
from shadoweval.dashboard.check_cells import LATENCY_METRICS as LATENCY_CHECKS
from shadoweval.dashboard.check_cells import checks_table, style_checks_table
from shadoweval.dashboard.context import scored_pairs_page
from shadoweval.dashboard.formatting import task_type_label
from shadoweval.dashboard.latency_view import (
    LATENCY_METRICS,
    default_task_type,
    latency_table,
    quantile_chart,
    quantile_curves,
)
from shadoweval.records import POOLED

ctx, pairs = scored_pairs_page("Latency")
options = [*loaders.task_types(ctx.database_url, ctx.run_id, ctx.version.pairs), POOLED]
verdict = loaders.latest_verdict(ctx.database_url, ctx.run_id, ctx.version.verdict)
if st.session_state.get("latency_task") not in options:
    # first visit (or a run without the task type picked before): the worst latency check
    st.session_state["latency_task"] = default_task_type(
        options, () if verdict is None else verdict.checks
    )
task_type = st.selectbox("Task type", options, format_func=task_type_label, key="latency_task")

charts = st.columns(2)
for column, metric in zip(charts, ("ttft_ms", "e2e_ms"), strict=True):
    curves = quantile_curves(pairs, task_type, metric)
    with column:
        if curves.empty:
            st.info(f"No {LATENCY_METRICS[metric]} latencies for this task type.")
        else:
            st.altair_chart(
                quantile_chart(curves, f"{LATENCY_METRICS[metric]} ({metric})"),
                width="stretch",
            )

st.subheader("Quantiles")
table = latency_table(pairs, task_type)
st.dataframe(
    table.style.format(
        {"baseline ms": "{:,.1f}", "candidate ms": "{:,.1f}", "ratio": "{:.3f}"}, na_rep="–"
    ),
    hide_index=True,
    placeholder="–",
    key="latency_table",
)
st.caption(
    "Linear quantiles of each side's latencies over the pairs where neither side failed "
    "or had an infrastructure error and the candidate was not warming up (the summary's "
    "selection); ratio = candidate / baseline. The gate's own checks below are paired, "
    "use the baseline-repeat latency as control when there is one, and carry intervals."
)

if verdict is not None:
    latency_checks = [c for c in verdict.checks if c.metric in LATENCY_CHECKS]
    table_of_checks = checks_table(
        latency_checks, task_types=[task_type], status=verdict.check_status
    )
    st.subheader("Gate checks")
    if table_of_checks.empty:
        st.info("The stored verdict has no latency check for this task type.")
    else:
        st.dataframe(
            style_checks_table(table_of_checks),
            hide_index=True,
            placeholder="–",
            key="latency_checks",
        )
