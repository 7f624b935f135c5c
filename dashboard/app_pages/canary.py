"""Canary: a rollout on live traffic — its state, current step and share, its steps, the
share per version over time, each step's last verdict with its checks, and the audit trail.

Read only: a rollback is ``shadow-eval canary rollback`` or ``POST
/v1/canaries/{id}/rollback`` (both audited with who and why).
"""

from __future__ import annotations

from datetime import UTC, datetime

import streamlit as st

from shadoweval.application.canary import share_timeline
from shadoweval.dashboard import loaders
from shadoweval.dashboard.canary_view import (
    audit_table,
    canary_label,
    check_table,
    evaluated_at_text,
    share_chart,
    share_frame,
    steps_table,
    verdict_reasons,
)
from shadoweval.dashboard.context import current
from shadoweval.dashboard.formatting import md_escape

CANARY_KEY = "canary_picker"

ctx = current()
st.title("Canary")

found = loaders.canaries(ctx.database_url)
if not found:
    st.info(
        "No canary in this database yet. Start one after a promoted shadow run: "
        '`shadow-eval canary start --run RUN --why "…"`.'
    )
    st.stop()

by_id = {c.canary_id: c for c in found}
of_run = [c.canary_id for c in found if c.run_id == ctx.run_id]
if st.session_state.get(CANARY_KEY) not in by_id:
    st.session_state[CANARY_KEY] = of_run[0] if of_run else found[0].canary_id
picked = st.selectbox(
    "Canary",
    list(by_id),
    format_func=lambda i: canary_label(by_id[i]),
    key=CANARY_KEY,
    help="Every canary, newest first; the newest of the run picked in the sidebar comes up first.",
)
view = loaders.canary(ctx.database_url, picked)
canary = view.canary

state, step, share, revision = st.columns(4)
state.metric("State", canary.state.value)
step.metric("Current step", canary.step_index)
share.metric("Candidate share", f"{canary.candidate_share:.1%}")
revision.metric("Split revision", canary.split_revision)
observed = ", ".join(f"{arm} {n}" for arm, n in sorted(view.observed_per_arm.items())) or "none"
st.caption(
    f"{md_escape(canary.name)} · run `{canary.run_id}` · canary `{canary.canary_id}`  \n"
    f"requests observed: {md_escape(observed)} · policy `{canary.policy_hash}`"
)

st.subheader("Steps")
st.dataframe(
    steps_table(view).style.format({"share": "{:.1%}"}),
    hide_index=True,
    placeholder="–",
    key="canary_steps",
)

st.subheader("Share of sessions per version")
timeline = share_frame(share_timeline(view, now=datetime.now(UTC)))
st.altair_chart(share_chart(timeline), width="stretch")
st.caption("Baseline share = 1 − candidate share; each step holds its share over its window.")

st.subheader("Step verdicts")
judged = [s for s in view.steps if s.last_verdict is not None]
if not judged:
    st.info("No step verdict yet: the controller has not evaluated a step of this canary.")
for s in reversed(judged):
    verdict = s.last_verdict
    assert verdict is not None
    decision = verdict.decision.value
    with st.expander(
        f"Step {s.step_index} · share {s.share:.1%} · {decision}", expanded=s is judged[-1]
    ):
        st.markdown(
            f"**{md_escape(decision)}** — evaluated {evaluated_at_text(s.last_evaluated_at)}, "
            f"{s.evaluations} evaluation(s) in this step"
        )
        reasons = verdict_reasons(verdict)
        if reasons:
            st.markdown("\n".join(f"- {md_escape(r)}" for r in reasons))
        st.dataframe(
            check_table(verdict),
            hide_index=True,
            placeholder="–",
            key=f"canary_checks_{s.step_index}",
        )

st.subheader("Audit trail")
if not view.audit:
    st.info("No audit row for this canary.")
else:
    st.dataframe(audit_table(view.audit), hide_index=True, placeholder="–", key="canary_audit")
    st.caption("Who (actor), what (step, shares, split revision) and why, for every change.")
