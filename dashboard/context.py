"""What every page shares: the database, the run picked in the sidebar, the labeller.

``app.py`` (the entrypoint, run before every page) resolves the database URL, draws the
run picker in the sidebar and stores a :class:`PageContext` in ``st.session_state``;
pages read it with :func:`current`.

The database URL comes from the environment variable :data:`DATABASE_URL_ENV`
(``SHADOWEVAL_DATABASE__URL``, the settings variable every command reads), else the
default ``sqlite:///shadow-eval.db``. ``shadow-eval dashboard --database-url`` sets it
for the Streamlit process: an environment variable, not a command-line argument, so a
password in the URL is not shown to other local users by ``ps``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import streamlit as st

from shadoweval.config import DatabaseSettings
from shadoweval.dashboard import loaders
from shadoweval.dashboard.formatting import md_escape
from shadoweval.dashboard.loaders import DataVersion
from shadoweval.storage import Repository, RunInfo

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CONTEXT_KEY",
    "DATABASE_URL_ENV",
    "LABELLER_KEY",
    "RUN_KEY",
    "PageContext",
    "current",
    "database_url",
    "initial_run",
    "pick_run",
    "run_label",
    "scored_pairs_page",
]

DATABASE_URL_ENV = "SHADOWEVAL_DATABASE__URL"
CONTEXT_KEY = "dashboard.context"
RUN_KEY = "run_picker"
LABELLER_KEY = "labeller"


def database_url() -> str:
    """The database URL: ``$SHADOWEVAL_DATABASE__URL``, else the settings' default."""
    return os.environ.get(DATABASE_URL_ENV) or DatabaseSettings().url


@dataclass(frozen=True)
class PageContext:
    """The run every page shows, its data version and the database it lives in."""

    database_url: str
    run: RunInfo
    version: DataVersion

    @property
    def run_id(self) -> str:
        """The picked run's id."""
        return self.run.run_id

    @property
    def repo(self) -> Repository:
        """The shared repository (:func:`shadoweval.dashboard.loaders.repository`)."""
        return loaders.repository(self.database_url)


def scored_pairs_page(title: str) -> tuple[PageContext, pd.DataFrame]:
    """Start a page that shows scored pairs: its ``title``, then the page's context and
    the run's scored pairs (:func:`shadoweval.dashboard.loaders.pairs`). For a run with
    none yet the page says so and stops there (``st.stop``)."""
    ctx = current()
    st.title(title)
    if ctx.version.pairs == 0:
        st.info("This run has no scored pairs yet.")
        st.stop()
    return ctx, loaders.pairs(ctx.database_url, ctx.run_id, ctx.version.pairs)


def run_label(run: RunInfo) -> str:
    """How a run is listed in the picker: creation time, name, status, the full run id."""
    return f"{run.created_at:%Y-%m-%d %H:%M} · {run.name} · {run.status.value} · {run.run_id}"


def initial_run(run_ids: list[str], wanted: str | None) -> str | None:
    """The run picked when a session opens: ``wanted`` (the ``?run=`` parameter) when the
    database has it, the newest run (``run_ids[0]``) when no run is asked for, and
    ``None`` when ``wanted`` names a run that is not in the database (the page must say
    so rather than show another run)."""
    if wanted is None:
        return run_ids[0] if run_ids else None
    return wanted if wanted in run_ids else None


def pick_run(url: str) -> RunInfo | None:
    """Draw the run picker in the sidebar and return the picked run (``None``: no runs).

    The first pick is the ``?run=`` query parameter when it names a run, else (no
    ``?run=``) the newest run; the pick is written back to ``?run=`` so a page's address
    can be shared. When ``?run=`` names a run that is not in the database, the picker is
    drawn with nothing picked, the page shows the error "run 'X' not found in this
    database" and stops (``st.stop``): no other run is shown in its place. Picking a run
    then replaces ``?run=``.
    """
    all_runs = loaders.runs(url)
    if not all_runs:
        return None
    by_id = {r.run_id: r for r in all_runs}
    wanted = st.query_params.get("run")
    if st.session_state.get(RUN_KEY) not in by_id:
        st.session_state[RUN_KEY] = initial_run(list(by_id), wanted)
    run_id = st.sidebar.selectbox(
        "Run",
        list(by_id),
        format_func=lambda i: run_label(by_id[i]),
        key=RUN_KEY,
        placeholder="Pick a run",
    )
    if run_id is None:
        st.error(
            f"run '{md_escape(str(wanted))}' not found in this database. Pick a run in the "
            "sidebar (the address's `?run=` is replaced by the one you pick)."
        )
        st.stop()
    st.query_params["run"] = run_id
    return by_id[run_id]


def current() -> PageContext:
    """The context ``app.py`` stored for this script run.

    Raises:
        RuntimeError: a page was run without the entrypoint (``streamlit run
            dashboard/app.py`` is the only way in).
    """
    context = st.session_state.get(CONTEXT_KEY)
    if not isinstance(context, PageContext):
        raise RuntimeError("dashboard pages run inside dashboard/app.py (streamlit run it)")
    return context
