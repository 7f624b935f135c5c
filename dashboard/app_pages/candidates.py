"""Candidates: the picked run's sibling candidates on one shadow sample, side by side."""

from __future__ import annotations

import streamlit as st

from shadoweval.application.candidates import candidate_runs, stored_comparison
from shadoweval.dashboard.candidates_view import (
    DIRECTION_NOTE,
    candidates_table,
    pairwise_table,
)
from shadoweval.dashboard.context import current

ctx = current()
st.title("Candidates")
runs = candidate_runs(ctx.repo, ctx.run)
if len(runs) < 2:
    st.info(
        "This run's candidate was evaluated alone. Several candidates on one sample: "
        "`shadow-eval evaluate --candidate-url A=URL --candidate-url B=URL`."
    )
    st.stop()
comparison = stored_comparison(ctx.repo, runs)
if comparison is None:
    st.info("A candidate's run has no verdict yet — run `shadow-eval gate` on each.")
    st.stop()
st.dataframe(
    candidates_table(comparison, {name: run.run_id for name, run in runs}).style.format(
        {"p": "{:.3g}", "Holm p": "{:.3g}", "direction": "{:+.1f} pp"}, na_rep="–"
    ),
    hide_index=True,
    placeholder="–",
    key="candidates",
)
st.caption(DIRECTION_NOTE)
if comparison.best is not None:
    st.success(comparison.summary)
else:
    st.warning(comparison.summary)
st.caption(f"Method: {comparison.method}.")
if comparison.pairwise:
    st.subheader("Paired comparisons")
    st.dataframe(pairwise_table(comparison), hide_index=True, key="candidates_pairwise")
