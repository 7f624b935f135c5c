"""The test vectors of gate-statistics.md §4 (T1–T22), to 4 significant digits.

The reference numbers its vectors T1, T3, T4, T6–T13, T15, T16, T18–T22 (there is no
T2, T5, T14 or T17). Existing functions are used where they exist (McNemar and Tango in
:mod:`shadoweval.stats.paired_binary`, Holm in :mod:`shadoweval.stats.multiplicity`,
order-statistic ranks in
:mod:`shadoweval.stats.quantiles`); the rest come from the sequential, validity and report-only
modules, the group-sequential test reference (T15, tests/stats/reference), or from
scipy/statsmodels where the gate has no function of its own (Wilcoxon, BH,
Harrell–Davis), pinned here so a version change is noticed. T16 (the normal mSPRT) and
T21 (the sequential SRM test) are not here: the gate uses neither method, and their
implementations, which only these vectors exercised, were removed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from shadoweval.stats.multiplicity import holm
from shadoweval.stats.paired_binary import mcnemar, tango_score_ci, tango_score_test
from shadoweval.stats.power import paired_binary_min_pairs
from shadoweval.stats.quantiles import order_statistic_ranks
from shadoweval.stats.report_only import mann_whitney
from shadoweval.stats.sequential import sequential_mcnemar
from shadoweval.stats.validity import task_mix_chi2
from tests.stats.reference.group_sequential import (
    crossing_probability,
    obf_boundaries,
    pocock_boundaries,
)

REL = 5e-4  # §4: |Δ| ≤ 5e-4 relative

CAVO = {"b": 6, "c": 16, "n": 161}  # [[59, 6], [16, 80]]


def test_t1_exact_mcnemar() -> None:
    assert mcnemar(6, 16, method="exact").pvalue == pytest.approx(0.05248, rel=REL)


def test_t3_asymptotic_mcnemar() -> None:
    plain = mcnemar(6, 16, method="asymptotic")
    corrected = mcnemar(6, 16, method="asymptotic_cc")
    assert (plain.statistic, plain.pvalue) == pytest.approx((4.545, 0.03301), rel=REL)
    assert (corrected.statistic, corrected.pvalue) == pytest.approx((3.682, 0.05501), rel=REL)


def test_t4_bentur() -> None:
    # [[1, 1], [7, 12]]: b = 1, c = 7.
    got = [mcnemar(1, 7, method=m).pvalue for m in ("exact", "midp", "asymptotic")]
    assert got == pytest.approx([0.07031, 0.03906, 0.03389], rel=REL)


def test_t6_tango_interval() -> None:
    interval = tango_score_ci(3, 0, 3)
    assert interval.low == pytest.approx(-0.1230, rel=REL)
    assert interval.high == 1.0


def test_t7_tango_zero_discordance() -> None:
    result = tango_score_test(0, 0, 100, -0.05, alternative="greater")
    assert (result.statistic, result.pvalue) == pytest.approx((2.294, 0.01089), rel=REL)


def test_t8_tango_noninferiority() -> None:
    result = tango_score_test(CAVO["b"], CAVO["c"], CAVO["n"], -0.10, alternative="greater")
    assert (result.statistic, result.pvalue) == pytest.approx((1.249, 0.1058), rel=REL)


def test_t9_mann_whitney_exact() -> None:
    x = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46]
    y = [1.15, 0.88, 0.90, 0.74, 1.21]
    greater = mann_whitney(x, y, alternative="greater", method="exact")
    assert (greater.u, greater.method) == (35.0, "exact")
    assert greater.p_value == pytest.approx(0.1272, rel=REL)
    two = mann_whitney(x, y, alternative="two-sided", method="exact")
    assert two.p_value == pytest.approx(0.2544, rel=REL)


def test_t10_wilcoxon_paired() -> None:
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    greater = scipy_stats.wilcoxon(x, y, alternative="greater", method="exact")
    assert float(greater.statistic) == 40.0
    assert float(greater.pvalue) == pytest.approx(0.01953, rel=REL)
    two = scipy_stats.wilcoxon(x, y, alternative="two-sided", method="exact")
    assert float(two.statistic) == 5.0  # min(W+, W−) two-sided (pitfall 5)
    assert float(two.pvalue) == pytest.approx(0.03906, rel=REL)


def test_t11_mann_whitney_exact_and_asymptotic() -> None:
    males, females = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    exact = mann_whitney(males, females, alternative="two-sided", method="exact")
    asymptotic = mann_whitney(males, females, alternative="two-sided", method="asymptotic")
    assert exact.u == asymptotic.u == 17.0
    assert exact.p_value == pytest.approx(0.1111, rel=REL)
    assert asymptotic.p_value == pytest.approx(0.1113, rel=REL)


BH_1995 = [
    0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344,
    0.0459, 0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.0000,
]  # fmt: skip


def test_t12_multiplicity() -> None:
    assert int(np.count_nonzero(holm(BH_1995) <= 0.05)) == 3
    reject_bh, adjusted_bh, _, _ = multipletests(BH_1995, alpha=0.05, method="fdr_bh")
    assert int(reject_bh.sum()) == 4
    assert adjusted_bh[3] == pytest.approx(0.03563, rel=REL)
    assert adjusted_bh[4] == pytest.approx(0.06030, rel=REL)
    reject_bonferroni, _, _, _ = multipletests(BH_1995, alpha=0.05, method="bonferroni")
    assert int(reject_bonferroni.sum()) == 3


@pytest.mark.parametrize(
    ("k", "exact", "midp"), [(4, 0.1250, 0.06250), (5, 0.06250, 0.03125), (6, 0.03125, 0.01563)]
)
def test_t13_one_way_discordance(k: int, exact: float, midp: float) -> None:
    assert mcnemar(0, k, method="exact").pvalue == pytest.approx(exact, rel=REL)
    assert mcnemar(0, k, method="midp").pvalue == pytest.approx(midp, rel=REL)


def test_t15_group_sequential_constants() -> None:
    obf = obf_boundaries(5, 0.05)
    assert obf[-1] == pytest.approx(2.040, rel=REL)  # C_B(5, 0.05)
    np.testing.assert_allclose(obf, 2.040 * np.sqrt(5 / np.arange(1, 6)), rtol=REL)
    assert pocock_boundaries(5, 0.05)[0] == pytest.approx(2.413, rel=REL)  # C_P(5, 0.05)
    naive = crossing_probability(np.full(5, scipy_stats.norm.isf(0.025)))
    assert naive == pytest.approx(0.1417, rel=REL)
    ten = crossing_probability(np.full(10, scipy_stats.norm.isf(0.025)))
    assert ten == pytest.approx(0.1934, rel=REL)  # §1.3: 10 looks


def test_t18_harrell_davis() -> None:
    values = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 100], dtype=float)
    hd = np.asarray(scipy_stats.mstats.hdquantiles(values, prob=[0.5, 0.9]))
    np.testing.assert_allclose(hd, [5.546, 64.10], rtol=REL)


def test_t19_order_statistic_ranks() -> None:
    ranks = order_statistic_ranks(1000, 0.99, 0.95)
    assert (ranks.lower_rank, ranks.upper_rank) == (983, 997)
    assert ranks.coverage == pytest.approx(0.9761, rel=REL)


@pytest.mark.parametrize(
    ("counts", "chi2", "p"),
    [
        ((600, 400), 40.00, 2.540e-10),
        ((44000, 45000), 11.24, 8.023e-4),
        ((821588, 815482), 22.77, 1.822e-6),
    ],
)
def test_t20_srm_chi2(counts: tuple[int, int], chi2: float, p: float) -> None:
    check = task_mix_chi2({"a": counts[0], "b": counts[1]}, {"a": 1, "b": 1}, alpha=0.001)
    assert check.statistic == pytest.approx(chi2, rel=REL)
    assert check.p_value == pytest.approx(p, rel=REL)
    assert not check.ok


@pytest.mark.parametrize(("b", "c", "bf", "p"), [(1, 7, 3.556, 0.2813), (0, 10, 93.09, 0.01074)])
def test_t22_sequential_mcnemar(b: int, c: int, bf: float, p: float) -> None:
    result = sequential_mcnemar(b, c)
    assert result.bayes_factor == pytest.approx(bf, rel=REL)
    assert result.p_value == pytest.approx(p, rel=REL)
    mirrored = sequential_mcnemar(c, b).bayes_factor  # the two-sided mixture is symmetric
    assert mirrored == pytest.approx(result.bayes_factor, rel=1e-12)


def test_section_1_7_sample_sizes() -> None:
    # Not a numbered vector: n ≈ 1570 / 3924 / 7849 (ψ = 2 / 5 / 10%), rounded up here.
    sizes = [paired_binary_min_pairs(psi, 0.0, 0.01) for psi in (0.02, 0.05, 0.10)]
    assert sizes == [1570, 3925, 7849]
    assert math.isclose(sizes[1], 3924, abs_tol=1)
