"""Samples: filter the run's pairs, page through them, read them side by side, label them."""

from __future__ import annotations

import math
from typing import cast

import streamlit as st

from shadoweval.application.exporting import (
    FORMATS,
    ORDERS,
    ExportFormat,
    ExportOrder,
    export_zip,
    filter_request,
)
from shadoweval.application.samples import redacted_page
from shadoweval.dashboard import loaders
from shadoweval.dashboard.context import current
from shadoweval.dashboard.formatting import count_noun, md_escape, plural
from shadoweval.dashboard.paging import PAGE_SIZE, CursorStack, filter_key
from shadoweval.dashboard.redaction import page_redactor
from shadoweval.dashboard.sample_card import render_sample
from shadoweval.errors import ShadowEvalError
from shadoweval.pair_flags import PairFlag
from shadoweval.storage.samples import SampleFilter

EXPORT_KEY = "samples.export"

ctx = current()
st.title("Samples")
redact = page_redactor()

known_types = loaders.task_types(ctx.database_url, ctx.run_id, ctx.version.pairs)
flag_names = [f.value for f in PairFlag]
for key, options in (("samples_task_types", known_types), ("samples_flags", flag_names)):
    if key in st.session_state:  # a run switch may leave picks the new run does not have
        st.session_state[key] = [v for v in st.session_state[key] if v in options]

with st.container(border=True):
    left, right = st.columns(2)
    task_types = left.multiselect("Task types", known_types, key="samples_task_types")
    flags = right.multiselect(
        "Flags (a pair must have all)",
        flag_names,
        format_func=lambda f: f.replace("_", " "),
        key="samples_flags",
    )
    toggle_col, slider_col = st.columns([1, 3])
    by_similarity = toggle_col.toggle(
        "Filter by similarity",
        key="samples_by_similarity",
        help="Off: every pair, those without a similarity (an errored side) first. On: only "
        "pairs whose similarity lies in the range.",
    )
    low, high = slider_col.slider(
        "Similarity range",
        min_value=-1.0,
        max_value=1.0,
        value=(-1.0, 1.0),
        step=0.01,
        disabled=not by_similarity,
        key="samples_similarity",
    )

flt = SampleFilter(
    task_types=tuple(task_types),
    flags=tuple(PairFlag(f) for f in flags),
    min_similarity=low if by_similarity else None,
    max_similarity=high if by_similarity else None,
)
stack = CursorStack(st.session_state)
stack.sync(filter_key(ctx.run_id, flt))
total = loaders.count_samples(ctx.database_url, ctx.run_id, flt, ctx.version.pairs)
try:
    page = redacted_page(
        ctx.repo, ctx.run_id, flt, redact=redact, after=stack.current(), limit=PAGE_SIZE
    )
except ShadowEvalError as exc:
    st.error(f"Cannot read this page: {md_escape(str(exc))}")
    st.stop()
stack.shown(page.next_cursor)

pages = max(1, math.ceil(total / PAGE_SIZE))
first = (stack.page_number - 1) * PAGE_SIZE + 1
shown = (
    f"pairs {first:,}–{first + len(page.samples) - 1:,}"
    if page.samples
    else "no pairs on this page"
)
st.markdown(
    f"**{count_noun(total, 'pair')} {plural(total, 'matches', 'match')}** · "
    f"page {stack.page_number:,} of {pages:,} · {shown}"
)


def _navigation(where: str) -> None:
    prev_col, next_col, _ = st.columns([1, 1, 6])
    prev_col.button(
        "← Previous",
        key=f"samples_prev_{where}",
        on_click=stack.back,
        disabled=stack.page_number == 1,
    )
    next_col.button(
        "Next →", key=f"samples_next_{where}", on_click=stack.forward, disabled=not stack.has_next
    )


_navigation("top")

with st.expander("Export these pairs for analysts (redacted)"):
    cols = st.columns(4)
    fmt = cols[0].selectbox("Format", FORMATS, key="export_format")
    per_task_type = int(
        cols[1].number_input(
            "Pairs per task type", min_value=1, max_value=100_000, value=20, key="export_n"
        )
    )
    order = cols[2].radio(
        "Order",
        ORDERS,
        format_func=lambda o: "lowest similarity first" if o == "lowest" else "seeded random",
        key="export_order",
    )
    seed = int(cols[3].number_input("Seed (random)", min_value=0, value=0, key="export_seed"))
    changed_unjudged = st.checkbox(
        "Only changed pairs not judged yet",
        key="export_changed_unjudged",
        help="Pairs that changed beyond the noise (under the run's frozen policy) and have "
        "no successful judgement of any source (judge, human label, reference): what is "
        "left for the analysts to judge.",
    )
    request_key = (
        filter_key(ctx.run_id, flt),
        fmt,
        per_task_type,
        order,
        seed,
        changed_unjudged,
    )
    if st.button("Prepare export", key="export_prepare"):
        try:
            request = filter_request(
                ctx.run_id,
                flt,
                per_task_type=per_task_type,
                order=cast(ExportOrder, order),
                seed=seed,
                fmt=cast(ExportFormat, fmt),
                changed_unjudged=changed_unjudged,
            )
            st.session_state[EXPORT_KEY] = (
                request_key,
                export_zip(ctx.repo, request, redact=redact),
            )
        except ShadowEvalError as exc:
            st.error(md_escape(str(exc)))
    prepared = st.session_state.get(EXPORT_KEY)
    if prepared is not None and prepared[0] == request_key:
        download = prepared[1]
        file_name = f"shadow-eval-export-{ctx.run_id}-{fmt}.zip"
        st.download_button(
            f"Download {file_name}",
            data=download.data,
            file_name=file_name,
            mime="application/zip",
            on_click="ignore",
            key="export_download",
        )
        st.caption(
            f"{download.exported:,} of {count_noun(download.matching, 'matching pair')}; "
            "samples file and "
            "manifest.json (run, policy hash, filters, order, seed, counts, redaction hits)."
        )

for offset, sample in enumerate(page.samples):
    render_sample(ctx.database_url, first + offset, sample)

if len(page.samples) > 3:
    _navigation("bottom")
