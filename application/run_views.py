"""Reading a run for display: its pairs table, per-task-type summary and policy integrity.

What the dashboard shows of a run is computed here, from storage and the statistics
stage, so the pages only render it:

* :class:`PairsCache` — the run's :func:`stats.frame.pairs_frame`, read once and then
  extended with only the pairs scored since (a live run's overview stays warm);
* :func:`task_summary` — :func:`stats.summary.task_type_summary` of that table with the
  stored verdict's checks;
* :func:`judged_pairs` — the rows of one task type without an infrastructure error on
  either side (:func:`stats.checks.infra_pairs`): what the latency and similarity views
  are drawn from;
* :func:`policy_integrity` — whether the run's frozen policy YAML still hashes to the run's
  policy hash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from shadoweval.errors import ConfigError
from shadoweval.records import POOLED, Verdict
from shadoweval.storage import Repository, RunInfo
from stats.checks import infra_pairs
from stats.frame import pairs_frame
from stats.policy import GatePolicy, parse_policy_yaml, policy_hash
from stats.summary import task_type_summary

__all__ = [
    "PairsCache",
    "PolicyIntegrity",
    "judged_pairs",
    "policy_integrity",
    "task_summary",
    "task_type_rows",
]


class PairsCache:
    """One run's pairs table, extended incrementally; safe to share between sessions.

    Reading and validating every stored :class:`~shadoweval.records.PairScore` costs tens
    of microseconds per pair (38 s for 200,000 pairs on the development machine):
    rebuilding the table whenever a live run's pair count moves would keep the overview
    cold. A cache reads everything once, then only the rows stored after the last row it
    read (:meth:`Repository.load_pair_scores_after`), and re-reads everything every
    ``full_reload_s`` seconds so pairs rescored in place (which keep their row id) show up
    too.

    The table is always exactly :func:`stats.frame.pairs_frame` of the pairs read so far:
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
                scores, last = repo.load_pair_scores_after(self.run_id, 0)
                self._frame = pairs_frame(scores, self.policy)
                self._last_row_id, self._loaded_at = last, now
                self.full_reads += 1
                return self._frame
            scores, last = repo.load_pair_scores_after(self.run_id, self._last_row_id)
            self.incremental_reads += 1
            if scores:
                new = pairs_frame(scores, self.policy)
                merged = new if self._frame.empty else pd.concat([self._frame, new])
                self._frame = merged.sort_values(
                    ["captured_at", "exchange_id"], kind="stable"
                ).reset_index(drop=True)
                self._last_row_id = last
            return self._frame


def task_summary(pairs: pd.DataFrame, verdict: Verdict | None) -> pd.DataFrame:
    """Per task type and pooled: n, similarity, noise floor, rates, the verdict's outcome.

    :func:`stats.summary.task_type_summary` of a :class:`PairsCache` table; ``verdict`` is
    the run's stored latest verdict (``None``: no check columns filled).
    """
    return task_type_summary(pairs, verdict)


def task_type_rows(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """Rows of one task type of a pairs table (all rows for ``POOLED``)."""
    if task_type == POOLED:
        return pairs
    return pairs[pairs["task_type"] == task_type]


def judged_pairs(pairs: pd.DataFrame, task_type: str) -> pd.DataFrame:
    """Rows of ``task_type`` (all for ``POOLED``) without an infrastructure error on either
    side (:func:`stats.checks.infra_pairs`): the pairs the gate's quality and latency
    checks judge, and those the summary's similarity and latency columns describe."""
    rows = task_type_rows(pairs, task_type)
    return rows[~infra_pairs(rows)]


@dataclass(frozen=True)
class PolicyIntegrity:
    """Whether the run's frozen YAML still hashes to the run's policy hash.

    ``computed`` is :func:`stats.policy.policy_hash` of the parsed YAML (``None`` with
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
