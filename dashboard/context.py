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

import streamlit as st

from dashboard import loaders
from dashboard.loaders import DataVersion
from shadoweval.config import DatabaseSettings
from shadoweval.storage import Repository, RunInfo

__all__ = [
    "CONTEXT_KEY",
    "DATABASE_URL_ENV",
    "LABELLER_KEY",
    "RUN_KEY",
    "PageContext",
    "current",
    "database_url",
    "pick_run",
    "run_label",
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
        """The shared repository (:func:`dashboard.loaders.repository`)."""
        return loaders.repository(self.database_url)


def run_label(run: RunInfo) -> str:
    """How a run is listed in the picker: creation time, name, status, short id."""
    return f"{run.created_at:%Y-%m-%d %H:%M} · {run.name} · {run.status.value} · {run.run_id[-6:]}"


def pick_run(url: str) -> RunInfo | None:
    """Draw the run picker in the sidebar and return the picked run (``None``: no runs).

    The first pick is the ``?run=`` query parameter when it names a run, else the newest
    run; the pick is written back to ``?run=`` so a page's address can be shared.
    """
    all_runs = loaders.runs(url)
    if not all_runs:
        return None
    by_id = {r.run_id: r for r in all_runs}
    if st.session_state.get(RUN_KEY) not in by_id:
        wanted = st.query_params.get("run")
        st.session_state[RUN_KEY] = wanted if wanted in by_id else all_runs[0].run_id
    run_id = st.sidebar.selectbox(
        "Run", list(by_id), format_func=lambda i: run_label(by_id[i]), key=RUN_KEY
    )
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
