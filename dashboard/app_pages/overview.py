"""Overview: the verdict banner, the per-task-type table, the direction of the change and
the human-label rates."""

from __future__ import annotations

import streamlit as st

from shadoweval.dashboard import coverage_view, loaders
from shadoweval.dashboard.banner import BANNER_REASONS, reasons_markdown, verdict_banner
from shadoweval.dashboard.check_cells import checks_table, style_checks_table
from shadoweval.dashboard.context import current
from shadoweval.dashboard.formatting import count_noun, md_escape
from shadoweval.dashboard.labels_table import labels_table, style_labels_table
from shadoweval.dashboard.overview_table import (
    checks_heading,
    direction_view,
    noise_floor_warning,
    overview_table,
    style_direction_view,
    style_overview_table,
)
from shadoweval.errors import ShadowEvalError

ctx = current()
st.title("Overview")
st.caption(f"Run **{md_escape(ctx.run.name)}** · `{ctx.run_id}`")

verdict = loaders.latest_verdict(ctx.database_url, ctx.run_id, ctx.version.verdict)
banner = verdict_banner(verdict)
getattr(st, banner.kind)(banner.markdown())
if len(banner.reasons) > BANNER_REASONS:
    with st.expander(f"All {len(banner.reasons)} reasons of the verdict"):
        st.markdown(reasons_markdown(banner.reasons))

direction = None
try:
    direction = loaders.direction(ctx.database_url, ctx.run_id, ctx.version.pairs)
except ShadowEvalError as exc:
    st.error(f"**Cannot weigh the direction of the change.** {md_escape(str(exc))}")
noise_warning = None if direction is None else noise_floor_warning(direction.degenerate)
if noise_warning is not None:
    st.warning(noise_warning)

if verdict is not None:
    coverage = verdict.coverage
    cols = st.columns(5)
    cols[0].metric("Decision", verdict.decision.value.upper())
    cols[1].metric("Look", verdict.look)
    cols[2].metric("Coverage", f"{coverage.share:.1%}")
    cols[3].metric("Paired", f"{coverage.paired:,}")
    cols[4].metric("Captured", f"{coverage.captured:,}")
    st.caption(
        f"Decided {verdict.decided_at:%Y-%m-%d %H:%M:%S} UTC · policy `{verdict.policy_hash}`"
        f" · {coverage.errored:,} errored, {coverage.skipped:,} skipped, "
        f"{count_noun(coverage.warmup, 'warm-up replay')}, "
        f"{count_noun(coverage.rejected, 'unreadable capture line')}"
    )

st.subheader("Coverage")
routes = coverage_view.route_table(verdict)
if verdict is None:
    st.info("No verdict yet: coverage is counted when the run is gated.")
elif routes.empty:
    st.caption("This verdict was stored before coverage by route was counted.")
else:
    unevaluated = routes.loc[routes["evaluated"] == "NO", "route"].tolist()
    if unevaluated:
        st.warning(
            "**Captured but not evaluated:** "
            + ", ".join(f"`{md_escape(r)}`" for r in unevaluated)
            + " — the verdict holds on such a route unless the policy exempts it "
            "(`routes: {<route>: {required: false}}`)."
        )
    st.dataframe(
        routes,
        hide_index=True,
        placeholder="–",
        key="coverage_routes",
        column_config={"coverage": st.column_config.NumberColumn(format="percent")},
    )
    st.dataframe(
        coverage_view.task_type_table(verdict),
        hide_index=True,
        placeholder="–",
        key="coverage_task_types",
        column_config={"coverage": st.column_config.NumberColumn(format="percent")},
    )
    note = coverage_view.load_note(verdict)
    if note is not None:
        st.warning(
            f"**Replay load:** {md_escape(note)} — the latency checks were measured at that "
            "load, not the asked one."
        )
    st.caption(
        "Coverage = paired / captured, by route (the path without a trailing slash) and by "
        "task type, from the stored verdict. Skipped exchanges were not sent (the reason "
        "says why: e.g. /v1/responses is not replayed)."
    )

st.subheader("Per task type")
if ctx.version.pairs == 0:
    st.info("This run has no scored pairs yet (run `shadow-eval compare`).")
else:
    summary = loaders.overview_summary(ctx.database_url, ctx.run_id, ctx.version)
    table = overview_table(summary, verdict)
    st.dataframe(
        style_overview_table(table), hide_index=True, placeholder="–", key="overview_table"
    )
    st.caption(
        "Check cells come first, after the task type, its worst outcome and n; the descriptive "
        "columns (similarity, noise floor, rates) follow and cover all pairs of the run; "
        "rates are baseline (base) and candidate (cand) shares, quality rates without pairs "
        "that had an infrastructure error. Check cells are the stored verdict's: estimate "
        "[interval] at its look — error/infra/format in percentage points (candidate − "
        "baseline failures), latency as candidate/baseline ratios; green pass, red fail, "
        "amber inconclusive."
    )
    if verdict is not None:
        with st.expander(checks_heading(len(verdict.checks))):
            st.dataframe(
                style_checks_table(checks_table(verdict.checks, status=verdict.check_status)),
                hide_index=True,
                placeholder="–",
                key="checks_table",
            )

st.subheader("Direction of the change")
if ctx.version.pairs > 0 and direction is not None:
    shown = direction_view(direction.table, verdict)
    st.dataframe(
        style_direction_view(shown), hide_index=True, placeholder="–", key="direction_table"
    )
    st.caption(
        "A pair is changed when it diverges beyond the noise floor or differs in a harm "
        "detector, format, tool behaviour or an error (under the run's frozen policy); only "
        "changed pairs are judged, unchanged ones count as ties. Judged = changed pairs with a "
        "successful judgement (a human label wins over a reference check, which wins over the "
        "LLM judge); to judge = changed pairs without one (failed judgements included). Win / "
        "tie / loss rates are among the judged changed pairs with 95% Wilson intervals; net "
        "harm = P(candidate worse) − P(candidate better) over all pairs, in points, with a 95% "
        "interval of the stratified estimator. The net harm check cell is the stored "
        "verdict's (green pass, red fail, amber inconclusive). Read the judgements on the "
        "Judged pairs page; export the pairs left to judge from the Samples page."
    )
    if direction.agreement is not None:
        st.caption(md_escape(direction.agreement.describe()))

st.subheader("Human labels")
rates = loaders.label_rates(ctx.database_url, ctx.run_id)
if rates.empty or int(rates["n"].iloc[-1]) == 0:
    st.info("No pairs of this run are labelled yet (label them on the Samples page).")
else:
    st.dataframe(
        style_labels_table(labels_table(rates)),
        hide_index=True,
        placeholder="–",
        key="labels_table",
    )
    st.caption(
        "Win rate = candidate better / labels, loss rate = candidate worse / labels, with 95% "
        "Wilson score intervals; a pair labelled by several people counts once per label."
    )
