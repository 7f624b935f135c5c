"""Cached, read-only loaders: what the pages read from the database, through storage.

Caching (Streamlit's ``st.cache_resource`` / ``st.cache_data``):

* one :class:`~shadoweval.storage.Repository` per database URL (``cache_resource``,
  shared by every session, engine disposed when the entry is released); it is opened as
  the reading commands open it (:func:`shadoweval.application.database.open_repository` without
  upgrade: the database must exist at the current schema);
* data (``cache_data``, a pickled copy per caller), keyed by the database URL, the run id
  and a cheap **data-version token** (:func:`data_version`: the run's pair count and its
  latest verdict's time, decision and look, itself cached for
  :data:`VERSION_TTL_S` seconds). New pairs or a new verdict change the token, so they
  show up within that time without recomputing anything else;
* the pairs table and its summary are the expensive entries (about a second at 200,000
  pairs on PostgreSQL, read from the packed pair facts: migration 0008); they are keyed by
  the pair count only, so a new verdict does not reload them. The overview's summary
  (:func:`overview_summary`, without the latency columns it does not show) and the
  direction read the table itself rather than :func:`pairs`' pickled copy. The table
  is kept per run in a :class:`~shadoweval.application.run_views.PairsCache` (``cache_resource``)
  that reads only the pairs scored since its last read, so a live run whose count moves
  every few seconds stays warm; it re-reads everything after :data:`PAIRS_TTL_S`, when
  pairs rescored in place (which keep the count) show up.
* labels are cached for :data:`LABELS_TTL_S` (imports show up then) and cleared at once
  when this dashboard saves one (:func:`labels_changed`);
* canaries (:func:`canaries`, :func:`canary`) are cached for :data:`RUNS_TTL_S` and
  :data:`VERSION_TTL_S`: a step, a verdict or a rollback shows up within that time;
* judgements (:func:`judgements`: the LLM judge's and reference checkers', written by
  ``shadow-eval judge run`` and the reference import) are cached for
  :data:`LABELS_TTL_S` too, and so is the direction of the change built from them
  (:func:`direction`), which is also keyed by the pair count and cleared with the labels.

Nothing here writes: the only write of the dashboard is a human label
(:func:`shadoweval.application.labels.save_label`).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd
import streamlit as st

from shadoweval.application.canary import CanaryView, canary_view, list_canaries
from shadoweval.application.database import open_repository
from shadoweval.application.labels import label_rates as rates_of_labels
from shadoweval.application.run_views import (
    PairsCache,
    RunDirection,
    direction_summary,
    task_summary,
)
from shadoweval.errors import StorageError
from shadoweval.records import HumanLabel, PairJudgement, Verdict
from shadoweval.storage import CanaryInfo, PolicyAuditEntry, Repository, RunInfo, VerdictEntry
from shadoweval.storage.samples import SampleFilter

__all__ = [
    "LABELS_TTL_S",
    "PAIRS_TTL_S",
    "RUNS_TTL_S",
    "VERSION_TTL_S",
    "DataVersion",
    "canaries",
    "canary",
    "count_samples",
    "data_version",
    "direction",
    "judgements",
    "label_rates",
    "labels",
    "labels_changed",
    "latest_verdict",
    "overview_summary",
    "pairs",
    "policy_audit",
    "repository",
    "run",
    "runs",
    "summary",
    "task_types",
    "verdict_history",
]

VERSION_TTL_S = 5.0
"""Seconds a data-version token is reused: new data shows up within this time."""
RUNS_TTL_S = 10.0
"""Seconds the run list (and one run's row) is reused."""
PAIRS_TTL_S = 600.0
"""Seconds a pairs table is kept even when the pair count did not change."""
LABELS_TTL_S = 30.0
"""Seconds labels are reused (labels saved here clear the cache at once)."""
MAX_RUNS_CACHED = 4
"""Pairs tables kept in memory (one per run and version)."""


@dataclass
class _OpenRepository:
    """A repository held open by the resource cache, with what closes it."""

    repo: Repository
    stack: ExitStack

    def close(self) -> None:
        self.stack.close()


def _release(entry: _OpenRepository) -> None:
    entry.close()


@st.cache_resource(show_spinner=False, on_release=_release)
def _open(database_url: str) -> _OpenRepository:
    stack = ExitStack()
    repo = stack.enter_context(open_repository(database_url, upgrade=False))
    return _OpenRepository(repo, stack)


def repository(database_url: str) -> Repository:
    """The shared repository of ``database_url`` (opened once per process).

    Raises:
        StorageError: the database cannot be reached, does not exist, or is not at the
            current schema (``shadow-eval db upgrade``).
    """
    return _open(database_url).repo


class DataVersion(NamedTuple):
    """What changes when a run gets new data: its pair count and its latest verdict."""

    pairs: int
    verdict: str


@st.cache_data(ttl=VERSION_TTL_S, show_spinner=False)
def data_version(database_url: str, run_id: str) -> DataVersion:
    """The run's data-version token: two cheap queries (a count and the latest decision)."""
    repo = repository(database_url)
    count = repo.count_samples(run_id, SampleFilter())
    latest = repo.latest_decisions([run_id]).get(run_id)
    verdict = (
        ""
        if latest is None
        else f"{latest.decided_at.isoformat()}|{latest.decision.value}|{latest.look}"
    )
    return DataVersion(count, verdict)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def runs(database_url: str) -> list[RunInfo]:
    """Every run, newest first."""
    return repository(database_url).list_runs()


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def run(database_url: str, run_id: str) -> RunInfo | None:
    """One run, or ``None``."""
    return repository(database_url).get_run(run_id)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def canaries(database_url: str) -> list[CanaryInfo]:
    """Every canary, newest first (:func:`shadoweval.application.canary.list_canaries`)."""
    return list_canaries(repository(database_url))


@st.cache_data(ttl=VERSION_TTL_S, show_spinner=False, max_entries=64)
def canary(database_url: str, canary_id: str) -> CanaryView:
    """One canary with its steps, audit trail and observations per arm
    (:func:`shadoweval.application.canary.canary_view`).

    Raises:
        ConfigError: unknown canary (names the id).
    """
    return canary_view(repository(database_url), canary_id)


@st.cache_resource(show_spinner=False, max_entries=MAX_RUNS_CACHED)
def _pairs_cache(database_url: str, run_id: str) -> PairsCache:
    info = repository(database_url).get_run(run_id)
    if info is None:
        raise StorageError(f"run {run_id!r} not found")
    return PairsCache.for_run(info, full_reload_s=PAIRS_TTL_S)


@st.cache_data(ttl=PAIRS_TTL_S, max_entries=MAX_RUNS_CACHED, show_spinner="Loading pairs…")
def pairs(database_url: str, run_id: str, pair_count: int) -> pd.DataFrame:
    """The run's pairs table (:func:`shadoweval.stats.frame.pairs_frame` of its pair scores under
    its
    frozen policy).

    ``pair_count`` is the version key (:attr:`DataVersion.pairs`); a new count reads only
    the pairs scored since (:class:`~shadoweval.application.run_views.PairsCache`).

    Raises:
        StorageError: unknown run, or a database failure.
    """
    return _pairs_cache(database_url, run_id).table(repository(database_url))


def _shared_pairs(database_url: str, run_id: str) -> pd.DataFrame:
    """The run's pairs table itself, not :func:`pairs`' pickled copy (read-only use).

    ``cache_data`` pickles what a function returns and unpickles a copy for every caller:
    at 200,000 pairs each copy costs tenths of a second, so loaders that only read the
    table (and cache their own result) take the :class:`PairsCache` table directly; it
    is brought up to date (the pairs scored since) on every call.
    """
    return _pairs_cache(database_url, run_id).table(repository(database_url))


@st.cache_data(show_spinner=False, max_entries=64)
def latest_verdict(database_url: str, run_id: str, verdict_token: str) -> Verdict | None:
    """The run's stored latest verdict (``verdict_token``: :attr:`DataVersion.verdict`)."""
    if not verdict_token:
        return None
    return repository(database_url).latest_verdict(run_id)


@st.cache_data(ttl=PAIRS_TTL_S, max_entries=MAX_RUNS_CACHED * 4, show_spinner=False)
def summary(database_url: str, run_id: str, version: DataVersion) -> pd.DataFrame:
    """:func:`shadoweval.application.run_views.task_summary` of the pairs, with the latest
    verdict."""
    return task_summary(
        pairs(database_url, run_id, version.pairs),
        latest_verdict(database_url, run_id, version.verdict),
    )


@st.cache_data(ttl=PAIRS_TTL_S, max_entries=MAX_RUNS_CACHED * 4, show_spinner=False)
def overview_summary(database_url: str, run_id: str, version: DataVersion) -> pd.DataFrame:
    """:func:`summary` without its latency columns (the overview's table shows none of
    them: :data:`shadoweval.stats.summary.LATENCY_COLUMNS` are NaN); every other column the same."""
    return task_summary(
        _shared_pairs(database_url, run_id),
        latest_verdict(database_url, run_id, version.verdict),
        latency=False,
    )


@st.cache_data(show_spinner=False, max_entries=64)
def verdict_history(database_url: str, run_id: str, verdict_token: str) -> list[VerdictEntry]:
    """Every stored verdict of the run, oldest first."""
    return repository(database_url).verdict_history(run_id)


@st.cache_data(ttl=RUNS_TTL_S, show_spinner=False)
def policy_audit(database_url: str, run_id: str) -> list[PolicyAuditEntry]:
    """The run's policy audit log, oldest first."""
    return repository(database_url).policy_audit(run_id)


@st.cache_data(show_spinner=False, max_entries=64)
def task_types(database_url: str, run_id: str, pair_count: int) -> list[str]:
    """Task types with pair scores in the run, sorted."""
    return repository(database_url).task_types(run_id)


@st.cache_data(show_spinner=False, max_entries=256)
def count_samples(database_url: str, run_id: str, flt: SampleFilter, pair_count: int) -> int:
    """How many pairs of the run match ``flt`` (:meth:`Repository.count_samples`)."""
    return repository(database_url).count_samples(run_id, flt)


@st.cache_data(ttl=LABELS_TTL_S, show_spinner=False)
def labels(database_url: str, run_id: str) -> list[HumanLabel]:
    """The run's human labels."""
    return repository(database_url).load_labels(run_id)


@st.cache_data(ttl=LABELS_TTL_S, show_spinner=False)
def label_rates(database_url: str, run_id: str) -> pd.DataFrame:
    """:func:`shadoweval.application.labels.label_rates` of the run's labels."""
    return rates_of_labels(labels(database_url, run_id))


@st.cache_data(ttl=LABELS_TTL_S, show_spinner=False)
def judgements(database_url: str, run_id: str) -> list[PairJudgement]:
    """The run's stored judgements, every source, failures included
    (:meth:`Repository.list_judgements`)."""
    return repository(database_url).list_judgements(run_id)


@st.cache_data(
    ttl=LABELS_TTL_S, max_entries=MAX_RUNS_CACHED * 4, show_spinner="Weighing the changes…"
)
def direction(database_url: str, run_id: str, pair_count: int) -> RunDirection:
    """:func:`shadoweval.application.run_views.direction_summary` of the run over its cached pairs
    table (``pair_count``: :attr:`DataVersion.pairs`).

    Raises:
        StorageError: unknown run, or a database failure.
        ConfigError: the run's frozen policy no longer parses.
    """
    info = run(database_url, run_id)
    if info is None:
        raise StorageError(f"run {run_id!r} not found")
    return direction_summary(
        repository(database_url), info, pairs=_shared_pairs(database_url, run_id)
    )


def labels_changed() -> None:
    """Forget cached labels and what is built from them (after this dashboard saved one)."""
    labels.clear()
    label_rates.clear()
    direction.clear()
