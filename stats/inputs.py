"""Checking numeric inputs before a statistic is computed.

Every public statistic in :mod:`shadoweval.stats` takes array-likes and turns them into a
one-dimensional ``float64`` array here first, so that NaN, infinities and empty inputs are
rejected with one clear error instead of propagating (scipy returns NaN silently; the gate
must turn such data into HOLD, never into a verdict).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from shadoweval.errors import InsufficientDataError, InvalidDataError

__all__ = [
    "FloatArray",
    "InsufficientDataError",
    "InvalidDataError",
    "check_alpha",
    "count",
    "finite_1d",
    "positive_int",
]

FloatArray = npt.NDArray[np.float64]
"""A one-dimensional array of float64 values."""


def finite_1d(
    values: npt.ArrayLike | Iterable[float],
    name: str,
    *,
    min_size: int = 1,
    positive: bool = False,
) -> FloatArray:
    """Return ``values`` as a 1-D float64 array after checking it.

    Args:
        values: any 1-D array-like of numbers (list, tuple, numpy array, pandas Series).
        name: what the values are, used in error messages.
        min_size: the smallest number of values the caller can use.
        positive: require every value to be strictly greater than 0.

    Raises:
        InvalidDataError: a value is NaN or infinite (counted in the message), a value
            is not > 0 when ``positive``, or the input is not one-dimensional.
        InsufficientDataError: fewer than ``min_size`` values.
    """
    source: object = values
    if isinstance(values, Iterable) and not (
        hasattr(values, "__array__") or isinstance(values, Sequence)
    ):
        source = list(values)  # a generator or other one-shot iterable
    try:
        array = np.asarray(source, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"{name}: values are not numbers ({exc})", name=name) from exc
    if array.ndim != 1:
        raise InvalidDataError(
            f"{name}: expected a one-dimensional sequence, got shape {array.shape}", name=name
        )
    bad = int(np.count_nonzero(~np.isfinite(array)))
    if bad:
        raise InvalidDataError(
            f"{name}: {bad} of {array.size} values are NaN or infinite", name=name, count=bad
        )
    if array.size < min_size:
        raise InsufficientDataError(f"{name}: {array.size} values, at least {min_size} needed")
    if positive:
        not_positive = int(np.count_nonzero(array <= 0))
        if not_positive:
            raise InvalidDataError(
                f"{name}: {not_positive} of {array.size} values are <= 0 (must be > 0)",
                name=name,
                count=not_positive,
            )
    return array


def count(value: int, name: str) -> int:
    """Return ``value`` as a Python ``int`` after checking it is a non-negative integer count.

    Raises:
        InvalidDataError: ``value`` is a bool, not integral, or negative.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidDataError(f"{name} must be an integer count, got {value!r}", name=name)
    if value < 0:
        raise InvalidDataError(f"{name} must be >= 0, got {value}", name=name)
    return int(value)


def check_alpha(alpha: float, *, upper: float = 1.0, name: str = "alpha") -> float:
    """Return ``alpha`` as a float.

    Raises:
        InvalidDataError: ``alpha`` is not a number in ``(0, upper)`` (names ``name``).
    """
    if isinstance(alpha, bool) or not isinstance(alpha, int | float | np.floating):
        raise InvalidDataError(f"{name} must be a number, got {alpha!r}", name=name)
    if not 0.0 < alpha < upper:
        raise InvalidDataError(f"{name} must be in (0, {upper:g}), got {alpha}", name=name)
    return float(alpha)


def positive_int(value: int, name: str) -> int:
    """Return ``value`` as an int.

    Raises:
        InvalidDataError: ``value`` is not an integer >= 1 (names ``name``).
    """
    value = count(value, name)
    if value < 1:
        raise InvalidDataError(f"{name} must be >= 1, got {value}", name=name)
    return value
