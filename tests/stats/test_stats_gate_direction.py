"""The verdict's direction (issue 11): harm detectors, tool behaviour, net harm, the
observation window, and the rule that the first reason says what decided the verdict.

Simulated runs (conftest.py) are captured one pair a minute; ``ties`` judges every pair a
tie. These tests call :func:`shadoweval.stats.gate.evaluate_gate` as look 1 (or
:func:`shadoweval.stats.checkpoints.evaluate_poll` for re-evaluations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    HarmKind,
    JudgementSource,
    PairJudgement,
    PairScore,
    QualityOutcome,
    ToolCallFlags,
    ToolChange,
    Verdict,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate, judgements_sha256
from shadoweval.stats.policy import GatePolicy, parse_policy

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Ties = Callable[..., dict[str, PairJudgement]]
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)
CLEAN = {"n": 1500, "base_error": 0.0, "cand_error": 0.0}
"""One task type, no errors: 1,500 pairs span 25 h of capture time."""


def run(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    policy: GatePolicy | None = None,
    judgements: Mapping[str, PairJudgement] | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    frame = pairs_frame(scores, policy, judgements)
    return evaluate_gate(
        frame, policy, run_id="run-dir", coverage=coverage_for(len(frame)), decided_at=DECIDED
    )


def check(verdict: Verdict, task_type: str, metric: str) -> Check:
    [found] = [c for c in verdict.checks if c.task_type == task_type and c.metric == metric]
    return found


def with_harm(
    scores: list[PairScore], rows: Iterable[int], kind: HarmKind, side: str
) -> list[PairScore]:
    chosen = set(rows)
    field = f"{side}_harms"
    return [
        s.model_copy(update={field: (kind,)}) if i in chosen else s for i, s in enumerate(scores)
    ]


def judged(
    scores: list[PairScore], outcome: QualityOutcome, rows: Iterable[int] | None = None
) -> dict[str, PairJudgement]:
    chosen = set(range(len(scores))) if rows is None else set(rows)
    return {
        s.exchange_id: PairJudgement(
            run_id=s.run_id,
            exchange_id=s.exchange_id,
            task_type=s.task_type,
            source=JudgementSource.JUDGE,
            outcome=outcome,
        )
        for i, s in enumerate(scores)
        if i in chosen
    }


# ------------------------------------------------------------------ harm detectors


def test_a_candidate_that_degenerates_rolls_back(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    # 20 candidate answers loop (b = 20), no baseline answer does (c = 0): McNemar mid-p
    # 0.5**20 / 2 — significant even with every changed pair judged a tie.
    scores = simulate({"chat": CLEAN})
    scores = with_harm(scores, range(100, 1500, 70), HarmKind.DEGENERATION, "candidate")
    v = run(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.ROLLBACK
    assert v.reasons[0].startswith("pooled, harm_degeneration: significant harm: candidate ")
    assert "20 pairs degenerate only on the candidate vs 0 only on the baseline" in v.reasons[0]
    degeneration = check(v, "chat", "harm_degeneration")
    assert degeneration.outcome == CheckOutcome.FAIL
    assert degeneration.critical
    assert degeneration.estimate == pytest.approx(20 / 1500)
    # The other detectors saw nothing and pass.
    assert check(v, "chat", "harm_refusal").outcome == CheckOutcome.PASS


def test_a_baseline_that_degenerates_is_an_improvement_never_a_rollback(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    # The AlpacaEval case: the baseline's answers run into hashtag loops where the
    # candidate answers in a few sentences (c = 41, b = 0).
    scores = simulate({"chat": CLEAN})
    scores = with_harm(scores, range(0, 1500, 37), HarmKind.DEGENERATION, "baseline")
    v = run(scores, coverage_for, judgements=ties(scores))
    degeneration = check(v, "chat", "harm_degeneration")
    # The interval lies below 0. The power floor is computed at the observed improvement
    # (-2.7 pp), not at no change (which asked for 2,314 pairs at 2.7% discordance, the more
    # the better the candidate was: issue 29): the improvement passes, never a ROLLBACK.
    assert degeneration.outcome == CheckOutcome.PASS, degeneration.reason
    assert degeneration.ci_high is not None
    assert degeneration.ci_high < 0
    assert v.decision == Decision.PROMOTE, v.reasons
    # Twice the traffic, 40 baseline loops: PROMOTE.
    scores = simulate({"chat": {**CLEAN, "n": 3000}})
    scores = with_harm(scores, range(0, 3000, 75), HarmKind.DEGENERATION, "baseline")
    v = run(scores, coverage_for, judgements=ties(scores))
    assert check(v, "chat", "harm_degeneration").outcome == CheckOutcome.PASS
    assert v.decision == Decision.PROMOTE, v.reasons


def test_failed_sides_are_left_out_of_the_harm_checks_and_counted(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run(simulate({"chat": {"n": 1500, "cand_error": 0.02, "cand_infra": 0.01}}), coverage_for)
    refusal = check(v, "chat", "harm_refusal")
    assert "pairs where a side failed (see error_rate) were left out" in refusal.reason
    assert "pairs with an infrastructure error on either side were left out" in refusal.reason
    assert refusal.n < 1500


def test_a_non_critical_harm_detector_holds_instead_of_rolling_back(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": CLEAN})
    scores = with_harm(scores, range(100, 1500, 70), HarmKind.REFUSAL, "candidate")
    policy = parse_policy({"harm": {"critical": False}})
    v = run(scores, coverage_for, policy, judgements=ties(scores))
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, harm_refusal: significant harm")
    assert check(v, "chat", "harm_refusal").outcome == CheckOutcome.FAIL
    assert not check(v, "chat", "harm_refusal").critical


def test_only_the_policys_detectors_are_checked(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = parse_policy({"harm": {"detectors": ["degeneration", "refusal"]}})
    v = run(simulate({"chat": {"n": 300}}), coverage_for, policy)
    harms = {c.metric for c in v.checks if c.metric.startswith("harm_")}
    assert harms == {"harm_degeneration", "harm_refusal"}


def test_untestable_harm_checks_do_not_dilute_the_error_rate_test(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 8 new errors in 200 pairs: mid-p 0.00195 <= alpha_RB_1 0.00608. Seven harm detectors
    # that fired on no pair cannot reach that level (Tarone's screen) and stay out of the
    # Holm family, which would otherwise multiply the p-value by 8.
    scores = simulate({"chat": {"n": 200, "base_error": 0.0, "cand_error": 0.0}})
    broken = {5, 40, 77, 120, 150, 170, 185, 199}
    scores = [
        s.model_copy(update={"candidate_error": True, "similarity": None}) if i in broken else s
        for i, s in enumerate(scores)
    ]
    v = run(scores, coverage_for)
    assert v.decision == Decision.ROLLBACK
    assert "Holm-adjusted 0.002 <= alpha_RB_k 0.00608" in check(v, "chat", "error_rate").reason


# ------------------------------------------------------------------ tool behaviour

CALLED = ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True)
TEXT = ToolCallFlags(calls=0, arguments_parse=True, schema_valid=True)


def tool_run(simulate: Simulate, n: int = 600) -> list[PairScore]:
    """Tools offered on every request; the baseline calls a tool on all but 100.

    Rows 0–59: text instead of a call (b = 60); rows 60–69: a call instead of text (c =
    10); 70–79 a different function, 80–84 different arguments, 85–87 another call order.
    """
    scores = simulate(
        {"rest": {"n": n, "base_error": 0.0, "cand_error": 0.0, "format_expected": False}}
    )
    out = []
    for i, s in enumerate(scores):
        base, cand = CALLED, CALLED
        changes: tuple[ToolChange, ...] = ()
        if i < 60:
            cand, changes = TEXT, (ToolChange.TEXT_INSTEAD_OF_CALL,)
        elif i < 70:
            base, changes = TEXT, (ToolChange.CALL_INSTEAD_OF_TEXT,)
        elif i < 80:
            changes = (ToolChange.FUNCTION_CHANGED,)
        elif i < 85:
            changes = (ToolChange.ARGUMENTS_CHANGED,)
        elif i < 88:
            changes = (ToolChange.ORDER_CHANGED,)
        elif i >= n - 90:
            base, cand = TEXT, TEXT
        out.append(
            s.model_copy(
                update={"baseline_tools": base, "candidate_tools": cand, "tool_changes": changes}
            )
        )
    return out


def test_tool_text_answer_counts_and_holds_when_not_critical(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run(tool_run(simulate), coverage_for)
    tool = check(v, "rest", "tool_text_answer")
    assert tool.outcome == CheckOutcome.FAIL
    assert not tool.critical
    assert "60 pairs answer in text only on the candidate vs 10 only on the baseline" in (
        tool.reason
    )
    assert tool.reason.endswith(
        "tool changes on the pairs used: 60 text instead of a call, 10 a call instead of "
        "text, 10 a different function, 5 different arguments, 3 a different call order"
    )
    assert tool.n == 600
    # Not critical (whether text is right depends on the request): HOLD, never ROLLBACK.
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, tool_text_answer: significant harm")


def test_at_the_sample_cap_a_failed_hold_check_leads_and_more_pairs_are_not_advised(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # Found by the trial: the cap line led and advised a larger n_max, though the tool
    # check had failed (more pairs cannot clear a failed check).
    policy = parse_policy({"sequential": {"first_checkpoint": 600, "n_max": 600}})
    v = run(tool_run(simulate), coverage_for, policy)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, tool_text_answer: significant harm")
    [cap] = [r for r in v.reasons if r.startswith("inconclusive at the sample cap")]
    assert v.reasons.index(cap) > 0
    assert cap.endswith("the failed checks above need a fixed candidate, not more pairs")
    assert "larger n_max" not in cap


def test_a_critical_tool_check_rolls_back_and_order_free_drops_the_order_count(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = parse_policy({"tool_calls": {"critical": True, "order_free": True}})
    v = run(tool_run(simulate), coverage_for, policy)
    assert v.decision == Decision.ROLLBACK
    assert v.reasons[0].startswith("pooled, tool_text_answer: significant harm")
    tool = check(v, "rest", "tool_text_answer")
    assert tool.critical
    assert "call order" not in tool.reason


def test_no_tool_check_where_no_request_offered_tools(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run(simulate({"chat": {"n": 300}}), coverage_for)
    assert not [c for c in v.checks if c.metric == "tool_text_answer"]


# ------------------------------------------------------------------ net harm


def test_changed_answers_judged_better_promote(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # Every real upgrade changes answers: divergence 0.15 on every pair, far beyond the
    # divergence threshold — and the judge finds the candidate better on all of them.
    scores = simulate({"chat": CLEAN})
    v = run(scores, coverage_for, judgements=judged(scores, QualityOutcome.CANDIDATE_BETTER))
    assert v.decision == Decision.PROMOTE, v.reasons
    net = check(v, "chat", "net_harm")
    assert net.outcome == CheckOutcome.PASS
    assert net.estimate is not None
    assert net.estimate < -0.5
    similarity = check(v, "chat", "similarity")
    assert similarity.reason.startswith("changed beyond the noise: ")


def test_changed_answers_judged_worse_roll_back(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": CLEAN})
    changed = classify_changes(pairs_frame(scores, GatePolicy()), GatePolicy()).changed
    rows = [i for i, c in enumerate(pairs_frame(scores, GatePolicy())["exchange_id"]) if changed[i]]
    # A tenth of the changed pairs are worse, the rest ties: net harm ≈ 7 points.
    worse = set(rows[::10])
    judgements = {**ties(scores), **judged(scores, QualityOutcome.CANDIDATE_WORSE, worse)}
    v = run(scores, coverage_for, judgements=judgements)
    assert v.decision == Decision.ROLLBACK
    assert v.reasons[0].startswith("pooled, net_harm: significant net harm: the candidate is worse")
    net = check(v, "chat", "net_harm")
    assert net.outcome == CheckOutcome.FAIL
    assert net.critical


def test_unjudged_changes_hold_naming_how_many_to_judge(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = simulate({"koala": CLEAN})
    # 20 judged ties: fewer than min_judged 30.
    v = run(scores, coverage_for, judgements=judged(scores, QualityOutcome.TIE, range(20)))
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, net_harm: judge ")
    assert any(r.startswith("task type 'koala', net_harm: judge ") for r in v.reasons)
    [line] = [r for r in v.reasons if r.startswith("task type 'koala', net_harm")]
    assert "more changed pairs in `koala`" in line
    assert "< min_judged 30" in line


def test_in_no_change_mode_net_harm_is_reported_not_required(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # A near-identical swap (a quantisation): the similarity guardrail passes; a few pairs
    # differ in errors, and no judge is needed to promote.
    spec = {"n": 1500, "similarity_mean": 0.99, "similarity_sd": 0.005}
    policy = parse_policy({"change": {"mode": "no_change"}})
    v = run(simulate({"chat": spec}), coverage_for, policy)
    assert v.decision == Decision.PROMOTE, v.reasons
    assert "(change.mode no_change)" in v.reasons[0]
    assert check(v, "chat", "similarity").outcome == CheckOutcome.PASS
    assert check(v, "chat", "net_harm").outcome != CheckOutcome.PASS


def test_unreadable_similarities_still_block_in_judge_mode(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": {**CLEAN, "nan_similarity": 3}})
    v = run(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, similarity: changed beyond the noise")
    assert "have no similarity (NaN)" in v.reasons[0]


# ------------------------------------------------------------------ observation window


def test_a_run_shorter_than_the_observation_window_holds(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": CLEAN})
    # The same pairs captured over 3.2 hours instead of 25.
    start = scores[0].captured_at
    step = timedelta(hours=3.2) / (len(scores) - 1)
    scores = [s.model_copy(update={"captured_at": start + i * step}) for i, s in enumerate(scores)]
    v = run(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.HOLD
    assert v.reasons[0] == (
        "observation window: the pairs span 3.2 h of capture time; the policy asks for 24 h "
        "(a full daily cycle) before a promote (observation.min_window_hours)"
    )
    assert all(c.outcome == CheckOutcome.PASS for c in v.checks if c.metric != "similarity")
    off = parse_policy({"observation": {"min_window_hours": 0}})
    assert run(scores, coverage_for, off, judgements=ties(scores)).decision == Decision.PROMOTE
    two_days = parse_policy({"observation": {"min_window_hours": 48}})
    v = run(scores, coverage_for, two_days, judgements=ties(scores))
    assert "asks for 48 h (2 full daily cycles)" in v.reasons[0]


def test_a_promote_states_the_window(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    scores = simulate({"chat": CLEAN})
    v = run(scores, coverage_for, judgements=ties(scores))
    assert v.decision == Decision.PROMOTE, v.reasons
    assert v.reasons[1] == (
        "observation window: the pairs span 25.0 h of capture time "
        "(observation.min_window_hours 24)"
    )


# ------------------------------------------------------------------ judgements arrive later


def test_a_look_is_re_evaluated_when_its_judgements_change(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    policy = parse_policy({"observation": {"min_window_hours": 0}})
    scores = simulate({"chat": CLEAN})

    def poll(judgements: Mapping[str, PairJudgement] | None, previous: Verdict | None) -> Verdict:
        frame = pairs_frame(scores, policy, judgements)
        return evaluate_poll(
            frame,
            policy,
            run_id="run-dir",
            coverage=coverage_for(len(frame)),
            decided_at=DECIDED,
            previous=previous,
        )

    first = poll(None, None)
    assert first.decision == Decision.HOLD
    assert (first.look, first.judgement_look) == (3, 1)  # checkpoint 800
    assert first.judgements_sha256 == judgements_sha256(pairs_frame(scores, policy).iloc[:0])
    # The same judgements (none): the stored verdict, unchanged.
    assert poll(None, first) is first
    # The judge has answered: the same look is evaluated again. The first evaluation read
    # no judgement and spent nothing of the net-harm level, so this is judgement look 1.
    second = poll(judged(scores, QualityOutcome.TIE), first)
    assert (second.look, second.judgement_look) == (3, 1)
    assert second.judgements_sha256 != first.judgements_sha256
    [net] = [c for c in second.checks if c.task_type == POOLED and c.metric == "net_harm"]
    assert net.outcome == CheckOutcome.PASS
    # The run's first look, at checkpoint 3: the cumulative level 0.0207 (6/π²·Σ 1/i², i ≤ 3,
    # of alpha; issue 29), split over judgement evaluations: · 6/π².
    assert "look 3: alpha_k 0.0126" in net.statistic
    assert poll(judged(scores, QualityOutcome.TIE), second) is second
    # Different judgements again (analysts relabel): the next share of the level.
    third = poll(judged(scores, QualityOutcome.CANDIDATE_BETTER), second)
    assert (third.look, third.judgement_look) == (3, 2)
    [net] = [c for c in third.checks if c.task_type == POOLED and c.metric == "net_harm"]
    assert "look 3: alpha_k 0.00314" in net.statistic  # 0.0207 · 6/(π²·2²)
