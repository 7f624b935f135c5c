"""Ground truth is never dropped (issue 29, item 3).

Reference correctness and analysts' labels are read on every pair they cover, whatever the
similarity says: a pair whose ground truth differs between the sides is changed (and its
judgement enters net harm), a pair both sides got equally right is a tie. A structured or
short pair whose normalised exact forms differ is changed too. The similarity check's
reason reports how often the embedding called such a pair unchanged (its miss rate).

The numbers mirror the BFCL prompt-mode measurement of the issue: MiniLM reads
``"operating_hours": 11`` vs ``23`` as unchanged (similarity 0.99), so 164 of 253 pairs on
which the official correctness differs were never read and ``rest`` came out with the
wrong sign.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from shadoweval.application.run_views import direction_of
from shadoweval.records import (
    Coverage,
    HumanLabel,
    JudgementSource,
    LabelValue,
    PairJudgement,
    PairScore,
    QualityOutcome,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.judgements import resolve_judgements
from shadoweval.stats.net_harm import ground_truth_stratum
from shadoweval.stats.policy import GatePolicy, parse_policy

T0 = datetime(2024, 6, 1, tzinfo=UTC)
DECIDED = datetime(2024, 6, 3, tzinfo=UTC)
RUN = "r"


def score(i: int, similarity: float, *, exact_differs: bool | None = None) -> PairScore:
    return PairScore(
        run_id=RUN,
        exchange_id=f"ex{i:05d}",
        task_type="rest",
        captured_at=T0 + timedelta(minutes=i),
        similarity=similarity,
        sampled=True,
        exact_differs=exact_differs,
    )


def reference(i: int, baseline_pass: bool, candidate_pass: bool) -> PairJudgement:
    outcome = (
        QualityOutcome.TIE
        if baseline_pass == candidate_pass
        else QualityOutcome.CANDIDATE_BETTER
        if candidate_pass
        else QualityOutcome.CANDIDATE_WORSE
    )
    return PairJudgement(
        run_id=RUN,
        exchange_id=f"ex{i:05d}",
        task_type="rest",
        source=JudgementSource.REFERENCE,
        outcome=outcome,
        baseline_pass=baseline_pass,
        candidate_pass=candidate_pass,
        checker="test",
    )


def coverage(frame: pd.DataFrame) -> Coverage:
    n = len(frame)
    return Coverage(
        captured=n,
        replayed=n,
        paired=n,
        errored=0,
        warmup=0,
        skipped=0,
        share=1.0,
        per_task_type={str(t): int(c) for t, c in frame["task_type"].value_counts().items()},
    )


def gate(frame: pd.DataFrame, policy: GatePolicy) -> dict[str, str]:
    verdict = evaluate_gate(frame, policy, run_id=RUN, coverage=coverage(frame), decided_at=DECIDED)
    return {f"{c.task_type}/{c.metric}": c.reason for c in verdict.checks} | {
        f"{c.task_type}/{c.metric}:value": repr(c.estimate) for c in verdict.checks
    }


def test_a_pair_whose_reference_differs_is_changed_whatever_its_similarity() -> None:
    # 200 pairs the embedding reads as unchanged (D 0.01 < 0.1); the reference says the
    # candidate is better on 30 of them, worse on 5, and both equally right on the rest.
    scores = [score(i, 0.99) for i in range(200)]
    judgements = [reference(i, False, True) for i in range(30)]
    judgements += [reference(i, True, False) for i in range(30, 35)]
    judgements += [reference(i, True, True) for i in range(35, 200)]
    policy = parse_policy({"observation": {"min_window_hours": 0}})
    frame = pairs_frame(scores, policy, judgements=resolve_judgements(judgements, []))
    changes = classify_changes(frame, policy)
    assert int(np.count_nonzero(changes.changed)) == 35
    assert changes.changed[:35].all()
    assert not changes.changed[35:].any()
    edges = policy.net_harm.strata_edges
    assert set(changes.stratum[:35].tolist()) == {ground_truth_stratum(edges)}
    reasons = gate(frame, policy)
    net = reasons["rest/net_harm"]
    assert "35 of 35 changed pairs judged" in net, net
    assert "30 better, 0 tie, 5 worse" in net, net
    # Net harm −12.5 pp: read from the reference, not "200 pairs, all ties".
    assert float(reasons["rest/net_harm:value"]) == -25 / 200
    assert "all ties" not in net
    # The 165 reference ties are read (both sides equally right), not "not read".
    assert "165 unchanged pairs counted as ties (ground truth: a tie on 165 of them)" in net


def test_analysts_labels_on_unchanged_pairs_count_and_same_is_a_tie() -> None:
    scores = [score(i, 0.995) for i in range(200)]
    labels = [
        HumanLabel(
            run_id=RUN,
            exchange_id=f"ex{i:05d}",
            task_type="rest",
            label=label,
            labeller="ana",
            source="import",
        )
        for i, label in (
            (0, LabelValue.CANDIDATE_WORSE),
            (1, LabelValue.CANDIDATE_WORSE),
            (2, LabelValue.SAME),
            (3, LabelValue.BOTH_BAD),
        )
    ]
    policy = GatePolicy()
    frame = pairs_frame(scores, policy, judgements=resolve_judgements([], labels))
    changes = classify_changes(frame, policy)
    assert changes.changed.tolist()[:4] == [True, True, False, False]
    assert int(np.count_nonzero(changes.changed)) == 2


def test_an_llm_judge_outcome_never_marks_a_change() -> None:
    scores = [score(i, 0.99) for i in range(10)]
    judged = PairJudgement(
        run_id=RUN,
        exchange_id="ex00000",
        task_type="rest",
        source=JudgementSource.JUDGE,
        outcome=QualityOutcome.CANDIDATE_WORSE,
    )
    policy = GatePolicy()
    frame = pairs_frame(scores, policy, judgements=resolve_judgements([judged], []))
    assert not classify_changes(frame, policy).changed.any()


def test_an_exact_difference_marks_a_pair_changed_and_the_miss_rate_is_reported() -> None:
    # 4 structured pairs whose exact forms differ at similarity 0.99 (the embedding misses
    # them), 1 with a real divergence and an exact difference, the rest equal.
    scores = [score(i, 0.99, exact_differs=True) for i in range(4)]
    scores.append(score(4, 0.5, exact_differs=True))
    scores += [score(i, 0.99, exact_differs=False) for i in range(5, 200)]
    policy = GatePolicy()
    frame = pairs_frame(scores, policy)
    changes = classify_changes(frame, policy)
    assert changes.changed[:5].all()
    assert not changes.changed[5:].any()
    assert int(np.count_nonzero(changes.similarity_found)) == 5
    assert int(np.count_nonzero(changes.similarity_missed)) == 4
    reasons = gate(frame, policy)
    assert (
        "similarity miss rate 80.0%: of the 5 pairs that ground truth or exact comparison "
        "found changed, the embedding alone called 4 unchanged" in reasons["rest/similarity"]
    )


def test_without_ground_truth_or_exact_facts_nothing_changes() -> None:
    scores = [score(i, 0.99) for i in range(150)] + [score(i, 0.5) for i in range(150, 200)]
    policy = GatePolicy()
    frame = pairs_frame(scores, policy)
    changes = classify_changes(frame, policy)
    assert int(np.count_nonzero(changes.changed)) == 50
    assert not changes.similarity_found.any()
    assert "miss rate" not in gate(frame, policy)["rest/similarity"]


def test_the_run_view_classifies_with_ground_truth_and_reports_the_miss_rate() -> None:
    scores = [score(i, 0.99, exact_differs=i == 0) for i in range(20)]
    judgements = [reference(1, True, False), reference(2, True, True)]
    policy = GatePolicy()
    direction = direction_of(pairs_frame(scores, policy), policy, judgements, [])
    row = direction.table.set_index("task_type").loc["rest"]
    assert (row["changed"], row["worse"], row["judged_reference"]) == (2, 1, 1)
    assert (row["similarity_found"], row["similarity_missed"]) == (2, 2)
