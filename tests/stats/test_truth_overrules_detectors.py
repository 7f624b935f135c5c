"""Ground truth overrules the heuristic detectors on the pairs it covers (issue 29).

A harm detector (``harm_<kind>``) or the tool-behaviour check (``tool_text_answer``) flags a
side by a heuristic; reference correctness and analysts' labels say which side is right. On
a pair whose ground truth says the candidate is not worse (a tie or better), a flag on the
candidate alone is not harm: the check counts that pair as concordant and its reason says
how many flags ground truth overruled. The LLM judge is not ground truth and overrules
nothing; without ground truth nothing changes.

The numbers mirror the BFCL prompt-mode pair (Hermes-2-Pro-Mistral-7B → Llama-3-8B,
``docs/real-data.md`` §1b): in ``relevance`` (no offered function fits, text is the right
answer) 61 of the 66 text answers given only by the candidate were on pairs the official
reference calls a tie or better, and ``tool_text_answer`` failed and held the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from shadoweval.records import (
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
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy

Simulate = Callable[..., list[PairScore]]
CoverageFor = Callable[[int], Coverage]

CALLED = ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True)
TEXT = ToolCallFlags(calls=0, arguments_parse=True, schema_valid=True)
N = 600
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)


def run(
    scores: list[PairScore],
    coverage_for: CoverageFor,
    judgements: dict[str, PairJudgement] | None = None,
) -> Verdict:
    policy = GatePolicy()
    frame = pairs_frame(scores, policy, judgements)
    return evaluate_gate(
        frame, policy, run_id="run-truth", coverage=coverage_for(len(frame)), decided_at=DECIDED
    )


def check(verdict: Verdict, task_type: str, metric: str) -> Check:
    [found] = [c for c in verdict.checks if c.task_type == task_type and c.metric == metric]
    return found


def text_only_on_the_candidate(simulate: Simulate) -> list[PairScore]:
    """Tools offered on every request: rows 0–65 the candidate answers in text where the
    baseline called (b = 66), rows 66–73 the reverse (c = 8), every other pair calls."""
    scores = simulate(
        {"relevance": {"n": N, "base_error": 0.0, "cand_error": 0.0, "format_expected": False}}
    )
    out = []
    for i, s in enumerate(scores):
        base, cand = CALLED, CALLED
        changes: tuple[ToolChange, ...] = ()
        if i < 66:
            cand, changes = TEXT, (ToolChange.TEXT_INSTEAD_OF_CALL,)
        elif i < 74:
            base, changes = TEXT, (ToolChange.CALL_INSTEAD_OF_TEXT,)
        out.append(
            s.model_copy(
                update={"baseline_tools": base, "candidate_tools": cand, "tool_changes": changes}
            )
        )
    return out


def judgement(score: PairScore, source: JudgementSource, outcome: QualityOutcome) -> PairJudgement:
    extra: dict[str, object] = {}
    if source is JudgementSource.REFERENCE:
        extra = {
            "baseline_pass": outcome is not QualityOutcome.CANDIDATE_BETTER,
            "candidate_pass": outcome is not QualityOutcome.CANDIDATE_WORSE,
            "checker": "test",
        }
    elif source is JudgementSource.HUMAN:
        extra = {"labeller": "analyst"}
    return PairJudgement(
        run_id=score.run_id,
        exchange_id=score.exchange_id,
        task_type=score.task_type,
        source=source,
        outcome=outcome,
        **extra,
    )


def judged(
    scores: list[PairScore],
    source: JudgementSource,
    outcomes: Mapping[QualityOutcome, Iterable[int]],
) -> dict[str, PairJudgement]:
    return {
        scores[i].exchange_id: judgement(scores[i], source, outcome)
        for outcome, rows in outcomes.items()
        for i in rows
    }


def relevance_reference(scores: list[PairScore]) -> dict[str, PairJudgement]:
    """The reference on every pair: of the 66 candidate-only text answers, 40 are better
    (the candidate rightly declined), 21 ties, 5 worse; every other pair a tie."""
    return judged(
        scores,
        JudgementSource.REFERENCE,
        {
            QualityOutcome.CANDIDATE_BETTER: range(40),
            QualityOutcome.TIE: [*range(40, 61), *range(66, N)],
            QualityOutcome.CANDIDATE_WORSE: range(61, 66),
        },
    )


def test_without_ground_truth_text_only_on_the_candidate_fails(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    v = run(text_only_on_the_candidate(simulate), coverage_for)
    tool = check(v, "relevance", "tool_text_answer")
    assert tool.outcome == CheckOutcome.FAIL
    assert "66 pairs answer in text only on the candidate vs 8 only on the baseline" in tool.reason
    assert "overruled" not in tool.reason
    assert v.decision == Decision.HOLD


def test_reference_correctness_overrules_candidate_text_answers_it_calls_not_worse(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = text_only_on_the_candidate(simulate)
    v = run(scores, coverage_for, relevance_reference(scores))
    tool = check(v, "relevance", "tool_text_answer")
    # 61 of the 66 are on pairs the reference calls a tie or better: they do not count; the
    # other 5 it calls worse: counted once, by net_harm, not again as tool behaviour.
    assert tool.outcome != CheckOutcome.FAIL, tool.reason
    assert tool.estimate == (0 - 8) / N
    assert "61 candidate flags overruled by reference correctness" in tool.reason, tool.reason
    assert (
        "5 candidate flags confirmed by reference correctness (ground truth says the "
        "candidate is worse on those pairs: counted once, by net_harm)" in tool.reason
    ), tool.reason
    # The facts stay in the reason: 66 text answers instead of a call happened.
    assert "tool changes on the pairs used: 66 text instead of a call" in tool.reason
    assert not [c for c in v.checks if c.outcome == CheckOutcome.FAIL], [
        c.reason for c in v.checks if c.outcome == CheckOutcome.FAIL
    ]


def test_analysts_labels_overrule_a_harm_detector_and_the_llm_judge_does_not(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    # 20 candidate answers flagged as degenerate (b = 20, c = 0): significant harm.
    scores = simulate({"chat": {"n": 1500, "base_error": 0.0, "cand_error": 0.0}})
    flagged = list(range(100, 1500, 70))
    scores = [
        s.model_copy(update={"candidate_harms": (HarmKind.DEGENERATION,)}) if i in flagged else s
        for i, s in enumerate(scores)
    ]
    same = {QualityOutcome.TIE: flagged[:18], QualityOutcome.CANDIDATE_WORSE: flagged[18:]}

    by_judge = run(scores, coverage_for, judged(scores, JudgementSource.JUDGE, same))
    degeneration = check(by_judge, "chat", "harm_degeneration")
    assert degeneration.outcome == CheckOutcome.FAIL
    assert "overruled" not in degeneration.reason
    assert by_judge.decision == Decision.ROLLBACK

    by_analysts = run(scores, coverage_for, judged(scores, JudgementSource.HUMAN, same))
    degeneration = check(by_analysts, "chat", "harm_degeneration")
    assert degeneration.outcome != CheckOutcome.FAIL, degeneration.reason
    assert degeneration.estimate == 2 / 1500
    assert "18 candidate flags overruled by analysts' labels" in degeneration.reason
    assert by_analysts.decision != Decision.ROLLBACK


def test_mixed_ground_truth_names_both_sources(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    scores = text_only_on_the_candidate(simulate)
    judgements = relevance_reference(scores)
    # An analyst relabels 10 of the better ones "same": still ground truth, still not worse.
    judgements |= judged(scores, JudgementSource.HUMAN, {QualityOutcome.TIE: range(10)})
    v = run(scores, coverage_for, judgements)
    tool = check(v, "relevance", "tool_text_answer")
    assert (
        "61 candidate flags overruled by ground truth (51 reference correctness, "
        "10 analysts' labels)" in tool.reason
    ), tool.reason


def test_text_answers_the_reference_calls_wrong_are_counted_once_by_net_harm(
    simulate: Simulate, coverage_for: CoverageFor
) -> None:
    """BFCL gpt-4o-2024-05-13 → 2024-08-06, ``java`` (docs/real-data.md): 9 text answers only
    on the candidate, each one the reference calls worse; overall the reference says 5 better
    and 10 worse (exact paired p 0.3, not significant). The tool check does not flag ``java``
    a second time for what net harm already weighs."""
    n = 100
    scores = simulate(
        {"java": {"n": n, "base_error": 0.0, "cand_error": 0.0, "format_expected": False}}
    )
    text_rows = range(9)
    out = []
    for i, s in enumerate(scores):
        cand, changes = (
            (TEXT, (ToolChange.TEXT_INSTEAD_OF_CALL,)) if i in text_rows else (CALLED, ())
        )
        out.append(
            s.model_copy(
                update={"baseline_tools": CALLED, "candidate_tools": cand, "tool_changes": changes}
            )
        )
    reference = judged(
        out,
        JudgementSource.REFERENCE,
        {
            QualityOutcome.CANDIDATE_WORSE: range(10),
            QualityOutcome.CANDIDATE_BETTER: range(10, 15),
            QualityOutcome.TIE: range(15, n),
        },
    )
    without = check(run(out, coverage_for), "java", "tool_text_answer")
    assert without.outcome == CheckOutcome.FAIL, without.reason
    v = run(out, coverage_for, reference)
    tool = check(v, "java", "tool_text_answer")
    assert tool.outcome != CheckOutcome.FAIL, tool.reason
    assert tool.estimate == 0.0
    assert "9 candidate flags confirmed by reference correctness" in tool.reason, tool.reason
    assert "tool changes on the pairs used: 9 text instead of a call" in tool.reason
    harm = check(v, "java", "net_harm")
    assert harm.outcome != CheckOutcome.FAIL, harm.reason
    assert harm.estimate == (10 - 5) / n
