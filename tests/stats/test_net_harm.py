"""Net harm: the stratified two-phase estimator, its interval, the judge count, the check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.net_harm import (
    NOT_REACHABLE,
    divergence_strata,
    estimate_net_harm,
    pooled_strata,
    stratum_label,
    stratum_names,
)
from tests.stats.reference.net_harm_reference import reference_interval, reference_net_harm

EDGES = (0.1, 0.2, 0.35)
NAN = math.nan
W, T, B = 1.0, 0.0, -1.0  # worse, tie, better


def unit(
    strata: list[list[float]], unchanged: int, unjudged: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrays of one unit: stratum h holds the judged qualities ``strata[h]`` plus
    ``unjudged[h]`` changed pairs without a quality; then ``unchanged`` unchanged pairs."""
    unjudged = unjudged or [0] * len(strata)
    q: list[float] = []
    s: list[int] = []
    for h, (values, extra) in enumerate(zip(strata, unjudged, strict=True)):
        q += values + [NAN] * extra
        s += [h] * (len(values) + extra)
    changed = [True] * len(q) + [False] * unchanged
    q += [NAN] * unchanged
    s += [-1] * unchanged
    return np.array(q), np.array(changed), np.array(s, dtype=np.int64)


def as_pairs(q: np.ndarray, c: np.ndarray, s: np.ndarray) -> list[tuple[float | None, bool, int]]:
    return [
        (None if math.isnan(x) else float(x), bool(ci), int(si))
        for x, ci, si in zip(q, c, s, strict=True)
    ]


# --------------------------------------------------------------------------- strata


def test_divergence_strata_by_edges() -> None:
    d = np.array([0.0, 0.05, 0.1, 0.19999, 0.2, 0.3, 0.35, 0.9, 2.0, NAN])
    assert divergence_strata(d, EDGES).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3, 4]
    assert divergence_strata(np.array([]), EDGES).tolist() == []
    assert divergence_strata(np.array([0.5, NAN]), ()).tolist() == [0, 1]


def test_divergence_strata_rejects_bad_input() -> None:
    with pytest.raises(InvalidDataError, match="1 infinite"):
        divergence_strata(np.array([0.1, math.inf]), EDGES)
    with pytest.raises(ValueError, match="strictly increasing"):
        divergence_strata(np.array([0.1]), (0.2, 0.1))
    with pytest.raises(InvalidDataError, match="1-D"):
        divergence_strata(np.zeros((2, 2)), EDGES)


def test_stratum_names() -> None:
    assert stratum_names(EDGES) == {
        0: "D < 0.1",
        1: "D 0.1-0.2",
        2: "D 0.2-0.35",
        3: "D >= 0.35",
        4: "no similarity",
        5: "ground truth only",
    }
    with pytest.raises(ValueError, match="outside"):
        stratum_label(6, EDGES)


def test_pooled_strata_cross_task_type_and_divergence() -> None:
    group = np.array(["qa", "code", "qa", "code", "qa"], dtype=object)
    stratum = np.array([0, 4, -1, 0, 3])
    codes, names = pooled_strata(group, stratum, EDGES)
    # task types sorted: code 0, qa 1; width len(edges) + 3 = 6 (the divergence strata,
    # "no similarity" and "ground truth only").
    assert codes.tolist() == [6, 4, -1, 0, 9]
    assert names == {
        0: "code: D < 0.1",
        4: "code: no similarity",
        6: "qa: D < 0.1",
        9: "qa: D >= 0.35",
    }
    with pytest.raises(InvalidDataError, match="above 5"):
        pooled_strata(group, np.array([0, 6, 0, 0, 0]), EDGES)


def test_pooled_estimate_is_the_traffic_weighted_sum_of_task_types() -> None:
    # Task types judged at different rates: the pooled strata keep each one's weights.
    rng = np.random.default_rng(3)
    parts = []
    for name, n, judged_share in (("a", 300, 0.8), ("b", 700, 0.1)):
        c = rng.random(n) < 0.4
        s = np.where(c, rng.integers(0, 5, n), -1)
        q = np.where(c & (rng.random(n) < judged_share), rng.choice([-1.0, 0.0, 1.0], n), NAN)
        parts.append((name, q, c, s))
    group = np.concatenate([np.full(p[1].size, p[0], dtype=object) for p in parts])
    q = np.concatenate([p[1] for p in parts])
    c = np.concatenate([p[2] for p in parts])
    s = np.concatenate([p[3] for p in parts])
    codes, names = pooled_strata(group, s, EDGES)
    pooled = estimate_net_harm(q, c, codes, names=names)
    by_type = [estimate_net_harm(p[1], p[2], p[3]) for p in parts]
    assert pooled.estimate == pytest.approx(0.3 * by_type[0].estimate + 0.7 * by_type[1].estimate)
    # The phase-2 variance adds up over task types with the squared weights.
    assert pooled.se_finite**2 == pytest.approx(
        0.09 * by_type[0].se_finite ** 2 + 0.49 * by_type[1].se_finite ** 2
    )
    assert {r.name for r in pooled.strata} <= set(names.values())


# --------------------------------------------------------------------------- the estimator


def test_hand_computed_vector() -> None:
    # n = 20 pairs: 10 unchanged (ties), stratum 0 with 6 changed pairs of which 4 judged
    # (worse, tie, better, better), stratum 1 with 4 changed pairs of which 2 judged
    # (worse, worse).
    q, c, s = unit([[W, T, B, B], [W, W]], unchanged=10, unjudged=[2, 2])
    e = estimate_net_harm(q, c, s)
    # weights w0 = 6/20 = 0.3, w1 = 4/20 = 0.2, unchanged 0.5
    # means ȳ0 = (1 + 0 − 1 − 1)/4 = −0.25, ȳ1 = 1
    # Δ̂ = 0.3·(−0.25) + 0.2·1 = 0.125
    assert e.estimate == pytest.approx(0.125, abs=1e-15)
    # s0² (ddof 1): deviations 1.25, 0.25, −0.75, −0.75 → (1.5625 + 0.0625 + 2·0.5625)/3
    #   = 2.75/3 = 0.916667; pseudo-counts {1, 0, −1, −1} + {−1, 0, 1}: mean −1/7,
    #   E[y²] = 5/7 → 34/49 = 0.6939 < s0², so v0 = 11/12.
    # s1² = 0; pseudo-counts {1, 1} + {−1, 0, 1}: mean 0.4, E[y²] = 0.8 → v1 = 0.64.
    rows = {r.stratum: r for r in e.strata}
    assert rows[0].sample_variance == pytest.approx(11 / 12)
    assert rows[0].variance == pytest.approx(11 / 12)
    assert rows[1].sample_variance == 0.0
    assert rows[1].variance == pytest.approx(0.64)
    # phase 2 (Cochran 5.6): 0.3²·(1 − 4/6)·(11/12)/4 + 0.2²·(1 − 2/4)·0.64/2
    #   = 0.09·11/144 + 0.04·0.16 = 0.006875 + 0.0064 = 0.013275
    assert e.se_finite**2 == pytest.approx(0.013275)
    # σ̂² = 0.3·(11/12 + (−0.25 − 0.125)²) + 0.2·(0.64 + (1 − 0.125)²) + 0.5·0.125²
    #    = 0.3·1.0572917 + 0.2·1.405625 + 0.0078125 = 0.3171875 + 0.281125 + 0.0078125
    #    = 0.606125; phase 1: 0.606125/20 = 0.03030625
    # Var = 0.03030625 + 0.013275 = 0.04358125, se = 0.2087612
    assert e.se**2 == pytest.approx(0.04358125)
    assert e.se == pytest.approx(0.2087612, abs=1e-7)
    # P(worse) = 0.3·1/4 + 0.2·2/2 = 0.275; P(better) = 0.3·2/4 + 0.2·0 = 0.15
    assert e.p_worse == pytest.approx(0.275)
    assert e.p_better == pytest.approx(0.15)
    assert e.p_worse - e.p_better == pytest.approx(e.estimate)
    # 95% two-sided: 0.125 ± 1.959964·0.2087612 = (−0.284164, 0.534164)
    low, high = e.interval(0.025)
    assert (low, high) == pytest.approx((-0.284164, 0.534164), abs=1e-6)
    assert (e.n, e.changed, e.judged, e.worse, e.ties, e.better) == (20, 10, 6, 3, 1, 2)
    assert e.unjudged_strata == ()


@pytest.mark.parametrize("seed", range(8))
def test_matches_the_reference_implementation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 400))
    c = rng.random(n) < rng.uniform(0.1, 0.9)
    s = np.where(c, rng.integers(0, 5, n), -1)
    judged = c & (rng.random(n) < rng.uniform(0.05, 1.0))
    q = np.where(judged, rng.choice([-1.0, 0.0, 1.0], n, p=rng.dirichlet([1, 1, 1])), NAN)
    # Quality on some unchanged pairs too: it must not be read.
    q[~c & (rng.random(n) < 0.2)] = 1.0
    if seed == 0:  # one stratum with a single judged pair, one all ties, one unjudged
        q[c & (s == 0)] = NAN
        q[np.flatnonzero(c & (s == 0))[:1]] = 1.0
        q[c & (s == 1)] = np.where(judged[c & (s == 1)], 0.0, NAN)
        q[c & (s == 2)] = NAN
    e = estimate_net_harm(q, c, s)
    ref = reference_net_harm(as_pairs(q, c, s))
    assert e.estimate == pytest.approx(ref["net"].estimate, abs=1e-12)
    assert e.se**2 == pytest.approx(ref["net"].variance, rel=1e-10)
    assert e.se_finite**2 == pytest.approx(ref["net"].variance_finite, rel=1e-10, abs=1e-15)
    assert e.unknown == pytest.approx(ref["net"].unknown, abs=1e-15)
    assert e.p_worse == pytest.approx(ref["worse"].estimate, abs=1e-12)
    assert e.worse_share.se**2 == pytest.approx(ref["worse"].variance, rel=1e-10)
    assert e.p_better == pytest.approx(ref["better"].estimate, abs=1e-12)
    assert e.better_share.se**2 == pytest.approx(ref["better"].variance, rel=1e-10)
    z = float(scipy_stats.norm.isf(0.01))
    assert e.bounds(0.01) == pytest.approx(reference_interval(ref["net"], z), abs=1e-12)
    assert e.worse_share.interval(0.01) == pytest.approx(
        reference_interval(ref["worse"], z), abs=1e-12
    )
    if seed == 0:
        rows = {r.stratum: r for r in e.strata}
        assert rows[0].judged == 1
        assert rows[0].variance == 1.0
        assert math.isnan(rows[0].sample_variance)
        assert rows[2].judged == 0
        assert 2 in e.unjudged_strata


def test_no_pairs_and_no_changed_pairs() -> None:
    empty = estimate_net_harm(np.array([]), np.array([], dtype=bool), np.array([], dtype=int))
    assert (empty.n, empty.changed, empty.estimate, empty.se) == (0, 0, 0.0, 0.0)
    q, c, s = unit([], unchanged=50)
    q[:5] = 1.0  # judgements of unchanged pairs are not read
    e = estimate_net_harm(q, c, s)
    assert (e.n, e.changed, e.judged, e.judged_unchanged) == (50, 0, 0, 5)
    assert e.estimate == 0.0
    assert e.se == 0.0
    assert e.interval(0.025) == (0.0, 0.0)
    assert e.p_harm() == 1.0
    assert e.judged_needed(0.02, 0.025, min_judged=30) == 0


def test_every_changed_pair_judged_keeps_the_traffic_variance() -> None:
    # 200 pairs, 20 changed and all judged: 1 worse, 19 ties. The finite-population
    # variance is 0 (these pairs are known exactly), the traffic's is not: one worse
    # pair is no evidence of harm (McNemar: b = 1, c = 0, mid-p 0.25).
    q, c, s = unit([[W] + [T] * 19], unchanged=180)
    e = estimate_net_harm(q, c, s)
    assert e.estimate == pytest.approx(0.005)
    assert e.se_finite == 0.0
    # v = pseudo-count variance 0.1285 (> s² 0.05); σ̂² = 0.1·(0.1285 + 0.045²) + 0.9·0.005²
    assert e.se == pytest.approx(
        math.sqrt((0.1 * (0.128544 + 0.045**2) + 0.9 * 0.005**2) / 200), rel=1e-4
    )
    assert 0.2 < e.p_harm() < 0.35


def test_ten_judged_all_better_do_not_give_a_zero_width_interval() -> None:
    q, c, s = unit([[B] * 10], unchanged=100, unjudged=[90])
    e = estimate_net_harm(q, c, s)
    row = e.strata[0]
    assert row.sample_variance == 0.0
    # pseudo-counts: 11 better, 1 tie, 1 worse of 13 → mean −10/13, E[y²] = 12/13
    assert row.variance == pytest.approx(12 / 13 - (10 / 13) ** 2)  # 0.3314
    low, high = e.interval(0.025)
    assert high - low > 0.1
    assert e.estimate == pytest.approx(-0.5)


def test_unjudged_stratum_widens_the_interval_by_its_weight() -> None:
    q, c, s = unit([[W, T, B, T], []], unchanged=10, unjudged=[0, 6])
    e = estimate_net_harm(q, c, s)
    assert e.unjudged_strata == (1,)
    assert e.unknown == pytest.approx(0.3)  # 6 of 20 pairs
    # stratum 0 mean 0 (weight 0.2), the unjudged stratum at its midpoint 0.
    assert e.estimate == pytest.approx(0.0)
    low, high = e.bounds(0.025)
    assert low < -0.3
    assert high > 0.3
    row = e.strata[1]
    assert row.judged == 0
    assert math.isnan(row.mean)
    assert math.isnan(row.variance)
    # The shares' unjudged stratum sits at 1/2 ± 1/2.
    assert e.p_worse == pytest.approx(0.2 * 0.25 + 0.3 * 0.5)
    assert e.worse_share.unknown == pytest.approx(0.15)
    # p_harm takes the unjudged stratum at its most favourable value.
    assert e.p_harm() == pytest.approx(float(scipy_stats.norm.sf((0.0 - 0.3) / e.se)))


def test_rejects_bad_input() -> None:
    c = np.array([True, False])
    s = np.array([0, -1])
    with pytest.raises(InvalidDataError, match="1 values other than"):
        estimate_net_harm(np.array([0.5, NAN]), c, s)
    with pytest.raises(InvalidDataError, match="booleans"):
        estimate_net_harm(np.array([1.0, NAN]), np.array([1, 0]), s)
    with pytest.raises(InvalidDataError, match="integers"):
        estimate_net_harm(np.array([1.0, NAN]), c, np.array([0.0, -1.0]))
    with pytest.raises(InvalidDataError, match="negative stratum"):
        estimate_net_harm(np.array([1.0, NAN]), c, np.array([-1, -1]))
    with pytest.raises(InvalidDataError, match="differ in shape"):
        estimate_net_harm(np.array([1.0]), c, s)
    e = estimate_net_harm(np.array([1.0, NAN]), c, s)
    with pytest.raises(ValueError, match="level_one_sided"):
        e.interval(0.6)


def test_p_values_agree_with_the_bounds() -> None:
    q, c, s = unit([[W] * 30 + [T] * 20 + [B] * 10, [W, T, T, B]], unchanged=300, unjudged=[40, 30])
    e = estimate_net_harm(q, c, s)
    p = e.p_harm()
    # At the level p the lower bound is exactly 0; at the margin p_noninferior likewise.
    assert e.bounds(p)[0] == pytest.approx(0.0, abs=1e-12)
    margin = 0.15
    p_ni = e.p_noninferior(margin)
    assert e.bounds(p_ni)[1] == pytest.approx(margin, abs=1e-12)


def test_judged_needed_is_the_smallest_count_that_clears_the_margin() -> None:
    rng = np.random.default_rng(11)
    strata = [list(rng.choice([W, T, B], 12, p=[0.2, 0.5, 0.3])) for _ in range(3)]
    q, c, s = unit(strata, unchanged=2000, unjudged=[400, 300, 200])
    e = estimate_net_harm(q, c, s)
    level, margin = 0.0152, 0.05
    # With no extra judgement the projection is the current upper bound.
    assert e.upper_bound_after(0, level) == pytest.approx(e.bounds(level)[1], rel=1e-12)
    k = e.judged_needed(margin, level)
    assert k > 0
    assert e.upper_bound_after(k, level) < margin <= e.upper_bound_after(k - 1, level)
    # Monotone: more judged pairs, a lower bound.
    bounds = [e.upper_bound_after(m, level) for m in (0, 10, 100, 400, e.changed - e.judged)]
    assert bounds == sorted(bounds, reverse=True)
    # min_judged raises the count, never lowers it.
    assert e.judged_needed(margin, level, min_judged=e.judged + k + 50) == k + 50
    # A margin below the estimate cannot be reached by judging.
    assert e.judged_needed(e.estimate - 0.01, level) == NOT_REACHABLE


def test_judged_needed_not_reachable_when_the_traffic_variance_dominates() -> None:
    # 60 pairs, half changed and all but 2 judged, mean 0: even all judged, σ²/n keeps the
    # 2-point margin out of reach.
    q, c, s = unit([[W] * 9 + [T] * 10 + [B] * 9], unchanged=30, unjudged=[2])
    e = estimate_net_harm(q, c, s)
    assert e.judged_needed(0.02, 0.0152) == NOT_REACHABLE
    assert e.judged_needed(0.9, 0.0152) == 0


def test_judged_needed_with_an_unjudged_stratum_judges_it() -> None:
    q, c, s = unit([[T] * 40, []], unchanged=500, unjudged=[100, 50])
    e = estimate_net_harm(q, c, s)
    # The bound is below a wide margin already, but the unjudged stratum must be judged.
    assert e.bounds(0.0152)[1] < 0.2
    assert e.judged_needed(0.2, 0.0152) == 1
    k = e.judged_needed(0.1, 0.0152)
    assert k > 1
    assert e.upper_bound_after(k, 0.0152) < 0.1 <= e.upper_bound_after(k - 1, 0.0152)


# --------------------------------------------------------------------------- simulation

TRUE_STRATA = (  # share of the traffic, P(worse), P(tie), P(better)
    (0.25, 0.15, 0.70, 0.15),
    (0.15, 0.25, 0.35, 0.40),
    (0.10, 0.60, 0.15, 0.25),
)
TRUE_NET_HARM = sum(share * (w - b) for share, w, _, b in TRUE_STRATA)  # 0.0125


def draw_unit(rng: np.random.Generator, n: int, per_stratum: int | None):
    """One unit of ``n`` pairs drawn from the traffic of :data:`TRUE_STRATA` (the rest
    unchanged), ``per_stratum`` changed pairs judged at random in each stratum (None: all)."""
    shares = [share for share, *_ in TRUE_STRATA]
    cat = rng.choice(4, n, p=[*shares, 1 - sum(shares)])
    q_true = np.zeros(n)
    for h, (_, w, t, b) in enumerate(TRUE_STRATA):
        rows = np.flatnonzero(cat == h)
        q_true[rows] = rng.choice([W, T, B], rows.size, p=[w, t, b])
    changed = cat < 3
    stratum = np.where(changed, cat, -1).astype(np.int64)
    q = np.full(n, NAN)
    for h in range(3):
        rows = np.flatnonzero(cat == h)
        take = rows if per_stratum is None else rng.permutation(rows)[:per_stratum]
        q[take] = q_true[take]
    return q, changed, stratum, q_true


def coverage_run(seed: int, reps: int, n: int, per_stratum: int | None):
    rng = np.random.default_rng(seed)
    estimates = np.empty(reps)
    ses = np.empty(reps)
    covered = 0
    for i in range(reps):
        q, c, s, _ = draw_unit(rng, n, per_stratum)
        e = estimate_net_harm(q, c, s)
        estimates[i] = e.estimate
        ses[i] = e.se
        low, high = e.bounds(0.025)
        covered += low <= TRUE_NET_HARM <= high
    return estimates, ses, covered / reps


def test_simulation_unbiased_and_covering_under_stratified_sampling() -> None:
    # 2,000 units of 800 pairs, 30 judged at random per changed stratum.
    estimates, ses, coverage = coverage_run(20240601, 2000, 800, 30)
    mc_se = estimates.std(ddof=1) / math.sqrt(estimates.size)
    assert abs(estimates.mean() - TRUE_NET_HARM) < 3 * mc_se
    assert coverage >= 0.93
    # The standard error matches the spread of the estimates.
    assert 0.85 < math.sqrt(np.mean(ses**2)) / estimates.std(ddof=1) < 1.2


def test_simulation_covers_when_every_changed_pair_is_judged() -> None:
    # Small fully judged units: the finite-population variance alone would be 0.
    estimates, _, coverage = coverage_run(7, 2000, 200, None)
    q, c, s, _ = draw_unit(np.random.default_rng(8), 200, None)
    assert estimate_net_harm(q, c, s).se_finite == 0.0  # it would cover nothing
    mc_se = estimates.std(ddof=1) / math.sqrt(estimates.size)
    assert abs(estimates.mean() - TRUE_NET_HARM) < 3 * mc_se
    assert coverage >= 0.93


def test_simulation_finite_population_variance_covers_the_pairs_net_harm() -> None:
    # One fixed unit, judged subsamples redrawn: Cochran 5.6 covers these pairs' net harm.
    rng = np.random.default_rng(99)
    _, c, s, q_true = draw_unit(rng, 1000, None)
    finite_net = float(q_true[c].sum() / q_true.size)
    covered = 0
    estimates = []
    z = float(scipy_stats.norm.isf(0.025))
    for _ in range(2000):
        q = np.full(q_true.size, NAN)
        for h in range(3):
            rows = np.flatnonzero(c & (s == h))
            take = rng.permutation(rows)[:25]
            q[take] = q_true[take]
        e = estimate_net_harm(q, c, s)
        estimates.append(e.estimate)
        covered += abs(e.estimate - finite_net) <= z * e.se_finite
    mc_se = np.std(estimates, ddof=1) / math.sqrt(len(estimates))
    assert abs(np.mean(estimates) - finite_net) < 3 * mc_se
    assert covered / 2000 >= 0.93
