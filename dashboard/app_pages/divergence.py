"""Divergence: similarity against the noise floor per task type; the lowest-similarity pairs."""

from __future__ import annotations

import math

import streamlit as st

from shadoweval.application.samples import redacted_page
from shadoweval.dashboard import loaders
from shadoweval.dashboard.check_cells import checks_table, style_checks_table
from shadoweval.dashboard.context import scored_pairs_page
from shadoweval.dashboard.divergence_view import histogram_chart, lowest_table, similarity_histogram
from shadoweval.dashboard.formatting import task_type_label
from shadoweval.dashboard.redaction import page_redactor
from shadoweval.pair_flags import PairFlag
from shadoweval.records import POOLED
from shadoweval.storage.samples import SampleFilter

LOWEST = 20

ctx, pairs = scored_pairs_page("Divergence")
summary = loaders.summary(ctx.database_url, ctx.run_id, ctx.version)
options = [*loaders.task_types(ctx.database_url, ctx.run_id, ctx.version.pairs), POOLED]
task_type = st.selectbox("Task type", options, format_func=task_type_label, key="divergence_task")
task_filter = () if task_type == POOLED else (task_type,)

row = summary[summary["task_type"] == task_type].iloc[0]
below = loaders.count_samples(
    ctx.database_url,
    ctx.run_id,
    SampleFilter(task_types=task_filter, flags=(PairFlag.BELOW_NOISE_FLOOR,)),
    ctx.version.pairs,
)


def _fmt(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3f}"


cols = st.columns(4)
cols[0].metric("Mean similarity", _fmt(float(row["similarity_mean"])))
cols[1].metric("10th percentile", _fmt(float(row["similarity_p10"])))
cols[2].metric("Noise floor (mean)", _fmt(float(row["noise_similarity_mean"])))
cols[3].metric("Pairs below their noise floor", f"{below:,}")

histogram = similarity_histogram(pairs, task_type)
if histogram.empty:
    st.info("No similarity values for this task type (every pair had an error).")
else:
    st.altair_chart(
        histogram_chart(histogram, f"Similarity distribution — {task_type_label(task_type)}"),
        width="stretch",
    )
    st.caption(
        "Cosine similarity of the candidate's answer to the live baseline's, against the "
        "baseline's similarity to its own repeat (the noise floor), on shared bins up to 1.0: "
        "in each bin the candidate's bar (orange) on the left, the noise floor's (blue) on "
        "the right; heights are shares of each series. Pairs with an infrastructure error "
        "are left out."
    )

verdict = loaders.latest_verdict(ctx.database_url, ctx.run_id, ctx.version.verdict)
if verdict is not None:
    similarity_checks = checks_table(
        [c for c in verdict.checks if c.metric == "similarity"],
        task_types=[task_type],
        status=verdict.check_status,
    )
    if not similarity_checks.empty:
        st.dataframe(
            style_checks_table(similarity_checks),
            hide_index=True,
            placeholder="–",
            key="similarity_checks",
        )

st.subheader(f"The {LOWEST} lowest-similarity pairs")
redact = page_redactor()
page = redacted_page(
    ctx.repo,
    ctx.run_id,
    SampleFilter(task_types=task_filter, min_similarity=-1.0),
    redact=redact,
    limit=LOWEST,
)
lowest = lowest_table(page.samples)
if lowest.empty:
    st.info("No pair with a similarity.")
else:
    st.dataframe(
        lowest.style.format({"similarity": "{:.3f}", "noise floor": "{:.3f}"}, na_rep="–"),
        hide_index=True,
        placeholder="–",
        key="lowest_pairs",
    )
    st.caption("Read them side by side on the Samples page (filter by similarity).")
