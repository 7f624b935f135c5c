"""A judge below its agreement floor does not vote: through the gate, in SQLite.

One task type, ``chat``: 60 changed pairs (similarity 0.5) and 60 unchanged (0.99). The
judge says the candidate is better on every changed pair; analysts labelled 40 of them,
20 better and 20 the same — the judge agrees on 20 of 40 (50%), below the default floor
60%. Without the floor (``judge.min_agreement: 0``) the net harm passes on judge and
labels together; with it the judge's 20 unlabelled pairs are not read and the unit holds,
the reason naming the agreement, its interval and the floor, although the 40 labelled
pairs alone would pass.
"""

from __future__ import annotations

from pathlib import Path

from shadoweval.application.gating import GateResult, gate_run
from shadoweval.application.judging import JudgementSummary, judgement_summary
from shadoweval.application.run_views import (
    changed_unjudged_ids,
    direction_summary,
    judged_pairs_view,
)
from shadoweval.records import (
    POOLED,
    CheckOutcome,
    HumanLabel,
    JudgeIdentity,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.policy import (
    DEFAULT_POLICY_FILE,
    GatePolicy,
    JudgePolicy,
    load_policy,
    policy_hash,
    policy_to_yaml,
)
from shadoweval.storage import Database, Repository, RunInfo
from tests.judge.seed import BASELINE, CANDIDATE, _pair

JUDGE = JudgeIdentity(endpoint="http://judge:1", model="j", prompt_sha256="a" * 64)
CHANGED = 60
LABELLED = 40
FIGURE = (
    "judge does not vote in 'chat': agreement with labels 50% (95% CI 35–65%, 40 labelled "
    "pairs) below the floor 60%"
)


def _policy(judge: JudgePolicy) -> GatePolicy:
    policy = load_policy(DEFAULT_POLICY_FILE)
    sequential = policy.sequential.model_copy(update={"first_checkpoint": 10})
    return policy.model_copy(update={"sequential": sequential, "judge": judge})


def _gate(tmp_path: Path, name: str, judge: JudgePolicy) -> tuple[GateResult, JudgementSummary]:
    """Seed the run of the module docstring under ``judge``, gate it and summarize it."""
    run_id = f"run-{name}"
    with Database(f"sqlite:///{tmp_path / f'{name}.db'}") as db:
        db.upgrade()
        repo = Repository(db)
        policy = _policy(judge)
        run = repo.create_run(
            run_id=run_id, name=name, baseline=BASELINE, candidate=CANDIDATE,
            policy_hash=policy_hash(policy), policy_yaml=policy_to_yaml(policy),
        )  # fmt: skip
        rows = [_pair(run_id, n, "chat", 0.5, f"good answer {n}") for n in range(CHANGED)]
        rows += [_pair(run_id, n, "chat", 0.99, f"fair answer {n}") for n in range(CHANGED, 120)]
        repo.save_exchanges(run_id, [r[0] for r in rows])
        repo.save_outcomes([r[1] for r in rows])
        repo.save_pair_scores([r[2] for r in rows])
        repo.freeze_judge(run_id, JUDGE, command="test")
        repo.save_judgements(
            PairJudgement(
                run_id=run_id, exchange_id=f"ex-{n:04d}", task_type="chat",
                source=JudgementSource.JUDGE, outcome=QualityOutcome.CANDIDATE_BETTER,
                votes=(
                    JudgeVote(order="baseline_first", preferred="candidate"),
                    JudgeVote(order="candidate_first", preferred="candidate"),
                ),
                judge=JUDGE,
            )
            for n in range(CHANGED)
        )  # fmt: skip
        repo.save_labels(
            HumanLabel(
                run_id=run_id, exchange_id=f"ex-{n:04d}", task_type="chat",
                label=LabelValue.CANDIDATE_BETTER if n % 2 else LabelValue.SAME,
                labeller="ana", source="import",
            )
            for n in range(LABELLED)
        )  # fmt: skip
        result = gate_run(repo, run, command="test")
        summary = judgement_summary(repo, run_id)
        _views_read_as_the_gate(repo, run, result)
    return result, summary


def _views_read_as_the_gate(repo: Repository, run: RunInfo, result: GateResult) -> None:
    """The dashboard's direction, its export of pairs left to judge and the Judged page's
    "used" read the judge as the gate does."""
    silent = bool(result.verdict.coverage.judge_not_voting)
    table = direction_summary(repo, run).table.set_index("task_type")
    assert table.loc["chat", "judged_judge"] == (0 if silent else CHANGED - LABELLED)
    unjudged = changed_unjudged_ids(repo, run)
    assert unjudged == ({f"ex-{n:04d}" for n in range(LABELLED, CHANGED)} if silent else set())
    page = judged_pairs_view(repo, run, redact=lambda text: text, source="judge", page_size=200)
    used = {p.judgement.exchange_id for p in page.pairs if p.used}
    assert used == (set() if silent else {f"ex-{n:04d}" for n in range(LABELLED, CHANGED)})


def test_a_judge_below_the_floor_holds_the_net_harm_naming_the_figure(tmp_path: Path) -> None:
    free, _ = _gate(tmp_path, "free", JudgePolicy(min_agreement=0.0))
    checks = {c.task_type: c for c in free.verdict.checks if c.metric == "net_harm"}
    assert checks["chat"].outcome == CheckOutcome.PASS, checks["chat"].reason
    assert "judge does not vote" not in checks["chat"].reason
    assert free.verdict.coverage.judge_not_voting == {}
    assert "judge 20, human 40" in checks["chat"].reason

    held, summary = _gate(tmp_path, "held", JudgePolicy())
    checks = {c.task_type: c for c in held.verdict.checks if c.metric == "net_harm"}
    for unit in ("chat", POOLED):
        assert checks[unit].outcome == CheckOutcome.INCONCLUSIVE, checks[unit].reason
        assert checks[unit].reason.startswith(FIGURE), checks[unit].reason
    assert "judge 0, human 40" in checks["chat"].reason  # the labels still count
    assert held.verdict.coverage.judge_not_voting == {"chat": FIGURE}
    quality = held.pairs.set_index("exchange_id")
    assert quality.loc["ex-0050", "quality_source"] == ""  # the judge's pair: not read
    assert quality.loc["ex-0000", "quality_source"] == "human"

    assert held.judgement is not None
    report = held.judgement.as_dict()
    assert report["sources"]["resolved"]["judge"] == 0
    chat = report["judge_quality"]["per_task_type"]["chat"]
    assert chat["agreement"]["count"] == 20
    assert chat["agreement"]["n"] == 40
    assert (chat["flip"]["count"], chat["flip"]["n"], chat["flip"]["share"]) == (0, 60, 0.0)
    assert chat["first_position"]["count"] == 60
    assert chat["first_position"]["n"] == 120
    assert chat["standing"] == {
        "votes": False,
        "read": "task_type",
        "agreement": chat["agreement"],
        "flip": chat["flip"],  # read (60 pairs in both orders), 0%: not what silences it
        "text": FIGURE,
    }
    # `judge summary` reads the run's frozen floor, as the gate does
    assert summary.as_dict()["judge_quality"] == report["judge_quality"]
