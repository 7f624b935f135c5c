"""Output divergence judged against a noise floor (baseline against itself).

An LLM answers the same prompt differently on every call, so "the candidate's output
differs from the baseline's" means little on its own. Diffy's idea (twitter/diffy):
replay part of the traffic to the baseline a second time and discount the candidate's
differences that occur at the baseline-vs-baseline (noise) rate (gate-statistics.md
§1.6).

On the baseline-replay subsample R, per exchange i (divergence D = 1 − similarity, so
D ∈ [0, 2] for cosine similarity; lower is better):

* ``D_cand_i = 1 − sim(candidate_i, baseline_i)``,
* ``D_noise_i = 1 − sim(baseline_replay_i, baseline_i)``.

The null hypothesis "the candidate diverges more than noise by more than the margin",
``E[D_cand] ≥ (1 + r)·E[D_noise] + δ_abs``, is linearised by
:func:`noise_floor_values` into a one-sample mean test of ``e_i = D_cand_i − (1 + r)·
D_noise_i`` against ``δ_abs`` (the gate: the look's sequential interval,
:func:`shadoweval.stats.checks.sequential_interval.sequential_mean_interval`), with no delta method
or Fieller interval. :func:`tail_rate_split` is the report-only tail check:
a mean hides rare catastrophic divergences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shadoweval.stats.inputs import FloatArray, InvalidDataError, finite_1d
from shadoweval.stats.paired_binary import mcnemar

__all__ = ["TailRateReport", "noise_floor_values", "tail_rate_split"]

_TOLERANCE = 1e-6  # cosine similarities of float32 embeddings overshoot ±1 by ~1e-7


def _divergences(
    d_cand: npt.ArrayLike, d_noise: npt.ArrayLike, *, min_size: int = 1
) -> tuple[FloatArray, FloatArray]:
    cand = finite_1d(d_cand, "candidate divergence", min_size=min_size)
    noise = finite_1d(d_noise, "noise divergence", min_size=min_size)
    if cand.size != noise.size:
        raise InvalidDataError(
            f"paired divergences differ in length: {cand.size} candidate vs "
            f"{noise.size} noise values (both must be on the same exchanges)"
        )
    for name, values in (("candidate divergence", cand), ("noise divergence", noise)):
        bad = int(np.count_nonzero((values < -_TOLERANCE) | (values > 2.0 + _TOLERANCE)))
        if bad:
            raise InvalidDataError(
                f"{name}: {bad} of {values.size} values outside [0, 2] "
                "(divergence is 1 - cosine similarity)",
                name=name,
                count=bad,
            )
    return np.clip(cand, 0.0, 2.0), np.clip(noise, 0.0, 2.0)


def noise_floor_values(d_cand: npt.ArrayLike, d_noise: npt.ArrayLike, r: float) -> FloatArray:
    """Linearised noise-floor differences ``e_i = D_cand_i − (1 + r)·D_noise_i``.

    Testing H0: ``E[e] ≥ δ_abs`` against H1: ``E[e] < δ_abs`` is exactly testing
    H0: ``E[D_cand] ≥ (1 + r)·E[D_noise] + δ_abs`` (gate-statistics.md §1.6): the ratio
    margin becomes a difference test on paired values.

    Args:
        d_cand: candidate-vs-baseline divergences ``1 − similarity``, shape ``(n,)``,
            in [0, 2] (values within 1e-6 outside are clipped: float rounding).
        d_noise: baseline-replay-vs-baseline divergences on the **same exchanges, in the
            same order**, shape ``(n,)``, in [0, 2].
        r: relative margin over the noise floor, ≥ 0 (default policy 0.25).

    Returns:
        ``e``, shape ``(n,)``, in divergence units.

    Raises:
        InvalidDataError: a value is NaN, infinite or outside [0, 2]; the arrays differ
            in length; r negative or not finite.
        InsufficientDataError: no values.
    """
    if isinstance(r, bool) or not (math.isfinite(r) and r >= 0.0):
        raise InvalidDataError(f"relative margin r must be finite and >= 0, got {r!r}", name="r")
    cand, noise = _divergences(d_cand, d_noise)
    return cand - (1.0 + float(r)) * noise


@dataclass(frozen=True)
class TailRateReport:
    """Result of :func:`tail_rate_split` (report only, not a gate check).

    Attributes:
        threshold: the ``quantile`` of the noise divergences on the fitting half
            (divergence units).
        cand_rate: share of the evaluation half whose candidate divergence exceeds the
            threshold.
        noise_rate: share of the evaluation half whose noise divergence exceeds it
            (about ``1 − quantile`` when nothing changed).
        n_fit: exchanges used to fit the threshold.
        n_eval: exchanges used to evaluate the rates.
        cand_only: evaluation exchanges where only the candidate exceeds the threshold.
        noise_only: evaluation exchanges where only the noise replay exceeds it.
        p_value: one-sided McNemar mid-p of "the candidate exceeds more often than noise"
            on the paired evaluation half (1 when nobody exceeds alone).
    """

    threshold: float
    cand_rate: float
    noise_rate: float
    n_fit: int
    n_eval: int
    cand_only: int = 0
    noise_only: int = 0
    p_value: float = 1.0


def tail_rate_split(
    d_cand: npt.ArrayLike,
    d_noise: npt.ArrayLike,
    *,
    quantile: float = 0.95,
    seed: int = 0,
) -> TailRateReport:
    """Compare tail rates of candidate and noise divergence with a split-sample threshold.

    The exchanges are split at random (``numpy.random.default_rng(seed)``) into a fitting
    half (``⌊n/2⌋``) and an evaluation half. The threshold τ is the ``quantile`` of the
    noise divergences on the fitting half; the rates ``P(D > τ)`` are measured on the
    evaluation half only. Fitting τ on the same noise sample it is compared with would
    put exactly ``1 − quantile`` of that sample above it by construction and bias the
    comparison towards "no difference" (gate-statistics.md pitfall 9). The evaluation
    half stays paired, so the difference is tested with McNemar's mid-p on the
    exceedances (:func:`shadoweval.stats.paired_binary.mcnemar`, Fagerland et al. 2013; the
    reference's unpaired ``test_proportions_2indep`` would ignore the pairing).

    Args:
        d_cand: candidate divergences, shape ``(n,)``, n ≥ 2, in [0, 2].
        d_noise: noise divergences on the same exchanges, shape ``(n,)``, in [0, 2].
        quantile: level of the noise threshold, in (0, 1).
        seed: seed of the split (same seed, same split: polls are reproducible).

    Raises:
        InvalidDataError: a value NaN/infinite/outside [0, 2], lengths differ, quantile
            outside (0, 1), seed not a non-negative integer.
        InsufficientDataError: fewer than 2 exchanges.
    """
    if not 0.0 < quantile < 1.0:
        raise InvalidDataError(f"quantile must be in (0, 1), got {quantile}", name="quantile")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidDataError(f"seed must be a non-negative integer, got {seed!r}", name="seed")
    cand, noise = _divergences(d_cand, d_noise, min_size=2)
    order = np.random.default_rng(int(seed)).permutation(cand.size)
    n_fit = cand.size // 2
    fit, evaluate = order[:n_fit], order[n_fit:]
    threshold = float(np.quantile(noise[fit], quantile))
    cand_exceeds = cand[evaluate] > threshold
    noise_exceeds = noise[evaluate] > threshold
    cand_only = int(np.count_nonzero(cand_exceeds & ~noise_exceeds))
    noise_only = int(np.count_nonzero(noise_exceeds & ~cand_exceeds))
    # mcnemar's b counts pairs where only the second arm (the candidate) "fails".
    p = mcnemar(cand_only, noise_only, method="midp", alternative="greater").pvalue
    return TailRateReport(
        threshold=threshold,
        cand_rate=float(np.mean(cand_exceeds)),
        noise_rate=float(np.mean(noise_exceeds)),
        n_fit=int(n_fit),
        n_eval=int(evaluate.size),
        cand_only=cand_only,
        noise_only=noise_only,
        p_value=p,
    )
