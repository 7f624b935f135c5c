"""A canary with two steps and a stored step verdict, on a real split directory, for the
tests of the faces (API and dashboard): started by
:func:`shadoweval.application.canary.start_canary`,
step 0 evaluated (HOLD, :data:`VERDICT`), then promoted to step 1 as the controller does it
(the split written first, then the move recorded with its audit row)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from shadoweval.application.canary import start_canary
from shadoweval.capture.canary_split import Split, write_split
from shadoweval.capture.envoy_config import CanarySpec, EnvoyConfigSpec
from shadoweval.records import StepVerdict
from shadoweval.stats.canary.policy import load_canary_policy
from shadoweval.storage import AuditNote, CanaryInfo, CanaryState, PolicyAuditAction, Repository
from tests.storage.factories import BASELINE, CANDIDATE, T0

VERDICT: dict[str, Any] = {
    "decision": "hold",
    "reasons": ["candidate arm has 40 requests, the step needs 200"],
    "checks": [
        {
            "name": "error_rate",
            "role": "rollback",
            "status": "pass",
            "estimate": 0.004,
            "low": -0.01,
            "high": 0.012,
            "threshold": 0.02,
            "level": 0.01,
            "detail": "e-value 0.8 below 20",
        },
        {
            "name": "e2e_ms_p95_ratio",
            "role": "promote",
            "status": "not_enough_data",
            "estimate": 1.04,
            "low": 0.97,
            "high": 1.12,
            "threshold": 1.1,
            "level": 0.025,
            "detail": "interval crosses the margin",
        },
    ],
    "error_breach_since": None,
    "n_baseline": 360,
    "n_candidate": 40,
    "sessions_baseline": 300,
    "sessions_candidate": 35,
    "look": 0,
    "rollback_look": 1,
}
"""A step verdict in the form the controller stores (:meth:`StepVerdict.to_json`)."""


def split_spec(split_dir: Path) -> EnvoyConfigSpec:
    return EnvoyConfigSpec(
        upstream_url="http://baseline.internal:8000",
        canary=CanarySpec(candidate_url="http://candidate.internal:8000", split_dir=split_dir),
    )


def make_run(repo: Repository, run_id: str, hours_before: int) -> str:
    repo.create_run(
        run_id=run_id,
        name=f"run {run_id}",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:gate",
        policy_yaml="{}\n",
        created_at=T0 - timedelta(hours=hours_before),
    )
    return run_id


def two_step_canary(repo: Repository, spec: EnvoyConfigSpec, run_id: str) -> CanaryInfo:
    """A running canary at step 1 whose step 0 was evaluated (HOLD), then promoted: the
    split written for step 1 as the controller writes it, then the move recorded."""
    policy = load_canary_policy(None)
    canary = start_canary(
        repo, run_id=run_id, policy=policy, spec=spec, actor="ops", require_promote=False, why="ok"
    )
    repo.record_canary_evaluation(
        canary.canary_id,
        step_index=0,
        decision="hold",
        verdict=StepVerdict.from_json(VERDICT),
        error_breach_since=None,
    )
    assert spec.canary is not None
    revision = canary.split_revision + 1
    write_split(spec.canary.split_dir, spec, Split(policy.steps[1].share, revision))
    return repo.move_canary(
        canary.canary_id,
        from_step=0,
        to_step=1,
        state=CanaryState.RUNNING,
        share=policy.steps[1].share,
        split_revision=revision,
        step_outcome="promoted",
        note=AuditNote(
            PolicyAuditAction.CANARY_ADVANCED,
            "test controller",
            actor="controller",
            detail={"why": "step 0 promoted", "step": 1, "share": policy.steps[1].share},
        ),
    )
