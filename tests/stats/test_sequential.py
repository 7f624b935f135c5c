"""Sequential validity: checkpoints, confidence sequences, α spending, sequential McNemar, GST."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.errors import DegenerateDataWarning
from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError
from shadoweval.stats.sequential import (
    checkpoint_schedule,
    confidence_sequence,
    lan_demets_spent,
    latest_checkpoint,
    look_alpha,
    sequential_mcnemar,
)
from tests.stats.reference.group_sequential import (
    crossing_probability,
    obf_boundaries,
    spending_boundaries,
)

# ------------------------------------------------------------------ checkpoints


def test_default_schedule_doubles_from_200() -> None:
    assert checkpoint_schedule()[:5] == (200, 400, 800, 1600, 3200)
    assert len(checkpoint_schedule()) == 64
    assert checkpoint_schedule(limit=3) == (200, 400, 800)


def test_schedule_ends_at_n_max() -> None:
    assert checkpoint_schedule(n_max=5000) == (200, 400, 800, 1600, 3200, 5000)
    assert checkpoint_schedule(n_max=3200) == (200, 400, 800, 1600, 3200)  # no duplicate
    assert checkpoint_schedule(n_max=200) == (200,)


def test_schedule_rounds_up_and_stays_increasing() -> None:
    assert checkpoint_schedule(200, 1.5, limit=5) == (200, 300, 450, 675, 1013)
    fine = checkpoint_schedule(1, 1.01, limit=64)
    assert fine[:3] == (1, 2, 3)
    assert all(b > a for a, b in itertools.pairwise(fine))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"factor": 1.0}, "factor"),
        ({"factor": math.nan}, "factor"),
        ({"first": 0}, "first"),
        ({"first": True}, "first"),
        ({"n_max": 100}, "below the first checkpoint"),
        ({"n_max": 10**9, "limit": 5}, "limit"),
        ({"limit": 0}, "limit"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidDataError, match=match):
        checkpoint_schedule(**kwargs)  # type: ignore[arg-type]


def test_latest_checkpoint() -> None:
    assert latest_checkpoint(0) is None
    assert latest_checkpoint(199) is None
    assert latest_checkpoint(200) == (1, 200)
    assert latest_checkpoint(399) == (1, 200)
    assert latest_checkpoint(1599) == (3, 800)
    assert latest_checkpoint(1600) == (4, 1600)
    assert latest_checkpoint(10**6, n_max=5000) == (6, 5000)
    assert latest_checkpoint(4999, n_max=5000) == (5, 3200)
    with pytest.raises(InvalidDataError, match="n must be >= 0"):
        latest_checkpoint(-1)


def test_latest_checkpoint_agrees_with_schedule() -> None:
    schedule = checkpoint_schedule(50, 1.3, limit=40)
    for n in np.random.default_rng(1).integers(50, schedule[-1], 200):
        k, n_k = latest_checkpoint(int(n), first=50, factor=1.3)  # type: ignore[misc]
        assert schedule[k - 1] == n_k <= n < schedule[k]


# ------------------------------------------------------------------ confidence sequence


def _ws_half_width(sd: float, n: int, alpha: float, n_star: int) -> float:
    """Waudby-Smith et al. eq. 9 as written in gate-statistics.md §1.3."""
    rho2 = (-2 * math.log(alpha) + math.log(1 - 2 * math.log(alpha))) / n_star
    return sd * math.sqrt(
        2 * (n * rho2 + 1) / (n * n * rho2) * math.log(math.sqrt(n * rho2 + 1) / alpha)
    )


def test_two_sided_matches_published_formula() -> None:
    x = np.random.default_rng(2).normal(0.3, 2.0, 700)
    result = confidence_sequence(x, alpha=0.05, n_star=1000)
    half = _ws_half_width(float(np.std(x, ddof=1)), 700, 0.05, 1000)
    assert result.mean == pytest.approx(float(np.mean(x)), rel=1e-12)
    assert result.high - result.mean == pytest.approx(half, rel=1e-10)
    assert result.mean - result.low == pytest.approx(half, rel=1e-10)
    assert (result.n, result.alpha, result.method) == (700, 0.05, "asymptotic-cs")


@pytest.mark.parametrize(("fraction", "ratio"), [(1.0, 1.549), (0.2, 1.716)])
def test_width_relative_to_fixed_n(fraction: float, ratio: float) -> None:
    # §1.3: ≈ 1.55× the fixed-n interval at N*, ≈ 1.7× at N*/5.
    n_star = 5000
    n = int(n_star * fraction)
    fixed = 1.959964 / math.sqrt(n)
    assert _ws_half_width(1.0, n, 0.05, n_star) / fixed == pytest.approx(ratio, abs=1e-3)


def test_tightest_near_n_star() -> None:
    def scaled(n: int) -> float:
        return _ws_half_width(1.0, n, 0.05, 2000) * math.sqrt(n)

    assert scaled(2000) < scaled(1400)
    assert scaled(2000) < scaled(2800)


@pytest.mark.parametrize("side", ["two-sided", "upper", "lower"])
def test_p_value_inverts_the_sequence(side: str) -> None:
    x = np.random.default_rng(3).normal(0.0, 1.0, 400)
    cs = confidence_sequence(x, alpha=0.05, n_star=400, side=side)  # type: ignore[arg-type]
    edge = cs.high if side != "lower" else cs.low
    at_edge = confidence_sequence(x, alpha=0.05, n_star=400, side=side, null=edge)  # type: ignore[arg-type]
    assert at_edge.p_value == pytest.approx(0.05, rel=1e-8)
    beyond = edge + (0.01 if side != "lower" else -0.01)
    outside = confidence_sequence(x, alpha=0.05, n_star=400, side=side, null=beyond)  # type: ignore[arg-type]
    assert outside.p_value < 0.05
    inside = confidence_sequence(x, alpha=0.05, n_star=400, side=side, null=cs.mean)  # type: ignore[arg-type]
    assert inside.p_value > 0.05


def test_one_sided_bounds() -> None:
    x = np.random.default_rng(4).normal(1.0, 1.0, 900)
    upper = confidence_sequence(x, alpha=0.025, n_star=900, side="upper")
    lower = confidence_sequence(-x, alpha=0.025, n_star=900, side="lower")
    assert upper.low == -math.inf
    assert lower.high == math.inf
    assert lower.low == pytest.approx(-upper.high, rel=1e-12)  # mirror image
    # The one-sided mixture lies between the two-sided boundaries at α and 2α.
    two_2a = confidence_sequence(x, alpha=0.05, n_star=900)
    two_a = confidence_sequence(x, alpha=0.025, n_star=900)
    assert two_2a.high <= upper.high < two_a.high


def test_degenerate_values_warn_and_floor_helps() -> None:
    zeros = np.zeros(300)
    with pytest.warns(DegenerateDataWarning, match="no variance"):
        cs = confidence_sequence(zeros, alpha=0.05, n_star=1000, side="upper", null=0.01)
    assert (cs.high, cs.p_value, cs.degenerate) == (0.0, 0.0, True)
    floored = confidence_sequence(zeros, alpha=0.05, n_star=1000, side="upper", sd_floor=0.1)
    assert floored.high > 0.0
    assert not floored.degenerate


@pytest.mark.parametrize(
    ("values", "kwargs", "error", "match"),
    [
        ([1.0, math.nan], {}, InvalidDataError, "NaN"),
        ([1.0], {}, InsufficientDataError, "at least 2"),
        ([1.0, 2.0], {"alpha": 0.5}, InvalidDataError, "alpha"),
        ([1.0, 2.0], {"n_star": 0}, InvalidDataError, "n_star"),
        ([1.0, 2.0], {"side": "both"}, InvalidDataError, "side"),
        ([1.0, 2.0], {"sd_floor": -1.0}, InvalidDataError, "sd_floor"),
        ([1.0, 2.0], {"null": math.inf}, InvalidDataError, "null"),
    ],
)
def test_confidence_sequence_validation(
    values: list[float], kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    arguments: dict[str, object] = {"alpha": 0.05, "n_star": 100} | kwargs
    with pytest.raises(error, match=match):
        confidence_sequence(values, **arguments)  # type: ignore[arg-type]


# ------------------------------------------------------------------ α spending


def test_lan_demets_spending() -> None:
    assert lan_demets_spent(0.0, 0.05) == 0.0
    assert lan_demets_spent(1.0, 0.05) == pytest.approx(0.05, rel=1e-12)
    assert lan_demets_spent(3.0, 0.05) == lan_demets_spent(1.0, 0.05)
    assert lan_demets_spent(1.0, 0.05, "pocock") == pytest.approx(0.05, rel=1e-12)
    assert lan_demets_spent(0.5, 0.05, "pocock") == pytest.approx(
        0.05 * math.log(1 + (math.e - 1) * 0.5), rel=1e-12
    )
    # OBF spends almost nothing early: 2 − 2Φ(1.96/√0.2) ≈ 1.17e-5.
    assert lan_demets_spent(0.2, 0.05) == pytest.approx(
        2 * scipy_stats.norm.sf(scipy_stats.norm.isf(0.025) / math.sqrt(0.2)), rel=1e-12
    )
    spent = [lan_demets_spent(t, 0.05) for t in np.linspace(0, 1, 11)]
    assert all(b > a for a, b in itertools.pairwise(spent))
    with pytest.raises(InvalidDataError, match="information fraction"):
        lan_demets_spent(-0.1, 0.05)
    with pytest.raises(InvalidDataError, match="spending function"):
        lan_demets_spent(0.5, 0.05, "linear")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["obf", "pocock"])
def test_look_alpha_with_n_max_sums_to_alpha(kind: str) -> None:
    schedule = checkpoint_schedule(n_max=5000)
    levels = [
        look_alpha(k, schedule, alpha=0.05, n_max=5000, kind=kind)  # type: ignore[arg-type]
        for k in range(1, len(schedule) + 1)
    ]
    assert all(level > 0 for level in levels)
    assert sum(levels) == pytest.approx(0.05, rel=1e-12)


def test_look_alpha_without_n_max_never_exceeds_alpha() -> None:
    schedule = checkpoint_schedule(limit=64)
    levels = [look_alpha(k, schedule, alpha=0.05, n_max=None) for k in range(1, 65)]
    assert levels[0] == pytest.approx(0.05 * 6 / math.pi**2, rel=1e-12)
    assert sum(levels) < 0.05
    assert sum(levels) > 0.049  # Σ 1/k² converges to π²/6


def test_look_alpha_validation() -> None:
    with pytest.raises(InvalidDataError, match="beyond"):
        look_alpha(4, [200, 400, 800], alpha=0.05, n_max=None)
    with pytest.raises(InvalidDataError, match="strictly increasing"):
        look_alpha(1, [200, 200], alpha=0.05, n_max=None)
    with pytest.raises(InvalidDataError, match="look"):
        look_alpha(0, [200], alpha=0.05, n_max=None)
    # A look past n_max spends nothing.
    assert look_alpha(2, [200, 400], alpha=0.05, n_max=200) == 0.0


# ------------------------------------------------------------------ sequential McNemar


def test_sequential_mcnemar_closed_form() -> None:
    for b, c in [(0, 0), (3, 9), (40, 25)]:
        bf = 2.0 ** (b + c) * math.exp(
            math.lgamma(1 + b) + math.lgamma(1 + c) - math.lgamma(2 + b + c)
        )
        result = sequential_mcnemar(b, c)
        assert result.bayes_factor == pytest.approx(bf, rel=1e-10)
        assert result.p_value == pytest.approx(min(1.0, 1.0 / bf), rel=1e-10)


def test_greater_mixture_matches_numerical_integral() -> None:
    from scipy import integrate

    for b, c in [(0, 0), (1, 7), (7, 1), (4, 4), (20, 35)]:
        integral, _ = integrate.quad(lambda t, b=b, c=c: 2.0 * t**c * (1 - t) ** b, 0.5, 1.0)
        expected = integral * 2.0 ** (b + c)
        got = sequential_mcnemar(b, c, side="greater").bayes_factor
        assert got == pytest.approx(expected, rel=1e-8)


def test_greater_is_directional() -> None:
    harm = sequential_mcnemar(1, 14, side="greater")
    better = sequential_mcnemar(14, 1, side="greater")
    assert harm.p_value < 0.01
    assert better.p_value == 1.0
    # Mixing only over θ > ½ doubles the evidence for harm at most.
    two = sequential_mcnemar(1, 14)
    assert two.bayes_factor < harm.bayes_factor <= 2 * two.bayes_factor


def test_sequential_mcnemar_large_counts_in_log_space() -> None:
    balanced = sequential_mcnemar(500_000, 500_000, side="greater")
    assert 0.0 < balanced.bayes_factor < 1.0
    assert balanced.p_value == 1.0
    harm = sequential_mcnemar(500_000, 550_000, side="greater")
    assert harm.bayes_factor == math.inf
    assert harm.p_value == 0.0
    assert harm.log_bayes_factor > 700
    benefit = sequential_mcnemar(550_000, 500_000, side="greater")
    assert benefit.p_value == 1.0
    assert math.isfinite(sequential_mcnemar(10**6, 0).log_bayes_factor)


def test_sequential_mcnemar_validation() -> None:
    with pytest.raises(InvalidDataError, match="b must be >= 0"):
        sequential_mcnemar(-1, 2)
    with pytest.raises(InvalidDataError, match="c must be an integer"):
        sequential_mcnemar(1, 2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidDataError, match="side"):
        sequential_mcnemar(1, 2, side="less")  # type: ignore[arg-type]


# ------------------------------------------------------------------ GST (the reference)


def _mvn_crossing(bounds: np.ndarray, times: np.ndarray) -> float:
    cov = np.sqrt(np.minimum.outer(times, times) / np.maximum.outer(times, times))
    inside = scipy_stats.multivariate_normal.cdf(
        bounds,
        mean=np.zeros(times.size),
        cov=cov,
        lower_limit=-bounds,
        abseps=1e-6,
        releps=0,
        rng=np.random.default_rng(0),
    )
    return 1.0 - float(inside)


def test_crossing_probability_agrees_with_multivariate_normal() -> None:
    times = np.array([0.15, 0.4, 0.55, 1.0])
    bounds = np.array([3.1, 2.6, 2.4, 2.1])
    ours = crossing_probability(bounds, times)
    assert ours == pytest.approx(_mvn_crossing(bounds, times), abs=2e-5)


def test_obf_boundaries_agree_with_multivariate_normal() -> None:
    bounds = obf_boundaries(5, 0.05)
    assert _mvn_crossing(bounds, np.arange(1, 6) / 5) == pytest.approx(0.05, abs=2e-5)


def test_one_sided_spending_bounds_match_gsdesign() -> None:
    # gsDesign(k = 5, test.type = 1, alpha = 0.025, sfu = sfLDOF) prints
    # upper bounds 4.88 3.36 2.68 2.29 2.03.
    bounds = spending_boundaries([0.2, 0.4, 0.6, 0.8, 1.0], 0.025)
    np.testing.assert_allclose(bounds, [4.88, 3.36, 2.68, 2.29, 2.03], atol=5e-3)
    total = crossing_probability(bounds, [0.2, 0.4, 0.6, 0.8, 1.0], two_sided=False)
    assert total == pytest.approx(0.025, abs=1e-7)


def test_spending_bounds_for_unplanned_looks() -> None:
    times = [0.13, 0.5, 0.77, 1.0, 1.2]
    bounds = spending_boundaries(times, 0.05, kind="pocock", two_sided=True)
    assert bounds[-1] == math.inf  # past n_max: nothing left to spend
    assert crossing_probability(bounds, times) == pytest.approx(0.05, abs=1e-7)
    # A union-bound look level is always smaller than the exact one.
    first_union = lan_demets_spent(0.13, 0.05, "pocock")
    assert 2 * scipy_stats.norm.sf(bounds[0]) == pytest.approx(first_union, rel=1e-6)
    assert 2 * scipy_stats.norm.sf(bounds[1]) > lan_demets_spent(
        0.5, 0.05, "pocock"
    ) - lan_demets_spent(0.13, 0.05, "pocock")


def test_gst_validation() -> None:
    with pytest.raises(InvalidDataError, match="bounds"):
        crossing_probability([2.0, -1.0])
    with pytest.raises(InvalidDataError, match="times"):
        crossing_probability([2.0, 2.0], [0.5, 0.5])
    with pytest.raises(InvalidDataError, match="looks"):
        obf_boundaries(0, 0.05)
    with pytest.raises(InvalidDataError, match="alpha"):
        spending_boundaries([0.5, 1.0], 0.5)


# ------------------------------------------------------------------ repeated looks under H0

ALPHA = 0.05
PATHS = 1000
SCHEDULE = checkpoint_schedule(50, 1.1, limit=50)  # 50 looks, 50 … 5,336 values
SLACK = 3.0 * math.sqrt(ALPHA * (1 - ALPHA) / PATHS)  # three Monte Carlo standard errors


def test_schedule_for_the_simulation() -> None:
    assert len(SCHEDULE) == 50
    assert SCHEDULE[-1] == 5336


def test_confidence_sequence_covers_under_repeated_looks() -> None:
    """50 looks at a true mean 0: the CS's miscoverage stays ≤ α, the fixed-n one's does not."""
    rng = np.random.default_rng(20240601)
    values = rng.standard_normal((PATHS, SCHEDULE[-1]))
    cs_missed = np.zeros(PATHS, dtype=bool)
    naive_missed = np.zeros(PATHS, dtype=bool)
    z = float(scipy_stats.norm.isf(ALPHA / 2))
    for path in range(PATHS):
        row = values[path]
        for n in SCHEDULE:
            cs = confidence_sequence(row[:n], alpha=ALPHA, n_star=1000)
            if not cs.low <= 0.0 <= cs.high:
                cs_missed[path] = True
                break
        means = np.cumsum(row)[np.array(SCHEDULE) - 1] / np.array(SCHEDULE)
        sds = np.array([np.std(row[:n], ddof=1) for n in SCHEDULE])
        naive_missed[path] = bool(np.any(np.abs(means) > z * sds / np.sqrt(SCHEDULE)))
    assert cs_missed.mean() <= ALPHA + SLACK
    assert naive_missed.mean() > 3 * ALPHA  # peeking: ≈ 0.3 with 50 looks


@pytest.mark.parametrize(
    ("side", "theta"), [("two-sided", 0.5), ("greater", 0.5), ("greater", 0.4)]
)
def test_sequential_mcnemar_false_alarms_under_repeated_looks(side: str, theta: float) -> None:
    """50 looks, no harm (θ ≤ ½): P(p ≤ α at any look) ≤ α."""
    rng = np.random.default_rng(7)
    pairs = SCHEDULE[-1] * 4  # 4 pairs per unit: up to 21,344 pairs, ~20% discordant
    discordant = rng.random((PATHS, pairs)) < 0.2
    candidate_worse = discordant & (rng.random((PATHS, pairs)) < theta)
    c_at = np.cumsum(candidate_worse, axis=1)[:, np.array(SCHEDULE) * 4 - 1]
    d_at = np.cumsum(discordant, axis=1)[:, np.array(SCHEDULE) * 4 - 1]
    alarms = 0
    for path in range(PATHS):
        for c, d in zip(c_at[path], d_at[path], strict=True):
            if sequential_mcnemar(int(d - c), int(c), side=side).p_value <= ALPHA:  # type: ignore[arg-type]
                alarms += 1
                break
    assert alarms / PATHS <= ALPHA + SLACK


def test_sequential_mcnemar_detects_harm() -> None:
    rng = np.random.default_rng(8)
    detected = 0
    for _ in range(200):
        discordant = rng.random(2000) < 0.05  # ~100 discordant pairs
        c = int(np.count_nonzero(discordant & (rng.random(2000) < 0.8)))
        b = int(np.count_nonzero(discordant)) - c
        detected += sequential_mcnemar(b, c, side="greater").p_value <= ALPHA
    assert detected / 200 > 0.95
