"""Multiplicity adjustment for the harm (rollback) family.

ROLLBACK is a union rule ("any significant harm in any task type or metric"), so its
family-wise error rate is controlled with Holm's step-down procedure across task types ×
critical metrics (gate-statistics.md §1.7). PROMOTE is an intersection–union rule and
needs no adjustment.

Source: Holm, "A simple sequentially rejective multiple test procedure", Scandinavian
Journal of Statistics 6:65–70 (1979). Computed directly (sort, ``(m − i + 1)·p_(i)``,
running maximum, capped at 1): the same values as
:func:`statsmodels.stats.multitest.multipletests` (``method="holm"``), which calls
``gc.collect()`` on every call (≈ 60 ms with a large pairs table in memory; the gate
adjusts two families per poll). Test vector T12.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shadoweval.stats.inputs import FloatArray, InvalidDataError, finite_1d

__all__ = ["holm"]


def holm(pvalues: Sequence[float] | FloatArray) -> FloatArray:
    """Return Holm-adjusted p-values, in the input order.

    Reject hypothesis ``i`` at family-wise level α when ``adjusted[i] <= α``.

    Args:
        pvalues: unadjusted p-values, shape ``(m,)``, each in [0, 1]; ``m`` may be 0.

    Returns:
        Adjusted p-values, shape ``(m,)``, each in [0, 1] and ≥ the unadjusted one.

    Raises:
        InvalidDataError: a p-value is NaN, infinite or outside [0, 1].
    """
    array = finite_1d(pvalues, "p-values", min_size=0)
    if array.size == 0:
        return np.empty(0, dtype=np.float64)
    if np.any((array < 0.0) | (array > 1.0)):
        raise InvalidDataError("p-values must lie in [0, 1]", name="p-values")
    m = int(array.size)
    order = np.argsort(array, kind="stable")
    stepped = np.maximum.accumulate(array[order] * np.arange(m, 0, -1, dtype=np.float64))
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted
