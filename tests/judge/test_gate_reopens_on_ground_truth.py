"""A terminal verdict is terminal for the evidence it saw (issue 29, items 1 and 9b).

A ROLLBACK stored at ``evaluate`` (before any judgement) is returned as is while nothing
new arrives; reference correctness imported after it reopens the gate: a new verdict is
computed on the same look, stored after the ROLLBACK (the history shows both), its last
reason says what it reopened, and the run's status leaves ``rolled_back``. SQLite, the
real repository and ``gate_run``.
"""

from __future__ import annotations

from pathlib import Path

from shadoweval.application.gating import gate_run
from shadoweval.records import Decision, JudgementSource, PairJudgement, QualityOutcome
from shadoweval.stats.checkpoints import REOPENED
from shadoweval.stats.policy import DEFAULT_POLICY_FILE, load_policy
from shadoweval.storage import Database, Repository, RunStatus
from tests.judge.seed import CHAT_CHANGED, CHAT_SAME, RUN_ID, seed_judge_run


def reference(n: int, outcome: QualityOutcome) -> PairJudgement:
    return PairJudgement(
        run_id=RUN_ID,
        exchange_id=f"ex-{n:04d}",
        task_type="chat" if n < CHAT_CHANGED + CHAT_SAME else "code",
        source=JudgementSource.REFERENCE,
        outcome=outcome,
        baseline_pass=outcome != QualityOutcome.CANDIDATE_BETTER,
        candidate_pass=outcome != QualityOutcome.CANDIDATE_WORSE,
        checker="test",
    )


def test_new_ground_truth_reopens_a_terminal_verdict(tmp_path: Path) -> None:
    with Database(f"sqlite:///{tmp_path / 'g.db'}") as db:
        db.upgrade()
        repo = Repository(db)
        policy = load_policy(DEFAULT_POLICY_FILE)
        sequential = policy.sequential.model_copy(update={"first_checkpoint": 10})
        run = seed_judge_run(repo, policy=policy.model_copy(update={"sequential": sequential}))
        first = gate_run(repo, run, command="evaluate")
        assert first.verdict.look >= 1
        # The verdict `evaluate` stored was a ROLLBACK (e.g. a cost guardrail alone).
        rollback = first.verdict.model_copy(update={"decision": Decision.ROLLBACK})
        repo.save_verdict(rollback, "evaluate")
        repo.set_run_status(RUN_ID, RunStatus.ROLLED_BACK)

        again = gate_run(repo, run, command="gate")
        assert again.reused_terminal
        assert again.verdict == rollback

        n = CHAT_CHANGED + CHAT_SAME + 5
        repo.save_judgements(reference(i, QualityOutcome.CANDIDATE_BETTER) for i in range(n))
        reopened = gate_run(repo, run, command="gate")
        assert not reopened.reused_terminal
        assert reopened.verdict.decision != Decision.ROLLBACK
        assert reopened.verdict.look == rollback.look
        assert reopened.verdict.judgements_sha256 != rollback.judgements_sha256
        assert reopened.verdict.reasons[-1].startswith(f"{REOPENED}: the ROLLBACK of ")
        history = repo.verdict_history(RUN_ID)
        assert [e.verdict.decision for e in history][-2:] == [
            Decision.ROLLBACK,
            reopened.verdict.decision,
        ]
        info = repo.get_run(RUN_ID)
        assert info is not None
        assert info.status is not RunStatus.ROLLED_BACK
        # Nothing new since: the reopened verdict is returned as stored.
        assert gate_run(repo, run, command="gate").verdict == reopened.verdict
