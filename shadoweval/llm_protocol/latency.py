"""The inter-token latency summary of a response: :func:`summarize_itl` (re-exported by
:mod:`shadoweval.llm_protocol.assembler` and the package); its time per output token from
the end-to-end latency: :func:`tpot_ms`.

Count, mean, p50/p95/p99 (numpy's default ``linear`` quantile) and max of the ITLs in
milliseconds; short lists are computed in Python with numpy's own arithmetic (same bits).
"""

from __future__ import annotations

import math

import numpy as np

from shadoweval.records import LatencySummary


def _quantile_sorted(values: list[float], q: float) -> float:
    """numpy's default (``linear``) quantile of sorted ``values``, with its lerp."""
    h = (len(values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(values) - 1)
    t = h - lo
    a, b = values[lo], values[hi]
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def summarize_itl(itl_ms: tuple[float, ...] | list[float]) -> LatencySummary | None:
    """Summarize inter-token latencies (ms): count, mean, p50/p95/p99 (linear), max."""
    if len(itl_ms) == 0:
        return None
    if len(itl_ms) > _NUMPY_FROM:
        arr = np.asarray(itl_ms, dtype=float)
        p50, p95, p99 = np.quantile(arr, [0.5, 0.95, 0.99])
        mean, top = float(arr.mean()), float(arr.max())
    else:  # a short list: numpy's call overhead is most of the cost; same figures
        ordered = sorted(float(x) for x in itl_ms)
        p50, p95, p99 = (_quantile_sorted(ordered, q) for q in (0.5, 0.95, 0.99))
        mean, top = _pairwise_mean(itl_ms), ordered[-1]
    return LatencySummary(
        count=len(itl_ms),
        mean_ms=float(mean),
        p50_ms=float(p50),
        p95_ms=float(p95),
        p99_ms=float(p99),
        max_ms=top,
    )


def tpot_ms(
    e2e_ms: float | None, ttft_ms: float | None, completion_tokens: int | None
) -> float | None:
    """Time per output token after the first, ms: ``(e2e - ttft) / (tokens - 1)``;
    ``None`` when a figure is missing or there are fewer than 2 completion tokens."""
    if e2e_ms is None or ttft_ms is None or completion_tokens is None or completion_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (completion_tokens - 1)


_NUMPY_FROM = 128
"""Up to this many ITLs the figures are computed in Python with numpy's own arithmetic
(its pairwise summation is one 8-accumulator block up to 128 values), so they are the same
bits as numpy's, without numpy's per-call overhead."""


def _pairwise_mean(values: tuple[float, ...] | list[float]) -> float:
    """numpy's ``mean`` of at most 128 floats: the same summation order (``pairwise_sum``)."""
    a = [float(x) for x in values]
    n = len(a)
    if n < 8:
        total = 0.0
        for x in a:
            total += x
        return total / n
    r = a[:8]
    i = 8
    while i < n - (n % 8):
        for j in range(8):
            r[j] += a[i + j]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for x in a[i:]:
        total += x
    return total / n
