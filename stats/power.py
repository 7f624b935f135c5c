"""Design sample sizes: how many pairs a non-inferiority check needs before it can PROMOTE.

PROMOTE requires every guardrail to clear its margin (an intersection–union rule, no α
adjustment), so type-II errors add up: with G guardrails each test is powered at
``1 − β/G`` (:func:`guardrail_power`; Spotify's risk-aware rule, Schultzberg et al.
2024, arXiv 2402.11609). A stratum's minimum is ``max(200, design n)``
(:func:`design_min_pairs`; gate-statistics.md §1.7, §2.3).

All sizes are one-sided normal approximations (z quantiles), rounded **up**.
"""

from __future__ import annotations

import math
from typing import Literal

from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError, count

__all__ = [
    "design_min_pairs",
    "guardrail_power",
    "mean_min_pairs",
    "paired_binary_min_pairs",
]


def _z_sum(alpha: float, power: float) -> tuple[float, float]:
    if not 0.0 < alpha < 0.5:
        raise InvalidDataError(f"alpha must be in (0, 0.5), got {alpha}", name="alpha")
    if not 0.5 <= power < 1.0:
        raise InvalidDataError(f"power must be in [0.5, 1), got {power}", name="power")
    return float(scipy_stats.norm.isf(alpha)), float(scipy_stats.norm.ppf(power))


def _finite(value: float, name: str) -> float:
    if isinstance(value, bool) or not math.isfinite(value):
        raise InvalidDataError(f"{name} must be a finite number, got {value!r}", name=name)
    return float(value)


def _round_up(n: float) -> int:
    return max(1, math.ceil(n - 1e-9))


def paired_binary_min_pairs(
    psi: float,
    delta: float,
    margin: float,
    *,
    alpha: float = 0.025,
    power: float = 0.8,
    method: Literal["wald", "score"] = "wald",
) -> int:
    """Pairs needed to show non-inferiority of a paired difference of proportions.

    δ is the candidate's failure rate minus the baseline's (``(n12 − n21)/N`` of
    :mod:`shadoweval.stats.paired_binary`: n12 pairs where only the candidate fails); H0: δ ≥
    ``margin`` against H1: δ < ``margin``, one-sided level α, power at the true δ =
    ``delta``. Discordance ψ = p12 + p21 (pairs where exactly one arm fails); estimate
    it from an A/A replay (baseline against itself).

    * ``wald`` (gate-statistics.md §1.7; the variance of the paired difference is
      ψ − δ², Connor, "Sample size for testing differences in proportions for the
      paired-sample design", Biometrics 43:207–211, 1987)::

          n = (z_{1−α} + z_{power})² · (ψ − δ²) / (margin − δ)²

      α = 0.025, power 0.8, δ = 0, margin 1 pp: 1570 / 3925 / 7849 pairs for
      ψ = 2 / 5 / 10% (the reference rounds to nearest: 1570 / 3924 / 7849).
    * ``score`` (Nam, "Establishing equivalence of two treatments and sample size
      requirements in matched-pairs design", Biometrics 53:1422–1430, 1997; matches
      Tango's score test used by the gate)::

          n = (z_{1−α}·σ0 + z_{power}·σ1)² / (margin − δ)²,
          σ1² = ψ − δ²,  σ0² = 2p̃21 + δ0(1 − δ0) at δ0 = margin,

      p̃21 the restricted MLE of Tango (1998) evaluated at the expected cell
      probabilities p12 = (ψ + δ)/2, p21 = (ψ − δ)/2. Larger than ``wald`` for the
      usual small ψ (1785 for ψ = 2% above).

    Args:
        psi: discordance rate ψ in (0, 1].
        delta: the expected true δ, ``|δ| ≤ ψ`` and ``δ < margin`` (0: no change).
        margin: the non-inferiority margin, in (0, 1) (default policy 0.01).
        alpha: one-sided level in (0, 0.5).
        power: power in [0.5, 1) (use :func:`guardrail_power` for several guardrails).
        method: ``wald`` or ``score``.

    Returns:
        The number of pairs, ≥ 1, rounded up.

    Raises:
        InvalidDataError: an argument out of its range (named in the message).
    """
    psi = _finite(psi, "psi")
    delta = _finite(delta, "delta")
    margin = _finite(margin, "margin")
    z_alpha, z_power = _z_sum(alpha, power)
    if not 0.0 < psi <= 1.0:
        raise InvalidDataError(f"discordance psi must be in (0, 1], got {psi}", name="psi")
    if abs(delta) > psi:
        raise InvalidDataError(f"|delta| = {abs(delta)} exceeds the discordance psi = {psi}")
    if not 0.0 < margin < 1.0:
        raise InvalidDataError(f"margin must be in (0, 1), got {margin}", name="margin")
    if delta >= margin:
        raise InvalidDataError(f"delta = {delta} must be below the margin {margin}")
    sigma1 = math.sqrt(max(psi - delta * delta, 0.0))
    if method == "wald":
        sigma0 = sigma1
    elif method == "score":
        p12, p21 = (psi + delta) / 2.0, (psi - delta) / 2.0
        a = 2.0
        b = -p12 - p21 + (2.0 - p12 + p21) * margin
        c = -p21 * margin * (1.0 - margin)
        p21_restricted = (math.sqrt(max(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
        sigma0 = math.sqrt(2.0 * p21_restricted + margin * (1.0 - margin))
    else:
        raise InvalidDataError(f"unknown sample-size method {method!r}", name="method")
    return _round_up(((z_alpha * sigma0 + z_power * sigma1) / (margin - delta)) ** 2)


def mean_min_pairs(
    sd: float, delta: float, margin: float, *, alpha: float = 0.025, power: float = 0.8
) -> int:
    """Pairs needed to show a mean below ``margin`` (one-sided z approximation).

    For paired values such as the noise-floor differences ``e_i`` or the token
    linearisation ``c_i − k·b_i`` (gate-statistics.md §1.7)::

        n = (z_{1−α} + z_{power})² · sd² / (margin − δ)²

    with δ the expected true mean (H0: mean ≥ margin). E.g. sd = 0.1, δ = 0,
    margin = 0.01, α = 0.025, power 0.8: 785 pairs. Standard one-sample formula
    (Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*, 2nd ed., §3.1).

    Args:
        sd: standard deviation of one paired value, > 0 (same unit as the margin).
        delta: expected true mean, below the margin.
        margin: the non-inferiority margin.
        alpha: one-sided level in (0, 0.5).
        power: power in [0.5, 1).

    Returns:
        The number of pairs, ≥ 1, rounded up.

    Raises:
        InvalidDataError: sd not > 0, a value not finite, ``delta ≥ margin``, alpha or
            power out of range.
    """
    sd = _finite(sd, "sd")
    delta = _finite(delta, "delta")
    margin = _finite(margin, "margin")
    z_alpha, z_power = _z_sum(alpha, power)
    if sd <= 0.0:
        raise InvalidDataError(f"sd must be > 0, got {sd}", name="sd")
    if delta >= margin:
        raise InvalidDataError(f"delta = {delta} must be below the margin {margin}")
    return _round_up(((z_alpha + z_power) * sd / (margin - delta)) ** 2)


def guardrail_power(power: float, guardrails: int) -> float:
    """Per-test power so that ``guardrails`` non-inferiority tests all pass with ``power``.

    Bonferroni split of β: ``1 − (1 − power)/G`` (Schultzberg et al. 2024). E.g.
    power 0.8 over 4 guardrails: 0.95 each.

    Raises:
        InvalidDataError: power outside [0.5, 1) or guardrails < 1.
    """
    if not 0.5 <= power < 1.0:
        raise InvalidDataError(f"power must be in [0.5, 1), got {power}", name="power")
    guardrails = count(guardrails, "guardrails")
    if guardrails < 1:
        raise InvalidDataError("guardrails must be >= 1", name="guardrails")
    return 1.0 - (1.0 - power) / guardrails


def design_min_pairs(*required: int, floor: int = 200) -> int:
    """The design minimum for a stratum: ``max(floor, *required)``.

    Args:
        required: computed sizes of the stratum's guardrails (e.g. from
            :func:`paired_binary_min_pairs`, :func:`mean_min_pairs`); may be none.
        floor: the minimum whatever the computation says (default 200 pairs,
            gate-statistics.md §2.3).

    Raises:
        InvalidDataError: a size or the floor is negative or not an integer.
    """
    floor = count(floor, "floor")
    return max([floor, *(count(n, "required pairs") for n in required)])
