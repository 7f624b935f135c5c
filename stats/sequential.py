"""Sequential validity: statistics that stay valid when the verdict is polled repeatedly.

A CI job polls the gate many times while traffic accumulates. A fixed-n test read at
every poll rejects far more often than its nominal level (peeking: 5 looks at a nominal
two-sided 0.05 give a false-positive rate of 0.1417, gate-statistics.md pitfall 1 and
T15). This module provides the pieces that keep repeated looks valid
(gate-statistics.md §1.3 and §2.4):

* :func:`checkpoint_schedule` / :func:`latest_checkpoint` — geometric checkpoints
  200, 400, 800, … so a poll evaluates the first ``n_k`` pairs at the latest checkpoint
  ``n_k ≤ n``: deterministic, cacheable, and the number of looks grows only
  logarithmically with n.
* :func:`confidence_sequence` — the asymptotic confidence sequence for a mean
  (Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, "Time-uniform central limit theory and
  asymptotic confidence sequences", arXiv 2103.06476, eq. 9 / Howard et al.'s
  normal-mixture boundary), as shipped by GrowthBook and Eppo. Valid at every n at once.
* :func:`lan_demets_spent` / :func:`look_alpha` — union-bound α spending for statistics
  that have no confidence sequence (quantile ratios, exact tests): look k is tested at
  ``α_k`` with ``Σ_k α_k ≤ α``, valid under any dependence between looks.
* :func:`sequential_mcnemar` — the Beta(1,1)-mixture always-valid test on discordant
  pairs (critical-harm rollback, T22).

The exact group-sequential (GST) boundaries for a known n_max (T15), against which the
union-bound levels are checked, are a test reference
(tests/stats/reference/group_sequential.py).

Every always-valid p-value here is ``min(1, 1/E)`` for a nonnegative (super)martingale
``E`` with ``E_0 = 1`` under H0, so by Ville's inequality ``P(∃n: p_n ≤ α) ≤ α``: the
p-value read at any poll, or the running minimum over polls, is valid.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import optimize, special
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from shadoweval.stats.inputs import InvalidDataError, check_alpha, count, finite_1d, positive_int

__all__ = [
    "ConfidenceSequenceResult",
    "CsSide",
    "SequentialMcNemarResult",
    "SpendingKind",
    "checkpoint_schedule",
    "confidence_sequence",
    "cs_half_width",
    "lan_demets_spent",
    "latest_checkpoint",
    "look_alpha",
    "sequential_mcnemar",
]

CsSide = Literal["two-sided", "upper", "lower"]
"""``upper``: only an upper bound (``low = -inf``); ``lower``: only a lower bound."""

SpendingKind = Literal["obf", "pocock"]
"""Lan–DeMets spending function: O'Brien–Fleming type or Pocock type."""


# ------------------------------------------------------------------ checkpoints


def _geometric(first: int, factor: float) -> Iterator[int]:
    """Yield ``n_k = ⌈first·factor^(k−1)⌉`` (k ≥ 1), strictly increasing."""
    previous = 0
    for k in itertools.count():
        value = first * factor**k
        nearest = round(value)
        n = nearest if abs(value - nearest) <= 1e-9 * value else math.ceil(value)
        n = max(n, previous + 1)
        yield n
        previous = n


def _check_schedule_args(first: int, factor: float, n_max: int | None) -> tuple[int, float]:
    first = positive_int(first, "first")
    if isinstance(factor, bool) or not math.isfinite(factor) or factor <= 1.0:
        raise InvalidDataError(f"factor must be a finite number > 1, got {factor!r}")
    if n_max is not None:
        n_max = positive_int(n_max, "n_max")
        if n_max < first:
            raise InvalidDataError(f"n_max = {n_max} is below the first checkpoint {first}")
    return first, float(factor)


def checkpoint_schedule(
    first: int = 200, factor: float = 2.0, n_max: int | None = None, limit: int = 64
) -> tuple[int, ...]:
    """Geometric checkpoints ``first, ⌈first·factor⌉, ⌈first·factor²⌉, …`` (pair counts).

    A poll with n pairs evaluates the first ``n_k`` pairs (capture order) at the latest
    checkpoint ``n_k ≤ n`` (gate-statistics.md §2.1), so polls are deterministic and the
    number of looks — which every union-bound correction pays for — grows like
    ``log(n)/log(factor)``.

    Args:
        first: the first checkpoint, ≥ 1 (default 200 pairs).
        factor: growth factor between checkpoints, > 1 (values are rounded up to
            integers and kept strictly increasing).
        n_max: the planned maximum; when given, every checkpoint below it is kept and
            ``n_max`` itself is the last one.
        limit: the most checkpoints returned; without ``n_max`` the first ``limit``.

    Returns:
        The checkpoints, strictly increasing, shape ``(K,)`` with ``1 ≤ K ≤ limit``.

    Raises:
        InvalidDataError: ``first``/``limit``/``n_max`` not a positive integer,
            ``n_max < first``, ``factor ≤ 1``, or ``n_max`` needs more than ``limit``
            checkpoints.
    """
    first, factor = _check_schedule_args(first, factor, n_max)
    limit = positive_int(limit, "limit")
    if n_max is None:
        return tuple(itertools.islice(_geometric(first, factor), limit))
    out: list[int] = []
    for n in _geometric(first, factor):
        if n >= n_max:
            break
        out.append(n)
        if len(out) >= limit:
            raise InvalidDataError(
                f"n_max = {n_max} needs more than limit = {limit} checkpoints "
                f"(first = {first}, factor = {factor:g})"
            )
    out.append(n_max)
    return tuple(out)


def latest_checkpoint(
    n: int,
    *,
    first: int = 200,
    factor: float = 2.0,
    n_max: int | None = None,
    limit: int = 64,
) -> tuple[int, int] | None:
    """The latest checkpoint at or below ``n`` pairs, as ``(look k ≥ 1, n_k)``.

    Checkpoints are those of :func:`checkpoint_schedule` with the same arguments; with
    ``n_max`` given, any ``n ≥ n_max`` maps to the last look ``(K, n_max)``. Without
    ``n_max`` the schedule is unbounded (``limit`` is not applied).

    Returns:
        ``None`` when ``n < first`` (no look yet).

    Raises:
        InvalidDataError: ``n`` negative or not an integer, or invalid schedule arguments.
    """
    n = count(n, "n")
    first, factor = _check_schedule_args(first, factor, n_max)
    if n < first:
        return None
    if n_max is not None:
        schedule = checkpoint_schedule(first, factor, n_max, limit)
        k = int(np.searchsorted(schedule, n, side="right"))
        return k, schedule[k - 1]
    latest = (1, first)
    for k, n_k in enumerate(_geometric(first, factor), start=1):
        if n_k > n:
            break
        latest = (k, n_k)
    return latest


# ------------------------------------------------------------------ confidence sequence


@dataclass(frozen=True)
class ConfidenceSequenceResult:
    """Result of :func:`confidence_sequence`, on the values' own scale.

    Attributes:
        mean: the sample mean x̄ of the n values.
        low: lower bound (``-inf`` for ``side="upper"``).
        high: upper bound (``+inf`` for ``side="lower"``).
        n: number of values.
        alpha: the miscoverage allowed over *all* n at once (all on one side when sided).
        method: ``"asymptotic-cs"``.
        sd: the standard deviation used, ``max(sample sd (ddof=1), sd_floor)``.
        side: ``two-sided``, ``upper`` or ``lower``.
        n_star: the n at which the boundary was tuned to be tightest.
        null: the value the p-value tests.
        p_value: always-valid p-value of H0: mean = null (two-sided), mean ≥ null
            (``upper``) or mean ≤ null (``lower``); ``p_value ≤ alpha`` exactly when
            ``null`` lies outside the sequence's bound(s).
        degenerate: true when the values had no variance and no ``sd_floor`` was given
            (the bounds collapse onto the mean).
    """

    mean: float
    low: float
    high: float
    n: int
    alpha: float
    method: str
    sd: float = math.nan
    side: CsSide = "two-sided"
    n_star: int = 0
    null: float = 0.0
    p_value: float = 1.0
    degenerate: bool = False


def _rho_squared(alpha: float, n_star: int) -> float:
    """Mixture precision ρ² minimising the two-sided boundary at n = n_star (WS eq. 9)."""
    log_alpha = math.log(alpha)
    return (-2.0 * log_alpha + math.log(1.0 - 2.0 * log_alpha)) / n_star


def _log_mixture_one_sided(x: float, ratio: float) -> float:
    """log of the one-sided normal mixture at ``x = S/√(V+ρ_H)``, ``ratio = (V+ρ_H)/ρ_H``.

    ``M = 2·√(ρ_H/(V+ρ_H))·exp(S²/(2(V+ρ_H)))·Φ(S/√(V+ρ_H))`` (Howard et al. 2021,
    arXiv 1810.08240, §3.4, "one-sided normal mixture").
    """
    return math.log(2.0) - 0.5 * math.log(ratio) + 0.5 * x * x + float(special.log_ndtr(x))


def _radius(n: int, rho2: float, alpha: float, side: CsSide) -> float:
    """Boundary on the standardised sum S = Σ(x_i − μ)/σ at V = n (crossing prob α)."""
    ratio = n * rho2 + 1.0  # (V + ρ_H)/ρ_H with ρ_H = 1/ρ²
    scale = math.sqrt(ratio / rho2)  # √(V + ρ_H)
    x_two = math.sqrt(2.0 * math.log(1.0 / alpha) + math.log(ratio))
    if side == "two-sided":
        return scale * x_two
    target = math.log(1.0 / alpha)
    x_one = optimize.brentq(
        lambda x: _log_mixture_one_sided(x, ratio) - target, 0.0, x_two, xtol=1e-12
    )
    return scale * float(x_one)


def confidence_sequence(
    values: npt.ArrayLike,
    *,
    alpha: float,
    n_star: int,
    side: CsSide = "two-sided",
    null: float = 0.0,
    sd_floor: float = 0.0,
) -> ConfidenceSequenceResult:
    """Asymptotic confidence sequence for the mean of i.i.d. values, valid at every n.

    Two-sided (Waudby-Smith et al. 2021, arXiv 2103.06476, eq. 9; GrowthBook's
    ``gbstats``, Eppo with Howard et al. eq. 14)::

        x̄ ± s·√( 2(nρ²+1)/(n²ρ²) · ln(√(nρ²+1)/α) ),
        ρ² = (−2 ln α + ln(1 − 2 ln α)) / n_star,

    ``s`` the sample standard deviation. This is Howard et al.'s two-sided
    normal-mixture boundary (mixing precision ρ_H = 1/ρ²) applied to the standardised
    sum ``S_n = Σ(x_i − μ)/s``; ρ is chosen so the bound is tightest at ``n = n_star``
    (about 1.55× the fixed-n interval there, ≈ 1.7× at n_star/5 or 20·n_star).
    ``P(∃n: μ ∉ CS_n) ≤ α`` asymptotically (the CLT at the rate of the strong
    approximation), so the sequence can be read at every poll.

    One-sided (``upper``/``lower``): all of α on one side, using Howard et al.'s
    *one-sided* normal mixture ``M = 2√(ρ_H/(V+ρ_H))·exp(S²/(2(V+ρ_H)))·Φ(S/√(V+ρ_H))``
    (arXiv 1810.08240, §3.4) with the boundary solved exactly (``brentq``) from
    ``M = 1/α``; ρ is tuned as for the two-sided boundary at level 2α, which the
    one-sided boundary approaches. ``upper`` gives ``(−inf, high]`` (non-inferiority
    when ``high < margin``), ``lower`` gives ``[low, +inf)``.

    The p-value is ``min(1, 1/M_n(null))`` for the same mixture, so ``p ≤ α`` exactly
    when ``null`` is outside the bound(s). (gate-statistics.md §1.3 writes the
    e-value with ``S = estimate/SE``; it inverts to the interval above only with the
    sum-scale ``S = n(x̄ − null)/s = √n·estimate/SE``, which is what is used here.)

    Zero variance: binary differences with no discordant pair have ``s = 0`` and the
    sequence collapses onto the mean; pass ``sd_floor`` (e.g. ``√ψ`` for a planned
    discordance ψ) or use :func:`sequential_mcnemar` / Tango's test for such data.

    Args:
        values: observations, shape ``(n,)``, n ≥ 2, finite (any unit).
        alpha: total miscoverage over all n, in (0, 0.5).
        n_star: the n where the bound is tightest (the planned n per stratum), ≥ 1.
        side: ``two-sided``, ``upper`` or ``lower``.
        null: the value tested by ``p_value``.
        sd_floor: lower limit on the standard deviation used, ≥ 0.

    Warns:
        DegenerateDataWarning: the values have no variance and ``sd_floor`` is 0.

    Raises:
        InvalidDataError: a value is NaN/infinite, alpha outside (0, 0.5), n_star not a
            positive integer, unknown side, ``null`` not finite, ``sd_floor`` < 0.
        InsufficientDataError: fewer than 2 values.
    """
    alpha, n_star = _check_cs_args(alpha, n_star, side, null, sd_floor)
    x = finite_1d(values, "values", min_size=2)
    n = int(x.size)
    mean = float(np.mean(x))
    sd = max(float(np.std(x, ddof=1)), float(sd_floor))
    rho2 = _rho_squared(alpha if side == "two-sided" else 2.0 * alpha, n_star)

    def result(low: float, high: float, sd: float, p: float) -> ConfidenceSequenceResult:
        return ConfidenceSequenceResult(
            mean, low, high, n, alpha, "asymptotic-cs", sd, side, n_star, float(null), p, sd == 0
        )

    if sd == 0.0:
        warnings.warn(
            f"all {n} values equal {mean:.6g} (no variance); the confidence sequence "
            "collapses onto the mean",
            DegenerateDataWarning,
            stacklevel=2,
        )
        if side == "two-sided":
            p = 1.0 if mean == null else 0.0
        elif side == "upper":
            p = 0.0 if mean < null else 1.0
        else:
            p = 0.0 if mean > null else 1.0
        low = -math.inf if side == "upper" else mean
        high = math.inf if side == "lower" else mean
        return result(low, high, 0.0, p)
    half = cs_half_width(n, sd, alpha=alpha, n_star=n_star, side=side)
    low = -math.inf if side == "upper" else mean - half
    high = math.inf if side == "lower" else mean + half
    return result(low, high, sd, _cs_p_value(n, n * (mean - null) / sd, rho2, side))


def cs_half_width(n: int, sd: float, *, alpha: float, n_star: int, side: CsSide) -> float:
    """Half-width of :func:`confidence_sequence` at ``n`` values of standard deviation
    ``sd`` (the same unit as ``sd``): ``sd·r(n)/n``, ``r`` the mixture boundary on the
    standardised sum. It is what the sequence adds to the mean, so the pairs a check needs
    before its bound clears a margin are found on it (:func:`shadoweval.stats.checks.
    sequential_interval.pairs_to_clear`), not on a second formula.
    """
    rho2 = _rho_squared(alpha if side == "two-sided" else 2.0 * alpha, n_star)
    return sd * _radius(n, rho2, alpha, side) / n


def _check_cs_args(
    alpha: float, n_star: int, side: CsSide, null: float, sd_floor: float
) -> tuple[float, int]:
    """:func:`confidence_sequence`'s checked ``alpha`` and ``n_star``.

    Raises:
        InvalidDataError: as :func:`confidence_sequence` says (but for the values).
    """
    alpha = check_alpha(alpha, upper=0.5)
    n_star = positive_int(n_star, "n_star")
    if side not in ("two-sided", "upper", "lower"):
        raise InvalidDataError(f"unknown side {side!r}", name="side")
    if not math.isfinite(null):
        raise InvalidDataError(f"null must be finite, got {null}", name="null")
    if not (math.isfinite(sd_floor) and sd_floor >= 0.0):
        raise InvalidDataError(f"sd_floor must be finite and >= 0, got {sd_floor}")
    return alpha, n_star


def _cs_p_value(n: int, s_sum: float, rho2: float, side: CsSide) -> float:
    """``min(1, 1/M_n(null))`` of :func:`confidence_sequence`'s mixture at ``V = n``, from
    the sum-scale statistic ``s_sum = n(x̄ − null)/s``."""
    ratio = n * rho2 + 1.0
    if side == "two-sided":
        log_e = rho2 * s_sum * s_sum / (2.0 * ratio) - 0.5 * math.log(ratio)
    else:
        signed = -s_sum if side == "upper" else s_sum
        log_e = _log_mixture_one_sided(signed / math.sqrt(ratio / rho2), ratio)
    return math.exp(-log_e) if log_e > 0.0 else 1.0


# ------------------------------------------------------------------ alpha spending


def lan_demets_spent(t: float, alpha: float, kind: SpendingKind = "obf") -> float:
    """α spent by information fraction ``t`` under a Lan–DeMets spending function.

    * ``obf`` (O'Brien–Fleming type): ``α(t) = 2 − 2Φ(z_{1−α/2}/√t)``;
    * ``pocock`` (Pocock type): ``α(t) = α·ln(1 + (e − 1)·t)``.

    Both are 0 at t = 0 and α at t = 1; ``t > 1`` (a look past the planned n_max) is
    clipped to 1, so it spends nothing more. Source: Lan & DeMets, "Discrete sequential
    boundaries for clinical trials", Biometrika 70:659–663 (1983); gsDesign ``sfLDOF``,
    ``sfLDPocock``.

    Raises:
        InvalidDataError: t negative or not finite, alpha outside (0, 1), unknown kind.
    """
    alpha = check_alpha(alpha)
    if not (math.isfinite(t) and t >= 0.0):
        raise InvalidDataError(f"information fraction t must be finite and >= 0, got {t}")
    t = min(float(t), 1.0)
    if t == 0.0:
        return 0.0
    if kind == "obf":
        z = float(scipy_stats.norm.isf(alpha / 2.0))
        return float(2.0 * scipy_stats.norm.sf(z / math.sqrt(t)))
    if kind == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise InvalidDataError(f"unknown spending function {kind!r}", name="kind")


def _check_schedule(schedule: Sequence[int]) -> tuple[int, ...]:
    out = tuple(positive_int(n, "schedule checkpoint") for n in schedule)
    if not out:
        raise InvalidDataError("schedule is empty", name="schedule")
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise InvalidDataError(f"schedule must be strictly increasing, got {out}")
    return out


def look_alpha(
    look: int,
    schedule: Sequence[int],
    *,
    alpha: float,
    n_max: int | None,
    kind: SpendingKind = "obf",
) -> float:
    """The level at which look ``look`` (1-based) is tested under union-bound spending.

    * With ``n_max``: ``α_k = α(t_k) − α(t_{k−1})``, ``t_k = n_k / n_max`` (``t_0 = 0``),
      α(·) from :func:`lan_demets_spent`. Σ_k α_k = α(t_K) ≤ α, so by the union bound
      the family of K looks has error ≤ α whatever the correlation between them
      (conservative: correlated looks would allow larger levels, as the exact GST
      boundaries of tests/stats/reference/group_sequential.py show). Looks past
      ``n_max`` get 0.
    * Without ``n_max``: ``α_k = α·6/(π²k²)``, which sums to α over infinitely many
      looks (Σ 1/k² = π²/6), so any number of polls stays valid. Look 1 gets 0.608·α.

    For a one-sided z-test the per-look critical value is ``Φ⁻¹(1 − α_k)``.

    Args:
        look: look number k, 1 ≤ k ≤ len(schedule).
        schedule: the checkpoints n_1 < n_2 < …, e.g. from :func:`checkpoint_schedule`.
        alpha: total level in (0, 1).
        n_max: the planned maximum (the last checkpoint), or ``None``.
        kind: spending function when ``n_max`` is given.

    Raises:
        InvalidDataError: look out of range, schedule not strictly increasing positive
            integers, alpha outside (0, 1), n_max not a positive integer, unknown kind.
    """
    alpha = check_alpha(alpha)
    checkpoints = _check_schedule(schedule)
    look = positive_int(look, "look")
    if look > len(checkpoints):
        raise InvalidDataError(f"look {look} is beyond the {len(checkpoints)} checkpoints")
    if kind not in ("obf", "pocock"):
        raise InvalidDataError(f"unknown spending function {kind!r}", name="kind")
    if n_max is None:
        return alpha * 6.0 / (math.pi**2 * look**2)
    n_max = positive_int(n_max, "n_max")
    t_now = checkpoints[look - 1] / n_max
    t_before = checkpoints[look - 2] / n_max if look > 1 else 0.0
    spent = lan_demets_spent(t_now, alpha, kind) - lan_demets_spent(t_before, alpha, kind)
    return max(spent, 0.0)


# ------------------------------------------------------------------ sequential McNemar


@dataclass(frozen=True)
class SequentialMcNemarResult:
    """Result of :func:`sequential_mcnemar`.

    Attributes:
        bayes_factor: the mixture likelihood ratio against θ = ½ (``inf`` on overflow).
        p_value: always-valid p-value ``min(1, 1/BF)``.
        b: discordant pairs where the baseline is worse (only the baseline fails).
        c: discordant pairs where the candidate is worse (only the candidate fails).
        side: ``two-sided`` or ``greater`` (harm: the candidate worse).
        log_bayes_factor: natural log of the Bayes factor (never overflows; ``-inf``
            for ``greater`` when the mixture's tail underflows, i.e. overwhelming
            evidence that the candidate is better).
    """

    bayes_factor: float
    p_value: float
    b: int
    c: int
    side: Literal["two-sided", "greater"] = "two-sided"
    log_bayes_factor: float = 0.0


def sequential_mcnemar(
    b: int, c: int, *, side: Literal["two-sided", "greater"] = "two-sided"
) -> SequentialMcNemarResult:
    """Always-valid McNemar test on the discordant pairs (Beta-mixture likelihood ratio).

    Among discordant pairs, let θ = P(a discordant pair is candidate-worse); c of the
    ``b + c`` discordant pairs are candidate-worse, and H0 is θ = ½. (Note the naming:
    here **c counts candidate-worse pairs**; :func:`shadoweval.stats.paired_binary.mcnemar` calls
    that count ``b``.)

    * ``two-sided``: mixture over θ ~ Beta(1, 1) = U(0, 1) (gate-statistics.md §2.4, T22)::

        BF = ∫₀¹ θ^c (1−θ)^b dθ / ½^(b+c) = 2^(b+c)·B(1+b, 1+c) / B(1, 1).

    * ``greater`` (harm): mixture over θ ~ U(½, 1] (density 2 on (½, 1])::

        BF = 2·∫_½¹ θ^c (1−θ)^b dθ / ½^(b+c)
           = 2^(b+c+1)·B(1+c, 1+b)·P(Beta(1+c, 1+b) > ½).

      Each θ' > ½ gives a likelihood ratio whose one-step expectation under θ is
      ``2(θθ' + (1−θ)(1−θ')) ≤ 1`` for every θ ≤ ½, so the mixture is a nonnegative
      supermartingale under the composite H0: θ ≤ ½ (candidate no worse).

    By Ville's inequality ``P_H0(∃ look: BF ≥ 1/α) ≤ α``, so ``p = min(1, 1/BF)`` is
    valid at every poll, with any number of polls and no n_max. Computed in log space
    (``lgamma``; the tail ``I_½`` by ``scipy.special.betainc``), fine for b + c up to
    10⁶ and beyond.
    T22: b = 1, c = 7 gives BF = 3.556 (p = 0.2813); b = 0, c = 10 gives BF = 93.09.

    Args:
        b: baseline-worse discordant pairs, ≥ 0.
        c: candidate-worse discordant pairs, ≥ 0.
        side: ``two-sided`` or ``greater``.

    Raises:
        InvalidDataError: a count is negative or not an integer, or an unknown side.
    """
    b = count(b, "b")
    c = count(c, "c")
    m = b + c
    if side not in ("two-sided", "greater"):
        raise InvalidDataError(f"unknown side {side!r}", name="side")
    log_beta = math.lgamma(1 + b) + math.lgamma(1 + c) - math.lgamma(2 + m)
    log_bf = m * math.log(2.0) + log_beta
    if side == "greater":
        # P(Beta(1+c, 1+b) > ½) = I_½(1+b, 1+c); it underflows to 0 only where the
        # evidence points the other way (BF ≪ 1, p = 1 either way).
        tail = float(special.betainc(1 + b, 1 + c, 0.5))
        log_bf = log_bf + math.log(2.0) + math.log(tail) if tail > 0.0 else -math.inf
    bf = math.exp(log_bf) if log_bf < 700.0 else math.inf
    p = 1.0 if log_bf <= 0.0 else math.exp(-log_bf)
    return SequentialMcNemarResult(bf, p, b, c, side, log_bf)
