"""``gate_run`` reads random-sample labels as the PPI sample (issue 31 item 1).

A run whose changed pairs the judge calls all "better" while the analysts' random sample
says "worse" on every labelled pair: the gate estimates net harm by prediction-powered
inference from the stored judgements (predictor) and the labels whose ``sample`` is set
(the correction), and says so; the same labels chosen by hand (no sample) keep the
stratified estimator.
"""

from __future__ import annotations

from pathlib import Path

from shadoweval.application.gating import gate_run
from shadoweval.records import (
    POOLED,
    HumanLabel,
    JudgementSource,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.policy import parse_policy
from shadoweval.storage import Database, Repository
from tests.judge.seed import RUN_ID, seed_judge_run

CHAT = [f"ex-{i:04d}" for i in range(12)]
CODE = [f"ex-{i:04d}" for i in range(18, 23)]
# A first look at 10 pairs, so the gate's checks run on the 23 seeded pairs.
POLICY = parse_policy(
    {"net_harm": {"ppi_min_labels": 6, "min_judged": 4}, "sequential": {"first_checkpoint": 10}}
)


def _gate(tmp_path: Path, sample: str | None) -> dict[str, str]:
    with Database(f"sqlite:///{tmp_path / 'g.db'}") as db:
        db.upgrade()
        repo = Repository(db)
        run = seed_judge_run(repo, policy=POLICY)
        repo.save_judgements(
            [
                PairJudgement(
                    run_id=RUN_ID,
                    exchange_id=e,
                    task_type="chat" if e in CHAT else "code",
                    source=JudgementSource.JUDGE,
                    outcome=QualityOutcome.CANDIDATE_BETTER,
                )
                for e in CHAT + CODE
            ]
        )
        repo.save_labels(
            [
                HumanLabel(
                    run_id=RUN_ID,
                    exchange_id=e,
                    task_type="chat" if e in CHAT else "code",
                    label=LabelValue.CANDIDATE_WORSE,
                    labeller="ana",
                    source="import",
                    sample=sample,
                )
                for e in CHAT[:6] + CODE[:2]
            ]
        )
        verdict = gate_run(repo, run, command="test").verdict
    return {
        c.task_type: c.statistic + " | " + c.reason
        for c in verdict.checks
        if c.metric == "net_harm"
    }


def test_random_sample_labels_make_the_net_harm_prediction_powered(tmp_path: Path) -> None:
    net = _gate(tmp_path, "ppi-seed-7-n-6")
    assert "prediction-powered" in net[POOLED]
    # Look 2 reads the first 20 pairs by capture time: 14 changed, 8 of them labelled.
    assert "corrected by 8 random labels of 14 changed pairs" in net[POOLED]
    assert "predictor: judge or ground truth on" in net[POOLED]
    # The judge says better everywhere, every random label says worse: PPI is > 0.
    assert "net harm by prediction-powered inference" in net["chat"]
    assert "net harm worse than the margin" in net["chat"] or "not shown" in net["chat"]


def test_the_same_labels_chosen_by_hand_keep_the_stratified_estimator(tmp_path: Path) -> None:
    net = _gate(tmp_path, None)
    assert "prediction-powered" not in net[POOLED]
    assert "PPI not used" not in net[POOLED]
