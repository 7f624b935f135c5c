"""The composition root wires the canary split: ``app_from_environment`` (what ``shadow-eval
api serve`` starts) reads the Envoy front's canary settings from the environment once and
hands the spec to the app; without ``envoy.canary`` the rollback is 503 and reads work."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from shadoweval.api.app import app_from_environment
from shadoweval.capture.canary_split import read_split
from shadoweval.storage import CanaryState, Database, Repository
from tests.canary_seed import make_run, split_spec, two_step_canary

from .conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served_env(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SHADOWEVAL_DATABASE__URL", db_url)
    monkeypatch.setenv("SHADOWEVAL_API__TOKEN", TOKEN)
    return db_url


def _seed(db_url: str, split_dir: Path) -> str:
    with Database(db_url) as db:
        repo = Repository(db)
        return two_step_canary(repo, split_spec(split_dir), make_run(repo, "run-1", 1)).canary_id


def test_the_served_app_rolls_back_with_the_fronts_settings(
    served_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    split_dir = tmp_path / "split"
    canary_id = _seed(served_env, split_dir)
    # the front's settings, as the compose file's x-canary-env gives them to the API
    monkeypatch.setenv("SHADOWEVAL_CAPTURE__UPSTREAM_URL", "http://baseline.internal:8000")
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL", "http://candidate.internal:8000")
    monkeypatch.setenv("SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR", str(split_dir))
    revision = read_split(split_dir).revision
    with TestClient(app_from_environment()) as client:
        response = client.post(
            f"/v1/canaries/{canary_id}/rollback",
            headers=AUTH,
            json={"why": "error rate", "actor": "sre"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["state"] == CanaryState.ROLLED_BACK.value
    split = read_split(split_dir)
    assert (split.revision, split.candidate_share) == (revision + 1, 0.0)


def test_the_served_app_without_canary_settings_answers_503(
    served_env: str, tmp_path: Path
) -> None:
    split_dir = tmp_path / "split"
    canary_id = _seed(served_env, split_dir)
    with TestClient(app_from_environment()) as client:
        listed = client.get("/v1/canaries", headers=AUTH)
        refused = client.post(
            f"/v1/canaries/{canary_id}/rollback", headers=AUTH, json={"why": "x", "actor": "y"}
        )
    assert [c["canary_id"] for c in listed.json()["canaries"]] == [canary_id]
    assert refused.status_code == 503
    assert "envoy.canary" in refused.json()["detail"]
    assert read_split(split_dir).candidate_share == 0.05
