"""Two-arm proportion tests and the conditional binomial e-value."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate

from shadoweval.stats.canary.two_arm import (
    conditional_binomial_evalue,
    proportion_excess,
    proportion_noninferiority,
)
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.sequential import sequential_mcnemar
from tests.stats.reference import two_proportions as ref

TABLES = [
    (56, 70, 48, 80),
    (20, 1000, 18, 1000),
    (5, 40, 1, 60),
    (30, 100, 40, 120),
    (0, 50, 3, 50),
    (0, 10, 0, 20),
    (10, 10, 0, 20),
    (123, 5000, 101, 4800),
]


def test_newcombe_1998_mn_interval() -> None:
    # Newcombe (Stat Med 1998) example 56/70 vs 48/80, Miettinen–Nurminen 95%: 0.0528 to 0.3382.
    r = proportion_noninferiority(56, 70, 48, 80, margin=0.1, alpha=0.025)
    assert r.low == pytest.approx(0.0528, abs=5e-5)
    assert r.high == pytest.approx(0.3382, abs=5e-5)
    assert r.estimate == pytest.approx(0.2)


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("margin", [-0.05, 0.0, 0.01, 0.1, 0.3])
def test_score_test_matches_reference(table: tuple[int, int, int, int], margin: float) -> None:
    ni = proportion_noninferiority(*table, margin=margin, alpha=0.05)
    ex = proportion_excess(*table, max_increase=margin, alpha=0.05)
    assert ni.p_value == pytest.approx(ref.fm_pvalue(*table, margin, "smaller"), abs=1e-9)
    assert ex.p_value == pytest.approx(ref.fm_pvalue(*table, margin, "larger"), abs=1e-9)
    assert ni.passed == (ni.p_value <= 0.05)
    assert not ni.breach
    assert ex.breach == (ex.p_value <= 0.05)
    assert not ex.passed


@pytest.mark.parametrize("table", TABLES)
def test_interval_matches_reference(table: tuple[int, int, int, int]) -> None:
    r = proportion_noninferiority(*table, margin=0.05, alpha=0.05)
    low, high = ref.mn_interval(*table, 0.10)
    assert r.low == pytest.approx(low, abs=1e-7)
    assert r.high == pytest.approx(high, abs=1e-7)
    assert r.low <= r.estimate <= r.high


def test_restricted_mle_is_the_likelihood_maximum() -> None:
    p1, p2 = ref.restricted_mle(56, 70, 48, 80, 0.33817)
    assert p1 - p2 == pytest.approx(0.33817)
    assert p1 == pytest.approx(0.8507637, abs=1e-6)


def test_clear_cases_and_json() -> None:
    good = proportion_noninferiority(100, 10000, 100, 10000, margin=0.01, alpha=0.05)
    assert good.passed
    bad = proportion_excess(300, 10000, 100, 10000, max_increase=0.01, alpha=0.05)
    assert bad.breach
    j = bad.to_json()
    assert j["breach"] is True
    assert j["passed"] is False
    json.dumps(j, allow_nan=False)


def _quad_evalue(k: int, m: int, pi0: float) -> float:
    # scaled by the likelihood at θ = π0 to avoid underflow
    def f(t: float) -> float:
        return math.exp(
            k * (math.log(t) - math.log(pi0)) + (m - k) * (math.log1p(-t) - math.log1p(-pi0))
        )

    value, _ = integrate.quad(f, pi0, 1.0, epsabs=0.0, epsrel=1e-11, limit=500)
    return float(value) / (1 - pi0)


@pytest.mark.parametrize(
    ("k", "m", "pi0"),
    [(7, 8, 0.5), (10, 10, 0.5), (3, 10, 0.1), (0, 5, 0.05), (40, 100, 0.25), (0, 0, 0.3)],
)
def test_evalue_matches_quadrature(k: int, m: int, pi0: float) -> None:
    assert conditional_binomial_evalue(k, m, pi0) == pytest.approx(
        _quad_evalue(k, m, pi0), rel=1e-8
    )


@pytest.mark.parametrize(("b", "c"), [(1, 7), (0, 10), (5, 5), (30, 12), (0, 0)])
def test_evalue_is_sequential_mcnemar_greater_at_half(b: int, c: int) -> None:
    e = conditional_binomial_evalue(c, b + c, 0.5)
    assert e == pytest.approx(sequential_mcnemar(b, c, side="greater").bayes_factor, rel=1e-10)


def test_evalue_valid_under_peeking() -> None:
    # H0 boundary θ = π0 = 0.2: p = min(1, 1/E) read after every event up to 300 events
    # rejects at most about α over the whole run.
    rng = np.random.default_rng(16)
    alpha, runs, events, pi0 = 0.05, 400, 300, 0.2
    hits = rng.random((runs, events)) < pi0
    ks = np.cumsum(hits, axis=1)
    rejected = 0
    for run in range(runs):
        for m in range(1, events + 1, 3):
            if conditional_binomial_evalue(int(ks[run, m - 1]), m, pi0) >= 1 / alpha:
                rejected += 1
                break
    assert rejected / runs <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / runs)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: proportion_noninferiority(-1, 10, 1, 10, 0.1, 0.05), "x_c"),
        (lambda: proportion_noninferiority(1, 0, 1, 10, 0.1, 0.05), "n_c"),
        (lambda: proportion_noninferiority(1, 10, 11, 10, 0.1, 0.05), "x_b"),
        (lambda: proportion_noninferiority(1, 10, 1, 10, 1.5, 0.05), "margin"),
        (lambda: proportion_excess(1, 10, 1, 10, 1.5, 0.05), "max_increase"),
        (lambda: proportion_excess(1, 10, 1, 10, 0.1, 0.7), "alpha"),
        (lambda: conditional_binomial_evalue(5, 3, 0.5), "k_candidate"),
        (lambda: conditional_binomial_evalue(1, -3, 0.5), "k_total"),
        (lambda: conditional_binomial_evalue(1, 3, 1.0), "null_share"),
    ],
)
def test_bad_input_names_argument(call: object, name: str) -> None:
    with pytest.raises(InvalidDataError, match=name):
        call()  # type: ignore[operator]
