"""Exact unconditional two-proportion tests with a margin (Chan 1998) for small arms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.canary.exact import exact_unconditional_test, smallest_expected_count
from shadoweval.stats.canary.two_arm import proportion_noninferiority
from shadoweval.stats.inputs import InvalidDataError
from tests.stats.reference import exact_unconditional as ref

TABLES = [(5, 40, 1, 60), (2, 30, 0, 25), (1, 20, 4, 20), (0, 15, 0, 15), (7, 12, 3, 14)]


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize(("alternative", "scipy_alt"), [("smaller", "less"), ("larger", "greater")])
def test_margin_zero_is_barnards_pooled_test(
    table: tuple[int, int, int, int], alternative: str, scipy_alt: str
) -> None:
    x1, n1, x2, n2 = table
    ours = exact_unconditional_test(*table, 0.0, alternative)  # type: ignore[arg-type]
    barnard = scipy_stats.barnard_exact(
        [[x1, x2], [n1 - x1, n2 - x2]], alternative=scipy_alt, pooled=True, n=200
    )
    assert ours.p_value == pytest.approx(barnard.pvalue, abs=1e-5)


@pytest.mark.parametrize("table", TABLES[:3])
@pytest.mark.parametrize("margin", [-0.1, 0.05, 0.1])
@pytest.mark.parametrize("alternative", ["smaller", "larger"])
def test_matches_brute_force_enumeration(
    table: tuple[int, int, int, int], margin: float, alternative: str
) -> None:
    ours = exact_unconditional_test(*table, margin, alternative)  # type: ignore[arg-type]
    brute = ref.exact_pvalue(*table, margin, alternative, points=501)
    # the reference's coarser grid can only find a smaller (or equal) maximum
    assert ours.p_value >= brute - 1e-9
    assert ours.p_value == pytest.approx(brute, abs=1e-4)


@pytest.mark.parametrize(("table", "margin"), [((3, 12, 1, 10), 0.1), ((2, 10, 4, 11), -0.1)])
@pytest.mark.parametrize("alternative", ["smaller", "larger"])
def test_supremum_lies_on_the_boundary(
    table: tuple[int, int, int, int], margin: float, alternative: str
) -> None:
    ours = exact_unconditional_test(*table, margin, alternative)  # type: ignore[arg-type]
    whole = ref.exact_pvalue(*table, margin, alternative, region="whole", points=81)
    assert whole <= ours.p_value + 1e-6


def test_exact_size_is_at_most_alpha_where_the_score_test_exceeds_it() -> None:
    n1 = n2 = 20
    margin, alpha = 0.1, 0.05
    exact = np.zeros((n1 + 1, n2 + 1), dtype=bool)
    score = np.zeros_like(exact)
    for x1 in range(n1 + 1):
        for x2 in range(n2 + 1):
            exact[x1, x2] = exact_unconditional_test(
                x1, n1, x2, n2, margin, "smaller", alpha, grid_points=201
            ).rejected
            score[x1, x2] = proportion_noninferiority(x1, n1, x2, n2, margin, alpha).passed

    def size(region: np.ndarray) -> float:
        best = 0.0
        for p2 in np.linspace(0.0, 1.0 - margin, 901):
            joint = np.outer(
                scipy_stats.binom.pmf(np.arange(n1 + 1), n1, p2 + margin),
                scipy_stats.binom.pmf(np.arange(n2 + 1), n2, p2),
            )
            best = max(best, float(joint[region].sum()))
        return best

    assert size(exact) <= alpha
    assert size(score) > alpha  # 0.0544: why small arms need the exact test
    assert size(exact) == pytest.approx(0.04485, abs=1e-4)


def test_smallest_expected_count() -> None:
    assert smallest_expected_count(3, 300, 2, 300, 0.0) == pytest.approx(2.5)
    assert smallest_expected_count(60, 300, 50, 300, 0.0) == pytest.approx(55.0)


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidDataError, match="x_c must be <= n_c"):
        exact_unconditional_test(5, 4, 0, 4, 0.0, "smaller")
    with pytest.raises(InvalidDataError, match="margin"):
        exact_unconditional_test(1, 4, 0, 4, 1.0, "smaller")
    with pytest.raises(InvalidDataError, match="alternative"):
        exact_unconditional_test(1, 4, 0, 4, 0.0, "two-sided")  # type: ignore[arg-type]
