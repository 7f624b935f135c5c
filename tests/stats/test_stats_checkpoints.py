"""Polling the gate: checkpoints on a prefix by capture time, look levels, cap, terminality."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import pandas as pd
import pytest

from shadoweval.records import (
    Coverage,
    Decision,
    EnvironmentFailure,
    PairJudgement,
    PairScore,
    Verdict,
)
from shadoweval.stats.checkpoints import WAITING, evaluate_poll, ordered_by_capture
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import INCONCLUSIVE_AT_CAP, evaluate_gate
from shadoweval.stats.looks import design_sample_size, look_levels
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Ties = Callable[[list[PairScore]], dict[str, PairJudgement]]
DECIDED = datetime(2024, 6, 2, tzinfo=UTC)
RELAXED = parse_policy({"error_rate": {"margin": 0.02}, "format_parse": {"margin": 0.02}})
"""2-point binary margins: design sample size 1004, so a small A/A run can promote."""


def poll(
    frame: pd.DataFrame,
    policy: GatePolicy,
    coverage_for: CoverageFor,
    previous: Verdict | None = None,
) -> Verdict:
    return evaluate_poll(
        frame,
        policy,
        run_id="run-poll",
        coverage=coverage_for(len(frame)),
        decided_at=DECIDED,
        previous=previous,
    )


def test_design_sample_size_of_the_default_policy() -> None:
    # Nam's score formula at ψ = 2%, δ = 0, margin 1 pp, α = 0.025, power 1 − 0.2/9.
    assert design_sample_size(GatePolicy()) == 3454
    # The smallest binary margin decides: 2 points need 1004 pairs, 5 points the floor.
    assert design_sample_size(RELAXED) == 1004
    assert design_sample_size(parse_policy({"error_rate": {"margin": 0.05}})) == 3454
    loose = {"error_rate": {"margin": 0.05}, "format_parse": {"margin": 0.05}}
    assert design_sample_size(parse_policy({**loose, "infra_error_rate": {"margin": 0.05}})) < 1004
    tight = parse_policy({"task_types": {"x": {"format_parse": {"margin": 0.005}}}})
    assert design_sample_size(tight) > 3454


def test_look_levels_without_a_cap() -> None:
    policy = GatePolicy()
    for k in (1, 2, 5, 50):
        levels = look_levels(policy, k)
        assert levels.mean_method == "cs"
        assert not levels.final
        assert levels.alpha_k == pytest.approx(0.025 * 6 / (math.pi**2 * k**2))
        assert levels.alpha_harm_k == pytest.approx(0.01 * 6 / (math.pi**2 * k**2))
        assert levels.alpha_mix_k == pytest.approx(0.001 * 6 / (math.pi**2 * k**2))
        assert levels.n_k == 200 * 2 ** (k - 1)
        assert levels.n_star == 3454
    assert look_levels(policy, 1).describe() == "look 1: alpha_k 0.0152, alpha_RB_k 0.00608"
    # Over any number of looks the levels sum to at most alpha.
    assert sum(look_levels(policy, k).alpha_k for k in range(1, 60)) < 0.025
    with pytest.raises(ValueError, match="look"):
        look_levels(policy, 0)


def test_look_levels_with_a_cap_spend_over_the_schedule() -> None:
    policy = parse_policy({"sequential": {"n_max": 1600, "n_star": 500}})
    levels = [look_levels(policy, k) for k in range(1, 5)]  # 200, 400, 800, 1600
    assert [lv.n_k for lv in levels] == [200, 400, 800, 1600]
    assert [lv.final for lv in levels] == [False, False, False, True]
    assert all(lv.mean_method == "spending" and lv.n_star == 500 for lv in levels)
    # O'Brien–Fleming keeps almost all of alpha for the last look; Pocock spends early.
    assert sum(lv.alpha_k for lv in levels) <= 0.025 + 1e-9
    assert levels[-1].alpha_k > 0.02
    assert levels[0].alpha_k < 1e-9  # O'Brien–Fleming at t = 1/8: 2.3e-10
    assert levels[0].alpha_harm_k > 0.001
    assert sum(lv.alpha_harm_k for lv in levels) == pytest.approx(0.01)
    # A look past the cap is the last look.
    assert look_levels(policy, 9).n_k == 1600


def test_no_data_and_waiting_for_the_first_checkpoint(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate({"chat": {"n": 150, "cand_error": 1.0}}), policy)
    empty = poll(frame.iloc[0:0], policy, coverage_for)
    assert (empty.decision, empty.look, empty.checks) == (Decision.HOLD, 0, ())
    assert empty.reasons[0].startswith("no data")
    waiting = poll(frame, policy, coverage_for)
    # Even 150 candidate errors wait: the gate decides only at checkpoints.
    assert (waiting.decision, waiting.look, waiting.checks) == (Decision.HOLD, 0, ())
    assert waiting.reasons[0].startswith(f"{WAITING}: 150 of 200 pairs")
    # ...but a setup to fix is said first, never hidden behind the wait (a wrong key)
    wrong_key = EnvironmentFailure(
        cause="HTTP 401", count=150, example_url="http://cand/v1/messages", example_detail="no"
    )
    failing = evaluate_poll(
        frame,
        policy,
        run_id="run-poll",
        coverage=coverage_for(150).model_copy(update={"environment_failures": (wrong_key,)}),
        decided_at=DECIDED,
    )
    assert failing.reasons[0].startswith("infrastructure: 150 of 150 candidate requests")
    assert "HTTP 401 on 150 pairs" in failing.reasons[0]
    assert failing.reasons[1].startswith(WAITING)
    assert "150 of the paired failed for reasons of the environment" in failing.reasons[-1]
    with pytest.raises(Exception, match="captured_at"):
        evaluate_poll(
            frame.drop(columns=["captured_at"]).iloc[:5],
            policy,
            run_id="r",
            coverage=coverage_for(5),
        )


def test_a_poll_evaluates_the_prefix_of_its_latest_checkpoint(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = GatePolicy()
    clean = {"n": 900, "base_error": 0.0, "cand_error": 0.0}
    frame = pairs_frame(simulate({"chat": clean}), policy)
    at_800 = poll(frame.iloc[:800], policy, coverage_for)
    assert at_800.look == 3
    # Everything after the checkpoint (here: the candidate failing on every later pair)
    # is not looked at before the next checkpoint (1600): the same verdict and checks.
    broken = frame.copy()
    broken.loc[800:, "candidate_fail"] = True
    for n in (801, 850, 900):
        later = poll(broken.iloc[:n], policy, coverage_for)
        assert later.look == 3
        assert later.decision == at_800.decision
        assert later.checks == at_800.checks
    # It is exactly evaluate_gate on the first 800 pairs at look 3.
    direct = evaluate_gate(
        frame.iloc[:800],
        policy,
        run_id="run-poll",
        coverage=coverage_for(800),
        look=3,
        decided_at=DECIDED,
        looks_taken=(3,),  # the poll at 800 pairs is the run's first look
    )
    assert direct == at_800


def test_polls_order_pairs_by_capture_time(simulate: Simulate, coverage_for: CoverageFor) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate({"chat": {"n": 450}}), policy)
    shuffled = frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    assert poll(shuffled, policy, coverage_for) == poll(frame, policy, coverage_for)
    assert ordered_by_capture(frame) is frame  # already in order: not copied
    assert ordered_by_capture(shuffled)["exchange_id"].tolist() == frame["exchange_id"].tolist()


def test_terminal_verdicts_are_returned_unchanged(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = GatePolicy()
    bad = pairs_frame(simulate({"chat": {"n": 250, "cand_error": 0.5}}), policy)
    rollback = poll(bad, policy, coverage_for)
    assert rollback.decision == Decision.ROLLBACK
    assert rollback.look == 1
    good = pairs_frame(simulate({"chat": {"n": 3000}}), policy)
    assert poll(good, policy, coverage_for, previous=rollback) is rollback
    hold = poll(bad.iloc[:120], policy, coverage_for)
    assert poll(bad, policy, coverage_for, previous=hold).decision == Decision.ROLLBACK


def test_each_checkpoint_is_evaluated_once_late_pairs_do_not_change_its_verdict(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = GatePolicy()
    frame = pairs_frame(simulate({"chat": {"n": 700}}), policy)
    # Pairs scored out of capture order: at the first poll of look 2 (400 pairs) some early
    # pairs were still missing; they arrive before the next poll, which is still look 2.
    first = poll(frame.drop(index=range(10, 60)).iloc[:420], policy, coverage_for)
    assert (first.look, first.decision) == (2, Decision.HOLD)
    fresh = poll(frame.iloc[:700], policy, coverage_for)
    assert fresh.look == 2
    assert fresh.checks != first.checks  # a different 400-pair prefix
    assert poll(frame.iloc[:700], policy, coverage_for, previous=first) is first
    # The next checkpoint is evaluated anew, and so is a verdict under another policy.
    more = pairs_frame(simulate({"chat": {"n": 900}}), policy)
    assert poll(more, policy, coverage_for, previous=first).look == 3
    other = parse_policy({"error_rate": {"margin": 0.02}})
    assert poll(frame.iloc[:700], other, coverage_for, previous=first) is not first


def test_an_undecided_gate_at_the_sample_cap_is_a_final_hold(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 1.5 points more errors: neither non-inferior at a 1-point margin nor significant harm
    # on 400 pairs.
    policy = parse_policy({"sequential": {"n_max": 400}})
    frame = pairs_frame(simulate({"chat": {"n": 500, "cand_error": 0.02}}), policy)
    before = poll(frame.iloc[:399], policy, coverage_for)
    assert before.decision == Decision.HOLD
    assert before.look == 1
    assert not before.reasons[0].startswith(INCONCLUSIVE_AT_CAP)
    for n in (400, 500):
        final = poll(frame.iloc[:n], policy, coverage_for)
        assert final.decision == Decision.HOLD
        assert final.look == 2
        assert final.reasons[0].startswith(f"{INCONCLUSIVE_AT_CAP}: the sample cap n_max 400")
        assert "never an implicit promote" in final.reasons[0]
        # The verdict is on the first 400 pairs only.
        assert {c.n for c in final.checks if c.metric == "infra_error_rate"} == {400}


def test_a_seeded_aa_run_polled_at_every_checkpoint_never_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    policy = RELAXED
    scores = simulate(
        {"chat": {"n": 2000}, "extract": {"n": 1200, "format_expected": True}}, seed=11
    )
    # Every pair judged a tie: the A/A run's changed answers are neither better nor worse.
    frame = pairs_frame(scores, policy, ties(scores))
    # Interleave the task types in capture order (the simulator writes them one after the
    # other).
    frame = frame.sample(frac=1.0, random_state=5).reset_index(drop=True)
    frame["captured_at"] = frame["captured_at"].sort_values().to_numpy()
    decisions = []
    for n in range(100, len(frame) + 1, 100):
        decisions.append(poll(frame.iloc[:n], policy, coverage_for).decision)
    assert Decision.ROLLBACK not in decisions
    assert decisions[-1] == Decision.PROMOTE


def test_at_the_cap_an_infrastructure_failure_stays_the_first_reason(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = parse_policy({"sequential": {"n_max": 400}})
    frame = pairs_frame(simulate({"chat": {"n": 400, "cand_infra": 0.3}}), policy)
    final = poll(frame, policy, coverage_for)
    assert final.decision == Decision.HOLD
    assert final.reasons[0].startswith("infrastructure:")
    cap = [i for i, r in enumerate(final.reasons) if r.startswith(INCONCLUSIVE_AT_CAP)]
    assert cap
    assert all(
        r.startswith(("infrastructure:", "pooled", "task type")) for r in final.reasons[: cap[0]]
    )


def test_with_a_cap_binary_checks_use_tango_at_the_spent_level(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = parse_policy({"sequential": {"n_max": 400}})
    frame = pairs_frame(simulate({"chat": {"n": 400, "format_expected": True}}), policy)
    verdict = poll(frame, policy, coverage_for)
    [fmt] = [c for c in verdict.checks if c.task_type == "chat" and c.metric == "format_parse"]
    assert fmt.statistic.startswith("tango_score_ni+mcnemar_midp; look 2")
    assert "candidate format-parse failure rate" in fmt.reason
    assert "Tango score interval (alpha_k" in fmt.reason
    assert "Tango p" in fmt.reason


def test_design_sample_size_counts_the_top_level_margins_beside_overrides() -> None:
    relaxed_override = parse_policy(
        {"task_types": {"x": {"error_rate": {"margin": 0.05}, "format_parse": {"margin": 0.05}}}}
    )
    assert design_sample_size(relaxed_override) == 3454
