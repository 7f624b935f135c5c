"""What every check shares: its numbers, its record, and the wording of its reason.

A check's ``reason`` is a sentence an operator can act on, with the numbers; these are
the pieces every metric family words the same way: number formats, the minimum-pairs
note, and the infrastructure-error notes (reference failure case 11: a pair with an
infrastructure error on either side is left out of every quality check and counted,
and ``infra_error_rate`` gates it, a FAIL meaning HOLD, never ROLLBACK).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shadoweval.records import Check, CheckOutcome

__all__ = [
    "INFRA_CONSEQUENCE",
    "INFRA_FAILED",
    "INFRA_METRIC",
    "CheckNumbers",
    "fmt_g",
    "fmt_p",
    "fmt_pct",
    "fmt_pp",
    "infra_note",
    "make_check",
    "margin_words",
    "min_pairs_note",
]

INFRA_METRIC = "infra_error_rate"
"""Name of the paired binary check of infrastructure errors (its FAIL means HOLD)."""
INFRA_FAILED = "the candidate's serving infrastructure failed"
"""Lead of the reason of an ``infra_error_rate`` FAIL (and of the verdict's headline)."""
INFRA_CONSEQUENCE = "model quality could not be judged on those pairs (HOLD, never ROLLBACK)"
"""What an ``infra_error_rate`` FAIL means, at the end of its reason."""


def infra_note(count: int) -> str:
    """The reason suffix of a quality check that left ``count`` infrastructure pairs out."""
    if not count:
        return ""
    return (
        f" ({count} pairs with an infrastructure error on either side were left out: "
        f"see {INFRA_METRIC})"
    )


def fmt_pct(x: float) -> str:
    """A proportion as a percentage: ``0.0123`` → ``1.2%``."""
    return f"{100.0 * x:.1f}%"


def fmt_pp(x: float) -> str:
    """A difference of proportions in percentage points: ``0.0123`` → ``+1.2 pp``."""
    return f"{100.0 * x:+.1f} pp"


def fmt_p(x: float) -> str:
    """A p-value: two significant digits below 0.01, else three decimals."""
    return f"{x:.2g}" if x < 0.01 else f"{x:.3f}"


def fmt_g(x: float) -> str:
    """A level or ratio to three significant digits (``alpha_k 0.00169``)."""
    return f"{x:.3g}"


@dataclass(frozen=True)
class CheckNumbers:
    """The numeric fields of a check: estimate, interval, pairs used, p-value.

    Non-finite values are stored as ``None`` by :func:`make_check`.
    """

    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    p_value: float | None = None


def make_check(
    metric: str,
    task_type: str,
    statistic: str,
    margin: float,
    outcome: CheckOutcome,
    reason: str,
    numbers: CheckNumbers,
    critical: bool = False,
    reach: tuple[int | None, str] = (None, ""),
) -> Check:
    """The :class:`~shadoweval.records.Check` record, NaN and infinite numbers as ``None``;
    ``reach`` is its ``(pairs_needed, pairs_needed_basis)``."""

    def finite(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else float(x)

    return Check(
        metric=metric,
        task_type=task_type,
        statistic=statistic,
        estimate=finite(numbers.estimate),
        ci_low=finite(numbers.ci_low),
        ci_high=finite(numbers.ci_high),
        margin=margin,
        n=numbers.n,
        p_value=finite(numbers.p_value),
        outcome=outcome,
        reason=reason,
        critical=critical,
        pairs_needed=reach[0],
        pairs_needed_basis=reach[1],
    )


def margin_words(margin: float) -> str:
    """A proportion margin in words: ``1-point`` for 0.01."""
    return f"{100 * margin:g}-point"


def min_pairs_note(floor: int, computed: int | None, basis: str) -> tuple[int, str]:
    """The effective minimum pairs and its explanation for a reason.

    ``computed`` is the power calculation's pairs (``None`` when it could not be run),
    ``basis`` says at what it was computed; the floor wins when it is larger.
    """
    if computed is None or computed <= floor:
        return floor, f"min_pairs {floor}"
    return computed, f"min pairs {computed} (power {basis}; floor {floor})"
