"""History: the run's verdict timeline, its frozen policy and the policy audit log."""

from __future__ import annotations

import streamlit as st

from shadoweval.application.run_views import policy_integrity
from shadoweval.dashboard import loaders
from shadoweval.dashboard.context import current
from shadoweval.dashboard.history_view import audit_table, timeline_chart, verdict_timeline

ctx = current()
st.title("History")

st.subheader("Verdict timeline")
entries = loaders.verdict_history(ctx.database_url, ctx.run_id, ctx.version.verdict)
if not entries:
    st.info("No verdict stored yet — run `shadow-eval gate`.")
else:
    timeline = verdict_timeline(entries)
    st.altair_chart(timeline_chart(timeline), width="stretch")
    st.dataframe(
        timeline.style.format({"coverage": "{:.1%}"}),
        hide_index=True,
        placeholder="–",
        key="verdict_timeline",
    )

st.subheader("Policy")
integrity = policy_integrity(ctx.run)
if integrity.ok:
    st.success(f"Frozen policy, sha256 `{integrity.stored}` (the YAML below hashes to it).")
else:
    st.error(
        f"The run's stored policy hash `{integrity.stored}` does not match its YAML "
        f"(`{integrity.computed or integrity.error}`)."
    )
with st.expander("Policy YAML (fully resolved, as frozen into the run)"):
    st.code(ctx.run.policy_yaml, language="yaml")

st.subheader("Policy audit log")
audit = loaders.policy_audit(ctx.database_url, ctx.run_id)
if not audit:
    st.info("The audit log of this run is empty.")
else:
    st.dataframe(audit_table(audit), hide_index=True, placeholder="–", key="policy_audit")
    st.caption(
        "Every creation of the run with its frozen policy, every command that used it, and "
        "every refused different policy (with both hashes in the detail)."
    )
