"""Latency quantiles: point estimates, order-statistic intervals, quantile-ratio intervals.

Latency is gated on quantile ratios (candidate / baseline), not on a location test:
Mann–Whitney tests P(X < Y) and barely moves when a tail gets 10× slower
(gate-statistics.md §1.5, pitfall 6).

* :func:`sample_quantile` — linear-interpolation quantile, numpy's default (``method=
  "linear"``, Hyndman & Fan type 7). The llmperf leaderboard summaries reproduce it.
* :func:`order_statistic_ranks` / :func:`quantile_ci` — distribution-free interval for
  one quantile from binomial order-statistic ranks (T19).
* :func:`paired_quantile_ratios_rf` — what the gate uses: the **resampling-free paired**
  Poisson bootstrap. A pair is one request answered by both arms; under the Poisson
  bootstrap with shared per-request weights each arm's bootstrap quantile is the order
  statistic ``x_(I)``, ``I ~ Binomial(n + 1, q)`` (Schultzberg & Ankargren,
  "Resampling-free bootstrap inference for quantiles", arXiv 2202.10992, 2022), whose
  variance on the log scale is computed exactly from the binomial weights — no
  replicates, no seed — and the two arms' log quantiles are correlated as the pairs'
  quantile indicators ``1{c_i ≤ Q_c}`` and ``1{b_i ≤ Q_b}`` are (the Bahadur
  representation of the shared-weight bootstrap). The request-to-request variation (a
  long prompt is slow on both sides) cancels in the ratio. The interval is normal on the
  log ratio at any level, so it can be read at the small per-look levels of α spending.
  O(n) per quantile (``numpy.partition``), deterministic.

The exact paired bootstrap with replicates, against which this is checked, is a test
reference (tests/stats/reference/paired_bootstrap.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import FloatArray, InvalidDataError, finite_1d

__all__ = [
    "OrderStatisticRanks",
    "QuantileCI",
    "QuantileRatioResult",
    "newey_west_factor",
    "newey_west_lags",
    "order_statistic_ranks",
    "paired_quantile_ratios_rf",
    "quantile_ci",
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
    """Result of :func:`paired_quantile_ratios_rf` (and of the tests' reference bootstrap).

    Attributes:
        estimate: ``Q_cand(q) / Q_base(q)`` from linear-interpolation sample quantiles.
        ci_low: lower limit of the two-sided interval.
        ci_high: upper limit of the interval.
        candidate_quantile: the candidate's sample q-quantile (input unit).
        baseline_quantile: the baseline's sample q-quantile (input unit).
        n_candidate: candidate sample size.
        n_baseline: baseline sample size.
        q: quantile level.
        confidence: two-sided confidence level.
        replicates: bootstrap replicates drawn (0: resampling-free).
        paired: true for the paired bootstrap (shared per-pair weights).
        se_log: standard error of ``log(estimate)`` (resampling-free method; NaN else).
        correlation: correlation of the two arms' bootstrap log quantiles
            (resampling-free paired method; NaN else).
        serial_lags: lags of the Newey–West widening (0: pairs taken as independent).
        serial_factor: the factor the log ratio's variance was multiplied by for serial
            dependence between consecutive pairs (≥ 1; 1.0 when not widened).
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
    paired: bool = False
    se_log: float = math.nan
    correlation: float = math.nan
    serial_lags: int = 0
    serial_factor: float = 1.0


def _check_ratio_q(q: float) -> float:
    q = _check_q(q)
    if not 0.0 < q < 1.0:
        raise InvalidDataError(f"q must be in (0, 1) for a ratio interval, got {q}")
    return q


_RF_WINDOW_SD = 8.0
"""Half-width of the binomial rank window, in standard deviations (mass outside < 1e-15)."""


def _rf_window(n: int, q: float) -> tuple[int, int]:
    """1-based rank window ``[lo, hi]`` holding the Bin(n + 1, q) ranks and the linear point."""
    mean = (n + 1) * q
    sd = math.sqrt((n + 1) * q * (1.0 - q))
    h = (n - 1) * q  # 0-based position of the linear-interpolation quantile
    lo = max(1, min(math.floor(mean - _RF_WINDOW_SD * sd), math.floor(h) + 1))
    hi = min(n, max(math.ceil(mean + _RF_WINDOW_SD * sd), math.floor(h) + 2))
    return lo, hi


def _rf_weights(n: int, q: float, lo: int, hi: int) -> FloatArray:
    """P(clip(I, 1, n) = i) for ranks ``i = lo..hi``, ``I ~ Binomial(n + 1, q)``."""
    ranks = np.arange(lo, hi + 1)
    weights = np.asarray(scipy_stats.binom.pmf(ranks, n + 1, q), dtype=np.float64)
    if lo == 1:
        weights[0] += float(scipy_stats.binom.pmf(0, n + 1, q))
    if hi == n:
        weights[-1] += float(scipy_stats.binom.pmf(n + 1, n + 1, q))
    normalised: FloatArray = weights / weights.sum()
    return normalised


@dataclass(frozen=True)
class _ArmQuantile:
    """One arm at one q: the linear point quantile and the centred log order statistics
    of the rank window with their Binomial weights."""

    point: float
    centred_logs: FloatArray
    weights: FloatArray

    @property
    def var_log(self) -> float:
        return max(float(self.weights @ self.centred_logs**2), 0.0)


def _arm_quantiles(values: FloatArray, qs: tuple[float, ...]) -> list[_ArmQuantile]:
    n = int(values.size)
    windows = [_rf_window(n, q) for q in qs]
    kth = sorted({k for lo, hi in windows for k in (lo - 1, hi - 1)})
    part = np.partition(values, kth)
    out = []
    for q, (lo, hi) in zip(qs, windows, strict=True):
        window = np.sort(part[lo - 1 : hi])
        logs = np.log(window)
        weights = _rf_weights(n, q, lo, hi)
        centred = logs - float(weights @ logs)
        h = (n - 1) * q
        j = math.floor(h)
        below = float(window[j - (lo - 1)])
        above = float(window[min(j + 1, n - 1) - (lo - 1)])
        out.append(_ArmQuantile(below + (h - j) * (above - below), centred, weights))
    return out


def paired_quantile_ratios_rf(
    candidate: npt.ArrayLike,
    baseline: npt.ArrayLike,
    qs: tuple[float, ...] | list[float],
    *,
    alpha: float | tuple[float, ...] | list[float] = 0.025,
    ordered: bool = False,
) -> list[QuantileRatioResult]:
    """Quantile ratios candidate / baseline on paired data, resampling-free, at several q.

    ``candidate[i]`` and ``baseline[i]`` are the same request on both arms. For each q:

    * **Estimate**: ``Q_c(q) / Q_b(q)`` with linear-interpolation sample quantiles
      (numpy's default).
    * **Each arm's bootstrap variance**: under the Poisson bootstrap an arm's replicate
      q-quantile is the order statistic ``x_(I)``, ``I ~ Binomial(n + 1, q)`` clipped to
      [1, n] (Schultzberg & Ankargren, arXiv 2202.10992), so
      ``V = Var(log x_(I)) = Σ_i P(I = i)·(log x_(i) − m)²`` is computed exactly from the
      order statistics in a window of ±8 binomial standard deviations (the rest carries
      < 1e-15 of the mass): the variance that a Poisson bootstrap of the arm alone
      samples.
    * **Pairing**: with shared per-request weights the replicate quantiles of the two
      arms move together. To first order (Bahadur representation ``Q* − Q ≈ (q −
      F*(Q))/f(Q)``) the correlation of their *ranks* is the correlation ρ, across
      requests, of the indicators ``1{c_i ≤ Q_c}`` and ``1{b_i ≤ Q_b}`` (the share of
      requests below both quantiles against the product of the shares). The joint law
      of the two ranks is taken as the Fréchet mixture with that rank correlation: with
      weight ρ both arms sit at the same rank I (comonotone), with weight 1 − ρ at
      independent ranks. Hence
      ``Var(log ratio) = V_c + V_b − 2ρ·C``, ``C = Σ_i P(I = i)·(log c_(i) − m_c)·
      (log b_(i) − m_b)`` (floored at 0; ρ < 0 counts as 0). For smooth order statistics
      (large n) ``C ≈ √(V_c·V_b)``, the first-order answer; when the arms' order
      statistics wiggle against each other (small n, per-request noise) ``C`` is smaller
      and the rank-to-rank noise of the ratio is kept — the first-order formula alone
      would give a zero-width interval whenever ρ = 1. Identical arms give a zero-width
      interval at exactly 1; independent arms (ρ ≈ 0) the unpaired resampling-free one.
    * **Interval**: ``exp(log estimate ± z_{1−α}·√Var)`` — each side one-sided at level
      α, i.e. a two-sided (1 − 2α) interval. Normal on the log scale, so it can be read
      at the small levels α_k of per-look α spending, where a percentile interval of a
      few thousand replicates cannot reach.
    * **Serial dependence** (``ordered``: the pairs are in the order they were sent):
      pairs in flight together share the host's momentary load, so consecutive pairs'
      log ratios are correlated (an A/A beside CPU burners: lag-1 autocorrelation 0.29,
      lag 2 0.10), which the bootstrap of independent pairs misses. The variance is then
      multiplied by the Newey–West factor (Newey & West, "A simple, positive
      semi-definite, heteroskedasticity and autocorrelation consistent covariance
      matrix", Econometrica 55, 1987) of the ratio's influence series
      ``u_i = √V_c·1{c_i ≤ Q_c} − √V_b·1{b_i ≤ Q_b}`` (Bahadur: each arm's log quantile
      moves by its indicator's mean over its density, and ``√V`` is that scale):
      ``1 + 2·Σ_{l=1..L} (1 − l/(L+1))·r_l`` with Bartlett weights, ``r_l`` the lag-``l``
      autocorrelation of ``u`` and ``L = ⌊4·(n/100)^{2/9}⌋`` lags (Newey & West, Rev.
      Econ. Stud. 61, 1994); floored at 1 (a noisy negative estimate never narrows the
      interval of independent pairs). :func:`newey_west_factor`.

    Checked against the exact paired bootstrap with shared Poisson(1) weights (the
    reference tests/stats/reference/paired_bootstrap.py): the standard errors agree to a
    few percent from n = 200 on (tests/stats/test_stats_quantiles_rf.py). Cost: O(n) per
    q (``numpy.partition``, one pass for the indicators), no random numbers: 1,000,000
    pairs at three quantiles take about 0.1 s.

    Args:
        candidate: candidate values, shape ``(n,)``, all finite and > 0 (e.g. ms).
        baseline: baseline values of the same requests, shape ``(n,)``, finite and > 0.
        qs: quantile levels, each in (0, 1), e.g. ``(0.5, 0.95)``.
        alpha: one-sided level of each interval side, in (0, 0.5): one value for all q
            or one per q.
        ordered: the pairs are in the order they were sent (replay order): widen for
            serial dependence; ``False``: pairs taken as independent.

    Returns:
        One :class:`QuantileRatioResult` per q (``replicates = 0``, ``paired = True``,
        ``confidence = 1 − 2α``, ``se_log`` and ``correlation`` set; ``serial_lags`` and
        ``serial_factor`` when ``ordered``).

    Raises:
        InvalidDataError: a value is NaN, infinite or ≤ 0; the arms differ in length; a
            q or α out of range; the number of α values differs from the number of q.
        InsufficientDataError: no pairs.
    """
    levels = tuple(_check_ratio_q(q) for q in qs)
    alphas = _check_ratio_alphas(alpha, len(levels))
    cand = finite_1d(candidate, "candidate", positive=True)
    base = finite_1d(baseline, "baseline", positive=True)
    if cand.size != base.size:
        raise InvalidDataError(
            f"paired arms differ in length: {cand.size} candidate vs {base.size} baseline values"
        )
    arms_c = _arm_quantiles(cand, levels)
    arms_b = _arm_quantiles(base, levels)
    return [
        _paired_ratio(cand, base, q, a, c, b, ordered=ordered)
        for q, a, c, b in zip(levels, alphas, arms_c, arms_b, strict=True)
    ]


def _check_ratio_alphas(
    alpha: float | tuple[float, ...] | list[float], count: int
) -> tuple[float, ...]:
    """One α per quantile level: ``alpha`` itself when it is one value.

    Raises:
        InvalidDataError: the number of α values differs from ``count``, or an α outside
            (0, 0.5).
    """
    alphas = tuple(alpha) if isinstance(alpha, tuple | list) else (alpha,) * count
    if len(alphas) != count:
        raise InvalidDataError(f"{len(alphas)} alpha values for {count} quantiles")
    for a in alphas:
        if not 0.0 < a < 0.5 or math.isnan(a):
            raise InvalidDataError(f"alpha must be in (0, 0.5), got {a}")
    return alphas


def _below_both_correlation(
    cand: FloatArray, base: FloatArray, c: _ArmQuantile, b: _ArmQuantile
) -> float:
    """ρ across requests of ``1{c_i ≤ Q_c}`` and ``1{b_i ≤ Q_b}``, clipped to [−1, 1]; exactly
    1 when the same requests lie below both quantiles, 0 when an indicator is constant."""
    n = int(cand.size)
    below_c = cand <= c.point
    below_b = base <= b.point
    n_c = int(np.count_nonzero(below_c))
    n_b = int(np.count_nonzero(below_b))
    n_both = int(np.count_nonzero(below_c & below_b))
    spread = float(n_c * (n - n_c)) * float(n_b * (n - n_b))
    if n_both == n_c == n_b:  # the same requests below both quantiles: exactly 1
        return 1.0
    if spread > 0.0:
        return min(1.0, max(-1.0, (n * n_both - n_c * n_b) / math.sqrt(spread)))
    return 0.0


def newey_west_lags(n: int) -> int:
    """Lags of the Newey–West widening for ``n`` ordered pairs: ``⌊4·(n/100)^{2/9}⌋``, the
    Newey & West (1994) rule (4 at 100–272 pairs, 5 from 273), at most ``n − 1``."""
    if n < 2:
        return 0
    return min(n - 1, math.floor(4.0 * math.pow(n / 100.0, 2.0 / 9.0)))


def newey_west_factor(series: npt.ArrayLike, lags: int) -> float:
    """Long-run over plain variance of ``series`` (shape ``(n,)``, in order), with Bartlett
    weights ``1 − l/(lags+1)`` (Newey & West 1987), floored at 1; 1.0 for a constant
    series or ``lags`` 0."""
    u = np.asarray(series, dtype=np.float64)
    u = u - u.mean()
    gamma0 = float(u @ u)
    if lags <= 0 or gamma0 <= 0.0:
        return 1.0
    total = gamma0
    for lag in range(1, min(lags, u.size - 1) + 1):
        total += 2.0 * (1.0 - lag / (lags + 1.0)) * float(u[lag:] @ u[:-lag])
    return max(1.0, total / gamma0)


def _paired_ratio(
    cand: FloatArray,
    base: FloatArray,
    q: float,
    a: float,
    c: _ArmQuantile,
    b: _ArmQuantile,
    *,
    ordered: bool = False,
) -> QuantileRatioResult:
    """The ratio at one ``q`` and one-sided level ``a`` from the arms' quantiles ``c``, ``b``
    (:func:`paired_quantile_ratios_rf`)."""
    n = int(cand.size)
    rho = _below_both_correlation(cand, base, c, b)
    # Fréchet mixture: with weight ρ both arms at the same rank I (comonotone), else
    # independent. ρ·E[(l_c(I) − l_b(I))²] + (1 − ρ)·(V_c + V_b) = V_c + V_b − 2ρ·C,
    # written without cancellation (identical arms give exactly 0).
    weight = max(rho, 0.0)
    same_rank = float(c.weights @ (c.centred_logs - b.centred_logs) ** 2)
    var = weight * same_rank + (1.0 - weight) * (c.var_log + b.var_log)
    lags, factor = 0, 1.0
    if ordered:
        lags = newey_west_lags(n)
        influence = math.sqrt(c.var_log) * (cand <= c.point) - math.sqrt(b.var_log) * (
            base <= b.point
        )
        factor = newey_west_factor(influence, lags)
    se = math.sqrt(max(var * factor, 0.0))
    estimate = c.point / b.point
    z = float(scipy_stats.norm.isf(a))
    return QuantileRatioResult(
        estimate=estimate,
        ci_low=float(estimate * math.exp(-z * se)),
        ci_high=float(estimate * math.exp(z * se)),
        candidate_quantile=c.point,
        baseline_quantile=b.point,
        n_candidate=n,
        n_baseline=n,
        q=q,
        confidence=1.0 - 2.0 * a,
        replicates=0,
        paired=True,
        se_log=se,
        correlation=rho,
        serial_lags=lags,
        serial_factor=factor,
    )
