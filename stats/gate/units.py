"""The gate's analysis units: the pooled pairs and each task type, their strata and
baseline repeats."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from shadoweval.records import (
    POOLED,
    Coverage,
)
from shadoweval.stats.change import ChangeResult, classify_pair_arrays
from shadoweval.stats.checks import (
    BaselineRepeats,
    PairArrays,
)
from shadoweval.stats.checks.pair_arrays import BoolArray, IntArray
from shadoweval.stats.frame import FAILED_QUALITY_SOURCE
from shadoweval.stats.net_harm import (
    stratum_names,
)
from shadoweval.stats.policy import (
    GatePolicy,
    effective,
)


@dataclass(frozen=True)
class _Group:
    """One analysis unit: the pooled rows or one task type's rows.

    ``changed`` and ``stratum`` are the unit's rows of
    :func:`shadoweval.stats.change.classify_changes`
    (aligned with ``arrays``); ``blocking`` is false for a task type below
    ``min_traffic_share``. ``found`` / ``missed`` are its rows of
    :attr:`ChangeResult.similarity_found` / :attr:`ChangeResult.similarity_missed`
    (the similarity's miss rate). ``judge_note``: why the LLM judge does not vote in the
    unit (:attr:`~shadoweval.records.Coverage.judge_not_voting`; the pooled unit joins every
    task type's), ``""`` where it votes.
    """

    task_type: str
    arrays: PairArrays
    share: float
    blocking: bool
    changed: BoolArray
    stratum: IntArray
    found: BoolArray
    missed: BoolArray
    judge_note: str = ""


def _groups(
    pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage
) -> tuple[list[_Group], ChangeResult, _PooledStrata]:
    """The pooled unit, each task type in the pairs, and captured types with no pairs;
    and which pairs changed (:func:`shadoweval.stats.change.classify_pair_arrays`, in the units' row
    order).

    The columns are converted once and ordered by task type, so that each task type is
    a contiguous slice of the pooled arrays (no per-type copies or masks).
    """
    total = len(pairs)
    task_types = pairs["task_type"].astype(str)
    codes, names = pd.factorize(task_types, sort=True)
    order = np.argsort(codes, kind="stable")
    arrays = PairArrays.from_frame(pairs).take(order)
    pooled = _PooledStrata(codes[order].astype(np.int64), tuple(str(t) for t in names))
    changes = classify_pair_arrays(arrays, pooled.codes, policy, names=pooled.names)
    counts = np.bincount(codes, minlength=len(names))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    groups = [
        _Group(
            POOLED,
            arrays,
            1.0,
            True,
            changes.changed,
            changes.stratum,
            changes.similarity_found,
            changes.similarity_missed,
            judge_note="; ".join(coverage.judge_not_voting.values()),
        )
    ]
    for i, task_type in enumerate(names):
        share = float(counts[i]) / total
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        groups.append(
            _Group(
                str(task_type),
                arrays.slice(lo, hi),
                share,
                share >= policy.min_traffic_share,
                changes.changed[lo:hi],
                changes.stratum[lo:hi],
                changes.similarity_found[lo:hi],
                changes.similarity_missed[lo:hi],
                judge_note=coverage.judge_not_voting.get(str(task_type), ""),
            )
        )
    captured = sum(coverage.per_task_type.values())
    present = {str(t) for t in names}
    for task_type in sorted(set(coverage.per_task_type) - present):
        share = coverage.per_task_type[task_type] / captured if captured else 0.0
        if coverage.per_task_type[task_type] > 0:
            groups.append(
                _Group(
                    task_type,
                    arrays.slice(0, 0),
                    share,
                    share >= policy.min_traffic_share,
                    changes.changed[:0],
                    changes.stratum[:0],
                    changes.similarity_found[:0],
                    changes.similarity_missed[:0],
                )
            )
    return groups, changes, pooled


def _baseline_repeats(coverage: Coverage, pooled: PairArrays) -> BaselineRepeats | None:
    """The run's baseline repeats, or ``None`` when its design has none.

    The run's design decides the similarity method, not the data: a run that sent
    baseline repeats (``coverage.baseline_repeat_replayed``) is judged against the noise
    floor even when every repeat failed. A coverage record without those counts (0)
    whose pairs nevertheless carry baseline-repeat similarities also had repeats.
    """
    if coverage.baseline_repeat_replayed > 0:
        return BaselineRepeats(coverage.baseline_repeat_replayed, coverage.baseline_repeat_errored)
    with_noise = int(np.count_nonzero(~np.isnan(pooled.noise_similarity)))
    if with_noise:
        return BaselineRepeats(with_noise, 0, from_coverage=False)
    return None


def _source_counts(arrays: PairArrays, rows: BoolArray) -> dict[str, int]:
    """Judged pairs among ``rows`` per ``quality_source`` (judge / human / reference), and
    under ``failed`` (when any) the pairs whose resolved judgement failed: the net-harm
    reason shows them (``sources judge 0, …, failed 10``), never counts them as judged."""
    judged = rows & ~np.isnan(arrays.quality)
    sources, counts = np.unique(arrays.quality_source[judged].astype(str), return_counts=True)
    found = {str(s): int(c) for s, c in zip(sources, counts, strict=True) if s}
    failed = int(np.count_nonzero(rows & (arrays.quality_source == FAILED_QUALITY_SOURCE)))
    if failed:
        found[FAILED_QUALITY_SOURCE] = failed
    return found


@dataclass(frozen=True)
class _PooledStrata:
    """The pooled rows' task types as codes (``names[code]``), for the pooled strata."""

    codes: IntArray
    names: tuple[str, ...]


def _pooled_strata(
    pooled: _PooledStrata, stratum: IntArray, edges: tuple[float, ...]
) -> tuple[IntArray, dict[int, str]]:
    """Strata of the pooled unit: task type × divergence stratum.

    The same codes and names as :func:`shadoweval.stats.net_harm.pooled_strata` (task type index ×
    ``len(edges) + 3`` + stratum, named ``"koala: D 0.1-0.2"``), computed from the task
    types' integer codes the gate already has instead of their strings (a million
    string comparisons otherwise).
    """
    width = len(edges) + 3
    codes = np.where(stratum >= 0, pooled.codes * width + stratum, -1).astype(np.int64)
    labels = stratum_names(edges)
    names = {
        int(code): f"{pooled.names[int(code) // width]}: {labels[int(code) % width]}"
        for code in np.unique(codes[codes >= 0])
    }
    return codes, names


def _widest_edges(policy: GatePolicy, task_types: tuple[str, ...]) -> tuple[float, ...]:
    """The pooled unit's strata edges: the pooled policy's, or a task type's longer ones
    (a per-task-type override with more edges; the codes must fit them)."""
    edges = tuple(policy.net_harm.strata_edges)
    for task_type in task_types:
        own = tuple(effective(policy, task_type).net_harm.strata_edges)
        if len(own) > len(edges):
            edges = own
    return edges
