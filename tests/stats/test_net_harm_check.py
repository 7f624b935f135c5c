"""Net harm: the check of one unit (its outcomes and reasons) and a re-evaluated look's levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shadoweval.records import POOLED, CheckOutcome
from shadoweval.stats.looks import look_levels
from shadoweval.stats.net_harm import (
    NET_HARM_METRIC,
    NET_HARM_STATISTIC,
    estimate_net_harm,
    judgement_levels,
    net_harm_check,
)
from shadoweval.stats.policy import GatePolicy, NetHarmPolicy
from tests.stats.test_net_harm import B, T, W, unit

POLICY = GatePolicy()
LEVELS = look_levels(POLICY, 1)  # alpha_k 0.0152, alpha_RB_k 0.00608
BLOCK = NetHarmPolicy()  # margin 0.02, min_judged 30
SOURCES = {"judge": 120, "human": 8, "reference": 0}


def test_check_no_changed_pair_passes_with_estimate_zero() -> None:
    q, c, s = unit([], unchanged=400)
    check, p = net_harm_check(
        estimate_net_harm(q, c, s), task_type="qa", block=BLOCK, levels=LEVELS, sources={}
    )
    assert check.outcome is CheckOutcome.PASS
    assert check.reason == "no pair changed beyond the noise: 400 pairs, all ties"
    assert (check.estimate, check.ci_low, check.ci_high, check.n) == (0.0, 0.0, 0.0, 400)
    assert p is None
    assert check.metric == NET_HARM_METRIC
    assert check.statistic == f"{NET_HARM_STATISTIC}; look 1: alpha_k 0.0152, alpha_RB_k 0.00608"
    assert check.critical is True
    assert check.margin == 0.02


def test_check_no_pairs_is_inconclusive() -> None:
    e = estimate_net_harm(np.array([]), np.array([], dtype=bool), np.array([], dtype=int))
    check, p = net_harm_check(e, task_type="qa", block=BLOCK, levels=LEVELS, sources={})
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    assert p is None


def test_check_better_candidate_passes() -> None:
    # 4,000 pairs, 1,000 changed in two strata, 400 judged: clearly better.
    q, c, s = unit(
        [[W] * 30 + [T] * 60 + [B] * 110, [W] * 40 + [T] * 50 + [B] * 110],
        unchanged=3000,
        unjudged=[300, 300],
    )
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="koala", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.PASS, check.reason
    assert check.reason.startswith("non-inferior: net harm ")
    assert "400 of 1000 changed pairs judged (judge 120, human 8, reference 0)" in check.reason
    assert "70 better" not in check.reason
    assert "220 better, 110 tie, 70 worse" in check.reason
    assert "P(worse)" in check.reason
    assert "P(better)" in check.reason
    assert "3000 unchanged pairs counted as ties" in check.reason
    assert "interval at alpha_k 0.0152 per side (look 1)" in check.reason
    assert p is not None
    assert p > 0.5
    assert check.p_value == pytest.approx(e.p_noninferior(0.02))
    low, high = e.interval(LEVELS.alpha_k)
    assert (check.ci_low, check.ci_high) == pytest.approx((low, high))
    assert high < 0.02


def test_check_harmful_candidate_fails() -> None:
    q, c, s = unit([[W] * 120 + [T] * 50 + [B] * 30], unchanged=600, unjudged=[200])
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="qa", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.FAIL, check.reason
    assert check.reason.startswith("net harm worse than the margin: net harm +")
    assert ": the interval lies wholly above the margin; 200 of 400 changed pairs" in check.reason
    assert check.reason.endswith("600 unchanged pairs counted as ties")
    assert p is not None
    assert p < 1e-6
    assert check.ci_low is not None
    assert check.ci_low > 0.02


def test_check_too_few_judged_names_how_many_more() -> None:
    q, c, s = unit([[B] * 10 + [T] * 10], unchanged=3000, unjudged=[200])
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="koala", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    k = e.judged_needed(0.02, LEVELS.alpha_k, min_judged=30)
    assert k >= 10
    assert check.reason.startswith(f"judge {k} more changed pairs in `koala` (20 < min_judged 30)")
    assert p is not None


def test_check_unit_with_fewer_changed_pairs_than_min_judged_needs_them_all() -> None:
    # 19 changed pairs of 200 (fewer than min_judged 30): a census of the 19 decides.
    q, c, s = unit([[B] * 17 + [T] * 2], unchanged=181)
    check, _ = net_harm_check(
        estimate_net_harm(q, c, s), task_type="chat", block=BLOCK, levels=LEVELS, sources={}
    )
    assert check.outcome is CheckOutcome.PASS, check.reason
    assert check.reason.endswith("(all 19 changed pairs judged: fewer than min_judged 30 changed)")
    # One of them not judged: all are needed, and the reason says so.
    q, c, s = unit([[B] * 17 + [T] * 1], unchanged=181, unjudged=[1])
    check, _ = net_harm_check(
        estimate_net_harm(q, c, s), task_type="chat", block=BLOCK, levels=LEVELS, sources={}
    )
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    assert "18 of its 19 changed pairs judged; all are needed below min_judged 30" in check.reason


def test_shares_with_unjudged_strata_are_ranges_and_no_spread_claim_without_judgements() -> None:
    # Found by helpers: with unjudged strata P(worse) and P(better) showed their midpoint
    # (35%/35% on all-tie judgements), and a unit with nothing judged claimed that "at
    # this spread" judging everything would not do.
    q, c, s = unit([[T] * 10, []], unchanged=100, unjudged=[0, 60])
    check, _ = net_harm_check(
        estimate_net_harm(q, c, s), task_type="oasst", block=BLOCK, levels=LEVELS, sources={}
    )
    assert "P(worse) 0.0% to 35.3% (unjudged strata), P(better) 0.0% to 35.3%" in check.reason
    q, c, s = unit([[]], unchanged=100, unjudged=[200])
    check, _ = net_harm_check(
        estimate_net_harm(q, c, s), task_type="oasst", block=BLOCK, levels=LEVELS, sources={}
    )
    assert "at this spread" not in check.reason
    assert check.reason.startswith("judge 30 more changed pairs in `oasst`")


def test_check_unjudged_stratum_is_inconclusive_and_named() -> None:
    q, c, s = unit([[B] * 50 + [T] * 50, [], []], unchanged=3000, unjudged=[100, 20, 5])
    s[s == 2] = 4  # the last changed stratum: no similarity
    e = estimate_net_harm(q, c, s)
    check, _ = net_harm_check(e, task_type=POOLED, block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    assert check.reason.startswith("judge ")
    assert "more changed pairs in the pooled pairs" in check.reason
    assert "no judged pair in D 0.1-0.2 (20 changed), no similarity (5 changed)" in check.reason
    assert "widened for 2 unjudged strata" in check.reason


def test_check_no_judged_pair() -> None:
    q, c, s = unit([[]], unchanged=3000, unjudged=[300])
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="qa", block=BLOCK, levels=LEVELS, sources={})
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    assert "none of the 300 changed pairs is judged (D < 0.1 (300 changed))" in check.reason
    assert check.reason.startswith("judge ")
    assert p is None
    assert check.estimate is None


def test_check_not_shown_yet_and_unreachable_by_judging() -> None:
    # Same quality among many changed pairs, all judged: the spread of the traffic keeps
    # the 2-point margin out of reach; the reason says the unit needs more pairs.
    q, c, s = unit([[W] * 40 + [T] * 40 + [B] * 40], unchanged=80)
    e = estimate_net_harm(q, c, s)
    check, _ = net_harm_check(e, task_type="qa", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    # Every changed pair is judged: the reason says so (issue 29: not "even with all …
    # judged") and how many pairs the unit's net harm needs at this spread and level.
    assert check.reason.startswith(
        "non-inferiority not shown yet: all 120 changed pairs are judged and the upper bound"
    )
    assert "net harm in `qa` needs about" in check.reason
    assert "more than its 200" in check.reason


def test_check_not_shown_yet_names_how_many_more() -> None:
    # 8,000 pairs, 2,100 changed, 100 judged with as many worse as better.
    q, c, s = unit([[W] * 15 + [T] * 70 + [B] * 15], unchanged=5000, unjudged=[2000])
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="koala", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    k = e.judged_needed(0.02, LEVELS.alpha_k, min_judged=30)
    assert k > 100
    assert check.reason.startswith(
        f"non-inferiority not shown yet: judge {k} more changed pairs in `koala`; net harm +0.0 pp"
    )
    assert p == pytest.approx(0.5)


def test_check_estimate_above_the_margin_cannot_pass_by_judging() -> None:
    q, c, s = unit([[W] * 20 + [T] * 10 + [B] * 10], unchanged=100, unjudged=[30])
    e = estimate_net_harm(q, c, s)
    check, p = net_harm_check(e, task_type="koala", block=BLOCK, levels=LEVELS, sources=SOURCES)
    assert check.outcome is CheckOutcome.INCONCLUSIVE
    assert check.reason.startswith(
        "non-inferiority not shown yet: the net harm estimate +10.3 pp is not below the margin "
        "+2.0 pp: while it stays there no number of judged pairs passes the unit"
    )
    assert p is not None
    assert LEVELS.alpha_harm_k < p < 0.05  # for the gate's Holm family: not significant here


def test_check_reports_failed_judgements_and_ignored_unchanged_ones() -> None:
    q, c, s = unit([[T] * 40], unchanged=100)
    q[-3:] = 1.0
    e = estimate_net_harm(q, c, s)
    check, _ = net_harm_check(
        e, task_type="qa", block=BLOCK, levels=LEVELS, sources={"judge": 40, "failed": 2}
    )
    assert "(judge 40, human 0, reference 0, failed 2)" in check.reason
    assert "100 unchanged pairs counted as ties (their 3 judgements not read)" in check.reason


def test_judgement_levels_split_a_look_over_its_evaluations() -> None:
    share = 6 / math.pi**2
    first = judgement_levels(LEVELS, 1)
    assert judgement_levels(LEVELS, 0) == first
    assert first.alpha_k == pytest.approx(LEVELS.alpha_k * share)
    second = judgement_levels(LEVELS, 2)
    assert second.alpha_k == pytest.approx(LEVELS.alpha_k * share / 4)
    assert second.alpha_harm_k == pytest.approx(LEVELS.alpha_harm_k * share / 4)
    total = sum(judgement_levels(LEVELS, j).alpha_k for j in range(1, 2_000))
    assert total <= LEVELS.alpha_k
    assert (second.look, second.n_k, second.alpha_mix_k) == (1, 200, LEVELS.alpha_mix_k)
    with pytest.raises(ValueError, match="judgement_look"):
        judgement_levels(LEVELS, -1)
