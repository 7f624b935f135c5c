"""A run's pairs table kept in memory and extended with only the pairs scored since.

Reading and validating every stored :class:`~shadoweval.records.PairScore` costs tens of
microseconds per pair (38 s for 200,000 pairs on the development machine): rebuilding the
table whenever a live run's pair count moves would keep the overview cold. A
:class:`PairsCache` reads everything once, then only the rows stored after the last row
it read (:meth:`Repository.load_pair_scores_after`), and re-reads everything every
``full_reload_s`` seconds so pairs rescored in place (which keep their row id) show up too.

The table is always exactly :func:`stats.frame.pairs_frame` of the pairs read so far:
ordered by capture time, then exchange id, index 0..n−1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pandas as pd

from shadoweval.storage import Repository
from stats.frame import pairs_frame
from stats.policy import GatePolicy

__all__ = ["PairsCache"]


class PairsCache:
    """One run's pairs table, extended incrementally; safe to share between sessions.

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
