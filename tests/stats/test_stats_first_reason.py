"""The first reason is what decided (issue 29 item 11, measured point 10).

One ranking for every face: quality signals before the checks that cannot judge for want
of pairs, those folded into one line naming their units; a PROMOTE never shows a check as a
hold (a check that did not decide is ``report only`` or ``not powered yet``); conflicting
duplicate capture lines are named as such, not as unreadable lines.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from rich.console import Console

from shadoweval.cli.render import print_result
from shadoweval.records import (
    NOT_POWERED,
    REPORT_ONLY,
    CheckOutcome,
    Coverage,
    Decision,
    PairJudgement,
    PairScore,
    Verdict,
)
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy, parse_policy
from shadoweval.stats.summary import task_type_summary

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]
Ties = Callable[..., dict[str, PairJudgement]]
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)
CLEAN: dict[str, object] = {"n": 1500, "base_error": 0.0, "cand_error": 0.0}
EMPTY_UNITS = [f"cat_{k:02d}" for k in range(28)]


def gate(
    scores: list[PairScore],
    coverage: Coverage,
    policy: GatePolicy | None = None,
    judgements: Mapping[str, PairJudgement] | None = None,
) -> Verdict:
    policy = policy or GatePolicy()
    frame = pairs_frame(scores, policy, judgements)
    return evaluate_gate(frame, policy, run_id="run-first", coverage=coverage, decided_at=DECIDED)


def test_a_quality_signal_leads_the_notes_of_28_task_types_without_pairs(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    # One real task type whose net harm needs judgements (20 judged of min_judged 30), and
    # 28 task types whose every pair failed on the baseline (an infrastructure error):
    # nothing left to compare there. Measured on main: the net-harm reason came after 308
    # "no pairs; cannot judge" lines of the 28 task types (481 reasons in all).
    specs: dict[str, dict[str, object]] = {"relevance": CLEAN}
    specs |= {
        t: {"n": 40, "base_error": 0.0, "cand_error": 0.0, "base_infra": 1.0} for t in EMPTY_UNITS
    }
    scores = simulate(specs)
    relevance = [s for s in scores if s.task_type == "relevance"]
    judgements = dict(list(ties(relevance).items())[:20])
    policy = parse_policy({"min_traffic_share": 0})
    v = gate(scores, coverage_for(len(scores)), policy, judgements)
    assert v.decision == Decision.HOLD
    assert v.reasons[0].startswith("pooled, net_harm: judge ")
    assert v.reasons[1].startswith("task type 'relevance', net_harm: judge ")
    folded = [r for r in v.reasons if r.startswith("no pairs to judge in 28 task types (")]
    assert len(folded) == 1
    assert all(repr(t) in folded[0] for t in EMPTY_UNITS)
    assert not any(r.startswith("task type 'cat_") for r in v.reasons)
    # The quality signals come before the fold, which comes before the context lines.
    assert v.reasons.index(folded[0]) > 1
    assert len(v.reasons) < 10, v.reasons


def test_task_types_captured_without_pairs_share_one_validity_line_and_one_note(
    simulate: Simulate,
) -> None:
    scores = simulate({"relevance": CLEAN})
    per_task_type = {"relevance": 1500} | dict.fromkeys(EMPTY_UNITS, 60)
    captured = sum(per_task_type.values())
    coverage = Coverage(
        captured=captured,
        replayed=1500,
        paired=1500,
        errored=0,
        warmup=0,
        skipped=captured - 1500,
        share=1500 / captured,
        per_task_type=per_task_type,
    )
    v = gate(scores, coverage)
    assert v.decision == Decision.HOLD
    low = [r for r in v.reasons if "have replay coverage below min_coverage" in r]
    assert len(low) == 1
    assert low[0].startswith("invalid run: 28 task types have replay coverage below")
    assert all(f"{t!r} 0.0% (0 of 60)" in low[0] for t in EMPTY_UNITS)
    minor = [r for r in v.reasons if "less than min_traffic_share" in r]
    assert len(minor) == 1
    assert minor[0].startswith("28 task types (")
    assert not any("'cat_05'" in r and r is not low[0] and r is not minor[0] for r in v.reasons)


def promote_with_a_minor_task_type(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> Verdict:
    # "rare" has 1.3% of the pairs, below min_traffic_share 5%: its checks are open for
    # too few pairs, reported, not blocking; every blocking check passes.
    scores = simulate({"chat": CLEAN, "rare": {"n": 20, "base_error": 0.0, "cand_error": 0.0}})
    v = gate(scores, coverage_for(len(scores)), judgements=ties(scores))
    assert v.decision == Decision.PROMOTE, v.reasons
    assert any(c.task_type == "rare" and c.outcome is CheckOutcome.INCONCLUSIVE for c in v.checks)
    return v


def test_a_promote_shows_no_hold(simulate: Simulate, coverage_for: CoverageFor, ties: Ties) -> None:
    v = promote_with_a_minor_task_type(simulate, coverage_for, ties)
    rare = [c for c in v.checks if c.task_type == "rare" and c.outcome is not CheckOutcome.PASS]
    shown = {v.check_status(c) for c in rare}
    assert NOT_POWERED in shown
    assert shown <= {NOT_POWERED, REPORT_ONLY}
    scores = simulate({"chat": CLEAN, "rare": {"n": 20, "base_error": 0.0, "cand_error": 0.0}})
    summary = task_type_summary(pairs_frame(scores, GatePolicy()), v, latency=False)
    outcomes = dict(zip(summary["task_type"], summary["outcome"], strict=True))
    assert outcomes["rare"] in {NOT_POWERED, REPORT_ONLY}
    assert CheckOutcome.INCONCLUSIVE.value not in outcomes.values()


def test_the_cli_prints_a_promote_without_hold_rows_or_a_table_of_failures(
    simulate: Simulate, coverage_for: CoverageFor, ties: Ties
) -> None:
    v = promote_with_a_minor_task_type(simulate, coverage_for, ties)
    scores = simulate({"chat": CLEAN, "rare": {"n": 20, "base_error": 0.0, "cand_error": 0.0}})
    summary = task_type_summary(pairs_frame(scores, GatePolicy()), v)
    out = io.StringIO()
    print_result(Console(file=out, width=200, color_system=None), summary, v)
    text = out.getvalue()
    assert "PROMOTE" in text
    assert re.search(r"\bhold\b", text) is None, text  # not "? hold", not "HOLD"
    assert "did not pass" not in text
    assert "Checks that did not decide (report only or not powered yet)" in text
    assert NOT_POWERED in text


def test_conflicting_duplicate_lines_are_named_as_such(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = simulate({"chat": CLEAN})
    n = len(scores)
    coverage = coverage_for(n).model_copy(
        update={"captured": n + 3, "rejected": 3, "conflicting_duplicates": 2, "share": n / (n + 3)}
    )
    v = gate(scores, coverage)
    text = " ".join(v.reasons)
    assert "2 conflicting duplicate lines: same exchange id, other content" in text
    assert "1 unreadable capture lines" in text
    assert "3 unreadable capture lines" not in text


def test_a_hold_shows_a_check_that_cannot_hold_as_not_powered_not_as_hold(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # No judgements: 'chat' holds on net harm (a blocking check), while 'rare' (1.3% of the
    # pairs, below min_traffic_share) cannot hold anything. Measured on main: every 'rare'
    # row printed "? hold" beside the HOLD.
    scores = simulate({"chat": CLEAN, "rare": {"n": 20, "base_error": 0.0, "cand_error": 0.0}})
    v = gate(scores, coverage_for(len(scores)))
    assert v.decision == Decision.HOLD, v.reasons
    rare = [c for c in v.checks if c.task_type == "rare" and c.outcome is not CheckOutcome.PASS]
    assert rare
    assert not any(c.blocking for c in rare)
    assert {v.check_status(c) for c in rare} <= {NOT_POWERED, REPORT_ONLY}
    chat_open = [
        c
        for c in v.checks
        if c.task_type == "chat" and c.blocking and c.outcome is CheckOutcome.INCONCLUSIVE
    ]
    assert chat_open, "the HOLD must come from an open blocking check"
    assert {v.check_status(c) for c in chat_open} == {CheckOutcome.INCONCLUSIVE.value}
    summary = task_type_summary(pairs_frame(scores, GatePolicy()), v, latency=False)
    outcomes = dict(zip(summary["task_type"], summary["outcome"], strict=True))
    assert outcomes["rare"] in {NOT_POWERED, REPORT_ONLY}
    assert outcomes["chat"] == CheckOutcome.INCONCLUSIVE.value
