"""McNemar, Tango and Holm against the reference vectors of gate-statistics.md §4."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.multiplicity import holm
from shadoweval.stats.paired_binary import McNemarMethod, mcnemar, tango_score_ci, tango_score_test

REL = 5e-4  # gate-statistics.md §4: |Δ| ≤ 5e-4 relative, i.e. 4 significant digits

# Cavo 2012 table [[59, 6], [16, 80]]: b = n12 = 6, c = n21 = 16.
CAVO_B, CAVO_C, CAVO_N = 6, 16, 161


def test_t1_exact_mcnemar() -> None:
    result = mcnemar(CAVO_B, CAVO_C, method="exact")
    assert result.pvalue == pytest.approx(0.05248, rel=REL)
    assert result.statistic == 6


@pytest.mark.parametrize(
    ("method", "chi2", "p"),
    [("asymptotic", 4.545, 0.03301), ("asymptotic_cc", 3.682, 0.05501)],
)
def test_t3_asymptotic_mcnemar(method: McNemarMethod, chi2: float, p: float) -> None:
    result = mcnemar(CAVO_B, CAVO_C, method=method)
    assert result.statistic == pytest.approx(chi2, rel=REL)
    assert result.pvalue == pytest.approx(p, rel=REL)


@pytest.mark.parametrize(
    ("method", "p"), [("exact", 0.07031), ("midp", 0.03906), ("asymptotic", 0.03389)]
)
def test_t4_bentur(method: str, p: float) -> None:
    # Bentur 2009 table [[1, 1], [7, 12]]: b = 1, c = 7.
    assert mcnemar(1, 7, method=method).pvalue == pytest.approx(p, rel=REL)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("k", "exact", "midp"), [(4, 0.1250, 0.06250), (5, 0.06250, 0.03125), (6, 0.03125, 0.01563)]
)
def test_t13_one_way_discordance(k: int, exact: float, midp: float) -> None:
    assert mcnemar(0, k, method="exact").pvalue == pytest.approx(exact, rel=REL)
    assert mcnemar(0, k, method="midp").pvalue == pytest.approx(midp, rel=REL)
    assert mcnemar(k, 0, method="midp").pvalue == pytest.approx(midp, rel=REL)


def test_zero_discordance_is_no_evidence() -> None:
    # Pitfall 2: statsmodels' asymptotic McNemar says p = 0 here; ours says 1.
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        assert sm_mcnemar([[50, 0], [0, 50]], exact=False).pvalue == 0.0
    for method in ("exact", "midp", "asymptotic", "asymptotic_cc"):
        for alternative in ("two-sided", "greater", "less"):
            r = mcnemar(0, 0, method=method, alternative=alternative)
            assert r.pvalue == 1.0
            assert np.isfinite(r.statistic)


def test_agrees_with_statsmodels_on_random_tables() -> None:
    rng = np.random.default_rng(3)
    for b, c in rng.integers(0, 40, size=(40, 2)):
        if b + c == 0:
            continue
        table = [[10, int(b)], [int(c), 10]]
        assert mcnemar(int(b), int(c), method="exact").pvalue == pytest.approx(
            sm_mcnemar(table, exact=True).pvalue, rel=1e-9
        )
        for method, correction in (("asymptotic", False), ("asymptotic_cc", True)):
            ours = mcnemar(int(b), int(c), method=method)  # type: ignore[arg-type]
            theirs = sm_mcnemar(table, exact=False, correction=correction)
            assert ours.statistic == pytest.approx(theirs.statistic, rel=1e-9)
            assert ours.pvalue == pytest.approx(theirs.pvalue, rel=1e-9)


def test_one_sided_directions() -> None:
    # 6 pairs fail only on the second arm: evidence that the second arm fails more.
    greater = mcnemar(6, 0, method="midp", alternative="greater")
    less = mcnemar(6, 0, method="midp", alternative="less")
    assert greater.pvalue == pytest.approx(0.5**6 / 2, rel=1e-12)
    assert less.pvalue == pytest.approx(1 - 0.5**6 / 2, rel=1e-12)
    assert mcnemar(0, 6, method="exact", alternative="greater").pvalue == 1.0
    z = mcnemar(9, 1, method="asymptotic", alternative="greater")
    assert z.statistic == pytest.approx(8 / np.sqrt(10))
    assert mcnemar(9, 1, method="asymptotic_cc", alternative="greater").statistic == (
        pytest.approx(7 / np.sqrt(10))
    )


def test_mcnemar_rejects_bad_counts() -> None:
    with pytest.raises(InvalidDataError):
        mcnemar(-1, 3)
    with pytest.raises(InvalidDataError):
        mcnemar(1.5, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidDataError):
        mcnemar(True, 3)


def test_t6_tango_ci_at_the_boundary() -> None:
    ci = tango_score_ci(3, 0, 3, confidence=0.95)
    assert ci.low == pytest.approx(-0.1230, rel=REL)
    assert ci.high == 1.0
    mirrored = tango_score_ci(0, 3, 3)
    assert mirrored.low == -1.0
    assert mirrored.high == pytest.approx(0.1230, rel=REL)


def test_t7_tango_zero_discordance() -> None:
    r = tango_score_test(0, 0, 100, -0.05, alternative="greater")
    assert r.statistic == pytest.approx(2.294, rel=REL)
    assert r.pvalue == pytest.approx(0.01089, rel=REL)
    ci = tango_score_ci(0, 0, 100)
    assert -0.1 < ci.low < 0.0 < ci.high < 0.1  # finite, unlike Wald's (0, 0)


def test_t8_tango_noninferiority() -> None:
    r = tango_score_test(CAVO_B, CAVO_C, CAVO_N, -0.10, alternative="greater")
    assert r.statistic == pytest.approx(1.249, rel=REL)
    assert r.pvalue == pytest.approx(0.1058, rel=REL)
    assert r.estimate == pytest.approx((6 - 16) / 161)


def test_tango_test_and_interval_agree() -> None:
    # NI at margin m (H1: δ < m) at level α ⇔ the (1 − 2α) interval's upper limit < m.
    rng = np.random.default_rng(11)
    for _ in range(30):
        n = int(rng.integers(20, 500))
        n12, n21 = (int(x) for x in rng.integers(0, n // 4 + 1, size=2))
        ci = tango_score_ci(n12, n21, n, confidence=0.95)
        for margin in (0.01, 0.02, 0.05):
            p = tango_score_test(n12, n21, n, margin, alternative="less").pvalue
            if abs(ci.high - margin) > 1e-6:
                assert (p < 0.025) == (ci.high < margin)


def test_tango_rejects_inconsistent_tables() -> None:
    with pytest.raises(InvalidDataError):
        tango_score_test(5, 6, 10, 0.1)
    with pytest.raises(InvalidDataError):
        tango_score_test(0, 0, 0, 0.1)
    with pytest.raises(InvalidDataError):
        tango_score_test(1, 1, 10, 1.0)


def test_t12_holm_on_benjamini_hochberg_example() -> None:
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459]
    p += [0.3240, 0.4262, 0.5719, 0.6528, 0.7590, 1.000]
    adjusted = holm(p)
    assert int((adjusted <= 0.05).sum()) == 3
    assert adjusted[:4] == pytest.approx([0.0015, 0.0056, 0.0247, 0.114], rel=REL)
    assert np.all(adjusted >= np.asarray(p))
    # Input order is kept.
    assert holm(p[::-1])[::-1] == pytest.approx(adjusted)


def test_holm_edges() -> None:
    assert holm([]).shape == (0,)
    with pytest.raises(InvalidDataError):
        holm([0.1, float("nan")])
    with pytest.raises(InvalidDataError):
        holm([1.2])
