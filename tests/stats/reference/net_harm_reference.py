"""Reference: the stratified two-phase net-harm estimator, written out in plain Python.

Test code only, an independent implementation of :mod:`shadoweval.stats.net_harm` (no numpy: lists,
dicts, :mod:`statistics`, explicit sums), from the formulas as a textbook writes them:

* Cochran (1977), *Sampling Techniques*, eq. 5.1 (the stratified mean) and eq. 5.6 (its
  variance with the finite population correction) for the judged subsample of each
  changed stratum;
* double sampling for stratification (Neyman 1938; Cochran 1977 §12.2): the phase-1
  variance ``σ²/n`` of the pairs drawn from the traffic, ``σ²`` estimated by the
  within-plus-between decomposition of the strata (the unchanged pairs a stratum of
  known zeros).

The small-stratum rules (variance 1 at one judged pair, the floor by one pseudo-count of
each outcome, the cap at the largest variance) and the worst-case widening for unjudged
strata are the module's documented choices, re-derived here from their definitions.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

__all__ = ["ReferenceEstimate", "reference_interval", "reference_net_harm"]


@dataclass(frozen=True)
class ReferenceEstimate:
    """Estimate, variances and widening of one stratified mean."""

    estimate: float
    variance: float
    variance_finite: float
    unknown: float


def _used_variance(values: list[float], support: tuple[float, ...]) -> float:
    largest = ((max(support) - min(support)) / 2) ** 2
    if len(values) == 1:
        return largest
    sample = statistics.variance(values)  # ddof 1
    augmented = values + list(support)
    pseudo = statistics.pvariance(augmented)  # the pseudo-count distribution's variance
    return min(largest, max(sample, pseudo))


def _stratified(
    pairs: list[tuple[float | None, bool, int]], support: tuple[float, ...], value
) -> ReferenceEstimate:
    n = len(pairs)
    sizes: dict[int, int] = {}
    judged: dict[int, list[float]] = {}
    for quality, changed, stratum in pairs:
        if not changed:
            continue
        sizes[stratum] = sizes.get(stratum, 0) + 1
        judged.setdefault(stratum, [])
        if quality is not None:
            judged[stratum].append(value(quality))
    low, high = min(support), max(support)
    largest = ((high - low) / 2) ** 2
    estimate = 0.0
    unknown = 0.0
    finite = 0.0
    for h, size in sizes.items():
        weight = size / n
        ys = judged[h]
        if not ys:
            estimate += weight * (low + high) / 2
            unknown += weight * (high - low) / 2
            continue
        estimate += weight * statistics.fmean(ys)
        fpc = 1 - len(ys) / size
        finite += weight**2 * fpc * _used_variance(ys, support) / len(ys)
    unchanged_share = 1 - sum(sizes.values()) / n
    sigma2 = unchanged_share * (0.0 - estimate) ** 2
    for h, size in sizes.items():
        weight = size / n
        ys = judged[h]
        if not ys:
            sigma2 += weight * (high - low) ** 2
        else:
            within = _used_variance(ys, support)
            sigma2 += weight * (within + (statistics.fmean(ys) - estimate) ** 2)
    sigma2 = min(largest, sigma2)
    return ReferenceEstimate(estimate, sigma2 / n + finite, finite, unknown)


def reference_net_harm(
    pairs: list[tuple[float | None, bool, int]],
) -> dict[str, ReferenceEstimate]:
    """Net harm, P(worse) and P(better) of ``pairs``: ``(quality or None, changed, stratum)``.

    Quality +1 worse, −1 better, 0 tie, ``None`` not judged; unchanged pairs are ties
    whatever their quality. Returns ``{"net": …, "worse": …, "better": …}``.
    """
    cleaned = [(q if changed else None, changed, s) for q, changed, s in pairs]
    return {
        "net": _stratified(cleaned, (-1.0, 0.0, 1.0), lambda q: q),
        "worse": _stratified(cleaned, (0.0, 1.0), lambda q: 1.0 if q == 1 else 0.0),
        "better": _stratified(cleaned, (0.0, 1.0), lambda q: 1.0 if q == -1 else 0.0),
    }


def reference_interval(ref: ReferenceEstimate, z: float) -> tuple[float, float]:
    """The unclipped interval ``estimate ∓ unknown ∓ z·√variance``."""
    half = ref.unknown + z * math.sqrt(ref.variance)
    return ref.estimate - half, ref.estimate + half
