"""Independent one-sided order-statistic ranks by exact binomial sums (no scipy).

For ``B ~ Binomial(n, q)`` (the number of sample values below the population q-quantile
ξ_q of a continuous distribution), with exact rational arithmetic (``fractions``):

* upper bound ``x_(u)``: the smallest ``u`` with ``P(B ≤ u − 1) ≥ 1 − a``, since
  ``x_(u) ≥ ξ_q`` ⇔ fewer than ``u`` values are below ξ_q; ``None`` if ``u > n``;
* lower bound ``x_(l)``: the largest ``l`` with ``P(B ≥ l) > 1 − a`` (equivalently
  ``P(B ≤ l − 1) < a``), since ``x_(l) ≤ ξ_q`` ⇔ at least ``l`` values are ≤ ξ_q;
  ``None`` if no ``l ≥ 1`` qualifies.

Hahn & Meeker, "Statistical Intervals" (1991), §5.2; David & Nagaraja, "Order
Statistics", §7.1.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb


def _pmf(n: int, q: Fraction) -> list[Fraction]:
    return [comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1)]


def upper_rank(n: int, q: Fraction, a: Fraction) -> int | None:
    """Smallest u with P(B ≤ u − 1) ≥ 1 − a, or None when u would exceed n."""
    cdf = Fraction(0)
    for u, p in enumerate(_pmf(n, q), start=1):
        cdf += p
        if cdf >= 1 - a:
            return u if u <= n else None
    return None


def lower_rank(n: int, q: Fraction, a: Fraction) -> int | None:
    """Largest l ≥ 1 with P(B ≤ l − 1) < a, or None."""
    cdf = Fraction(0)
    best: int | None = None
    for l_rank, p in enumerate(_pmf(n, q), start=1):
        cdf += p  # P(B <= l_rank - 1)
        if cdf >= a:
            break
        best = l_rank
    return best
