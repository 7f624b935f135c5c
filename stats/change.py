"""Which pairs *changed*: divergence beyond the noise floor, or a difference of behaviour.

Every real upgrade changes answers, so divergence says how much changed, never in which
direction (issue 11). A pair is **changed** when

* its divergence ``D = 1 − similarity`` exceeds its unit's **noise threshold**: the
  ``change.noise_quantile`` (default 0.95) of the baseline-repeat divergences
  ``D_noise = 1 − noise_similarity`` of its task type when the task type has at least
  ``change.min_noise_pairs`` of them, else of the pooled baseline-repeat divergences
  (when the run has that many), else — no usable noise floor, or a degenerate one (below)
  — ``change.divergence_threshold`` (default 0.1); or
* the two sides differ in any harm detector (``*_harm_<kind>`` columns, the runaway
  length ratio included), in format-parse success (both scored, one parses), in tool
  behaviour (any ``tool_<change>``; an order change only where ``tool_calls.order_free``
  is false), or in a model failure (one side errored or was empty, the other not); or
* the normalised exact comparison of a structured or short pair says its answers differ
  (``exact_differs``, :mod:`shadoweval.compare.exact`: ``"operating_hours": 11`` vs ``23``,
  which the embedding reads as unchanged); or
* its **ground truth** differs between the sides: a reference checker's per-side
  correctness or an analyst's label (``quality_source`` ``reference`` or ``human``) says
  the candidate is better or worse. Ground truth is read on every pair it covers,
  whatever the similarity says; a pair where both sides are equally correct (a tie) is
  not changed by it. An LLM judge's outcome never marks a change: the judge is asked
  about changed pairs only.

A pair with an infrastructure error on either side (or a missing infrastructure flag) is
never changed: the model was not judged there (``infra_error_rate`` gates it).

Changed pairs are what a judge, an analyst or a reference checker is asked about
(:mod:`shadoweval.stats.net_harm` counts unchanged pairs as ties). Each changed pair gets a
divergence
**stratum** for the stratified net-harm estimator and the judge budget:
:func:`shadoweval.stats.net_harm.divergence_strata` of its ``D`` with its task type's
``net_harm.strata_edges`` (0 … ``len(edges)``), ``len(edges) + 1`` for a changed pair
without a similarity (an error or tool change), ``len(edges) + 2``
(:func:`shadoweval.stats.net_harm.ground_truth_stratum`) for a pair that only its ground
truth marks changed, −1 for an unchanged pair.

**The similarity's miss rate.** Of the pairs with a similarity that ground truth or the
exact comparison found changed, the share whose divergence stayed at or below the
threshold (:attr:`ChangeResult.similarity_found` and :attr:`ChangeResult.similarity_missed`):
how often the embedding alone would have called a changed pair unchanged, per task type
in the similarity check's reason.

**Degenerate noise floor.** A baseline repeat that returns exactly the captured answer on
(nearly) every request that sampled — a deterministic replica (a fixed seed, as
llama-cpp-python reseeds every request from one fixed chain; or a server replaying stored
answers), not a second draw — shows no sampling noise: every changed answer would be
"beyond the noise". Among
the pairs with a noise similarity whose request sampled (``sampled`` 1.0 or unknown), the
share with ``noise_identical`` 1.0 (where that is unknown: noise similarity ≥
:data:`IDENTICAL_SIMILARITY`) is compared with ``change.degenerate_identical_share``
(default 0.95) of the pooled policy; at or above it the floor is degenerate
(:class:`DegenerateNoise`) for the whole run: every unit measures changes against its
``divergence_threshold`` and the similarity check is inconclusive, its reason led by
:meth:`DegenerateNoise.describe`. Requests with temperature 0 are left out of the test:
a repeat identical to the capture is what they should give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.records import POOLED, ToolChange
from shadoweval.stats.checks.pair_arrays import BoolArray, FloatArray, IntArray, PairArrays
from shadoweval.stats.checks.reasons import fmt_g
from shadoweval.stats.checks.truth import GROUND_TRUTH_SOURCES
from shadoweval.stats.frame import OPTIONAL_PAIRS_COLUMNS, PAIRS_COLUMNS
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.net_harm import divergence_strata, ground_truth_stratum
from shadoweval.stats.policy import GatePolicy, effective

__all__ = [
    "GROUND_TRUTH_SOURCES",
    "IDENTICAL_SIMILARITY",
    "MIN_NOISE_THRESHOLD",
    "ChangeResult",
    "DegenerateNoise",
    "classify_changes",
    "classify_pair_arrays",
]

IDENTICAL_SIMILARITY = 0.9999
"""A noise similarity at least this high counts as an identical repeat where the pair
does not say (``noise_identical`` unknown: scores written before the field existed)."""

MIN_NOISE_THRESHOLD = 1e-4
"""Floor on a noise threshold (divergence units): with temperature-0 traffic the noise
quantile can be exactly 0, and an encoder's rounding (``D`` of 1e-7 between identical
texts) must not count as a change. Equals ``1 − IDENTICAL_SIMILARITY``."""

_ORDER = list(ToolChange).index(ToolChange.ORDER_CHANGED)


@dataclass(frozen=True)
class DegenerateNoise:
    """A degenerate noise floor: a deterministic replica repeated the captured answer.

    Attributes:
        identical: sampled requests whose baseline repeat was identical to the capture.
        sampled_with_repeat: pairs with a noise similarity whose request sampled
            (temperature > 0 or unknown).
        share: ``identical / sampled_with_repeat``.
        limit: the policy's ``change.degenerate_identical_share``.
        divergence_threshold: the pooled policy's ``change.divergence_threshold``, which
            changes are measured against instead.
    """

    identical: int
    sampled_with_repeat: int
    share: float
    limit: float
    divergence_threshold: float

    def describe(self) -> str:
        """The sentence that leads the similarity reason and a HOLD verdict's reasons.

        Numbers are written for people: the share to one decimal, never rounded up to
        100% while a repeat differed (799 of 800: 99.8%), and the threshold to three
        significant digits (a policy value like ``1 - 0.7`` reads ``0.3``, not
        ``0.30000000000000004``).
        """
        return (
            "degenerate noise floor: the baseline replica is deterministic: it repeated the "
            f"captured answer word for word on {self.identical} of "
            f"{self.sampled_with_repeat} sampled requests "
            f"({_share_pct(self.identical, self.sampled_with_repeat)}), as a fixed seed does "
            "(llama-cpp-python reseeds every request from one fixed chain) or a server "
            "replaying stored answers; a second draw of the same request is then the same "
            "draw, so it shows no sampling noise to measure changes against; changes are "
            f"measured against divergence_threshold {fmt_g(self.divergence_threshold)} instead"
        )


def _share_pct(count: int, n: int) -> str:
    """``count / n`` as a percentage: ``100%`` only when all, else one decimal rounded
    down (``99.8%``), without a trailing ``.0`` (``95%``)."""
    if n <= 0:
        return "–"
    if count == n:
        return "100%"
    tenths = math.floor(1000 * count / n)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths / 10:.1f}%"


@dataclass(frozen=True)
class ChangeResult:
    """Which pairs changed, per row of the pairs table given to :func:`classify_changes`.

    Attributes:
        changed: shape ``(n,)``, the pair changed (see the module docstring).
        stratum: shape ``(n,)``, −1 unchanged; 0 … ``len(edges)`` the divergence stratum
            of a changed pair; ``len(edges) + 1`` a changed pair without a similarity.
        divergence: shape ``(n,)``, ``D = 1 − similarity`` (NaN without a similarity).
        noise_threshold: the divergence threshold of each task type and of ``POOLED``.
        threshold_source: how each threshold was set: ``"noise"`` (the unit's own noise
            quantile), ``"pooled noise"`` (a task type with too few repeats), or
            ``"divergence_threshold"`` (no usable noise floor, or a degenerate one).
        degenerate: the degenerate noise floor, or ``None``.
        noise_pairs: baseline-repeat divergences per unit (pooled included).
        similarity_found: shape ``(n,)``, pairs with a similarity (no infrastructure
            error) that ground truth or the exact comparison found changed.
        similarity_missed: shape ``(n,)``, those of them whose divergence stayed at or
            below the threshold: the embedding alone called them unchanged.
    """

    changed: BoolArray
    stratum: IntArray
    divergence: FloatArray
    noise_threshold: dict[str, float]
    threshold_source: dict[str, str]
    degenerate: DegenerateNoise | None
    noise_pairs: dict[str, int]
    similarity_found: BoolArray
    similarity_missed: BoolArray


def _degenerate(arrays: PairArrays, policy: GatePolicy) -> DegenerateNoise | None:
    block = policy.change
    with_repeat = ~np.isnan(arrays.noise_similarity) & ~arrays.infra
    sampled = with_repeat & (arrays.sampled != 0.0)  # 1.0 or NaN (unknown) sampled
    n = int(np.count_nonzero(sampled))
    if n == 0:
        return None
    known = ~np.isnan(arrays.noise_identical)
    identical_flag = np.where(
        known, arrays.noise_identical == 1.0, arrays.noise_similarity >= IDENTICAL_SIMILARITY
    )
    identical = int(np.count_nonzero(sampled & identical_flag))
    share = identical / n
    if share < block.degenerate_identical_share:
        return None
    return DegenerateNoise(
        identical=identical,
        sampled_with_repeat=n,
        share=share,
        limit=block.degenerate_identical_share,
        divergence_threshold=block.divergence_threshold,
    )


def classify_pair_arrays(
    arrays: PairArrays,
    task_types: npt.NDArray[np.object_] | npt.NDArray[np.int64],
    policy: GatePolicy,
    *,
    names: tuple[str, ...] | None = None,
) -> ChangeResult:
    """:func:`classify_changes` on the gate's arrays (the rows of one pairs table).

    Args:
        arrays: the pairs' columns (:class:`~shadoweval.stats.checks.pair_arrays.PairArrays`).
        task_types: each row's task type, shape ``(n,)``; or, with ``names``, each row's
            index into ``names`` (the gate's factorised task types).
        policy: the gate policy (per-task-type ``change``, ``tool_calls``, ``net_harm``).
        names: the task type of each code in ``task_types``.

    Raises:
        InvalidDataError: ``task_types`` does not have one entry per row, or a code is
            outside ``names``.
    """
    codes, names = _task_type_codes(task_types, arrays.n, names)
    divergence = 1.0 - np.clip(arrays.similarity, -1.0, 1.0)
    degenerate = _degenerate(arrays, policy)
    noise = _noise_thresholds(arrays, codes, names, policy, degenerate)
    reasons = _changed(arrays, codes, names, policy, divergence, noise.per_row)
    edges_of = [tuple(effective(policy, str(name)).net_harm.strata_edges) for name in names]
    stratum = _strata(reasons.changed, codes, divergence, edges_of)
    truth_only = reasons.truth & ~reasons.other
    for i, edges in enumerate(edges_of):
        stratum[truth_only & (codes == i)] = ground_truth_stratum(edges)
    found = ~arrays.infra & np.isfinite(divergence) & (reasons.truth | reasons.exact)
    return ChangeResult(
        changed=reasons.changed,
        stratum=stratum,
        divergence=divergence,
        noise_threshold=noise.threshold,
        threshold_source=noise.source,
        degenerate=degenerate,
        noise_pairs=noise.noise_pairs,
        similarity_found=found,
        similarity_missed=found & ~reasons.diverged,
    )


def _task_type_codes(
    task_types: npt.NDArray[np.object_] | npt.NDArray[np.int64],
    n: int,
    names: tuple[str, ...] | None,
) -> tuple[IntArray, tuple[str, ...]]:
    """Each row's index into the task types, and the task types (sorted when factorised here).

    Raises:
        InvalidDataError: as :func:`classify_pair_arrays` says.
    """
    if task_types.shape != (n,):
        raise InvalidDataError(f"task_types has shape {task_types.shape}, expected ({n},)")
    if names is None:
        codes, found = pd.factorize(pd.Series(task_types, dtype=object).astype(str), sort=True)
        return codes, tuple(str(t) for t in found)
    codes = np.asarray(task_types, dtype=np.int64)
    if n and (int(codes.min()) < 0 or int(codes.max()) >= len(names)):
        raise InvalidDataError(f"task type codes outside 0..{len(names) - 1}")
    return codes, names


@dataclass(frozen=True)
class _NoiseThresholds:
    """The divergence threshold of each unit (``POOLED`` first), how it was set, the
    baseline-repeat divergences it was read from, and each row's threshold (shape ``(n,)``)."""

    threshold: dict[str, float]
    source: dict[str, str]
    noise_pairs: dict[str, int]
    per_row: FloatArray


def _noise_thresholds(
    arrays: PairArrays,
    codes: IntArray,
    names: tuple[str, ...],
    policy: GatePolicy,
    degenerate: DegenerateNoise | None,
) -> _NoiseThresholds:
    """Each unit's threshold: its noise quantile, the pooled one, or ``divergence_threshold``
    (module docstring)."""
    d_noise = 1.0 - np.clip(arrays.noise_similarity, -1.0, 1.0)
    has_noise = ~arrays.infra & np.isfinite(d_noise)
    thresholds: dict[str, float] = {}
    sources: dict[str, str] = {}
    noise_pairs: dict[str, int] = {}

    def threshold(mask: BoolArray, unit: str, pooled: tuple[float, str] | None) -> None:
        block = effective(policy, unit).change
        values = d_noise[has_noise & mask]
        noise_pairs[unit] = int(values.size)
        if degenerate is not None:
            thresholds[unit], sources[unit] = block.divergence_threshold, "divergence_threshold"
        elif values.size >= block.min_noise_pairs:
            q = float(np.quantile(values, block.noise_quantile))
            thresholds[unit], sources[unit] = max(q, MIN_NOISE_THRESHOLD), "noise"
        elif pooled is not None and pooled[1] == "noise":
            thresholds[unit], sources[unit] = pooled[0], "pooled noise"
        else:
            thresholds[unit], sources[unit] = block.divergence_threshold, "divergence_threshold"

    n = arrays.n
    threshold(np.ones(n, dtype=bool), POOLED, None)
    pooled = (thresholds[POOLED], sources[POOLED])
    per_row = np.empty(n, dtype=np.float64)
    for i, name in enumerate(names):
        unit = str(name)
        mask = codes == i
        threshold(mask, unit, pooled)
        per_row[mask] = thresholds[unit]
    return _NoiseThresholds(thresholds, sources, noise_pairs, per_row)


@dataclass(frozen=True)
class _ChangeReasons:
    """Why each row changed (shape ``(n,)`` each, infrastructure errors never changed):
    ``diverged`` its divergence exceeds the threshold, ``exact`` its normalised exact forms
    differ, ``truth`` its ground truth differs, ``other`` anything but ground truth
    (divergence, exact, harm, format, tool or failure difference); ``changed`` any."""

    diverged: BoolArray
    exact: BoolArray
    truth: BoolArray
    other: BoolArray
    changed: BoolArray


def _truth_differs(arrays: PairArrays) -> BoolArray:
    """Rows whose ground truth (:data:`GROUND_TRUTH_SOURCES`) says better or worse."""
    truth = np.isin(arrays.quality_source.astype(str), GROUND_TRUTH_SOURCES)
    with np.errstate(invalid="ignore"):
        differs: BoolArray = truth & (np.abs(arrays.quality) == 1.0)
    return differs


def _changed(
    arrays: PairArrays,
    codes: IntArray,
    names: tuple[str, ...],
    policy: GatePolicy,
    divergence: FloatArray,
    threshold: FloatArray,
) -> _ChangeReasons:
    """Which rows changed and why: a divergence above the row's ``threshold``, a difference
    of behaviour, of exact form or of ground truth, and no infrastructure error (module
    docstring)."""
    order_counts = np.ones(arrays.n, dtype=bool)
    for i, name in enumerate(names):
        if effective(policy, str(name)).tool_calls.order_free:
            order_counts[codes == i] = False
    with np.errstate(invalid="ignore"):
        diverged = divergence > threshold  # NaN compares false
    harm_differs = np.any(arrays.base_harm != arrays.cand_harm, axis=1)
    format_differs = (
        ~np.isnan(arrays.base_format_ok)
        & ~np.isnan(arrays.cand_format_ok)
        & (arrays.base_format_ok != arrays.cand_format_ok)
    )
    tool = arrays.tool_change.copy()
    if tool.shape[1] > _ORDER:
        tool[:, _ORDER] &= order_counts
    tool_differs = np.any(tool, axis=1)
    base_fail = arrays.base_fail == 1.0
    cand_fail = arrays.cand_fail == 1.0
    fail_known = ~np.isnan(arrays.base_fail) & ~np.isnan(arrays.cand_fail)
    fail_differs = fail_known & (base_fail != cand_fail)
    usable = ~arrays.infra
    exact = usable & (arrays.exact_differs == 1.0)
    truth = usable & _truth_differs(arrays)
    other = usable & (
        diverged | exact | harm_differs | format_differs | tool_differs | fail_differs
    )
    return _ChangeReasons(
        diverged=usable & diverged, exact=exact, truth=truth, other=other, changed=other | truth
    )


def _strata(
    changed: BoolArray,
    codes: IntArray,
    divergence: FloatArray,
    edges_of: list[tuple[float, ...]],
) -> IntArray:
    """Each changed row's divergence stratum under its task type's edges
    (``len(edges) + 1`` without a similarity), −1 on the unchanged rows."""
    stratum = np.full(changed.shape, -1, dtype=np.int64)
    for i, edges in enumerate(edges_of):
        rows = changed & (codes == i)
        if not np.any(rows):
            continue
        d = divergence[rows]
        strata = np.full(d.shape, len(edges) + 1, dtype=np.int64)
        scored = np.isfinite(d)
        if np.any(scored):
            strata[scored] = np.asarray(divergence_strata(d[scored], edges), dtype=np.int64)
        stratum[rows] = strata
    return stratum


def classify_changes(pairs: pd.DataFrame, policy: GatePolicy) -> ChangeResult:
    """Which pairs changed, their divergence strata and the noise thresholds.

    Args:
        pairs: the pairs table (:data:`shadoweval.stats.frame.PAIRS_COLUMNS`, from
            :func:`shadoweval.stats.frame.pairs_frame`); any order.
        policy: the gate policy: ``change`` (noise quantile, minimum noise pairs,
            divergence threshold, degenerate share), ``tool_calls.order_free`` and
            ``net_harm.strata_edges`` per task type.

    Returns:
        A :class:`ChangeResult` aligned with the rows of ``pairs``.

    Raises:
        InvalidDataError: ``pairs`` lacks a required column.
    """
    missing = [
        c for c in PAIRS_COLUMNS if c not in pairs.columns and c not in OPTIONAL_PAIRS_COLUMNS
    ]
    if missing:
        raise InvalidDataError(f"pairs table lacks columns: {', '.join(missing)}")
    arrays = PairArrays.from_frame(pairs)
    return classify_pair_arrays(arrays, pairs["task_type"].to_numpy(dtype=object), policy)
