"""The canary store (migration 0009): guarded moves, audit rows under the run, idempotent
observations, ratings only for observed exchanges — on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from shadoweval.errors import StorageError
from shadoweval.records import Decision, StepVerdict
from shadoweval.storage import (
    AuditNote,
    CanaryObservation,
    CanaryRating,
    CanaryState,
    PolicyAuditAction,
    Repository,
)

from .factories import BASELINE, CANDIDATE, T0


def _run(repo: Repository, run_id: str = "run-1") -> str:
    repo.create_run(
        run_id=run_id,
        name="r",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:gate",
        policy_yaml="{}\n",
        created_at=T0 - timedelta(hours=1),
    )
    return run_id


def _start(repo: Repository, canary_id: str = "c-1", run_id: str = "run-1") -> None:
    repo.create_canary(
        canary_id=canary_id,
        run_id=run_id,
        name="ramp",
        policy_hash="sha256:canary",
        policy_yaml="steps: []\n",
        split_dir="/srv/split",
        first_share=0.05,
        split_revision=1,
        note=AuditNote(PolicyAuditAction.CANARY_STARTED, "test", actor="ops", detail={"why": "go"}),
        started_at=T0,
    )


def _obs(exchange_id: str, arm: str = "candidate") -> CanaryObservation:
    return CanaryObservation(
        exchange_id=exchange_id,
        step_index=0,
        arm=arm,
        observed_at=T0 + timedelta(seconds=1),
        session="s",
        error=False,
        format_expected=True,
        format_ok=True,
        harmed=False,
        cache_hit=False,
        e2e_ms=100.0,
        ttft_ms=20.0,
        detail={"status_code": 200},
    )


def _verdict(decision: str) -> StepVerdict:
    """A step verdict with no check, as the controller would store it."""
    return StepVerdict(
        decision=Decision(decision),
        reasons=(),
        checks=(),
        error_breach_since=None,
        n_baseline=0,
        n_candidate=0,
        sessions_baseline=0,
        sessions_candidate=0,
        look=0,
    )


def test_start_advance_rollback_are_audited_under_the_run(repo: Repository) -> None:
    _start(repo, run_id=_run(repo))
    with pytest.raises(StorageError, match="already has a running canary 'c-1'"):
        _start(repo, canary_id="c-2")
    repo.record_canary_evaluation(
        "c-1",
        step_index=0,
        decision="PROMOTE",
        verdict=_verdict("promote"),
        error_breach_since=None,
    )
    moved = repo.move_canary(
        "c-1",
        from_step=0,
        to_step=1,
        state=CanaryState.RUNNING,
        share=0.25,
        split_revision=2,
        step_outcome="promoted",
        note=AuditNote(PolicyAuditAction.CANARY_ADVANCED, "test", detail={"why": "PROMOTE"}),
        at=T0 + timedelta(days=1),
    )
    assert (moved.step_index, moved.candidate_share, moved.split_revision) == (1, 0.25, 2)
    # a second controller that judged step 0 cannot move it again
    with pytest.raises(StorageError, match="is at step 1, not 0"):
        repo.move_canary(
            "c-1",
            from_step=0,
            state=CanaryState.ROLLED_BACK,
            share=0.0,
            split_revision=3,
            step_outcome="rolled_back",
            note=AuditNote(PolicyAuditAction.CANARY_ROLLED_BACK, "test"),
        )
    done = repo.move_canary(
        "c-1",
        from_step=1,
        state=CanaryState.ROLLED_BACK,
        share=0.0,
        split_revision=3,
        step_outcome="rolled_back",
        note=AuditNote(PolicyAuditAction.CANARY_ROLLED_BACK, "test", detail={"why": "asked"}),
        at=T0 + timedelta(days=1, hours=1),
    )
    assert done.state is CanaryState.ROLLED_BACK
    assert done.candidate_share == 0.0
    steps = repo.canary_steps("c-1")
    assert [(s.step_index, s.share, s.outcome) for s in steps] == [
        (0, 0.05, "promoted"),
        (1, 0.25, "rolled_back"),
    ]
    assert steps[0].evaluations == 1
    assert steps[0].last_decision == "PROMOTE"
    actions = [e.action for e in repo.policy_audit("run-1")]
    assert actions == [
        PolicyAuditAction.CREATED,
        PolicyAuditAction.CANARY_STARTED,
        PolicyAuditAction.CANARY_ADVANCED,
        PolicyAuditAction.CANARY_ROLLED_BACK,
    ]
    started = repo.policy_audit("run-1")[1]
    assert started.actor == "ops"
    assert started.detail == {"canary_id": "c-1", "why": "go"}
    assert started.policy_hash == "sha256:canary"
    with pytest.raises(StorageError, match="is rolled_back; it can no longer change"):
        repo.record_canary_evaluation(
            "c-1", step_index=1, decision="HOLD", verdict=_verdict("hold"), error_breach_since=None
        )


def test_observations_are_stored_once_and_ratings_need_an_observation(repo: Repository) -> None:
    _start(repo, run_id=_run(repo))
    written = repo.save_canary_observations(
        "c-1", [_obs("e1"), _obs("e2", "baseline")], ingest_state={"seg-1.jsonl": 2}
    )
    again = repo.save_canary_observations("c-1", [_obs("e1")], ingest_state={"seg-1.jsonl": 3})
    assert (written, again) == (2, 0)
    assert repo.count_canary_observations("c-1") == {"baseline": 1, "candidate": 1}
    assert [o.exchange_id for o in repo.canary_observations("c-1", step_index=0)] == ["e1", "e2"]
    later = dataclasses.replace(_obs("e3"), step_index=1, session="t")
    repo.save_canary_observations("c-1", [later])
    assert repo.canary_sessions_before("c-1", 1) == {"s"}
    assert repo.canary_sessions_before("c-1", 2) == {"s", "t"}
    assert repo.canary_sessions_before("c-1", 0) == set()
    info = repo.get_canary("c-1")
    assert info is not None
    assert info.ingest_state == {"seg-1.jsonl": 3}
    rating = CanaryRating(canary_id="c-1", exchange_id="e1", rater="ann", rating=2.0, rated_at=T0)
    assert repo.save_canary_ratings([rating]) == 1
    assert repo.save_canary_ratings([rating]) == 1  # a repeat replaces
    assert [r.rating for r in repo.canary_ratings("c-1")] == [2.0]
    with pytest.raises(StorageError, match="observed no exchange 'nope'"):
        repo.save_canary_ratings(
            [CanaryRating(canary_id="c-1", exchange_id="nope", rater="a", rating=5, rated_at=T0)]
        )


def test_a_canary_needs_its_run(repo: Repository) -> None:
    with pytest.raises(StorageError, match="unknown run 'missing'"):
        _start(repo, run_id="missing")
