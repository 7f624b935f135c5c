"""Latency quantiles of two independent arms: a ratio bound and an absolute-limit check.

In a live canary each request is answered by one version, so the candidate's and the
baseline's latencies are two independent samples (the paired resampling-free interval of
:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf` needs pairs and does not apply). Both
checks here are **distribution-free order-statistic bounds** (Hahn & Meeker, "Statistical
Intervals: A Guide for Practitioners", Wiley 1991, §5.2 — one-sided distribution-free
bounds on a quantile; David & Nagaraja, "Order Statistics", §7.1), from the binomial ranks
of :func:`shadoweval.stats.quantiles.order_statistic_ranks`:

* for ``B ~ Binomial(n, q)`` and ``u = F_B⁻¹(1 − a) + 1``, ``P(x_(u) ≥ ξ_q) = P(B ≤ u − 1)
  ≥ 1 − a``: ``x_(u)`` is a one-sided ``1 − a`` upper bound on the q-quantile ξ_q;
* for ``l = F_B⁻¹(a)``, ``P(x_(l) ≤ ξ_q) = P(B ≥ l) ≥ 1 − a``: a lower bound.

Both hold for any distribution, continuous or not (ties only make them conservative),
and need no resampling, so they can be read at the small per-look levels of α spending.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from shadoweval.stats.inputs import InvalidDataError, check_alpha
from shadoweval.stats.quantiles import order_statistic_ranks

__all__ = [
    "QuantileLimitResult",
    "QuantileRatioResult",
    "lower_quantile_bound",
    "quantile_above_limit",
    "quantile_ratio_interval",
    "upper_quantile_bound",
]


def _finite_nonnegative(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    try:
        array = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"{name}: values are not numbers ({exc})", name=name) from exc
    bad = int(np.count_nonzero(~np.isfinite(array) | (array < 0)))
    if bad:
        raise InvalidDataError(
            f"{name}: {bad} of {array.size} values are NaN, infinite or negative "
            "(latencies in ms, unknown ones dropped before the call)",
            name=name,
            count=bad,
        )
    return np.sort(array)


def _check_q(q: float) -> float:
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0.0 < q < 1.0:
        raise InvalidDataError(f"q must be in (0, 1), got {q!r}", name="q")
    return float(q)


def upper_quantile_bound(sorted_values: npt.NDArray[np.float64], q: float, a: float) -> float:
    """One-sided ``1 − a`` distribution-free upper bound ``x_(u)`` on the q-quantile.

    ``u = F⁻¹(1 − a) + 1`` of ``Binomial(n, q)`` (the upper rank of
    :func:`shadoweval.stats.quantiles.order_statistic_ranks` at confidence ``1 − 2a``). Returns
    ``inf`` when ``u > n`` (too few values for a bound at this level) or ``n = 0``.
    ``sorted_values`` must be sorted ascending (not checked here).
    """
    n = int(sorted_values.size)
    if n == 0:
        return math.inf
    upper = order_statistic_ranks(n, q, 1.0 - 2.0 * a).upper_rank
    return float(sorted_values[upper - 1]) if upper <= n else math.inf


def lower_quantile_bound(sorted_values: npt.NDArray[np.float64], q: float, a: float) -> float:
    """One-sided ``1 − a`` distribution-free lower bound ``x_(l)`` on the q-quantile.

    ``l = F⁻¹(a)`` of ``Binomial(n, q)``. Returns ``-inf`` when ``l = 0`` (too few values)
    or ``n = 0``. ``sorted_values`` must be sorted ascending (not checked here).
    """
    n = int(sorted_values.size)
    if n == 0:
        return -math.inf
    lower = order_statistic_ranks(n, q, 1.0 - 2.0 * a).lower_rank
    return float(sorted_values[lower - 1]) if lower >= 1 else -math.inf


def _quantile(sorted_values: npt.NDArray[np.float64], q: float) -> float:
    if sorted_values.size == 0:
        return math.nan
    return float(np.quantile(sorted_values, q, method="linear"))


def _json(obj: object) -> dict[str, object]:
    return {
        key: None if isinstance(value, float) and not math.isfinite(value) else value
        for key, value in asdict(obj).items()  # type: ignore[call-overload]
    }


@dataclass(frozen=True, slots=True)
class QuantileRatioResult:
    """Result of :func:`quantile_ratio_interval` (two independent arms; not the paired
    :class:`shadoweval.stats.quantiles.QuantileRatioResult`).

    Attributes:
        estimate: sample q-quantile ratio candidate / baseline (linear interpolation;
            NaN when an arm is empty or the baseline's quantile is 0).
        high: one-sided ``1 − alpha`` upper bound on the population ratio
            (``inf`` when not ``enough``).
        candidate_quantile, baseline_quantile: the sample q-quantiles, ms.
        candidate_upper_ms: the candidate's ``1 − alpha/2`` upper order-statistic bound.
        baseline_lower_ms: the baseline's ``1 − alpha/2`` lower order-statistic bound.
        n_candidate, n_baseline: values per arm.
        q: the quantile level.
        alpha: the one-sided level of ``high``.
        enough: both bounds exist (each arm has enough values at ``alpha/2``, and the
            baseline's lower bound is > 0).
    """

    estimate: float
    high: float
    candidate_quantile: float
    baseline_quantile: float
    candidate_upper_ms: float
    baseline_lower_ms: float
    n_candidate: int
    n_baseline: int
    q: float
    alpha: float
    enough: bool

    def below(self, margin: float) -> bool:
        """The promote check: ``enough`` and the upper bound is below ``margin``."""
        return self.enough and self.high < margin

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (NaN/inf → ``None``)."""
        return _json(self)


def quantile_ratio_interval(
    candidate_ms: npt.ArrayLike, baseline_ms: npt.ArrayLike, q: float, alpha: float
) -> QuantileRatioResult:
    """Upper confidence bound on ``ξ_q(candidate) / ξ_q(baseline)`` from two independent arms.

    ``high = U_c / L_b`` with ``U_c`` the candidate's one-sided ``1 − alpha/2``
    distribution-free upper order-statistic bound on its q-quantile and ``L_b`` the
    baseline's ``1 − alpha/2`` lower bound (Hahn & Meeker 1991, §5.2; ranks from
    :func:`shadoweval.stats.quantiles.order_statistic_ranks`). By Bonferroni,
    ``P(ξ_c ≤ U_c and ξ_b ≥ L_b) ≥ 1 − alpha``, and on that event
    ``ξ_c / ξ_b ≤ U_c / L_b``: ``high`` is a one-sided ``1 − alpha`` upper bound on the
    ratio, for any latency distributions (conservative; tests/stats/reference checks the
    ranks by exact binomial sums and the coverage by a seeded simulation).

    Args:
        candidate_ms: the candidate's latencies, ms, shape ``(n_c,)``, finite and ≥ 0.
        baseline_ms: the baseline's latencies, ms, shape ``(n_b,)``.
        q: quantile level in (0, 1), e.g. 0.95.
        alpha: one-sided level in (0, 0.5).

    Returns:
        The result; ``enough = False`` (neither pass nor fail) when an arm has too few
        values for its bound (e.g. q = 0.95 at alpha/2 = 0.025 needs n_c ≥ 72) or the
        baseline's lower bound is 0.

    Raises:
        InvalidDataError: a value NaN, infinite or negative, q or alpha out of range.
    """
    q = _check_q(q)
    alpha = check_alpha(alpha, upper=0.5)
    cand = _finite_nonnegative(candidate_ms, "candidate_ms")
    base = _finite_nonnegative(baseline_ms, "baseline_ms")
    upper_c = upper_quantile_bound(cand, q, alpha / 2.0)
    lower_b = lower_quantile_bound(base, q, alpha / 2.0)
    enough = math.isfinite(upper_c) and math.isfinite(lower_b) and lower_b > 0.0
    qc, qb = _quantile(cand, q), _quantile(base, q)
    estimate = qc / qb if math.isfinite(qc) and math.isfinite(qb) and qb > 0.0 else math.nan
    return QuantileRatioResult(
        estimate=estimate,
        high=upper_c / lower_b if enough else math.inf,
        candidate_quantile=qc,
        baseline_quantile=qb,
        candidate_upper_ms=upper_c,
        baseline_lower_ms=lower_b,
        n_candidate=int(cand.size),
        n_baseline=int(base.size),
        q=q,
        alpha=alpha,
        enough=enough,
    )


@dataclass(frozen=True, slots=True)
class QuantileLimitResult:
    """Result of :func:`quantile_above_limit`.

    Attributes:
        estimate: the candidate's sample q-quantile, ms (NaN when empty).
        low: its one-sided ``1 − alpha`` lower order-statistic bound, ms
            (``-inf`` when not ``enough``).
        limit_ms: the absolute limit, ms.
        n: values.
        q: quantile level.
        alpha: one-sided level.
        enough: the lower bound exists (n large enough at this alpha).
        above: ``enough`` and ``low > limit_ms`` — the quantile is confidently above the
            limit (a rollback breach).
    """

    estimate: float
    low: float
    limit_ms: float
    n: int
    q: float
    alpha: float
    enough: bool
    above: bool

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (NaN/inf → ``None``)."""
        return _json(self)


def quantile_above_limit(
    candidate_ms: npt.ArrayLike, q: float, limit_ms: float, alpha: float
) -> QuantileLimitResult:
    """Is the candidate's q-quantile confidently above an absolute limit? (rollback check)

    H0: ``ξ_q ≤ limit_ms``; reject (``above``) when the one-sided ``1 − alpha``
    distribution-free lower bound ``x_(l)``, ``l = F⁻¹(alpha)`` of ``Binomial(n, q)``
    (Hahn & Meeker 1991, §5.2), exceeds the limit. Under H0,
    ``P(x_(l) > limit) ≤ P(x_(l) > ξ_q) ≤ alpha``.

    Args:
        candidate_ms: latencies, ms, shape ``(n,)``, finite and ≥ 0.
        q: quantile level in (0, 1), e.g. 0.99.
        limit_ms: the limit, ms, > 0.
        alpha: one-sided level in (0, 0.5).

    Returns:
        The result; ``enough = False`` when ``l = 0``, i.e. ``(1 − q)^n ≥ alpha`` (too few
        values: q = 0.5 at alpha = 0.025 needs n ≥ 6; q = 0.99 at 0.05 needs n ≥ 1 — a
        lower bound on a high quantile is cheap, an upper bound is not).

    Raises:
        InvalidDataError: a value NaN, infinite or negative, q, limit_ms or alpha out of
            range.
    """
    q = _check_q(q)
    alpha = check_alpha(alpha, upper=0.5)
    if (
        isinstance(limit_ms, bool)
        or not isinstance(limit_ms, int | float)
        or not math.isfinite(limit_ms)
        or limit_ms <= 0
    ):
        raise InvalidDataError(f"limit_ms must be a finite number > 0, got {limit_ms!r}")
    values = _finite_nonnegative(candidate_ms, "candidate_ms")
    low = lower_quantile_bound(values, q, alpha)
    enough = math.isfinite(low)
    return QuantileLimitResult(
        estimate=_quantile(values, q),
        low=low,
        limit_ms=float(limit_ms),
        n=int(values.size),
        q=q,
        alpha=alpha,
        enough=enough,
        above=enough and low > limit_ms,
    )
