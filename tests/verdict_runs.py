"""Three runs whose latest stored verdicts are PROMOTE, HOLD and ROLLBACK, for the tests of
what reads a decision over HTTP: the API's ``verdict/expect`` webhook (tests/api) and the
rollout-controller examples under ``deploy/`` (tests/deploy)."""

from __future__ import annotations

from datetime import timedelta

from shadoweval.records import Decision
from shadoweval.storage import Repository
from tests.canary_seed import make_run
from tests.storage.factories import T0, make_verdict

DECISION_RUNS: dict[Decision, str] = {
    Decision.PROMOTE: "run-promote",
    Decision.HOLD: "run-hold",
    Decision.ROLLBACK: "run-rollback",
}
"""The run id whose latest verdict is each decision."""


def seed_decision_runs(repo: Repository) -> None:
    """Create the runs of :data:`DECISION_RUNS`, each with its verdict stored at look 2
    (after a HOLD at look 1, as a run gated while traffic accumulates has)."""
    for hours, (decision, run_id) in enumerate(DECISION_RUNS.items(), start=1):
        make_run(repo, run_id, hours_before=hours)
        first = make_verdict(run_id, decided_at=T0, policy_hash="sha256:gate")
        repo.save_verdict(first, "shadow-eval gate")
        latest = make_verdict(
            run_id,
            decided_at=T0 + timedelta(minutes=30),
            decision=decision,
            look=2,
            policy_hash="sha256:gate",
        )
        repo.save_verdict(latest, "shadow-eval gate")
