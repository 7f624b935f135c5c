"""Design sample sizes (gate-statistics.md §1.7)."""

from __future__ import annotations

import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.power import (
    design_min_pairs,
    guardrail_power,
    mean_min_pairs,
    paired_binary_min_pairs,
)

Z_SUM = float(scipy_stats.norm.isf(0.025) + scipy_stats.norm.ppf(0.8))


@pytest.mark.parametrize(
    ("psi", "power", "reference", "ceiling"),
    [
        (0.02, 0.8, 1570, 1570),
        (0.05, 0.8, 3924, 3925),
        (0.10, 0.8, 7849, 7849),
        (0.02, 0.95, 2599, 2599),
        (0.05, 0.95, 6497, 6498),
        (0.10, 0.95, 12995, 12995),
    ],
)
def test_reference_sample_sizes(psi: float, power: float, reference: int, ceiling: int) -> None:
    # §1.7: α = 0.025, δ = 0, margin 1 pp, power 0.8 (and 1 − 0.2/4 for four guardrails).
    # The reference rounds to the nearest integer; a sample size is rounded up.
    n = paired_binary_min_pairs(psi, 0.0, 0.01, alpha=0.025, power=power)
    assert n == ceiling
    assert abs(n - reference) <= 1
    assert guardrail_power(0.8, 4) == pytest.approx(0.95, rel=1e-12)


def test_wald_formula_and_score_variant() -> None:
    n = paired_binary_min_pairs(0.04, 0.005, 0.02)
    assert n == -(-(Z_SUM**2) * (0.04 - 0.005**2) / 0.015**2 // 1)
    score = paired_binary_min_pairs(0.02, 0.0, 0.01, method="score")
    assert score == 1785  # Nam 1997: the restricted variance under H0 is larger
    assert score > paired_binary_min_pairs(0.02, 0.0, 0.01)


def test_sizes_are_monotone() -> None:
    sizes = [paired_binary_min_pairs(psi, 0.0, 0.01) for psi in (0.01, 0.02, 0.04, 0.08)]
    assert sizes == sorted(sizes)
    assert paired_binary_min_pairs(0.05, 0.0, 0.02) < paired_binary_min_pairs(0.05, 0.0, 0.01)
    assert paired_binary_min_pairs(0.05, 0.0, 0.01, power=0.9) > paired_binary_min_pairs(
        0.05, 0.0, 0.01
    )


def test_mean_min_pairs() -> None:
    assert mean_min_pairs(0.1, 0.0, 0.01) == 785
    assert mean_min_pairs(0.1, -0.01, 0.01) == 197
    assert mean_min_pairs(2.0, 0.0, 1.0, alpha=0.05, power=0.5) == 11  # (1.645·2)² = 10.8


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0.0, 0.0, 0.01), {}, "psi"),
        ((0.02, 0.03, 0.05), {}, "exceeds the discordance"),
        ((0.02, 0.0, 0.0), {}, "margin"),
        ((0.02, 0.015, 0.01), {}, "below the margin"),
        ((0.02, 0.0, 0.01), {"alpha": 0.5}, "alpha"),
        ((0.02, 0.0, 0.01), {"power": 1.0}, "power"),
        ((0.02, 0.0, 0.01), {"method": "exact"}, "method"),
        ((float("nan"), 0.0, 0.01), {}, "psi"),
    ],
)
def test_binary_validation(
    args: tuple[float, float, float], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidDataError, match=match):
        paired_binary_min_pairs(*args, **kwargs)  # type: ignore[arg-type]


def test_mean_validation_and_design() -> None:
    with pytest.raises(InvalidDataError, match="sd"):
        mean_min_pairs(0.0, 0.0, 0.01)
    with pytest.raises(InvalidDataError, match="below the margin"):
        mean_min_pairs(0.1, 0.02, 0.01)
    with pytest.raises(InvalidDataError, match="guardrails"):
        guardrail_power(0.8, 0)
    assert design_min_pairs() == 200
    assert design_min_pairs(150, 90) == 200
    assert design_min_pairs(1570, 785) == 1570
    assert design_min_pairs(50, floor=100) == 100
    with pytest.raises(InvalidDataError, match="required pairs"):
        design_min_pairs(-1)
