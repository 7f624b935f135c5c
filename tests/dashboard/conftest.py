"""Dashboard fixtures: a seeded, gated, labelled run and Streamlit's AppTest over it.

The database URL reaches the app the way ``shadow-eval dashboard`` hands it over: in the
``SHADOWEVAL_DATABASE__URL`` environment variable. Streamlit's caches are process-wide,
so every test starts and ends with empty caches (releasing a cached repository disposes
its engine).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from application.gating import gate_run, load_gate_policy
from faces.cli.dashboard_cmd import DATABASE_URL_ENV, app_path
from shadoweval.records import HumanLabel
from shadoweval.storage import Database, Repository, RunInfo
from simulation import pair_seeding
from simulation.pair_seeding import add_labels

GATE_COMMAND = "shadow-eval gate"
"""The command recorded with the seeded run's verdict (as ``shadow-eval gate`` records it)."""

APP_TIMEOUT_S = 120.0
"""Seconds one AppTest run may take (the first imports pandas, scipy and Streamlit)."""


@dataclass
class Seeded:
    """A seeded database: its URL, repository, run and the labels stored."""

    url: str
    repo: Repository
    run: RunInfo
    labels: list[HumanLabel]

    @property
    def run_id(self) -> str:
        return self.run.run_id


def seed_run(repo: Repository, **options: Any) -> RunInfo:
    """:func:`simulation.pair_seeding.seed_run` frozen with the default gate policy."""
    _, policy_yaml, policy_hash = load_gate_policy(None)
    return pair_seeding.seed_run(repo, policy_yaml=policy_yaml, policy_hash=policy_hash, **options)


def seed_database(url: str, *, labels: bool = True, gated: bool = True) -> Seeded:
    """Upgrade ``url``, seed :data:`~simulation.pair_seeding.TASK_MIX`, gate and label it.

    Gated as ``shadow-eval gate`` gates (:func:`application.gating.gate_run`).
    """
    db = Database(url)
    db.upgrade()
    repo = Repository(db)
    run = seed_run(repo)
    if gated:
        gate_run(repo, run, command=GATE_COMMAND)
    stored = add_labels(repo, run) if labels else []
    return Seeded(url, repo, run, stored)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One seeded SQLite database per test module (tests that write add, never remove)."""
    path = tmp_path_factory.mktemp("dashboard") / "shadow-eval.db"
    data = seed_database(f"sqlite:///{path}")
    try:
        yield data
    finally:
        data.repo.database.dispose()


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """Put back ``sys.modules["__main__"]`` after AppTest ran the app as ``__main__``.

    Streamlit's script runner installs the app module as ``__main__`` and leaves it there;
    a later test in this process that spawns a worker (the capture sidecar's builder, with
    the ``spawn`` start method) would then re-run ``dashboard/app.py`` in the child.
    """
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _fresh_streamlit_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def open_app(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], AppTest]:
    """Run the dashboard's entrypoint against a database URL; returns the AppTest."""

    def run(url: str) -> AppTest:
        monkeypatch.setenv(DATABASE_URL_ENV, url)
        app = AppTest.from_file(str(app_path()), default_timeout=APP_TIMEOUT_S)
        return app.run()

    return run


def page_path(name: str) -> str:
    """A page's path relative to the entrypoint, for ``AppTest.switch_page``."""
    return str(Path("app_pages") / f"{name}.py")
