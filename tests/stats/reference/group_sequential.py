"""Reference: exact group-sequential (GST) crossing probabilities and boundaries.

The gate polls with checkpoints, confidence sequences and union-bound α spending
(:mod:`shadoweval.stats.sequential`, :mod:`shadoweval.stats.looks`); the tests check those levels
against the
exact classical designs here (test code only, never used by the gate):

* :func:`crossing_probability` — P_H0(some look crosses its bound) for z-statistics at
  given information times;
* :func:`obf_boundaries`, :func:`pocock_boundaries` — the classical constants for K
  equal looks, which validate the recursion against published values (T15);
* :func:`spending_boundaries` — Lan–DeMets boundaries that spend
  :func:`shadoweval.stats.sequential.lan_demets_spent` exactly, i.e. using the looks' correlation,
  where :func:`shadoweval.stats.sequential.look_alpha` uses the (conservative) union bound.

All are computed with the recursive numerical integration of Armitage, McPherson & Rowe
(1969) (Jennison & Turnbull 2000, ch. 19).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import optimize
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import (
    FloatArray,
    InvalidDataError,
    check_alpha,
    finite_1d,
    positive_int,
)
from shadoweval.stats.sequential import SpendingKind, lan_demets_spent

__all__ = [
    "crossing_probability",
    "obf_boundaries",
    "pocock_boundaries",
    "spending_boundaries",
]


# ------------------------------------------------------------------ group-sequential boundaries

_TRUNCATE_SD = 10.0  # the S_k grid stops 10 sd from 0: mass beyond it is < 1e-22
_MAX_GRID = 2001


def _check_times(times: npt.ArrayLike | None, looks: int) -> FloatArray:
    if times is None:
        return np.arange(1, looks + 1, dtype=np.float64) / looks
    t = finite_1d(times, "times")
    if t.size != looks:
        raise InvalidDataError(f"{t.size} times for {looks} boundaries", name="times")
    if t[0] <= 0.0 or np.any(np.diff(t) <= 0.0):
        raise InvalidDataError("times must be > 0 and strictly increasing", name="times")
    return t


class _Recursion:
    """Density of ``S_k = √t_k·Z_k`` on the continuation region, look by look.

    Under H0, ``S`` is Brownian motion in information time: ``S_k − S_{k−1} ~
    N(0, t_k − t_{k−1})`` independent of the past. The sub-density of S_k on the
    region where no boundary was crossed is propagated on a Simpson grid (Armitage,
    McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19). Costs O(grid²) per look.
    """

    def __init__(self, times: FloatArray, two_sided: bool) -> None:
        self.times = times
        self.two_sided = two_sided
        self.k = 0
        self.grid: FloatArray = np.zeros(0)
        self.mass: FloatArray = np.zeros(0)  # Simpson weight × density

    def _step_sd(self) -> float:
        before = self.times[self.k - 1] if self.k > 0 else 0.0
        return math.sqrt(float(self.times[self.k] - before))

    def cross(self, z_bound: float) -> float:
        """P(no crossing before look k+1 and crossing at it) for bound ``z_bound``."""
        b = z_bound * math.sqrt(float(self.times[self.k]))
        sd = self._step_sd()
        if self.k == 0:
            p = float(scipy_stats.norm.sf(b / sd))
            return 2.0 * p if self.two_sided else p
        upper = scipy_stats.norm.sf((b - self.grid) / sd)
        if self.two_sided:
            upper = upper + scipy_stats.norm.cdf((-b - self.grid) / sd)
        return float(np.dot(self.mass, upper))

    def advance(self, z_bound: float) -> None:
        """Move past look k+1 with bound ``z_bound``, keeping only non-crossing paths."""
        t = float(self.times[self.k])
        sd = self._step_sd()
        hi = min(z_bound * math.sqrt(t), _TRUNCATE_SD * math.sqrt(t))
        lo = -hi if self.two_sided else -_TRUNCATE_SD * math.sqrt(t)
        next_sd = (
            math.sqrt(float(self.times[self.k + 1]) - t) if self.k + 1 < self.times.size else sd
        )
        h_target = min(sd, next_sd) / 20.0
        points = int(np.clip(math.ceil((hi - lo) / h_target), 100, _MAX_GRID - 1))
        points += points % 2  # even number of intervals for Simpson's rule
        grid = np.linspace(lo, hi, points + 1)
        weights = np.ones(points + 1)
        weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
        weights *= (hi - lo) / points / 3.0
        if self.k == 0:
            density = scipy_stats.norm.pdf(grid / sd) / sd
        else:
            kernel = scipy_stats.norm.pdf((grid[:, None] - self.grid[None, :]) / sd) / sd
            density = kernel @ self.mass
        self.grid, self.mass = grid, weights * density
        self.k += 1


def _check_bounds(bounds: npt.ArrayLike) -> FloatArray:
    array = np.asarray(bounds, dtype=float)
    if array.ndim != 1 or array.size == 0:
        raise InvalidDataError("bounds must be a non-empty 1-D sequence", name="bounds")
    if np.any(np.isnan(array)) or np.any(array <= 0.0):
        raise InvalidDataError("bounds must be > 0 (+inf allowed)", name="bounds")
    return array


def crossing_probability(
    bounds: npt.ArrayLike,
    times: npt.ArrayLike | None = None,
    *,
    two_sided: bool = True,
) -> float:
    """P_H0(Z_k crosses its bound at some look) for z-statistics at information ``times``.

    ``corr(Z_i, Z_j) = √(t_i/t_j)``; two-sided: the event ``|Z_k| ≥ c_k`` at some k,
    one-sided ``Z_k ≥ c_k``. T15: five equal looks at 1.96 give 0.1417 (Armitage et al.
    1969). Computed by recursive numerical integration (:class:`_Recursion`; agrees with
    :func:`scipy.stats.multivariate_normal.cdf` to its tolerance).

    Args:
        bounds: critical values c_k on the z scale, shape ``(K,)``, > 0 (``inf`` = no
            crossing possible at that look).
        times: information fractions t_1 < … < t_K (any positive scale, e.g. n_k);
            default equally spaced.
        two_sided: two-sided or upper one-sided crossing.

    Raises:
        InvalidDataError: bounds not > 0, times not positive increasing, lengths differ.
    """
    c = _check_bounds(bounds)
    t = _check_times(times, int(c.size))
    recursion = _Recursion(t, two_sided)
    total = 0.0
    for k, bound in enumerate(c):
        total += recursion.cross(float(bound))
        if k + 1 < c.size:
            recursion.advance(float(bound))
    return total


def _solve_constant(shape: FloatArray, alpha: float, two_sided: bool) -> float:
    def excess(constant: float) -> float:
        return crossing_probability(constant * shape, two_sided=two_sided) - alpha

    return float(optimize.brentq(excess, 0.05, 40.0, xtol=1e-10))


def obf_boundaries(looks: int, alpha: float, two_sided: bool = True) -> FloatArray:
    """O'Brien–Fleming boundaries ``c_k = C_B·√(K/k)`` for K equally spaced looks.

    ``C_B`` solves ``P_H0(cross at some look) = α`` (O'Brien & Fleming, Biometrics
    35:549–556, 1979; Jennison & Turnbull 2000, Table 2.3). T15: ``C_B(5, 0.05) = 2.040``
    two-sided (the last element).

    Returns:
        The z-scale boundaries, shape ``(looks,)``, decreasing to ``C_B``.

    Raises:
        InvalidDataError: looks < 1 or alpha outside (0, 1) (one-sided: (0, 0.5)).
    """
    looks = positive_int(looks, "looks")
    alpha = check_alpha(alpha, upper=1.0 if two_sided else 0.5)
    shape = np.sqrt(looks / np.arange(1, looks + 1, dtype=np.float64))
    return _solve_constant(shape, alpha, two_sided) * shape


def pocock_boundaries(looks: int, alpha: float, two_sided: bool = True) -> FloatArray:
    """Pocock's constant boundary ``c_k = C_P`` for K equally spaced looks.

    Pocock, Biometrika 64:191–199 (1977); Jennison & Turnbull 2000, Table 2.1.
    T15: ``C_P(5, 0.05) = 2.413`` two-sided.

    Raises:
        InvalidDataError: looks < 1 or alpha outside (0, 1) (one-sided: (0, 0.5)).
    """
    looks = positive_int(looks, "looks")
    alpha = check_alpha(alpha, upper=1.0 if two_sided else 0.5)
    shape = np.ones(looks, dtype=np.float64)
    return _solve_constant(shape, alpha, two_sided) * shape


def spending_boundaries(
    times: npt.ArrayLike,
    alpha: float,
    *,
    kind: SpendingKind = "obf",
    two_sided: bool = False,
) -> FloatArray:
    """Lan–DeMets group-sequential boundaries at information fractions ``times``.

    Look k's critical value c_k solves ``P_H0(first crossing at look k) = α(t_k) −
    α(t_{k−1})`` given the earlier bounds (:func:`lan_demets_spent`), so unplanned look
    times are allowed as long as ``t = n_k / n_max`` is known. Unlike :func:`look_alpha`
    this uses the correlation of the looks and is less conservative. With five equal
    looks and one-sided α = 0.025 (OBF type) the bounds are about 4.877, 3.357, 2.680,
    2.290, 2.031 (gsDesign ``sfLDOF``).

    Args:
        times: information fractions ``0 < t_1 < … < t_K``; fractions above 1 are
            clipped (they spend nothing and get ``inf``).
        alpha: total level, in (0, 1) two-sided, (0, 0.5) one-sided.
        kind: ``obf`` or ``pocock`` spending.
        two_sided: symmetric two-sided bounds, else upper one-sided (default).

    Returns:
        z-scale boundaries, shape ``(K,)``; ``inf`` where a look spends no α.

    Raises:
        InvalidDataError: times not positive increasing, alpha or kind invalid.
    """
    alpha = check_alpha(alpha, upper=1.0 if two_sided else 0.5)
    t = finite_1d(times, "times")
    if t[0] <= 0.0 or np.any(np.diff(t) <= 0.0):
        raise InvalidDataError("times must be > 0 and strictly increasing", name="times")
    recursion = _Recursion(t, two_sided)
    bounds = np.empty(t.size, dtype=np.float64)
    spent_before = 0.0
    for k, t_k in enumerate(t):
        spent = lan_demets_spent(float(t_k), alpha, kind)
        target = spent - spent_before
        if target <= 1e-15:
            bounds[k] = math.inf
        else:
            bounds[k] = float(
                optimize.brentq(
                    lambda c, goal=target: recursion.cross(c) - goal, 0.01, 40.0, xtol=1e-10
                )
            )
            spent_before = spent
        if k + 1 < t.size:
            recursion.advance(float(bounds[k]))
    return bounds
