"""Sample-ratio mismatch: T21 reference values, quadrature cross-check, validity under peeking."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.canary.srm import sample_ratio_mismatch, srm_log_bayes_factor
from shadoweval.stats.inputs import InvalidDataError
from tests.stats.reference.srm_reference import srm_bayes_factor_quad


@pytest.mark.parametrize(
    ("counts", "bf", "p"),
    [((600, 400), 2.667e7, 3.750e-8), ((44000, 45000), 9.145, 0.1094)],
)
def test_t21_reference_values(counts: tuple[int, int], bf: float, p: float) -> None:
    # gate-statistics.md T21: Dirichlet-multinomial k = 100, θ0 = (½, ½).
    r = sample_ratio_mismatch(*counts, expected_share=0.5, concentration=100.0)
    assert r.bayes_factor == pytest.approx(bf, rel=5e-4)
    assert r.p_always_valid == pytest.approx(p, rel=5e-4)


def test_t20_fixed_n_beside_it() -> None:
    # T20: χ² p = 2.540e-10 and 8.023e-4; pitfall 11: 44,000 vs 45,000 is no SRM always-valid.
    a = sample_ratio_mismatch(600, 400, 0.5)
    b = sample_ratio_mismatch(44000, 45000, 0.5)
    assert a.p_fixed_n == pytest.approx(2.540e-10, rel=5e-4)
    assert b.p_fixed_n == pytest.approx(8.023e-4, rel=5e-4)
    assert a.mismatch
    assert not b.mismatch


@pytest.mark.parametrize(
    ("x", "y", "s", "c"),
    [
        (600, 400, 0.5, 100.0),
        (44000, 45000, 0.5, 100.0),
        (130, 870, 0.1, 100.0),
        (5, 95, 0.05, 20.0),
        (0, 50, 0.2, 100.0),
        (3000, 7000, 0.3, 1000.0),
    ],
)
def test_closed_form_matches_quadrature(x: int, y: int, s: float, c: float) -> None:
    r = sample_ratio_mismatch(x, y, s, concentration=c)
    assert r.log_bayes_factor == pytest.approx(srm_bayes_factor_quad(x, y, s, c), abs=1e-7)


def test_no_sessions_and_json() -> None:
    r = sample_ratio_mismatch(0, 0, 0.1)
    assert r.bayes_factor == 1.0
    assert r.p_always_valid == 1.0
    assert not r.mismatch
    j = r.to_json()
    assert j["p_fixed_n"] is None
    assert j["observed_share"] is None
    json.dumps(j, allow_nan=False)


def test_always_valid_under_peeking() -> None:
    # Under H0 (share 0.1), the p read after every batch of 20 sessions up to 4,000
    # rejects at most about α over the whole run; the χ² read the same way does worse.
    rng = np.random.default_rng(20261203)
    alpha, runs, looks, batch, s = 0.05, 2000, 200, 20, 0.1
    cand = np.cumsum(rng.binomial(batch, s, size=(runs, looks)), axis=1)
    total = batch * np.arange(1, looks + 1)
    log_bf = srm_log_bayes_factor(cand, total - cand, s, 100.0)
    # the vectorised path is the scalar one
    for i, j in [(0, 0), (5, 77), (1999, 199)]:
        one = sample_ratio_mismatch(int(cand[i, j]), int(total[j] - cand[i, j]), s)
        assert one.log_bayes_factor == pytest.approx(log_bf[i, j], abs=1e-12)
    av = np.mean(np.any(log_bf >= math.log(1 / alpha), axis=1))
    chi2 = (cand - total * s) ** 2 / (total * s * (1 - s))
    fixed = np.mean(np.any(chi2 >= scipy_stats.chi2.ppf(1 - alpha, 1), axis=1))
    assert av <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / runs)
    assert fixed > 2 * alpha


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_candidate": -1}, "n_candidate"),
        ({"n_baseline": 2.5}, "n_baseline"),
        ({"expected_share": 0.0}, "expected_share"),
        ({"expected_share": 1.5}, "expected_share"),
        ({"alpha": 1.0}, "alpha"),
        ({"concentration": 0.0}, "concentration"),
    ],
)
def test_bad_input_names_argument(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"n_candidate": 10, "n_baseline": 90, "expected_share": 0.1}
    args.update(kwargs)
    with pytest.raises(InvalidDataError, match=name):
        sample_ratio_mismatch(**args)  # type: ignore[arg-type]
