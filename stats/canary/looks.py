"""Repeated polls of a canary step: checkpoints on the candidate arm, levels per look.

The controller polls a step's verdict often while traffic accumulates. A fixed-n test read
at every poll rejects far more often than its level (peeking, gate-statistics.md pitfall
1), so every fixed-n test of :mod:`shadoweval.stats.canary.verdict` is evaluated only at
**checkpoints** of the candidate arm's request count, on the data **truncated** to the
moment that arm reached the checkpoint (both arms cut at that ``observed_at``), at the
union-bound level of :func:`shadoweval.stats.sequential.look_alpha` with ``n_max=None``
(``α_k = α·6/(π²k²)``, Σ_k α_k = α over unboundedly many looks). A poll between two
checkpoints repeats the previous look's test on the same data, so the family of tests is
countable with levels summing to α, and P(any false rejection) ≤ α by the union bound,
whatever the number of polls and the dependence between looks.

Two schedules (:func:`shadoweval.stats.sequential.checkpoint_schedule`):

* promote looks: first = the step's ``min_requests_per_arm``, factor 2 (as the paired
  gate's schedule, :mod:`shadoweval.stats.checkpoints`);
* rollback looks: first = ``⌈min_requests_per_arm / 4⌉``, factor 1.5 — denser, so a
  harmful candidate is caught sooner; the rollback tests spend their own α (a false
  rollback is a different error than a false promote).

Spot-check ratings carry no time: their looks are checkpoints of the smaller arm's rating
count (first = ``min_ratings_per_arm``, factor 2) on the first ``n_j`` ratings of each arm
in the order given (the store's arrival order, oldest first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from shadoweval.stats.inputs import positive_int
from shadoweval.stats.sequential import checkpoint_schedule, latest_checkpoint, look_alpha

__all__ = [
    "PROMOTE_FACTOR",
    "ROLLBACK_FACTOR",
    "ROLLBACK_FIRST_FRACTION",
    "Look",
    "promote_look",
    "rating_look",
    "rollback_look",
    "truncate_at_candidate",
]

PROMOTE_FACTOR = 2.0
"""Growth factor of the promote checkpoints (first = ``min_requests_per_arm``)."""

ROLLBACK_FACTOR = 1.5
"""Growth factor of the rollback checkpoints."""

ROLLBACK_FIRST_FRACTION = 0.25
"""The first rollback checkpoint as a fraction of ``min_requests_per_arm`` (rounded up)."""


@dataclass(frozen=True, slots=True)
class Look:
    """One look of a schedule.

    Attributes:
        k: the look index (0: the first checkpoint is not reached; no test).
        n_k: the checkpoint (candidate requests or ratings per arm; 0 when ``k = 0``).
        level: the one-sided level ``α_k`` of each test at this look (0 when ``k = 0``).
        first: the schedule's first checkpoint.
        factor: the schedule's growth factor.
    """

    k: int
    n_k: int
    level: float
    first: int
    factor: float


def _look(n: int, first: int, factor: float, alpha: float) -> Look:
    found = latest_checkpoint(n, first=first, factor=factor)
    if found is None:
        return Look(0, 0, 0.0, first, factor)
    k, n_k = found
    schedule = checkpoint_schedule(first, factor, limit=k)
    return Look(k, n_k, look_alpha(k, schedule, alpha=alpha, n_max=None), first, factor)


def promote_look(n_candidate: int, min_requests_per_arm: int, alpha: float) -> Look:
    """The promote look for ``n_candidate`` candidate requests (first checkpoint
    ``min_requests_per_arm``, factor 2) and its level ``look_alpha(k, …, n_max=None)``.

    Raises:
        InvalidDataError: a negative count, ``min_requests_per_arm < 1``, alpha not in (0, 1).
    """
    first = positive_int(min_requests_per_arm, "min_requests_per_arm")
    return _look(n_candidate, first, PROMOTE_FACTOR, alpha)


def rollback_look(n_candidate: int, min_requests_per_arm: int, alpha: float) -> Look:
    """The rollback look (first ``⌈min_requests_per_arm/4⌉``, factor 1.5) and its level.

    Raises:
        InvalidDataError: as :func:`promote_look`.
    """
    first = positive_int(min_requests_per_arm, "min_requests_per_arm")
    return _look(
        n_candidate, max(1, math.ceil(first * ROLLBACK_FIRST_FRACTION)), ROLLBACK_FACTOR, alpha
    )


def rating_look(n_ratings_smaller_arm: int, min_ratings_per_arm: int, alpha: float) -> Look:
    """The spot-check look on the smaller arm's rating count (first ``min_ratings_per_arm``,
    factor 2) and its level.

    Raises:
        InvalidDataError: as :func:`promote_look`.
    """
    first = positive_int(min_ratings_per_arm, "min_ratings_per_arm")
    return _look(n_ratings_smaller_arm, first, PROMOTE_FACTOR, alpha)


def truncate_at_candidate(observations: pd.DataFrame, n_k: int) -> pd.DataFrame:
    """The observations up to the moment the candidate arm reached ``n_k`` requests.

    Rows are ordered by ``observed_at`` (stable: ties keep the given order); ``t_k`` is
    the ``observed_at`` of the ``n_k``-th candidate row; every row of either arm with
    ``observed_at ≤ t_k`` is kept (so candidate rows tied at ``t_k`` are kept too). With
    fewer than ``n_k`` candidate rows (or ``n_k = 0``) an empty frame is returned.
    The same rows give the same prefix at every poll.

    Args:
        observations: a frame with columns ``arm`` and ``observed_at``.
        n_k: the checkpoint, ≥ 0.
    """
    if n_k <= 0:
        return observations.iloc[:0]
    ordered = observations.sort_values("observed_at", kind="mergesort")
    candidate_times = ordered.loc[ordered["arm"] == "candidate", "observed_at"]
    if len(candidate_times) < n_k:
        return observations.iloc[:0]
    t_k = candidate_times.iloc[n_k - 1]
    kept: pd.DataFrame = ordered.loc[ordered["observed_at"] <= t_k]
    return kept
