"""The judge budget: which changed pairs are sent to the judge.

Per task type, only *changed* pairs are candidates (unchanged pairs count as ties without
judging). The budget ``max_per_task_type`` bounds the judge's successful judgements of the
task type in total, so pairs judged by an earlier ``judge run`` count against it. The
sample is stratified by divergence stratum (``stratum`` of
:func:`shadoweval.stats.change.classify_changes`,
the strata of ``net_harm.strata_edges``) with proportional allocation (Cochran 1977,
*Sampling Techniques*, §5.5): the task type's target ``T = min(budget, N)`` judged pairs
(``N`` changed pairs) is split over the strata in proportion to their sizes ``N_h`` by the
largest-remainder method (Hamilton's), then every non-empty stratum left with none gets one,
taken from the stratum most above its quota (when ``T`` is at least the number of non-empty
strata; otherwise the ``T`` largest strata get one each); no stratum gets more than it
holds. Each stratum then gets ``target_h − judged_h`` new pairs (none when it already has
its share).

**The top-up.** A non-empty stratum with no judged pair, and none chosen because the budget
is spent (earlier calls judged the task type's budget while this stratum was still empty or
smaller), gets one pair anyway, so a task type's judgements can exceed the budget by at most
its number of strata (``len(net_harm.strata_edges) + 2``: the divergence strata and the
stratum of changes without a similarity). Without it an unjudged stratum
enters the net-harm interval with its whole share range (any outcome between all better and
all worse, :mod:`shadoweval.stats.net_harm`), and a better candidate whose changes kept arriving
after
the budget was spent could not be promoted: in the direction simulation
(benchmarks/gate_direction_simulation.py, sample cap at the design total) 53% PROMOTE by the
design total with budget 600 and no top-up, 99% with this top-up and budget 1,500. A
budget below the number of non-empty strata (0 turns judging off)
has no top-up: it keeps the rule above (the largest strata get one each).

Within a stratum the pairs are taken in the order of SHA-256(``run_id`` NUL
``exchange_id``): a deterministic, seed-free shuffle, so the selection is a simple random
sample within each stratum (what the stratified estimator of :mod:`shadoweval.stats.net_harm`
assumes), the same for the same run on every call, and a later call continues the same
order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt

__all__ = [
    "Selection",
    "TaskTypeSelection",
    "allocate",
    "sample_order",
    "select_pairs",
    "send_order",
]


def sample_order(run_id: str, exchange_id: str) -> str:
    """The sort key of a pair in its stratum: SHA-256 hex of ``run_id`` NUL ``exchange_id``."""
    return hashlib.sha256(f"{run_id}\x00{exchange_id}".encode()).hexdigest()


def allocate(sizes: dict[int, int], total: int) -> dict[int, int]:
    """Split ``total`` over strata in proportion to ``sizes``, at least one per non-empty
    stratum, at most its size each (module docstring).

    Args:
        sizes: stratum → number of changed pairs in it (``N_h`` ≥ 0).
        total: pairs to allocate; clipped to ``[0, sum(sizes)]``.

    Returns:
        stratum → allocated pairs, for every stratum of ``sizes``; the values add up to
        the clipped total.
    """
    strata = sorted(h for h, n in sizes.items() if n > 0)
    allocation = dict.fromkeys(sizes, 0)
    available = sum(sizes[h] for h in strata)
    total = max(0, min(total, available))
    if total == 0:
        return allocation
    if total < len(strata):
        largest = sorted(strata, key=lambda h: (-sizes[h], h))[:total]
        for h in largest:
            allocation[h] = 1
        return allocation
    weight = sum(sizes[h] for h in strata)
    quotas = {h: Fraction(total * sizes[h], weight) for h in strata}  # exact, no float drift
    for h in strata:  # quota_h ≤ N_h, so floor and floor + 1 (fractional quota) fit
        allocation[h] = int(quotas[h])
    spare = total - sum(allocation.values())
    by_remainder = sorted(strata, key=lambda h: (-(quotas[h] - int(quotas[h])), -sizes[h], h))
    for h in by_remainder[:spare]:
        allocation[h] += 1
    for h in strata:  # every non-empty stratum gets one, from the most over-served one
        if allocation[h] == 0:
            donor = max(
                (d for d in strata if allocation[d] > 1),
                key=lambda d: (allocation[d] - quotas[d], allocation[d], -d),
            )
            allocation[donor] -= 1
            allocation[h] = 1
    return allocation


@dataclass(frozen=True, slots=True)
class TaskTypeSelection:
    """The budget of one task type.

    Attributes:
        task_type: the task type.
        pairs: its pairs in the frame.
        changed: its changed pairs (``N``).
        already_judged: changed pairs with a successful judge judgement before this call.
        budget: ``max_per_task_type``.
        selected: exchange ids chosen now, in sample order per stratum.
        strata: stratum → (changed pairs ``N_h``, already judged, selected now).
    """

    task_type: str
    pairs: int
    changed: int
    already_judged: int
    budget: int
    selected: tuple[str, ...] = ()
    strata: dict[int, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Selection:
    """What to judge: exchange id → stratum, and the per-task-type budget accounting."""

    stratum_of: dict[str, int]
    task_types: dict[str, TaskTypeSelection]

    @property
    def exchange_ids(self) -> list[str]:
        """The selected pairs, task type by task type (sorted), in sample order."""
        return [e for t in sorted(self.task_types) for e in self.task_types[t].selected]


def select_pairs(
    *,
    run_id: str,
    exchange_ids: Sequence[str],
    task_types: Sequence[str],
    changed: npt.ArrayLike,
    stratum: npt.ArrayLike,
    already_judged: Collection[str],
    max_per_task_type: int | dict[str, int],
    eligible: npt.ArrayLike | None = None,
) -> Selection:
    """Choose the changed pairs to send to the judge (module docstring).

    Args:
        run_id: the run (part of the sample order).
        exchange_ids, task_types: one entry per pair (row of the pairs frame).
        changed: bool per pair: changed beyond the noise.
        stratum: int per pair: its divergence stratum (ignored for unchanged pairs).
        already_judged: exchange ids with a successful judge judgement (they count
            against the budget and are never selected again).
        max_per_task_type: the budget, one number or per task type (a task type missing
            from the mapping gets no budget).
        eligible: bool per pair: may be sent at all (e.g. no infrastructure error on
            either side); ``None``: all. An ineligible changed pair still counts in
            ``N_h`` (the strata are the population) but is never chosen.

    Raises:
        ValueError: the per-pair inputs differ in length, or a budget is negative.
    """
    n = len(exchange_ids)
    changed_arr = np.asarray(changed, dtype=bool)
    stratum_arr = np.asarray(stratum, dtype=np.int64)
    eligible_arr = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, bool)
    lengths = {len(task_types), changed_arr.size, stratum_arr.size, eligible_arr.size}
    if lengths != {n}:
        raise ValueError(
            f"select_pairs: exchange_ids has {n} entries but task_types, changed, stratum "
            f"and eligible have {len(task_types)}, {changed_arr.size}, {stratum_arr.size} "
            f"and {eligible_arr.size}"
        )
    judged = set(already_judged)
    by_type: dict[str, list[int]] = {}
    for row, task_type in enumerate(task_types):
        by_type.setdefault(str(task_type), []).append(row)
    stratum_of: dict[str, int] = {}
    result: dict[str, TaskTypeSelection] = {}
    for task_type in sorted(by_type):
        rows = by_type[task_type]
        budget = (
            max_per_task_type.get(task_type, 0)
            if isinstance(max_per_task_type, dict)
            else max_per_task_type
        )
        if budget < 0:
            raise ValueError(f"max_per_task_type for {task_type!r} is {budget}; must be >= 0")
        changed_rows = [r for r in rows if changed_arr[r]]
        sizes: dict[int, int] = {}
        judged_in: dict[int, int] = {}
        pool: dict[int, list[str]] = {}
        for r in changed_rows:
            h = int(stratum_arr[r])
            exchange_id = exchange_ids[r]
            sizes[h] = sizes.get(h, 0) + 1
            if exchange_id in judged:
                judged_in[h] = judged_in.get(h, 0) + 1
            elif eligible_arr[r]:
                pool.setdefault(h, []).append(exchange_id)
        already = sum(judged_in.values())
        target = allocate(sizes, min(budget, len(changed_rows)))
        room = max(0, budget - already)
        chosen: list[str] = []
        strata: dict[int, tuple[int, int, int]] = {}
        for h in sorted(sizes):
            want = max(0, target[h] - judged_in.get(h, 0))
            ordered = sorted(pool.get(h, []), key=lambda e: sample_order(run_id, e))
            take = ordered[: min(want, room - len(chosen))] if room > len(chosen) else []
            if not take and budget >= len(sizes) and not judged_in.get(h) and pool.get(h):
                take = ordered[:1]  # the top-up: no changed stratum stays unjudged
            chosen.extend(take)
            stratum_of.update(dict.fromkeys(take, h))
            strata[h] = (sizes[h], judged_in.get(h, 0), len(take))
        result[task_type] = TaskTypeSelection(
            task_type=task_type,
            pairs=len(rows),
            changed=len(changed_rows),
            already_judged=already,
            budget=budget,
            selected=tuple(chosen),
            strata=strata,
        )
    return Selection(stratum_of=stratum_of, task_types=result)


def send_order(selection: Selection) -> list[str]:
    """The selected pairs in the order a judge run sends them: a prefix of any length is
    as balanced a sample as it can be, for a run that a budget stops early
    (:mod:`shadoweval.judge.budgeted`).

    Each group — a task type's stratum — keeps its sample order (so a prefix is still a
    simple random sample within each stratum). The ``i``-th pair of a group of ``n`` gets
    the key ``i / n`` and the groups are merged by key (ties: task type, then stratum):
    every group's first pair comes first (no stratum is left unjudged while another has
    two), then each group in proportion to its share of the selection. The same
    selection gives the same order.
    """
    groups: dict[tuple[str, int], list[str]] = {}
    for task_type in sorted(selection.task_types):
        for exchange_id in selection.task_types[task_type].selected:
            key = (task_type, selection.stratum_of[exchange_id])
            groups.setdefault(key, []).append(exchange_id)
    keyed = [
        (Fraction(i, len(members)), group, exchange_id)
        for group, members in groups.items()
        for i, exchange_id in enumerate(members)
    ]
    return [exchange_id for *_, exchange_id in sorted(keyed)]
