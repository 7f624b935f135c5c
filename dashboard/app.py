"""The shadow-eval dashboard: the Streamlit entrypoint (``shadow-eval dashboard``).

Run with ``shadow-eval dashboard`` (or ``streamlit run dashboard/app.py`` with
``SHADOWEVAL_DATABASE__URL`` set). This file runs before every page: it opens the
database, draws the run picker and the labeller's name in the sidebar, stores the
:class:`~shadoweval.dashboard.context.PageContext` and runs the page picked in the navigation
(``st.navigation``). Pages live in ``dashboard/app_pages/`` — not ``pages/``, which
Streamlit would also treat as a legacy multipage folder.

The dashboard reads through storage queries and writes nothing but human labels.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from shadoweval.dashboard import loaders
from shadoweval.dashboard.context import (
    CONTEXT_KEY,
    LABELLER_KEY,
    PageContext,
    database_url,
    pick_run,
)
from shadoweval.dashboard.formatting import count_noun, md_escape
from shadoweval.errors import ShadowEvalError

PAGES = Path(__file__).with_name("app_pages")

st.set_page_config(page_title="shadow-eval", page_icon=":material/compare:", layout="wide")

navigation = st.navigation(
    [
        st.Page(PAGES / "overview.py", title="Overview", icon=":material/dashboard:", default=True),
        st.Page(PAGES / "latency.py", title="Latency", icon=":material/speed:"),
        st.Page(PAGES / "divergence.py", title="Divergence", icon=":material/difference:"),
        st.Page(PAGES / "samples.py", title="Samples", icon=":material/fact_check:"),
        st.Page(PAGES / "judged.py", title="Judged pairs", icon=":material/gavel:"),
        st.Page(PAGES / "history.py", title="History", icon=":material/history:"),
        st.Page(PAGES / "canary.py", title="Canary", icon=":material/alt_route:"),
        st.Page(PAGES / "candidates.py", title="Candidates", icon=":material/compare:"),
    ]
)

url = database_url()
try:
    picked = pick_run(url)
    version = None if picked is None else loaders.data_version(url, picked.run_id)
except ShadowEvalError as exc:
    st.error(f"**Cannot read the database.** {md_escape(str(exc))}")
    st.stop()

if picked is None or version is None:
    st.info(
        "No runs in this database yet. Replay a capture log (`shadow-eval evaluate` or "
        "`shadow-eval replay run`), then open the dashboard again."
    )
    st.stop()

with st.sidebar:
    st.caption(
        f"{md_escape(picked.baseline.name)} → {md_escape(picked.candidate.name)}  \n"
        f"{count_noun(version.pairs, 'pair')} · status {picked.status.value}  \n"
        f"run `{picked.run_id}`"
    )
    st.text_input(
        "Your name (for labels)",
        key=LABELLER_KEY,
        help="Stored with every label you give on the Samples page.",
    )

st.session_state[CONTEXT_KEY] = PageContext(url, picked, version)
navigation.run()
