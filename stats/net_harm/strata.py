"""Divergence strata of changed pairs, and the pooled unit's task type × stratum codes.

The strata of the stratified net-harm estimator (:mod:`shadoweval.stats.net_harm`): a
changed pair's stratum by its divergence ``D = 1 − similarity`` and the task type's
``net_harm.strata_edges``, their names for reasons, and the pooled unit's strata.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shadoweval.stats.inputs import FloatArray, InvalidDataError

__all__ = [
    "GROUND_TRUTH_STRATUM_NAME",
    "IntArray",
    "divergence_strata",
    "ground_truth_stratum",
    "pooled_strata",
    "stratum_label",
    "stratum_names",
]

IntArray = npt.NDArray[np.int64]

GROUND_TRUTH_STRATUM_NAME = "ground truth only"
"""The name of the stratum of pairs that only their ground truth marks changed."""


def ground_truth_stratum(edges: Sequence[float]) -> int:
    """The stratum code of the pairs changed by their ground truth alone: ``len(edges) + 2``.

    A pair whose reference correctness or analyst's label differs between the sides is
    changed whatever its similarity says (:mod:`shadoweval.stats.change`); where nothing
    else marks it (its divergence below the threshold, no behaviour or exact difference)
    it is in this stratum, which is a census (every pair in it is judged: its judgement
    put it there), so the estimator reads its outcomes exactly and the divergence strata
    keep their random judge samples.
    """
    return len(edges) + 2


def divergence_strata(divergence: FloatArray, edges: Sequence[float]) -> IntArray:
    """The divergence stratum of each pair, by ``D = 1 − similarity``.

    Strata are ``0`` for ``D < e_1``, ``i`` for ``e_i ≤ D < e_{i+1}``, ``len(edges)`` for
    ``D ≥ e_last``; a NaN divergence (no similarity: an error or tool change) is stratum
    ``len(edges) + 1``. With the default edges (0.1, 0.2, 0.35): D 0.05 → 0, 0.1 → 1,
    0.3 → 2, 0.9 → 3, NaN → 4.

    Args:
        divergence: ``D`` per pair, shape ``(n,)``; finite or NaN.
        edges: strictly increasing stratum edges (``net_harm.strata_edges``).

    Returns:
        int64 stratum indexes, shape ``(n,)``.

    Raises:
        InvalidDataError: an infinite divergence, or a divergence array that is not 1-D.
        ValueError: edges not strictly increasing or not finite.
    """
    d = np.asarray(divergence, dtype=np.float64)
    if d.ndim != 1:
        raise InvalidDataError(f"divergence must be 1-D, got shape {d.shape}", name="divergence")
    bounds = np.asarray(tuple(edges), dtype=np.float64)
    if not np.all(np.isfinite(bounds)) or np.any(np.diff(bounds) <= 0):
        raise ValueError(f"strata edges must be finite and strictly increasing, got {edges}")
    infinite = int(np.count_nonzero(np.isinf(d)))
    if infinite:
        raise InvalidDataError(
            f"divergence: {infinite} infinite values", name="divergence", count=infinite
        )
    strata = np.searchsorted(bounds, d, side="right").astype(np.int64)
    strata[np.isnan(d)] = bounds.size + 1
    return strata


def stratum_label(index: int, edges: Sequence[float]) -> str:
    """The name of divergence stratum ``index`` (:func:`divergence_strata`): ``D < 0.1``,
    ``D 0.1-0.2``, ``D >= 0.35``, ``no similarity``; ``ground truth only`` for
    :func:`ground_truth_stratum`.

    Raises:
        ValueError: ``index`` outside ``0 … len(edges) + 2``.
    """
    e = [f"{x:g}" for x in edges]
    if not 0 <= index <= len(e) + 2:
        raise ValueError(f"stratum index {index} outside 0..{len(e) + 2}")
    if index == len(e) + 2:
        return GROUND_TRUTH_STRATUM_NAME
    if index == len(e) + 1:
        return "no similarity"
    if not e:
        return "all D"
    if index == 0:
        return f"D < {e[0]}"
    if index == len(e):
        return f"D >= {e[-1]}"
    return f"D {e[index - 1]}-{e[index]}"


def stratum_names(edges: Sequence[float]) -> dict[int, str]:
    """Every stratum's :func:`stratum_label`, by index (the ground-truth stratum included)."""
    return {i: stratum_label(i, edges) for i in range(len(edges) + 3)}


def pooled_strata(
    group: Sequence[str] | npt.NDArray[np.object_],
    stratum: IntArray,
    edges: Sequence[float],
) -> tuple[IntArray, dict[int, str]]:
    """Strata of the pooled unit: task type × divergence stratum.

    The judge budget samples each task type separately, so the sampling fraction of a
    divergence stratum differs between task types; pooling them into one stratum would
    over-weight the task types judged more densely. The pooled estimate therefore
    stratifies by task type and divergence stratum (each task type's strata keep their
    own weights), which makes it the traffic-weighted sum of the task types' estimates.

    Args:
        group: the task type of each pair, shape ``(n,)``.
        stratum: each pair's divergence stratum (−1 unchanged), shape ``(n,)``.
        edges: the strata edges of :func:`divergence_strata` (the same for every task type
            of the unit; strata ``0 … len(edges) + 2``, the last
            :func:`ground_truth_stratum`).

    Returns:
        The combined stratum codes (−1 where ``stratum`` is −1) and their names
        (``"koala: D 0.1-0.2"``).

    Raises:
        InvalidDataError: the arrays differ in length, or a stratum above
            ``len(edges) + 2``.
    """
    groups = np.asarray(group, dtype=object)
    strata = np.asarray(stratum, dtype=np.int64)
    if groups.shape != strata.shape:
        raise InvalidDataError(
            f"group and stratum differ in shape: {groups.shape} vs {strata.shape}",
            name="stratum",
        )
    width = len(edges) + 3
    too_large = int(np.count_nonzero(strata >= width))
    if too_large:
        raise InvalidDataError(
            f"stratum: {too_large} values above {width - 1} (edges {tuple(edges)})",
            name="stratum",
            count=too_large,
        )
    labels, group_code = np.unique(groups.astype(str), return_inverse=True)
    codes = np.where(strata >= 0, group_code.reshape(strata.shape) * width + strata, -1)
    stratum_text = stratum_names(edges)
    names = {
        int(code): f"{labels[int(code) // width]}: {stratum_text[int(code) % width]}"
        for code in np.unique(codes[codes >= 0])
    }
    codes = codes.astype(np.int64)
    return codes, names
