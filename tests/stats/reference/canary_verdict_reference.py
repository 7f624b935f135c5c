"""An independent recomputation of a canary step's promote and rollback numbers.

Plain Python over the rows (no pandas grouping, no code of shadoweval.stats.canary.verdict): the
truncation at the candidate arm's n_k-th request, the per-arm counts, the
Farrington–Manning p-values of tests/stats/reference/two_proportions.py, the
order-statistic ranks from log-space binomial sums (``math.lgamma``), and the levels
``α·6/(π²k²)`` for geometric checkpoints. Used by tests/stats/test_canary_verdict.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tests.stats.reference.two_proportions import fm_pvalue

Row = dict[str, Any]


def checkpoint_look(n: int, first: int, factor: float) -> tuple[int, int]:
    """(k, n_k) of the latest checkpoint ``⌈first·factor^(k−1)⌉ ≤ n``; (0, 0) if none."""
    k, n_k, j = 0, 0, 0
    while True:
        value = first * factor**j
        c = round(value) if abs(value - round(value)) <= 1e-9 * value else math.ceil(value)
        if c > n:
            return k, n_k
        k, n_k, j = j + 1, c, j + 1


def level(k: int, alpha: float) -> float:
    """α·6/(π²k²)."""
    return alpha * 6.0 / (math.pi**2 * k * k)


def truncate(rows: Sequence[Row], n_k: int) -> list[Row]:
    """Rows up to the observed_at of the n_k-th candidate row (time order, ties kept)."""
    ordered = sorted(rows, key=lambda r: r["observed_at"])
    times = [r["observed_at"] for r in ordered if r["arm"] == "candidate"]
    t_k = times[n_k - 1]
    return [r for r in ordered if r["observed_at"] <= t_k]


def counts(rows: Sequence[Row], arm: str) -> dict[str, tuple[int, int]]:
    """(events, trials) per metric for one arm."""
    mine = [r for r in rows if r["arm"] == arm]
    answered = [r for r in mine if not r["error"]]
    expected = [r for r in answered if r["format_expected"]]
    return {
        "error_rate": (sum(bool(r["error"]) for r in mine), len(mine)),
        "harm_rate": (sum(bool(r["harmed"]) for r in answered), len(answered)),
        "format_failure": (sum(r["format_ok"] is False for r in expected), len(expected)),
    }


def proportion_p(rows: Sequence[Row], metric: str, delta: float, alternative: str) -> float:
    """FM p-value candidate vs baseline for a metric on these rows."""
    x_c, n_c = counts(rows, "candidate")[metric]
    x_b, n_b = counts(rows, "baseline")[metric]
    return fm_pvalue(x_c, n_c, x_b, n_b, delta, alternative)


def _cdf(n: int, q: float) -> list[float]:
    out, total = [], 0.0
    for i in range(n + 1):
        total += math.exp(
            math.lgamma(n + 1)
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * math.log(q)
            + (n - i) * math.log1p(-q)
        )
        out.append(total)
    return out


def latency_ratio_high(rows: Sequence[Row], column: str, q: float, alpha: float) -> float:
    """U_c / L_b: the candidate's 1 − α/2 upper and the baseline's lower order statistic."""

    def values(arm: str) -> list[float]:
        return sorted(
            r[column]
            for r in rows
            if r["arm"] == arm and not r["error"] and not r["cache_hit"] and r[column] == r[column]
        )

    cand, base = values("candidate"), values("baseline")
    a = alpha / 2
    cdf_c = _cdf(len(cand), q)
    u = next(i + 1 for i, c in enumerate(cdf_c) if c >= 1 - a)  # P(B <= u - 1) >= 1 - a
    cdf_b = _cdf(len(base), q)
    low = max(i + 1 for i in range(len(base) + 1) if cdf_b[i] < a)  # P(B <= l - 1) < a
    return cand[u - 1] / base[low - 1]
