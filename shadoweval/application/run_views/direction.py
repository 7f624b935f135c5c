"""The direction of a run's change, per task type and pooled (:func:`direction_of`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from shadoweval.application.run_views.pairs import frozen_policy_pairs
from shadoweval.records import (
    POOLED,
    HumanLabel,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.change import ChangeResult, classify_changes
from shadoweval.stats.judge_quality import apply_judge_floor
from shadoweval.stats.judgements import Agreement, judge_human_agreement, resolve_judgements
from shadoweval.stats.net_harm import estimate_net_harm, pooled_strata
from shadoweval.stats.policy import GatePolicy, effective
from shadoweval.storage import Repository, RunInfo

DIRECTION_CONFIDENCE = 0.95
"""Two-sided level of the win / tie / loss and net-harm intervals shown (each net-harm
bound is one-sided at level (1 − confidence) / 2: :meth:`NetHarmEstimate.interval`)."""

DIRECTION_COLUMNS: dict[str, str] = {
    "task_type": "object",
    "pairs": "int64",
    "changed": "int64",
    "changed_share": "float64",
    "judged": "int64",
    "judged_judge": "int64",
    "judged_human": "int64",
    "judged_reference": "int64",
    "failed": "int64",
    "unjudged": "int64",
    "better": "int64",
    "tie": "int64",
    "worse": "int64",
    "win_rate": "float64",
    "win_low": "float64",
    "win_high": "float64",
    "tie_rate": "float64",
    "tie_low": "float64",
    "tie_high": "float64",
    "loss_rate": "float64",
    "loss_low": "float64",
    "loss_high": "float64",
    "net_harm": "float64",
    "net_harm_low": "float64",
    "net_harm_high": "float64",
    "similarity_found": "int64",
    "similarity_missed": "int64",
}
"""Columns of :attr:`RunDirection.table` and their pandas dtypes.

* ``pairs``: pairs of the unit; ``changed``: those :func:`shadoweval.stats.change.classify_changes`
  marks changed; ``changed_share`` = changed / pairs;
* ``judged``: changed pairs with a successful resolved judgement
  (:func:`shadoweval.stats.judgements.resolve_judgements`: human > reference > judge), split by the
  source that won in ``judged_judge`` / ``judged_human`` / ``judged_reference``;
  ``failed``: changed pairs whose every judgement failed (``outcome = None``);
  ``unjudged``: changed pairs without a successful judgement (``failed`` included) —
  what is left to judge;
* ``better`` / ``tie`` / ``worse``: judged changed pairs by outcome (candidate better,
  tie, candidate worse); ``win_rate`` = better / judged, ``tie_rate`` = tie / judged,
  ``loss_rate`` = worse / judged, each with its :data:`DIRECTION_CONFIDENCE` Wilson score
  interval (``*_low`` / ``*_high``; NaN when nothing is judged);
* ``net_harm``: :func:`shadoweval.stats.net_harm.estimate_net_harm` over *all* pairs of the unit
  (P(worse) − P(better), unchanged pairs counted as ties, changed strata weighted by
  size; a changed stratum with no judged pair at the midpoint 0 with worst-case bounds),
  with its interval (:meth:`shadoweval.stats.net_harm.NetHarmEstimate.interval`, each bound
  one-sided at (1 − :data:`DIRECTION_CONFIDENCE`) / 2, clipped to [−1, 1]; NaN for a
  unit without pairs);
* ``similarity_found`` / ``similarity_missed``: pairs with a similarity that ground truth
  or the exact comparison found changed, and those of them the embedding alone called
  unchanged (:attr:`shadoweval.stats.change.ChangeResult.similarity_missed`): the
  similarity's miss rate is their ratio.
"""

_SOURCE_COLUMNS: dict[JudgementSource, str] = {
    JudgementSource.JUDGE: "judged_judge",
    JudgementSource.HUMAN: "judged_human",
    JudgementSource.REFERENCE: "judged_reference",
}
_QUALITY: dict[QualityOutcome, float] = {
    QualityOutcome.CANDIDATE_WORSE: 1.0,
    QualityOutcome.CANDIDATE_BETTER: -1.0,
    QualityOutcome.TIE: 0.0,
}


@dataclass(frozen=True)
class RunDirection:
    """The direction of a run's change, per task type and pooled.

    Attributes:
        table: one row per task type (sorted), then the pooled row
            (``task_type = POOLED``); columns :data:`DIRECTION_COLUMNS`.
        degenerate: the sentence of a degenerate noise floor
            (:meth:`shadoweval.stats.change.DegenerateNoise.describe`), ``None`` when none was
            detected.
        agreement: judge–human agreement (:func:`shadoweval.stats.judgements.judge_human_agreement`)
            when the run has both a successful judge judgement and a human label, else
            ``None``.
    """

    table: pd.DataFrame
    degenerate: str | None
    agreement: Agreement | None


def _wilson(count: int, n: int) -> tuple[float, float, float]:
    """``count / n`` with its Wilson score interval (as :mod:`shadoweval.stats.labels` computes it:
    ``statsmodels`` ``proportion_confint(method="wilson")``); NaN for ``n == 0``."""
    if n == 0:
        return math.nan, math.nan, math.nan
    low, high = proportion_confint(count, n, alpha=1 - DIRECTION_CONFIDENCE, method="wilson")
    return count / n, float(low), float(high)


def pair_quality(
    exchange_ids: Sequence[str], resolved: Mapping[str, PairJudgement]
) -> tuple[np.ndarray, np.ndarray]:
    """The quality of each pair from its resolved judgement, in the order of ``exchange_ids``.

    Returns:
        ``(quality, source)``: ``quality`` float64, +1 candidate worse, −1 candidate better,
        0 tie, NaN not judged or only failed judgements (the orientation of net harm and of
        the pairs frame's ``quality`` column); ``source`` object, the winning source's
        value (``judge`` / ``human`` / ``reference``) where judged, ``""`` elsewhere.
    """
    quality = np.full(len(exchange_ids), np.nan)
    source = np.full(len(exchange_ids), "", dtype=object)
    for i, exchange_id in enumerate(exchange_ids):
        judgement = resolved.get(exchange_id)
        if judgement is None or judgement.outcome is None:
            continue
        quality[i] = _QUALITY[judgement.outcome]
        source[i] = judgement.source.value
    return quality, source


def _unit_row(
    task_type: str,
    changed: np.ndarray,
    stratum: np.ndarray,
    quality: np.ndarray,
    source: np.ndarray,
    failed: np.ndarray,
) -> dict[str, object]:
    n = len(changed)
    judged = changed & ~np.isnan(quality)
    judged_n = int(judged.sum())
    better = int((judged & (quality < 0)).sum())
    tie = int((judged & (quality == 0)).sum())
    worse = int((judged & (quality > 0)).sum())
    row: dict[str, object] = {
        "task_type": task_type,
        "pairs": n,
        "changed": int(changed.sum()),
        "changed_share": float(changed.mean()) if n else math.nan,
        "judged": judged_n,
        "failed": int((changed & failed).sum()),
        "unjudged": int((changed & ~judged).sum()),
        "better": better,
        "tie": tie,
        "worse": worse,
        "similarity_found": 0,
        "similarity_missed": 0,
    }
    for value, column in _SOURCE_COLUMNS.items():
        row[column] = int((judged & (source == value.value)).sum())
    for name, count in (("win", better), ("tie", tie), ("loss", worse)):
        rate, low, high = _wilson(count, judged_n)
        row[f"{name}_rate"], row[f"{name}_low"], row[f"{name}_high"] = rate, low, high
    row["net_harm"] = row["net_harm_low"] = row["net_harm_high"] = math.nan
    if n:
        estimate = estimate_net_harm(quality, changed, stratum)
        row["net_harm"] = float(estimate.estimate)
        low, high = estimate.interval((1 - DIRECTION_CONFIDENCE) / 2)
        row["net_harm_low"], row["net_harm_high"] = float(low), float(high)
    return row


def with_judgements(pairs: pd.DataFrame, resolved: Mapping[str, PairJudgement]) -> pd.DataFrame:
    """``pairs`` with ``quality`` / ``quality_source`` set from the resolved judgements
    (:func:`pair_quality`), a copy: ground truth marks pairs changed
    (:mod:`shadoweval.stats.change`), so a view classifies the pairs with the judgements the
    gate reads."""
    quality, source = pair_quality([str(i) for i in pairs["exchange_id"]], resolved)
    return pairs.assign(quality=quality, quality_source=pd.Series(source, dtype=object))


def direction_table(
    task_types: np.ndarray,
    changed: np.ndarray,
    stratum: np.ndarray,
    quality: np.ndarray,
    source: np.ndarray,
    failed: np.ndarray,
    *,
    edges: Sequence[float],
) -> pd.DataFrame:
    """The direction per task type and pooled from per-pair arrays (all of one length).

    Args:
        task_types: each pair's task type.
        changed: bool, the pair changed (:attr:`shadoweval.stats.change.ChangeResult.changed`).
        stratum: int, its divergence stratum (−1 unchanged;
            :attr:`shadoweval.stats.change.ChangeResult.stratum`).
        quality: float, +1 worse / −1 better / 0 tie / NaN not judged
            (:func:`pair_quality`).
        source: the winning source's value where judged, ``""`` elsewhere.
        failed: bool, the pair has judgements and all of them failed.
        edges: the longest ``net_harm.strata_edges`` of the units (strata
            ``0 … len(edges) + 1``): the pooled row is stratified by task type ×
            divergence stratum (:func:`shadoweval.stats.net_harm.pooled_strata`), since the judge
            budget samples each task type apart.

    Returns:
        A frame with :data:`DIRECTION_COLUMNS`: task types sorted, then the pooled row.

    Raises:
        ValueError: the arrays differ in length.
    """
    lengths = {len(a) for a in (task_types, changed, stratum, quality, source, failed)}
    if len(lengths) != 1:
        raise ValueError(f"direction_table: the per-pair arrays differ in length ({lengths})")
    task_types = task_types.astype(str)
    changed = changed.astype(bool)
    stratum = stratum.astype(np.int64)
    failed = failed.astype(bool)
    rows = []
    for task_type in sorted(set(task_types.tolist())):
        mask = task_types == task_type
        rows.append(
            _unit_row(
                task_type,
                changed[mask],
                stratum[mask],
                quality[mask],
                source[mask],
                failed[mask],
            )
        )
    pooled, _ = pooled_strata(task_types.astype(object), stratum, edges)
    rows.append(_unit_row(POOLED, changed, pooled, quality, source, failed))
    return pd.DataFrame(rows, columns=list(DIRECTION_COLUMNS)).astype(DIRECTION_COLUMNS)


def _longest_edges(policy: GatePolicy, task_types: Iterable[object]) -> tuple[float, ...]:
    """The longest ``net_harm.strata_edges`` of the pooled unit and the task types."""
    units = [POOLED, *(str(t) for t in task_types)]
    return max((effective(policy, u).net_harm.strata_edges for u in units), key=len)


def _has_both(judgements: Sequence[PairJudgement], labels: Sequence[HumanLabel]) -> bool:
    judged = any(j.source is JudgementSource.JUDGE and j.outcome is not None for j in judgements)
    return judged and bool(labels)


def direction_of(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
) -> RunDirection:
    """The direction of a run's change from its pairs table, judgements and labels.

    Args:
        pairs: :func:`shadoweval.stats.frame.pairs_frame` of the run (a :class:`PairsCache` table).
        policy: the run's frozen gate policy (change classification, strata edges).
        judgements: the run's stored judgements, every source, failures included
            (:meth:`Repository.list_judgements`).
        labels: the run's human labels (:meth:`Repository.load_labels`).

    Returns:
        A :class:`RunDirection`; with no pairs, only the pooled row (all counts 0). As the
        gate, it leaves out the judge's judgements in the task types where it does not
        vote (:func:`shadoweval.stats.judge_quality.apply_judge_floor` under ``policy.judge``).
    """
    resolved = resolve_judgements(
        apply_judge_floor(judgements, labels, policy.judge).voting, labels
    )
    agreement = None
    if _has_both(judgements, labels):
        # statsmodels' cohens_kappa divides by a zero null-hypothesis spread on tiny tables
        # (a RuntimeWarning it does not use); the agreement itself is well defined
        with np.errstate(invalid="ignore", divide="ignore"):
            agreement = judge_human_agreement(judgements, labels)
    if pairs.empty:
        empty = np.array([], dtype=bool)
        table = direction_table(
            np.array([], dtype=object),
            empty,
            np.array([], dtype=np.int64),
            np.array([], dtype=float),
            np.array([], dtype=object),
            empty,
            edges=(),
        )
        return RunDirection(table, None, agreement)
    ids = [str(i) for i in pairs["exchange_id"]]
    quality, source = pair_quality(ids, resolved)
    changes = classify_changes(with_judgements(pairs, resolved), policy)
    failed = np.array(
        [(j := resolved.get(i)) is not None and j.outcome is None for i in ids], dtype=bool
    )
    table = direction_table(
        pairs["task_type"].to_numpy(),
        np.asarray(changes.changed, dtype=bool),
        np.asarray(changes.stratum, dtype=np.int64),
        quality,
        source,
        failed,
        edges=_longest_edges(policy, pairs["task_type"].unique()),
    )
    _add_miss_counts(table, pairs["task_type"].astype(str).to_numpy(), changes)
    degenerate = None if changes.degenerate is None else changes.degenerate.describe()
    return RunDirection(table, degenerate, agreement)


def _add_miss_counts(table: pd.DataFrame, task_types: np.ndarray, changes: ChangeResult) -> None:
    """Set ``similarity_found`` / ``similarity_missed`` of each row of ``table`` (in place)."""
    for i, unit in enumerate(table["task_type"].astype(str)):
        rows = np.ones(task_types.size, dtype=bool) if unit == POOLED else task_types == unit
        table.loc[i, "similarity_found"] = int(np.count_nonzero(changes.similarity_found & rows))
        table.loc[i, "similarity_missed"] = int(np.count_nonzero(changes.similarity_missed & rows))


_View = TypeVar("_View")


def _of_stored_run(
    repo: Repository,
    run: RunInfo,
    pairs: pd.DataFrame | None,
    view: Callable[
        [pd.DataFrame, GatePolicy, Sequence[PairJudgement], Sequence[HumanLabel]], _View
    ],
) -> _View:
    """``view`` of the run as stored: its pairs under the frozen policy (``pairs`` when the
    caller has them), its judgements and its human labels."""
    policy, frame = frozen_policy_pairs(repo, run, pairs)
    return view(frame, policy, repo.list_judgements(run.run_id), repo.load_labels(run.run_id))


def direction_summary(
    repo: Repository, run: RunInfo, *, pairs: pd.DataFrame | None = None
) -> RunDirection:
    """:func:`direction_of` the run as stored: its pairs under its frozen policy, its
    judgements (:meth:`Repository.list_judgements`) and its human labels.

    Args:
        repo: the results database.
        run: the run.
        pairs: the run's pairs table when the caller has it (a :class:`PairsCache` table);
            read from storage when ``None``.

    Raises:
        ConfigError: the frozen policy YAML no longer parses.
        StorageError: the database failed.
    """
    return _of_stored_run(repo, run, pairs, direction_of)


def changed_pairs(pairs: pd.DataFrame, policy: GatePolicy) -> frozenset[str]:
    """Exchange ids of the pairs that changed, judged or not.

    *Changed* is :func:`shadoweval.stats.change.classify_changes` under ``policy`` of the
    pairs as scored — without the ground truth of judgements or labels, as the judge's
    pairs are chosen (:func:`shadoweval.application.judging.plan_judging`): the population
    the judge predicts on, and from which the random label sample of prediction-powered
    inference is drawn, must not depend on the labels drawn from it.
    """
    if pairs.empty:
        return frozenset()
    changed = np.asarray(classify_changes(pairs, policy).changed, dtype=bool)
    return frozenset(
        str(exchange_id)
        for exchange_id, is_changed in zip(pairs["exchange_id"], changed, strict=True)
        if is_changed
    )


def changed_ids(
    repo: Repository, run: RunInfo, *, pairs: pd.DataFrame | None = None
) -> frozenset[str]:
    """:func:`changed_pairs` of the run as stored (its pairs under its frozen policy): the
    population of the export's random label sample (``ppi_sample``).

    Raises:
        ConfigError: the frozen policy YAML no longer parses.
        StorageError: the database failed.
    """
    policy, frame = frozen_policy_pairs(repo, run, pairs)
    return changed_pairs(frame, policy)


def changed_unjudged(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
) -> frozenset[str]:
    """Exchange ids of the pairs that changed and have no successful judgement.

    A pair is *changed* as :func:`changed_pairs` says under ``policy``; it is *judged*
    when its resolved judgement (:func:`shadoweval.stats.judgements.resolve_judgements`:
    judge, human label or reference) has an outcome — a pair whose only judgements failed
    is still unjudged, and so is a pair judged only by the LLM judge in a task type where it
    does not vote (:func:`shadoweval.stats.judge_quality.apply_judge_floor`).
    """
    changed = changed_pairs(pairs, policy)
    if not changed:
        return frozenset()
    resolved = resolve_judgements(
        apply_judge_floor(judgements, labels, policy.judge).voting, labels
    )
    return frozenset(
        exchange_id
        for exchange_id in changed
        if (judgement := resolved.get(exchange_id)) is None or judgement.outcome is None
    )


def changed_unjudged_ids(
    repo: Repository, run: RunInfo, *, pairs: pd.DataFrame | None = None
) -> frozenset[str]:
    """:func:`changed_unjudged` of the run as stored (pairs under the frozen policy, its
    judgements and labels).

    Raises:
        ConfigError: the frozen policy YAML no longer parses.
        StorageError: the database failed.
    """
    return _of_stored_run(repo, run, pairs, changed_unjudged)
