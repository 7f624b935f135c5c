"""Reading a run for display: its pairs table, per-task-type summary and policy integrity.

What the dashboard shows of a run is computed here, from storage and the statistics
stage, so the pages only render it:

* :class:`PairsCache` — the run's :func:`shadoweval.stats.frame.pairs_frame`, read once and then
  extended with only the pairs scored since (a live run's overview stays warm);
* :func:`task_summary` — :func:`shadoweval.stats.summary.task_type_summary` of that table with the
  stored verdict's checks;
* :func:`judged_pairs` — the rows of one task type without an infrastructure error on
  either side (:func:`shadoweval.stats.checks.infra_pairs`): what the latency and similarity views
  are drawn from;
* :func:`policy_integrity` — whether the run's frozen policy YAML still hashes to the run's
  policy hash;
* :func:`direction_summary` — the direction of the change per task type and pooled:
  changed pairs (:func:`shadoweval.stats.change.classify_changes` under the frozen policy), judged
  pairs by source, better / tie / worse with Wilson intervals, the net-harm estimate
  (:func:`shadoweval.stats.net_harm.estimate_net_harm`) with its interval, the degenerate noise
  floor's sentence and the judge–human agreement
  (:func:`shadoweval.stats.judgements.judge_human_agreement`); :func:`direction_of` is its pure
  core;
* :func:`judged_pairs_view` — one page of the run's judgements (every source, failures
  included) with both votes, the stratum and both answers, redacted;
* :func:`changed_unjudged_ids` — the exchange ids of the pairs that changed and have no
  successful judgement of any source (the export's ``changed_unjudged`` selection).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from shadoweval.application.samples import redact_sample
from shadoweval.errors import ConfigError
from shadoweval.export.redaction import Redact
from shadoweval.records import (
    POOLED,
    HumanLabel,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
    Verdict,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.checks import infra_pairs
from shadoweval.stats.frame import pairs_frame_from_facts
from shadoweval.stats.judgements import Agreement, judge_human_agreement, resolve_judgements
from shadoweval.stats.net_harm import estimate_net_harm, pooled_strata
from shadoweval.stats.policy import GatePolicy, effective, parse_policy_yaml, policy_hash
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage import Repository, RunInfo
from shadoweval.storage.samples import Sample

__all__ = [
    "DIRECTION_COLUMNS",
    "DIRECTION_CONFIDENCE",
    "FAILED",
    "JUDGED_OUTCOMES",
    "MAX_JUDGED_PAGE_SIZE",
    "JudgedPair",
    "JudgedPairsPage",
    "PairsCache",
    "PolicyIntegrity",
    "RunDirection",
    "changed_unjudged",
    "changed_unjudged_ids",
    "direction_of",
    "direction_summary",
    "direction_table",
    "judged_pairs",
    "judged_pairs_view",
    "judged_records",
    "pair_quality",
    "policy_integrity",
    "redact_judgement",
    "task_summary",
    "task_type_rows",
]


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


# --- the direction of the change -------------------------------------------------------

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
  unit without pairs).
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
        A :class:`RunDirection`; with no pairs, only the pooled row (all counts 0).
    """
    resolved = resolve_judgements(judgements, labels)
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
    changes = classify_changes(pairs, policy)
    ids = [str(i) for i in pairs["exchange_id"]]
    quality, source = pair_quality(ids, resolved)
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
    degenerate = None if changes.degenerate is None else changes.degenerate.describe()
    return RunDirection(table, degenerate, agreement)


def _run_pairs(repo: Repository, run: RunInfo, policy: GatePolicy) -> pd.DataFrame:
    facts, _ = repo.load_pair_facts_after(run.run_id, 0)
    return pairs_frame_from_facts(facts, policy)


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
    policy = parse_policy_yaml(run.policy_yaml, source=f"run {run.run_id}")
    frame = _run_pairs(repo, run, policy) if pairs is None else pairs
    return direction_of(
        frame, policy, repo.list_judgements(run.run_id), repo.load_labels(run.run_id)
    )


def changed_unjudged(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
) -> frozenset[str]:
    """Exchange ids of the pairs that changed and have no successful judgement.

    A pair is *changed* as :func:`shadoweval.stats.change.classify_changes` says under ``policy``;
    it
    is *judged* when its resolved judgement (:func:`shadoweval.stats.judgements.resolve_judgements`:
    judge, human label or reference) has an outcome — a pair whose only judgements failed
    is still unjudged.
    """
    if pairs.empty:
        return frozenset()
    resolved = resolve_judgements(judgements, labels)
    changed = np.asarray(classify_changes(pairs, policy).changed, dtype=bool)
    out = set()
    for exchange_id, is_changed in zip(pairs["exchange_id"], changed, strict=True):
        judgement = resolved.get(str(exchange_id))
        if is_changed and (judgement is None or judgement.outcome is None):
            out.add(str(exchange_id))
    return frozenset(out)


def changed_unjudged_ids(
    repo: Repository, run: RunInfo, *, pairs: pd.DataFrame | None = None
) -> frozenset[str]:
    """:func:`changed_unjudged` of the run as stored (pairs under the frozen policy, its
    judgements and labels).

    Raises:
        ConfigError: the frozen policy YAML no longer parses.
        StorageError: the database failed.
    """
    policy = parse_policy_yaml(run.policy_yaml, source=f"run {run.run_id}")
    frame = _run_pairs(repo, run, policy) if pairs is None else pairs
    return changed_unjudged(
        frame, policy, repo.list_judgements(run.run_id), repo.load_labels(run.run_id)
    )


# --- judged pairs -----------------------------------------------------------------------

FAILED = "failed"
"""The outcome filter value of failed judgements (``outcome = None``)."""

JUDGED_OUTCOMES: tuple[str, ...] = (
    QualityOutcome.CANDIDATE_WORSE.value,
    QualityOutcome.CANDIDATE_BETTER.value,
    QualityOutcome.TIE.value,
    FAILED,
)
"""Outcome filter values, in the order judged pairs are listed."""

MAX_JUDGED_PAGE_SIZE = 200
"""Most judged pairs on one page."""

_SOURCE_ORDER = {JudgementSource.HUMAN: 0, JudgementSource.REFERENCE: 1, JudgementSource.JUDGE: 2}


@dataclass(frozen=True)
class JudgedPair:
    """One judgement of one pair, as an analyst reads it.

    Attributes:
        judgement: the judgement (any source; ``outcome = None`` when it failed, with
            ``error``), its rationale and its votes' rationales redacted.
        used: it is the pair's resolved judgement — the one the estimator reads
            (:func:`shadoweval.stats.judgements.resolve_judgements`: human > reference > judge).
        changed: the pair changed (:func:`shadoweval.stats.change.classify_changes`); ``None`` when
            the pair has no stored score.
        stratum: its divergence stratum now (−1 unchanged; ``None`` without a score).
        sample: the pair (request, both answers, similarity) redacted
            (:func:`shadoweval.application.samples.redact_sample`); ``None`` without a score.
    """

    judgement: PairJudgement
    used: bool
    changed: bool | None
    stratum: int | None
    sample: Sample | None

    @property
    def outcome(self) -> str:
        """The outcome's value, or :data:`FAILED`."""
        outcome = self.judgement.outcome
        return FAILED if outcome is None else outcome.value


@dataclass(frozen=True)
class JudgedPairsPage:
    """One page of a run's judged pairs.

    Attributes:
        pairs: the page's judgements, in list order (:func:`judged_records`).
        total: judgements matching the filters.
        page: this page's number (1-based).
        page_size: judgements per page.
    """

    pairs: tuple[JudgedPair, ...]
    total: int
    page: int
    page_size: int

    @property
    def pages(self) -> int:
        """Number of pages (at least 1)."""
        return max(1, math.ceil(self.total / self.page_size))


def judged_records(
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
    *,
    task_type: str | None = None,
    outcome: str | None = None,
    source: JudgementSource | str | None = None,
) -> list[tuple[PairJudgement, bool]]:
    """Every judgement of a run with whether it is its pair's resolved one, filtered.

    The stored judgements (every source, failures included) and, for each labelled pair,
    the human judgement :func:`shadoweval.stats.judgements.resolve_judgements` makes of its latest
    label. Listed worst first: by outcome (:data:`JUDGED_OUTCOMES`: candidate worse,
    candidate better, tie, failed), then task type, exchange id and source (human,
    reference, judge).

    Args:
        judgements: the run's stored judgements.
        labels: the run's human labels.
        task_type: only this task type (``None``: all).
        outcome: only this outcome (a :data:`JUDGED_OUTCOMES` value; ``None``: all).
        source: only this source (``None``: all).

    Raises:
        ConfigError: an unknown outcome or source (``field`` names it).
    """
    if outcome is not None and outcome not in JUDGED_OUTCOMES:
        raise ConfigError(
            f"outcome {outcome!r} is not one of {', '.join(JUDGED_OUTCOMES)}",
            field="outcome",
            value=outcome,
        )
    wanted_source = None
    if source is not None:
        try:
            wanted_source = JudgementSource(source)
        except ValueError:
            known = ", ".join(s.value for s in JudgementSource)
            raise ConfigError(
                f"source {source!r} is not one of {known}", field="source", value=source
            ) from None
    resolved = resolve_judgements(judgements, labels)
    every = list(judgements)
    stored = {(j.exchange_id, j.source) for j in judgements}
    every += [
        j
        for j in resolved.values()
        if j.source is JudgementSource.HUMAN and (j.exchange_id, j.source) not in stored
    ]
    records = []
    for judgement in every:
        name = FAILED if judgement.outcome is None else judgement.outcome.value
        if task_type is not None and judgement.task_type != task_type:
            continue
        if outcome is not None and name != outcome:
            continue
        if wanted_source is not None and judgement.source is not wanted_source:
            continue
        chosen = resolved.get(judgement.exchange_id)
        used = chosen is not None and chosen.source is judgement.source
        records.append((judgement, used))
    records.sort(
        key=lambda r: (
            JUDGED_OUTCOMES.index(FAILED if r[0].outcome is None else r[0].outcome.value),
            r[0].task_type,
            r[0].exchange_id,
            _SOURCE_ORDER[r[0].source],
        )
    )
    return records


def redact_judgement(judgement: PairJudgement, redact: Redact) -> PairJudgement:
    """``judgement`` with its rationale, its votes' rationales and its error redacted."""
    return judgement.model_copy(
        update={
            "rationale": redact(judgement.rationale) if judgement.rationale else "",
            "error": redact(judgement.error) if judgement.error else judgement.error,
            "votes": tuple(
                vote.model_copy(
                    update={"rationale": redact(vote.rationale) if vote.rationale else ""}
                )
                for vote in judgement.votes
            ),
        }
    )


def judged_pairs_view(
    repo: Repository,
    run: RunInfo,
    *,
    redact: Redact,
    task_type: str | None = None,
    outcome: str | None = None,
    source: JudgementSource | str | None = None,
    page: int = 1,
    page_size: int = 20,
    pairs: pd.DataFrame | None = None,
    judgements: Sequence[PairJudgement] | None = None,
    labels: Sequence[HumanLabel] | None = None,
) -> JudgedPairsPage:
    """One page of the run's judged pairs (:func:`judged_records`), with their answers.

    Each judgement comes with whether the estimator uses it, the pair's change class and
    stratum under the frozen policy, and the pair itself (:meth:`Repository.samples_by_ids`)
    through :func:`shadoweval.application.samples.redact_sample`; rationales are redacted too.

    Args:
        repo: the results database.
        run: the run.
        redact: text → text with every rule's matches replaced (the dashboard's redactor).
        task_type, outcome, source: filters (see :func:`judged_records`).
        page: 1-based page number (a page past the last is empty).
        page_size: judgements per page, 1 to :data:`MAX_JUDGED_PAGE_SIZE`.
        pairs, judgements, labels: what the caller already read (a cached pairs table,
            the run's judgements and labels); read from storage when ``None``.

    Raises:
        ConfigError: a bad filter, page or page size (``field`` names it), or a frozen
            policy that no longer parses.
        StorageError: the database failed.
    """
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise ConfigError(f"page {page!r} must be an integer >= 1", field="page", value=page)
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_JUDGED_PAGE_SIZE
    ):
        raise ConfigError(
            f"page_size {page_size!r} must be an integer from 1 to {MAX_JUDGED_PAGE_SIZE}",
            field="page_size",
            value=page_size,
        )
    stored = repo.list_judgements(run.run_id) if judgements is None else judgements
    given = repo.load_labels(run.run_id) if labels is None else labels
    records = judged_records(stored, given, task_type=task_type, outcome=outcome, source=source)
    shown = records[(page - 1) * page_size : page * page_size]
    policy = parse_policy_yaml(run.policy_yaml, source=f"run {run.run_id}")
    frame = _run_pairs(repo, run, policy) if pairs is None else pairs
    classes: dict[str, tuple[bool, int]] = {}
    if not frame.empty and shown:
        changes = classify_changes(frame, policy)
        classes = {
            str(e): (bool(c), int(h))
            for e, c, h in zip(frame["exchange_id"], changes.changed, changes.stratum, strict=True)
        }
    ids = list(dict.fromkeys(j.exchange_id for j, _ in shown if j.exchange_id in classes))
    samples = {
        s.exchange_id: redact_sample(s, redact) for s in repo.samples_by_ids(run.run_id, ids)
    }
    rows = []
    for judgement, used in shown:
        found = classes.get(judgement.exchange_id)
        rows.append(
            JudgedPair(
                judgement=redact_judgement(judgement, redact),
                used=used,
                changed=None if found is None else found[0],
                stratum=None if found is None else found[1],
                sample=samples.get(judgement.exchange_id),
            )
        )
    return JudgedPairsPage(tuple(rows), len(records), page, page_size)
