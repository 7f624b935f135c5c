"""PROMOTE within reach when the truth is "no worse" (issue 29, item 6): a unit whose
changed pairs are all judged says so, and how many pairs its net harm needs."""

from __future__ import annotations

import re
from collections.abc import Callable

from shadoweval.records import Coverage, Decision, PairJudgement, PairScore
from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import parse_policy

ALPACA = {"helpful_base": 129, "koala": 156, "oasst": 188, "selfinstruct": 252, "vicuna": 80}
"""AlpacaEval's 805 prompts by source set (docs/real-data.md)."""


def test_all_changed_pairs_judged_same_names_the_pairs_net_harm_needs(
    simulate: Callable[..., list[PairScore]],
    coverage_for: Callable[[int], Coverage],
    ties: Callable[..., dict[str, PairJudgement]],
) -> None:
    spec = {
        t: {"n": n, "base_error": 0.0, "cand_error": 0.0, "similarity_mean": 0.95,
            "similarity_sd": 0.04}
        for t, n in ALPACA.items()
    }  # fmt: skip
    scores = simulate(spec)
    policy = parse_policy({"observation": {"min_window_hours": 0}})
    frame = pairs_frame(scores, policy, ties(scores))
    v = evaluate_poll(frame, policy, run_id="alpaca", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    net = [c for c in v.checks if c.metric == "net_harm" and c.task_type == "vicuna"]
    [check] = net
    assert "even with all" not in check.reason
    found = re.search(
        r"all (\d+) changed pairs are judged and the upper bound \+[\d.]+ pp is not below the "
        r"margin \+2\.0 pp: net harm in `vicuna` needs about (\d+) pairs at this spread and "
        r"level \(alpha_k [\d.]+\), (\d+) more than its (\d+)",
        check.reason,
    )
    assert found is not None, check.reason
    changed, need, more, have = (int(g) for g in found.groups())
    assert f"{changed} of {changed} changed pairs judged" in check.reason
    assert need - have == more > 0


def test_alpaca_all_same_says_in_one_line_how_many_pairs_promote_needs(
    simulate: Callable[..., list[PairScore]],
    coverage_for: Callable[[int], Coverage],
    ties: Callable[..., dict[str, PairJudgement]],
) -> None:
    # 805 pairs, no error on either side, every pair judged a tie, window off: the truth is
    # "no worse". The HOLD says in one line how many pairs per task type PROMOTE needs,
    # which check binds and at which margin, computed by the checks' own interval code.
    spec = {
        t: {"n": n, "base_error": 0.0, "cand_error": 0.0, "similarity_mean": 0.95,
            "similarity_sd": 0.04}
        for t, n in ALPACA.items()
    }  # fmt: skip
    scores = simulate(spec)
    policy = parse_policy({"observation": {"min_window_hours": 0}})
    frame = pairs_frame(scores, policy, ties(scores))
    v = evaluate_poll(frame, policy, run_id="alpaca", coverage=coverage_for(len(frame)))
    assert v.decision == Decision.HOLD
    lines = [r for r in v.reasons if r.startswith("PROMOTE needs about")]
    assert len(lines) == 1, v.reasons
    assert v.reasons[0] == lines[0]  # what decided the HOLD comes first
    found = re.match(
        r"PROMOTE needs about ([\d,]+) pairs per task type \(now 75 to 252\): "
        r"(\w+)'s 1-point margin at zero discordance",
        lines[0],
    )
    assert found is not None, lines[0]
    need = int(found.group(1).replace(",", ""))
    metric = found.group(2)
    assert metric == "error_rate"
    assert 381 < need < 5000  # more than the fixed-n power size: the sequence is wider
    # Every check that binds it carries the number.
    binding = [c for c in v.checks if c.metric == metric and c.task_type == "vicuna"]
    assert [c.pairs_needed for c in binding] == [need]

    def outcome_at(n: int) -> str:
        one = simulate({"vicuna": {**spec["vicuna"], "n": n}})
        pairs = pairs_frame(one, policy, ties(one))
        verdict = evaluate_gate(pairs, policy, run_id="reach", coverage=coverage_for(n), look=1)
        [check] = [c for c in verdict.checks if c.metric == metric and c.task_type == "vicuna"]
        return check.outcome.value

    assert outcome_at(need) == "pass"  # exactly the pairs the line names
    assert outcome_at(need - 1) == "inconclusive"


def test_checks_without_a_usable_pair_do_not_set_the_task_types_pair_counts() -> None:
    """A latency check with no timed pair (n 0, no pair count) is named, not counted: the
    line's "now 50 to 100" reads the task types' counted checks, never that 0."""
    from shadoweval.records import Check, CheckOutcome
    from shadoweval.stats.engine import Judged
    from shadoweval.stats.gate.reach import promote_reach

    def open_check(metric: str, task_type: str, n: int, needed: int | None) -> Judged[Check]:
        check = Check(
            metric=metric, task_type=task_type, statistic="s", margin=0.01,
            outcome=CheckOutcome.INCONCLUSIVE, reason="r", n=n, pairs_needed=needed,
            pairs_needed_basis="1-point margin",
        )  # fmt: skip
        return Judged(check, harm=False, blocking=True, minor=False, on_fail="hold")

    [line] = promote_reach(
        [
            open_check("error_rate", "a", 50, 1019),
            open_check("error_rate", "b", 100, 900),
            open_check("latency_e2e_ms_p50", "a", 0, None),
        ]
    )
    assert line.startswith("PROMOTE needs about 1,019 pairs per task type (now 50 to 100)")
    assert "not counted here (their reasons say what they need): latency_e2e_ms_p50 in a" in line
