"""Latency quantiles: point estimates, order-statistic intervals, quantile-ratio intervals.

Latency is gated on quantile ratios (candidate / baseline), not on a location test:
Mann–Whitney tests P(X < Y) and barely moves when a tail gets 10× slower
(gate-statistics.md §1.5, pitfall 6).

* :func:`sample_quantile` — linear-interpolation quantile, numpy's default (``method=
  "linear"``, Hyndman & Fan type 7). The llmperf leaderboard summaries reproduce it.
* :func:`order_statistic_ranks` / :func:`quantile_ci` — distribution-free interval for
  one quantile from binomial order-statistic ranks (T19).
* :func:`quantile_ratio_ci` — the resampling-free Poisson bootstrap of Schultzberg &
  Ankargren, "Resampling-free bootstrap inference for quantiles", arXiv 2202.10992 (2022):
  under the Poisson bootstrap the q-quantile of a replicate is, to a close approximation,
  the order statistic ``x_(I)`` with ``I ~ Binomial(n + 1, q)`` (1-based). Each arm is
  sorted once and a replicate is one binomial draw per arm, O(n log n + B). The arms are
  resampled independently (unpaired), which ignores the positive correlation of paired
  latencies and so is conservative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from stats.inputs import InvalidDataError, finite_1d

__all__ = [
    "OrderStatisticRanks",
    "QuantileCI",
    "QuantileRatioResult",
    "order_statistic_ranks",
    "quantile_ci",
    "quantile_ratio_ci",
    "sample_quantile",
]


def _check_q(q: float) -> float:
    if not 0.0 <= q <= 1.0 or math.isnan(q):
        raise InvalidDataError(f"quantile level q must be in [0, 1], got {q}")
    return float(q)


def _check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0 or math.isnan(confidence):
        raise InvalidDataError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def sample_quantile(values: npt.ArrayLike, q: float) -> float:
    """Return the q-quantile of ``values`` by linear interpolation (numpy's default).

    Args:
        values: observations, shape ``(n,)``, n ≥ 1, all finite (any unit).
        q: quantile level in [0, 1] (0.5 = p50, 0.95 = p95).

    Raises:
        InvalidDataError: a value is NaN/infinite, or q is outside [0, 1].
        InsufficientDataError: no values.
    """
    x = finite_1d(values, "values")
    return float(np.quantile(x, _check_q(q), method="linear"))


@dataclass(frozen=True)
class OrderStatisticRanks:
    """1-based ranks of a distribution-free confidence interval for one quantile.

    Attributes:
        lower_rank: rank l of the lower limit ``x_(l)``; 0 means the interval is
            unbounded below.
        upper_rank: rank u of the upper limit ``x_(u)``; ``n + 1`` means unbounded above.
        coverage: the exact coverage ``P(l ≤ B ≤ u − 1)``, ``B ~ Binomial(n, q)``.
        n: sample size.
        q: quantile level.
        confidence: the requested two-sided level.
    """

    lower_rank: int
    upper_rank: int
    coverage: float
    n: int
    q: float
    confidence: float


def order_statistic_ranks(n: int, q: float, confidence: float = 0.95) -> OrderStatisticRanks:
    """Ranks ``l = F⁻¹(α/2)`` and ``u = F⁻¹(1 − α/2) + 1`` of ``Binomial(n, q)``.

    The interval ``[x_(l), x_(u)]`` covers the population q-quantile with probability
    ``P(l ≤ B ≤ u − 1)`` whatever the (continuous) distribution (gate-statistics.md §1.5;
    e.g. David & Nagaraja, "Order Statistics", §7.1). T19: n = 1000, q = 0.99 gives
    (983, 997) with coverage 0.9761.

    Raises:
        InvalidDataError: n < 1, q outside (0, 1), confidence outside (0, 1).
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidDataError(f"n must be a positive integer, got {n!r}")
    if not 0.0 < q < 1.0:
        raise InvalidDataError(f"q must be in (0, 1), got {q}")
    confidence = _check_confidence(confidence)
    alpha = 1.0 - confidence
    binom = scipy_stats.binom(int(n), q)
    lower = int(binom.ppf(alpha / 2.0))
    upper = int(binom.ppf(1.0 - alpha / 2.0)) + 1
    coverage = float(binom.cdf(upper - 1) - binom.cdf(lower - 1))
    return OrderStatisticRanks(lower, upper, coverage, int(n), float(q), confidence)


@dataclass(frozen=True)
class QuantileCI:
    """A quantile with its distribution-free order-statistic interval.

    Attributes:
        estimate: linear-interpolation sample quantile.
        low: ``x_(lower_rank)``, or ``-inf`` when the rank is 0.
        high: ``x_(upper_rank)``, or ``+inf`` when the rank is n + 1.
        ranks: the ranks and exact coverage.
    """

    estimate: float
    low: float
    high: float
    ranks: OrderStatisticRanks


def quantile_ci(values: npt.ArrayLike, q: float, confidence: float = 0.95) -> QuantileCI:
    """Return the q-quantile of ``values`` and its order-statistic confidence interval.

    Raises:
        InvalidDataError: a value is NaN/infinite, or q / confidence out of range.
        InsufficientDataError: no values.
    """
    x = np.sort(finite_1d(values, "values"))
    ranks = order_statistic_ranks(int(x.size), q, confidence)
    low = float(x[ranks.lower_rank - 1]) if ranks.lower_rank >= 1 else -math.inf
    high = float(x[ranks.upper_rank - 1]) if ranks.upper_rank <= x.size else math.inf
    estimate = float(np.quantile(x, q, method="linear"))
    return QuantileCI(estimate, low, high, ranks)


@dataclass(frozen=True)
class QuantileRatioResult:
    """Result of :func:`quantile_ratio_ci`.

    Attributes:
        estimate: ``Q_cand(q) / Q_base(q)`` from linear-interpolation sample quantiles.
        ci_low: lower limit of the two-sided percentile bootstrap interval.
        ci_high: upper limit of the interval.
        candidate_quantile: the candidate's sample q-quantile (input unit).
        baseline_quantile: the baseline's sample q-quantile (input unit).
        n_candidate: candidate sample size.
        n_baseline: baseline sample size.
        q: quantile level.
        confidence: two-sided confidence level.
        replicates: bootstrap replicates drawn.
    """

    estimate: float
    ci_low: float
    ci_high: float
    candidate_quantile: float
    baseline_quantile: float
    n_candidate: int
    n_baseline: int
    q: float
    confidence: float
    replicates: int


def _poisson_bootstrap_quantiles(
    sorted_values: npt.NDArray[np.float64], q: float, replicates: int, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Replicate q-quantiles: ``x_(I)``, ``I ~ Binomial(n + 1, q)`` clipped to [1, n]."""
    n = sorted_values.size
    ranks = rng.binomial(n + 1, q, size=replicates)
    index = np.clip(ranks, 1, n) - 1
    return sorted_values[index]


def quantile_ratio_ci(
    candidate: npt.ArrayLike,
    baseline: npt.ArrayLike,
    q: float,
    *,
    confidence: float = 0.95,
    replicates: int = 2000,
    rng: np.random.Generator | int | None = None,
) -> QuantileRatioResult:
    """Quantile ratio candidate / baseline with a resampling-free Poisson-bootstrap interval.

    Each arm is sorted once; replicate ``r`` draws ``I_r ~ Bin(n_c + 1, q)`` and
    ``J_r ~ Bin(n_b + 1, q)`` and takes ``x_(I_r) / y_(J_r)`` (1-based order statistics,
    ranks clipped to [1, n]). The interval is the (α/2, 1 − α/2) percentile interval of
    the replicate ratios, α = 1 − confidence (Schultzberg & Ankargren 2022). The arms are
    treated as independent, which is conservative for positively correlated pairs.

    Args:
        candidate: candidate values, shape ``(n_c,)``, all finite and > 0 (e.g. ms).
        baseline: baseline values, shape ``(n_b,)``, all finite and > 0, same unit.
        q: quantile level in (0, 1).
        confidence: two-sided level in (0, 1).
        replicates: number of bootstrap replicates, ≥ 1.
        rng: a numpy Generator, or a seed for :func:`numpy.random.default_rng`. Pass a
            fixed seed for a reproducible interval.

    Raises:
        InvalidDataError: a value is NaN, infinite or ≤ 0; q, confidence or replicates
            out of range.
        InsufficientDataError: an arm is empty.
    """
    q = _check_q(q)
    if not 0.0 < q < 1.0:
        raise InvalidDataError(f"q must be in (0, 1) for a ratio interval, got {q}")
    confidence = _check_confidence(confidence)
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise InvalidDataError(f"replicates must be a positive integer, got {replicates!r}")
    cand = np.sort(finite_1d(candidate, "candidate", positive=True))
    base = np.sort(finite_1d(baseline, "baseline", positive=True))
    generator = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    cand_q = float(np.quantile(cand, q, method="linear"))
    base_q = float(np.quantile(base, q, method="linear"))
    ratios = _poisson_bootstrap_quantiles(
        cand, q, replicates, generator
    ) / _poisson_bootstrap_quantiles(base, q, replicates, generator)
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2.0, 1.0 - alpha / 2.0], method="linear")
    return QuantileRatioResult(
        estimate=cand_q / base_q,
        ci_low=float(low),
        ci_high=float(high),
        candidate_quantile=cand_q,
        baseline_quantile=base_q,
        n_candidate=int(cand.size),
        n_baseline=int(base.size),
        q=q,
        confidence=confidence,
        replicates=replicates,
    )
