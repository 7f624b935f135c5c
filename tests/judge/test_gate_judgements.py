"""The gate reads the stored judgements: resolved per pair, human over reference over judge.

``gate_run`` loads the run's judgements and labels, resolves one per pair and passes them to
the pairs table; a failed judge judgement leaves its pair unjudged; the result carries the
judgement summary for the report (sources, the frozen judge and its endpoint, tokens).
"""

from __future__ import annotations

import math
from pathlib import Path

from shadoweval.application.gating import gate_run
from shadoweval.records import (
    HumanLabel,
    JudgeIdentity,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.policy import DEFAULT_POLICY_FILE, load_policy
from shadoweval.storage import Database, Repository
from tests.judge.seed import RUN_ID, seed_judge_run

JUDGE = JudgeIdentity(endpoint="http://judge:1", model="j", prompt_sha256="a" * 64)


def judged(exchange_id: str, outcome: QualityOutcome | None) -> PairJudgement:
    return PairJudgement(
        run_id=RUN_ID,
        exchange_id=exchange_id,
        task_type="chat",
        source=JudgementSource.JUDGE,
        outcome=outcome,
        votes=(
            JudgeVote(order="baseline_first", preferred="candidate", prompt_tokens=100,
                      completion_tokens=9),
            JudgeVote(order="candidate_first", preferred="candidate", prompt_tokens=101,
                      completion_tokens=8),
        ),
        judge=JUDGE,
        error=None if outcome is not None else "failed",
    )  # fmt: skip


def test_gate_uses_resolved_judgements_and_reports_them(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'g.db'}") as db:
        db.upgrade()
        repo = Repository(db)
        run = seed_judge_run(repo)
        repo.freeze_judge(RUN_ID, JUDGE, command="test")
        repo.save_judgements(
            [
                judged("ex-0000", QualityOutcome.CANDIDATE_BETTER),
                judged("ex-0001", QualityOutcome.CANDIDATE_BETTER),
                judged("ex-0002", None),
                judged("ex-0004", QualityOutcome.CANDIDATE_BETTER),
                judged("ex-0005", QualityOutcome.CANDIDATE_WORSE),
                PairJudgement(
                    run_id=RUN_ID,
                    exchange_id="ex-0001",
                    task_type="chat",
                    source=JudgementSource.REFERENCE,
                    outcome=QualityOutcome.TIE,
                    baseline_pass=True,
                    candidate_pass=True,
                    checker="test",
                ),
            ]
        )
        repo.save_labels(
            HumanLabel(
                run_id=RUN_ID,
                exchange_id=exchange_id,
                task_type="chat",
                label=label,
                labeller="ana",
                source="dashboard",
            )
            for exchange_id, label in (
                ("ex-0000", LabelValue.CANDIDATE_WORSE),
                ("ex-0004", LabelValue.CANDIDATE_BETTER),
                ("ex-0005", LabelValue.SAME),
            )
        )
        result = gate_run(repo, run, command="test")
    quality = result.pairs.set_index("exchange_id")
    values = dict(zip(result.pairs["exchange_id"], result.pairs["quality"], strict=True))
    assert quality.loc["ex-0000", "quality"] == 1.0  # the analyst overrides the judge
    assert quality.loc["ex-0000", "quality_source"] == "human"
    assert quality.loc["ex-0001", "quality"] == 0.0  # the reference over the judge
    assert quality.loc["ex-0001", "quality_source"] == "reference"
    assert math.isnan(values["ex-0002"])  # a failed judgement: not judged
    assert math.isnan(values["ex-0003"])
    assert result.judgement is not None
    report = result.judgement.as_dict()
    assert report["sources"]["resolved"] == {"judge": 0, "human": 3, "reference": 1, "failed": 1}
    assert report["sources"]["stored"]["judge"] == {"ok": 4, "failed": 1}
    assert report["endpoint"] == "http://judge:1"
    assert report["judge"]["model"] == "j"
    assert report["judge_tokens"] == {"prompt": 5 * 201, "completion": 5 * 17}
    # judge better / human worse, judge better / human better, judge worse / human same
    assert report["agreement"]["n"] == 3
    assert report["agreement"]["table"] == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]


def test_the_net_harm_reason_counts_failed_judgements(tmp_path: Path) -> None:
    """Pairs whose only judgement failed are not judged, but the reason says how many
    failed (``sources judge 0, human 0, reference 0, failed 3``)."""
    with Database(f"sqlite:///{tmp_path / 'f.db'}") as db:
        db.upgrade()
        repo = Repository(db)
        policy = load_policy(DEFAULT_POLICY_FILE)
        # A first look at 10 pairs, so the gate's checks run on the 23 seeded pairs.
        sequential = policy.sequential.model_copy(update={"first_checkpoint": 10})
        run = seed_judge_run(repo, policy=policy.model_copy(update={"sequential": sequential}))
        repo.freeze_judge(RUN_ID, JUDGE, command="test")
        repo.save_judgements([judged(f"ex-{n:04d}", None) for n in range(3)])
        result = gate_run(repo, run, command="test")
    quality = result.pairs.set_index("exchange_id")
    assert list(quality.loc[["ex-0000", "ex-0003"], "quality_source"]) == ["failed", ""]
    reasons = {c.task_type: c.reason for c in result.verdict.checks if c.metric == "net_harm"}
    assert "judge 0, human 0, reference 0, failed 3" in reasons["chat"]
    assert "failed" not in reasons["code"]
