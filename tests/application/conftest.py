"""Fixtures of the canary's application tests: a run, a stored canary, a split spec."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from shadoweval.capture.envoy_config import CanarySpec, EnvoyConfigSpec
from shadoweval.storage import AuditNote, PolicyAuditAction, Repository
from tests.storage.factories import BASELINE, CANDIDATE, T0


def split_spec(split_dir: Path) -> EnvoyConfigSpec:
    """The Envoy front's spec with the canary on, its split files in ``split_dir``."""
    return EnvoyConfigSpec(
        upstream_url="http://baseline.internal:8000",
        canary=CanarySpec(candidate_url="http://candidate.internal:8000", split_dir=split_dir),
    )


@pytest.fixture
def run(repo: Repository) -> str:
    """Run ``run-1`` (created an hour before :data:`T0`)."""
    repo.create_run(
        run_id="run-1",
        name="r",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="sha256:gate",
        policy_yaml="{}\n",
        created_at=T0 - timedelta(hours=1),
    )
    return "run-1"


@pytest.fixture
def canary(repo: Repository, run: str) -> str:
    """Canary ``c-1`` of ``run-1``, stored directly (no split written), its first step at
    share 0.5 from ``T0 + 5 s``."""
    repo.create_canary(
        canary_id="c-1",
        run_id=run,
        name="ramp",
        policy_hash="sha256:canary",
        policy_yaml="steps: []\n",
        split_dir="/srv/split",
        first_share=0.5,
        split_revision=1,
        note=AuditNote(PolicyAuditAction.CANARY_STARTED, "test"),
        started_at=T0 + timedelta(seconds=5),
    )
    return "c-1"
