"""Pair judgements and the run's frozen judge, on SQLite and PostgreSQL.

A judgement round-trips whole (votes, identity, reference passes, stratum, unicode); a
judge's first success wins and a failed one is replaced by a retry; reference judgements
replace; a judgement of an unscored pair, or with another task type, is refused naming
it; the judge identity freezes with the first use, a different one is refused with both
named, and every use and refusal is in the run's audit log.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
import sqlalchemy as sa
from alembic import command

from shadoweval.errors import StorageError
from shadoweval.records import (
    JudgeIdentity,
    JudgementSource,
    JudgeVote,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.storage import PolicyAuditAction, Repository
from shadoweval.storage.database import alembic_config
from tests.storage.factories import (
    BASELINE,
    CANDIDATE,
    T0,
    make_exchange,
    make_outcome,
    make_pair_score,
)

RUN_ID = "run-judged"
IDENTITY = JudgeIdentity(
    endpoint="http://judge:8000", model="judge-7b 🚀", prompt_sha256="f" * 64, seed=7
)


@pytest.fixture
def seeded(repo: Repository) -> Repository:
    repo.create_run(
        run_id=RUN_ID,
        name="judged",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:" + "p" * 64,
        policy_yaml="alpha: 0.05\n",
    )
    exchanges = [make_exchange(n, task_type="chat" if n < 3 else "code") for n in range(5)]
    repo.save_exchanges(RUN_ID, exchanges)
    repo.save_outcomes(make_outcome(RUN_ID, ex.exchange_id) for ex in exchanges)
    repo.save_pair_scores(make_pair_score(RUN_ID, ex) for ex in exchanges)
    return repo


def judge_judgement(
    exchange_id: str,
    outcome: QualityOutcome | None,
    *,
    task_type: str = "chat",
    rationale: str = "B is more accurate — naïve 👍",
    minutes: int = 0,
) -> PairJudgement:
    votes = (
        JudgeVote(
            order="baseline_first",
            preferred=None if outcome is None else "candidate",
            rationale=rationale,
            error=None if outcome is not None else "HTTP 500: injected",
            prompt_tokens=321,
            completion_tokens=45,
        ),
        JudgeVote(order="candidate_first", preferred="candidate", rationale="A wins"),
    )
    return PairJudgement(
        run_id=RUN_ID,
        exchange_id=exchange_id,
        task_type=task_type,
        source=JudgementSource.JUDGE,
        outcome=outcome,
        rationale=rationale,
        votes=votes,
        judge=IDENTITY,
        stratum=2,
        error=None if outcome is not None else "baseline_first vote failed: HTTP 500",
        judged_at=T0 + timedelta(minutes=minutes),
    )


def reference(exchange_id: str, baseline: bool, candidate: bool, **kw: object) -> PairJudgement:
    outcome = (
        QualityOutcome.CANDIDATE_BETTER
        if candidate and not baseline
        else QualityOutcome.CANDIDATE_WORSE
        if baseline and not candidate
        else QualityOutcome.TIE
    )
    return PairJudgement(
        run_id=RUN_ID,
        exchange_id=exchange_id,
        task_type=str(kw.get("task_type", "chat")),
        source=JudgementSource.REFERENCE,
        outcome=outcome,
        baseline_pass=baseline,
        candidate_pass=candidate,
        checker="bfcl-official-score",
    )


def test_round_trip_keeps_every_field(seeded: Repository) -> None:
    given = [
        judge_judgement("ex-00000", QualityOutcome.CANDIDATE_BETTER),
        judge_judgement("ex-00001", None, minutes=1),
        reference("ex-00000", True, False),
    ]
    assert seeded.save_judgements(given) == 3
    assert seeded.list_judgements(RUN_ID) == given  # by judged_at (the reference: now)
    assert seeded.list_judgements(RUN_ID, source="judge") == [given[0], given[1]]
    assert seeded.list_judgements(RUN_ID, source=JudgementSource.REFERENCE) == [given[2]]
    assert seeded.list_judgements(RUN_ID, source=JudgementSource.HUMAN) == []
    assert seeded.list_judgements("no-such-run") == []
    with pytest.raises(ValueError, match="oracle"):
        seeded.list_judgements(RUN_ID, source="oracle")


def test_first_successful_judge_write_wins_and_a_failed_one_is_replaced(
    seeded: Repository,
) -> None:
    seeded.save_judgements([judge_judgement("ex-00001", None)])
    retried = judge_judgement("ex-00001", QualityOutcome.TIE, rationale="retry: tie")
    assert seeded.save_judgements([retried]) == 1
    assert seeded.list_judgements(RUN_ID) == [retried]
    # A later success, or a later failure, never replaces a stored success.
    again = judge_judgement("ex-00001", QualityOutcome.CANDIDATE_WORSE, rationale="second")
    assert seeded.save_judgements([again, judge_judgement("ex-00001", None)]) == 0
    assert seeded.list_judgements(RUN_ID) == [retried]


def test_reference_judgements_replace(seeded: Repository) -> None:
    seeded.save_judgements([reference("ex-00002", True, True)])
    corrected = reference("ex-00002", False, True)
    assert seeded.save_judgements([corrected]) == 1
    (stored,) = seeded.list_judgements(RUN_ID, source="reference")
    assert stored.outcome is QualityOutcome.CANDIDATE_BETTER
    assert (stored.baseline_pass, stored.candidate_pass) == (False, True)


def test_unscored_pair_and_wrong_task_type_are_refused_and_nothing_is_written(
    seeded: Repository,
) -> None:
    good = judge_judgement("ex-00000", QualityOutcome.TIE)
    with pytest.raises(StorageError, match=r"exchange 'ex-09999' in run 'run-judged'"):
        seeded.save_judgements([good, judge_judgement("ex-09999", QualityOutcome.TIE)])
    with pytest.raises(StorageError, match=r"task_type 'chat', but the pair's task type is 'code'"):
        seeded.save_judgements([judge_judgement("ex-00004", QualityOutcome.TIE)])
    assert seeded.list_judgements(RUN_ID) == []


def test_judge_identity_freezes_with_the_first_use_and_refuses_another(
    seeded: Repository,
) -> None:
    assert seeded.run_judge(RUN_ID) is None
    first = seeded.freeze_judge(RUN_ID, IDENTITY, command="shadow-eval judge run")
    assert first.accepted
    assert first.action is PolicyAuditAction.JUDGE_FROZEN
    assert seeded.run_judge(RUN_ID) == IDENTITY
    same = seeded.freeze_judge(RUN_ID, IDENTITY, command="shadow-eval judge run")
    assert same.accepted
    assert same.action is PolicyAuditAction.JUDGE_USED

    other = IDENTITY.model_copy(update={"model": "another-judge", "temperature": 0.5})
    refused = seeded.freeze_judge(RUN_ID, other, command="shadow-eval judge run")
    assert not refused.accepted
    assert refused.frozen == IDENTITY
    assert refused.presented == other
    assert seeded.run_judge(RUN_ID) == IDENTITY

    log = [e for e in seeded.policy_audit(RUN_ID) if e.action.value.startswith("judge_")]
    assert [e.action for e in log] == [
        PolicyAuditAction.JUDGE_FROZEN,
        PolicyAuditAction.JUDGE_USED,
        PolicyAuditAction.JUDGE_REFUSED,
    ]
    assert all(e.policy_hash == "sha256:" + "p" * 64 for e in log)
    assert log[0].detail["judge"] == IDENTITY.model_dump(mode="json")
    detail = log[2].detail
    assert detail["run_judge"] == IDENTITY.model_dump(mode="json")
    assert detail["presented_judge"] == other.model_dump(mode="json")
    assert detail["run_judge_sha256"] != detail["presented_judge_sha256"]

    with pytest.raises(StorageError, match="unknown run 'nope'"):
        seeded.freeze_judge("nope", IDENTITY, command="x")


def test_a_judge_that_judged_nothing_can_be_released_and_one_that_did_cannot(
    seeded: Repository,
) -> None:
    ex = make_exchange(0).exchange_id
    seeded.freeze_judge(RUN_ID, IDENTITY, command="shadow-eval judge run")
    other = IDENTITY.model_copy(update={"model": "other"})
    assert not seeded.release_judge(RUN_ID, other, command="x", reason="not the frozen one")
    seeded.save_judgements([judge_judgement(ex, None)])  # a failed judgement: no outcome
    assert seeded.release_judge(RUN_ID, IDENTITY, command="x", reason="all 1 calls failed")
    assert seeded.run_judge(RUN_ID) is None
    released = [e for e in seeded.policy_audit(RUN_ID) if e.action.value == "judge_released"]
    assert [e.detail["reason"] for e in released] == ["all 1 calls failed"]

    seeded.freeze_judge(RUN_ID, IDENTITY, command="shadow-eval judge run")
    seeded.save_judgements([judge_judgement(ex, QualityOutcome.TIE)])
    assert not seeded.release_judge(RUN_ID, IDENTITY, command="x", reason="has an outcome")
    assert seeded.run_judge(RUN_ID) == IDENTITY
    with pytest.raises(StorageError, match="unknown run"):
        seeded.release_judge("nope", IDENTITY, command="x", reason="r")


def test_scored_pair_origins_name_each_pairs_exchange_source(seeded: Repository) -> None:
    origins = seeded.scored_pair_origins(RUN_ID)
    assert [o.exchange_id for o in origins] == [f"ex-{n:05d}" for n in range(5)]
    assert [o.task_type for o in origins] == ["chat"] * 3 + ["code"] * 2
    assert origins[1].source == "sidecar:pod-ü-1"


def test_judgements_go_with_their_run(seeded: Repository) -> None:
    seeded.save_judgements([judge_judgement("ex-00000", QualityOutcome.TIE)])
    seeded.freeze_judge(RUN_ID, IDENTITY, command="x")
    with seeded._db.connect() as conn:
        conn.execute(sa.text("DELETE FROM run WHERE run_id = :r"), {"r": RUN_ID})
    assert seeded.list_judgements(RUN_ID) == []
    assert seeded.run_judge(RUN_ID) is None


def test_offline_sql_creates_both_tables() -> None:
    buffer = io.StringIO()
    config = alembic_config()
    config.output_buffer = buffer
    config.set_main_option("sqlalchemy.url", "postgresql+psycopg://u@h/db")
    command.upgrade(config, "head", sql=True)
    sql = buffer.getvalue()
    assert "CREATE TABLE pair_judgement (" in sql
    assert "CONSTRAINT uq_pair_judgement_run_id_exchange_id_source UNIQUE" in sql
    assert "CREATE TABLE run_judge (" in sql
