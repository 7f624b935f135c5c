"""A run's pairs table (cached, extended incrementally), its summaries and policy integrity."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from shadoweval.errors import ConfigError
from shadoweval.records import (
    POOLED,
    Verdict,
)
from shadoweval.stats.checks import infra_pairs
from shadoweval.stats.frame import pairs_frame_from_facts
from shadoweval.stats.policy import GatePolicy, parse_policy_yaml, policy_hash
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage import Repository, RunInfo


class PairsCache:
    """One run's pairs table, extended incrementally; safe to share between sessions.

    The table is built from the pairs' packed facts
    (:meth:`Repository.load_pair_facts_after`,
    :func:`shadoweval.stats.frame.pairs_frame_from_facts`:
    no record is decoded or validated; about 1 s for 200,000 pairs instead of 21 s), and
    rebuilding it whenever a live run's pair count moves would still cost that. A cache
    reads everything once, then only the rows stored after the last row it read, and
    re-reads everything every ``full_reload_s`` seconds so pairs rescored in place (which
    keep their row id) show up too.

    The table is always exactly :func:`shadoweval.stats.frame.pairs_frame` of the pairs read so far:
    ordered by capture time, then exchange id, index 0..n−1.

    Args:
        run_id: the run.
        policy: its frozen gate policy (the format success flag per task type).
        full_reload_s: seconds after which :meth:`table` reads every pair again.
        clock: monotonic seconds (a seam for tests).
    """

    def __init__(
        self,
        run_id: str,
        policy: GatePolicy,
        *,
        full_reload_s: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id = run_id
        self.policy = policy
        self.full_reload_s = full_reload_s
        self._clock = clock
        self._lock = threading.Lock()
        self._frame: pd.DataFrame | None = None
        self._last_row_id = 0
        self._loaded_at = 0.0
        self.full_reads = 0
        self.incremental_reads = 0

    @classmethod
    def for_run(cls, run: RunInfo, *, full_reload_s: float = 600.0) -> PairsCache:
        """A cache of ``run`` under its frozen policy (``run.policy_yaml``).

        Raises:
            ConfigError: the frozen YAML no longer parses as a policy.
        """
        return cls(
            run.run_id,
            parse_policy_yaml(run.policy_yaml),
            full_reload_s=full_reload_s,
        )

    def table(self, repo: Repository) -> pd.DataFrame:
        """The pairs table now: the cached one plus what was scored since.

        Raises:
            StorageError: a database failure (the cached table is kept).
        """
        with self._lock:
            now = self._clock()
            if self._frame is None or now - self._loaded_at >= self.full_reload_s:
                facts, last = repo.load_pair_facts_after(self.run_id, 0)
                self._frame = pairs_frame_from_facts(facts, self.policy)
                self._last_row_id, self._loaded_at = last, now
                self.full_reads += 1
                return self._frame
            facts, last = repo.load_pair_facts_after(self.run_id, self._last_row_id)
            self.incremental_reads += 1
            if len(facts):
                new = pairs_frame_from_facts(facts, self.policy)
                merged = new if self._frame.empty else pd.concat([self._frame, new])
                self._frame = merged.sort_values(
                    ["captured_at", "exchange_id"], kind="stable"
                ).reset_index(drop=True)
                self._last_row_id = last
            return self._frame


def task_summary(
    pairs: pd.DataFrame, verdict: Verdict | None, *, latency: bool = True
) -> pd.DataFrame:
    """Per task type and pooled: n, similarity, noise floor, rates, the verdict's outcome.

    :func:`shadoweval.stats.summary.task_type_summary` of a :class:`PairsCache` table; ``verdict``
    is
    the run's stored latest verdict (``None``: no check columns filled); ``latency=False``
    leaves the latency columns NaN (:data:`shadoweval.stats.summary.LATENCY_COLUMNS`; the overview
    shows none of them).
    """
    return task_type_summary(pairs, verdict, latency=latency)


def task_type_rows(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """Rows of one task type of a pairs table (all rows for ``POOLED``)."""
    if task_type == POOLED:
        return pairs
    return pairs[pairs["task_type"] == task_type]


def judged_pairs(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """Rows of ``task_type`` (all for ``POOLED``) without an infrastructure error on either
    side (:func:`shadoweval.stats.checks.infra_pairs`): the pairs the gate's quality and latency
    checks judge, and those the summary's similarity and latency columns describe."""
    rows = task_type_rows(pairs, task_type)
    return rows[~infra_pairs(rows)]


@dataclass(frozen=True)
class PolicyIntegrity:
    """Whether the run's frozen YAML still hashes to the run's policy hash.

    ``computed`` is :func:`shadoweval.stats.policy.policy_hash` of the parsed YAML (``None`` with
    ``error`` when the YAML no longer parses).
    """

    stored: str
    computed: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the stored and computed hashes are equal."""
        return self.computed == self.stored


def policy_integrity(run: RunInfo) -> PolicyIntegrity:
    """Re-hash the run's frozen policy YAML and compare with the stored hash."""
    try:
        computed = policy_hash(parse_policy_yaml(run.policy_yaml, source=f"run {run.run_id}"))
    except ConfigError as exc:
        return PolicyIntegrity(run.policy_hash, None, str(exc))
    return PolicyIntegrity(run.policy_hash, computed)


def _run_pairs(repo: Repository, run: RunInfo, policy: GatePolicy) -> pd.DataFrame:
    facts, _ = repo.load_pair_facts_after(run.run_id, 0)
    return pairs_frame_from_facts(facts, policy)


def frozen_policy_pairs(
    repo: Repository, run: RunInfo, pairs: pd.DataFrame | None
) -> tuple[GatePolicy, pd.DataFrame]:
    """The run's frozen gate policy and its pairs table under it.

    ``pairs``: the table when the caller has it (a :class:`PairsCache` table); read from
    storage (:meth:`Repository.load_pair_facts_after`) when ``None``.

    Raises:
        ConfigError: the frozen policy YAML no longer parses.
        StorageError: the database failed.
    """
    policy = parse_policy_yaml(run.policy_yaml, source=f"run {run.run_id}")
    frame = _run_pairs(repo, run, policy) if pairs is None else pairs
    return policy, frame
