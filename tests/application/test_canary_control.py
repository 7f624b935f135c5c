"""shadoweval.application.canary start / rollback / view: the split file is the change, the audit
table
says who, what and why; a rollback is at once and needs a reason."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from shadoweval.application.canary import canary_view, rollback_canary, start_canary
from shadoweval.capture.canary_split import read_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.errors import ConfigError, StorageError
from shadoweval.stats.canary.policy import load_canary_policy
from shadoweval.storage import CanaryState, PolicyAuditAction, Repository
from tests.application.conftest import split_spec
from tests.storage.factories import T0


def test_start_then_rollback_moves_the_split_and_audits_both(
    repo: Repository, run: str, tmp_path: Path
) -> None:
    spec = split_spec(tmp_path / "split")
    policy = load_canary_policy(None)
    canary = start_canary(
        repo,
        run_id=run,
        policy=policy,
        spec=spec,
        actor="ops",
        require_promote=False,
        why="shadow ok",
    )
    split = read_split(tmp_path / "split")
    assert (split.revision, split.candidate_share) == (0, policy.steps[0].share)
    assert canary.candidate_share == policy.steps[0].share

    # a second canary of the same run, an unknown run, no reason: refused before the split
    # is touched (the running canary's split stays as it wrote it)
    with pytest.raises(ConfigError, match="already has a running canary"):
        start_canary(repo, run_id=run, policy=policy, spec=spec, require_promote=False, why="again")
    with pytest.raises(ConfigError, match="run_id = 'nope': no such run"):
        start_canary(
            repo, run_id="nope", policy=policy, spec=spec, require_promote=False, why="typo"
        )
    with pytest.raises(ConfigError, match="must say why"):
        start_canary(repo, run_id=run, policy=policy, spec=spec, require_promote=False, why="")
    split = read_split(tmp_path / "split")
    assert (split.revision, split.candidate_share) == (0, policy.steps[0].share)

    with pytest.raises(ConfigError, match="must say why"):
        rollback_canary(repo, canary.canary_id, spec=spec, why=" ")
    done = rollback_canary(repo, canary.canary_id, spec=spec, why="p99 too high", actor="sre")
    split = read_split(tmp_path / "split")
    assert (split.revision, split.candidate_share) == (1, 0.0)
    assert done.state is CanaryState.ROLLED_BACK
    assert done.split_revision == 1

    view = canary_view(repo, canary.canary_id)
    assert [e.action for e in view.audit] == [
        PolicyAuditAction.CANARY_STARTED,
        PolicyAuditAction.CANARY_ROLLED_BACK,
    ]
    rolled = view.audit[-1]
    assert rolled.actor == "sre"
    assert rolled.detail["why"] == "p99 too high"
    assert rolled.detail["from_share"] == policy.steps[0].share
    assert [s.outcome for s in view.steps] == ["rolled_back"]
    with pytest.raises(ConfigError, match="is rolled_back; nothing to roll back"):
        rollback_canary(repo, canary.canary_id, spec=spec, why="again")


def test_the_split_needs_the_front_ends_canary_settings(repo: Repository, run: str) -> None:
    spec = EnvoyConfigSpec(upstream_url="http://baseline.internal:8000")
    with pytest.raises(ConfigError, match=r"envoy\.canary is not set"):
        start_canary(
            repo,
            run_id=run,
            policy=load_canary_policy(None),
            spec=spec,
            require_promote=False,
            why="go",
        )


def test_a_rollback_with_the_database_down_still_moves_the_split(
    repo: Repository, run: str, tmp_path: Path
) -> None:
    from shadoweval.storage import Database

    spec = split_spec(tmp_path / "split")
    canary = start_canary(
        repo,
        run_id=run,
        policy=load_canary_policy(None),
        spec=spec,
        require_promote=False,
        why="go",
    )
    with (
        Database("postgresql+psycopg://postgres@127.0.0.1:1/test") as down,
        pytest.raises(StorageError, match="rolled back anyway"),
    ):
        rollback_canary(Repository(down), canary.canary_id, spec=spec, why="db down")
    assert read_split(tmp_path / "split").candidate_share == 0.0
    # when the database is back, the same rollback records it (the split stays at 0)
    done = rollback_canary(repo, canary.canary_id, spec=spec, why="db down")
    assert done.state is CanaryState.ROLLED_BACK
    assert read_split(tmp_path / "split").candidate_share == 0.0


def test_a_canary_starts_from_the_shadow_runs_promote(
    repo: Repository, run: str, tmp_path: Path
) -> None:
    from shadoweval.records import Decision
    from tests.storage.factories import make_verdict

    spec = split_spec(tmp_path / "split")
    policy = load_canary_policy(None)
    repo.save_verdict(make_verdict(run, decided_at=T0, decision=Decision.HOLD), "gate")
    with pytest.raises(ConfigError, match="latest gate verdict is hold"):
        start_canary(repo, run_id=run, policy=policy, spec=spec, why="go")
    assert not (tmp_path / "split" / "split.yaml").exists()
    repo.save_verdict(
        make_verdict(run, decided_at=T0 + timedelta(hours=1), decision=Decision.PROMOTE), "gate"
    )
    canary = start_canary(repo, run_id=run, policy=policy, spec=spec, why="go")
    started = canary_view(repo, canary.canary_id).audit[0]
    assert (started.detail["shadow_verdict"], started.detail["required_promote"]) == (
        "promote",
        True,
    )
