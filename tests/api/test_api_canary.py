"""The canary routes of the API (``/v1/canaries``) on SQLite and PostgreSQL, with a real split
directory and the Envoy front's real config spec: the rollback writes share 0 and audits
who and why; errors are 400 / 401 / 404 / 409 / 503 with a JSON body naming the cause."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from shadoweval.api.app import ROLLBACK_COMMAND, build_app
from shadoweval.application.canary import rollback_canary, start_canary
from shadoweval.capture.canary_split import Split, read_split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.stats.canary.policy import load_canary_policy
from shadoweval.storage import AuditNote, CanaryInfo, CanaryState, PolicyAuditAction, Repository
from tests.canary_seed import VERDICT, make_run, split_spec, two_step_canary

from .conftest import TOKEN

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def split_dir(tmp_path: Path) -> Path:
    return tmp_path / "split"


@pytest.fixture
def canary(repo: Repository, split_dir: Path) -> CanaryInfo:
    return two_step_canary(repo, split_spec(split_dir), make_run(repo, "run-1", 1))


@pytest.fixture
def app(repo: Repository, split_dir: Path) -> Starlette:
    """The API as ``shadow-eval api serve`` builds it, with the front's canary spec."""
    return build_app(repo, SecretStr(TOKEN), canary_split=split_spec(split_dir))


async def call(
    app: Starlette,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.request(
            method, path, headers=AUTH if headers is None else headers, **kwargs
        )


def validate(
    document: dict[str, Any], template: str, method: str, response: httpx.Response
) -> None:
    declared = document["paths"][template][method]["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    root = {"$ref": "#/x-response", "x-response": schema, "components": document["components"]}
    jsonschema.Draft202012Validator(root).validate(response.json())


async def test_list_is_newest_first_and_filters_by_state_and_limit(
    app: Starlette, repo: Repository, canary: CanaryInfo, split_dir: Path, tmp_path: Path
) -> None:
    other_spec = split_spec(tmp_path / "split-2")
    newer = start_canary(
        repo,
        run_id=make_run(repo, "run-2", 0),
        policy=load_canary_policy(None),
        spec=other_spec,
        require_promote=False,
        why="second",
    )
    listed = await call(app, "GET", "/v1/canaries")
    assert listed.status_code == 200
    rows = listed.json()["canaries"]
    assert [r["canary_id"] for r in rows] == [newer.canary_id, canary.canary_id]
    assert rows[1]["step_index"] == 1
    assert rows[1]["state"] == "running"
    assert rows[1]["run_id"] == "run-1"
    assert rows[1]["candidate_share"] == canary.candidate_share

    limited = await call(app, "GET", "/v1/canaries", params={"limit": 1})
    assert [r["canary_id"] for r in limited.json()["canaries"]] == [newer.canary_id]

    rollback_canary(repo, newer.canary_id, spec=other_spec, why="second thoughts")
    rolled = await call(app, "GET", "/v1/canaries", params={"state": "rolled_back"})
    assert [r["canary_id"] for r in rolled.json()["canaries"]] == [newer.canary_id]
    running = await call(app, "GET", "/v1/canaries", params={"state": "running"})
    assert [r["canary_id"] for r in running.json()["canaries"]] == [canary.canary_id]

    for params in ({"state": "paused"}, {"limit": "0"}, {"limit": "many"}):
        bad = await call(app, "GET", "/v1/canaries", params=params)
        assert bad.status_code == 400
        assert bad.json()["error"] == "bad_request"
        assert next(iter(params.values())) in bad.json()["detail"]


async def test_detail_is_the_status_json_with_each_steps_last_verdict(
    app: Starlette, repo: Repository, canary: CanaryInfo
) -> None:
    response = await call(app, "GET", f"/v1/canaries/{canary.canary_id}")
    assert response.status_code == 200
    body = response.json()
    assert body["canary_id"] == canary.canary_id
    assert body["state"] == "running"
    assert body["step_index"] == 1
    assert body["policy_hash"] == canary.policy_hash
    assert body["observed_per_arm"] == {}
    steps = body["steps"]
    stored = repo.canary_steps(canary.canary_id)
    assert [s["step_index"] for s in steps] == [0, 1]
    assert [s["share"] for s in steps] == [s.share for s in stored]
    assert [s["outcome"] for s in steps] == ["promoted", None]
    assert [s["evaluations"] for s in steps] == [1, 0]
    assert [s["last_decision"] for s in steps] == ["hold", None]
    assert steps[0]["last_verdict"] == VERDICT
    assert steps[1]["last_verdict"] is None
    assert steps[0]["last_evaluated_at"] is not None
    assert steps[0]["ended_at"] is not None
    assert steps[1]["ended_at"] is None
    assert [a["action"] for a in body["audit"]] == ["canary_started", "canary_advanced"]
    assert body["audit"][1]["actor"] == "controller"
    assert body["audit"][1]["detail"]["why"] == "step 0 promoted"

    missing = await call(app, "GET", "/v1/canaries/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "detail": "canary 'nope' not found"}


async def test_rollback_writes_share_0_and_audits_who_and_why(
    app: Starlette, repo: Repository, canary: CanaryInfo, split_dir: Path
) -> None:
    before = read_split(split_dir)
    assert before.candidate_share == canary.candidate_share
    response = await call(
        app,
        "POST",
        f"/v1/canaries/{canary.canary_id}/rollback",
        json={"why": "p99 over the limit", "actor": "sre on call"},
    )
    assert response.status_code == 200, response.text
    after = read_split(split_dir)
    assert after.candidate_share == 0.0
    assert after.revision == before.revision + 1
    body = response.json()
    assert body["state"] == "rolled_back"
    assert body["candidate_share"] == 0.0
    assert body["split_revision"] == after.revision
    assert [s["outcome"] for s in body["steps"]] == ["promoted", "rolled_back"]

    stored = repo.get_canary(canary.canary_id)
    assert stored is not None
    assert stored.state is CanaryState.ROLLED_BACK
    rows = [
        e for e in repo.policy_audit("run-1") if e.action is PolicyAuditAction.CANARY_ROLLED_BACK
    ]
    assert len(rows) == 1
    assert rows[0].actor == "sre on call"
    assert rows[0].command == ROLLBACK_COMMAND
    assert rows[0].detail["why"] == "p99 over the limit"
    assert rows[0].detail["canary_id"] == canary.canary_id
    assert rows[0].detail["from_share"] == before.candidate_share
    assert rows[0].detail["split_revision"] == after.revision

    again = await call(
        app,
        "POST",
        f"/v1/canaries/{canary.canary_id}/rollback",
        json={"why": "again", "actor": "x"},
    )
    assert again.status_code == 409
    assert again.json()["error"] == "conflict"
    assert "is rolled_back" in again.json()["detail"]
    assert read_split(split_dir).revision == after.revision  # nothing written


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"actor": "sre"}, "why"),
        ({"why": "", "actor": "sre"}, "why"),
        ({"why": "   ", "actor": "sre"}, "why"),
        ({"why": "slow"}, "actor"),
        ({"why": "slow", "actor": "sre", "force": True}, "force"),
        ({"why": 3, "actor": "sre"}, "why"),
    ],
)
async def test_a_bad_rollback_body_is_400_naming_the_field(
    app: Starlette, canary: CanaryInfo, split_dir: Path, body: dict[str, Any], field: str
) -> None:
    revision = read_split(split_dir).revision
    response = await call(app, "POST", f"/v1/canaries/{canary.canary_id}/rollback", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_request"
    assert field in response.json()["detail"]
    assert read_split(split_dir).revision == revision


async def test_a_body_that_is_not_json_is_400(app: Starlette, canary: CanaryInfo) -> None:
    response = await call(
        app, "POST", f"/v1/canaries/{canary.canary_id}/rollback", content=b"why=slow"
    )
    assert response.status_code == 400
    assert "body" in response.json()["detail"]


async def test_rollback_of_an_unknown_canary_is_404(app: Starlette) -> None:
    response = await call(
        app, "POST", "/v1/canaries/nope/rollback", json={"why": "slow", "actor": "sre"}
    )
    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


async def test_without_the_fronts_canary_settings_rollback_is_503_and_changes_nothing(
    repo: Repository, canary: CanaryInfo, split_dir: Path
) -> None:
    revision = read_split(split_dir).revision
    for spec in (None, EnvoyConfigSpec(upstream_url="http://baseline.internal:8000")):
        app = build_app(repo, SecretStr(TOKEN), canary_split=spec)
        response = await call(
            app,
            "POST",
            f"/v1/canaries/{canary.canary_id}/rollback",
            json={"why": "slow", "actor": "sre"},
        )
        assert response.status_code == 503
        assert response.json()["error"] == "canary_split_unavailable"
        assert "SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR" in response.json()["detail"]
        read = await call(app, "GET", f"/v1/canaries/{canary.canary_id}")
        assert read.status_code == 200  # reading needs no split
    assert read_split(split_dir).revision == revision
    stored = repo.get_canary(canary.canary_id)
    assert stored is not None
    assert stored.state is CanaryState.RUNNING


async def test_every_canary_route_needs_the_token_a_post_too(
    app: Starlette, canary: CanaryInfo, split_dir: Path
) -> None:
    revision = read_split(split_dir).revision
    wrong = {"Authorization": "Bearer " + "w" * 40}
    for headers in ({}, wrong):
        for method, path, kwargs in (
            ("GET", "/v1/canaries", {}),
            ("GET", f"/v1/canaries/{canary.canary_id}", {}),
            (
                "POST",
                f"/v1/canaries/{canary.canary_id}/rollback",
                {"json": {"why": "slow", "actor": "sre"}},
            ),
        ):
            response = await call(app, method, path, headers=headers, **kwargs)
            assert response.status_code == 401, (method, path, headers)
            assert response.headers["www-authenticate"].startswith("Bearer")
    assert read_split(split_dir).revision == revision
    wrong_method = await call(app, "GET", f"/v1/canaries/{canary.canary_id}/rollback")
    assert wrong_method.status_code == 405


async def test_canary_responses_validate_against_the_openapi_document(
    app: Starlette, canary: CanaryInfo
) -> None:
    document = (await call(app, "GET", "/openapi.json")).json()
    assert {"/v1/canaries", "/v1/canaries/{canary_id}", "/v1/canaries/{canary_id}/rollback"} <= set(
        document["paths"]
    )
    body_schema = document["paths"]["/v1/canaries/{canary_id}/rollback"]["post"]["requestBody"]
    ref = body_schema["content"]["application/json"]["schema"]["$ref"]
    rollback_in = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(rollback_in["required"]) == {"why", "actor"}
    detail = document["components"]["schemas"]["CanaryStepOut"]
    assert "last_verdict" in detail["required"]
    cases = [
        ("GET", "/v1/canaries", "/v1/canaries", "get", {}),
        ("GET", "/v1/canaries?state=paused", "/v1/canaries", "get", {}),
        ("GET", f"/v1/canaries/{canary.canary_id}", "/v1/canaries/{canary_id}", "get", {}),
        ("GET", "/v1/canaries/nope", "/v1/canaries/{canary_id}", "get", {}),
        (
            "POST",
            f"/v1/canaries/{canary.canary_id}/rollback",
            "/v1/canaries/{canary_id}/rollback",
            "post",
            {"json": {"why": ""}},
        ),
        (
            "POST",
            f"/v1/canaries/{canary.canary_id}/rollback",
            "/v1/canaries/{canary_id}/rollback",
            "post",
            {"json": {"why": "slow", "actor": "sre"}},
        ),
        (
            "POST",
            f"/v1/canaries/{canary.canary_id}/rollback",
            "/v1/canaries/{canary_id}/rollback",
            "post",
            {"json": {"why": "slow", "actor": "sre"}},
        ),
    ]
    statuses = set()
    for method, path, template, verb, kwargs in cases:
        response = await call(app, method, path, **kwargs)
        validate(document, template, verb, response)
        statuses.add(response.status_code)
    assert statuses == {200, 400, 404, 409}


class RacingRepository(Repository):
    """A repository where another writer (the controller) moves the canary just before the
    API's move lands: the race the rollback must survive, made deterministic."""

    def __init__(self, repo: Repository, race: Callable[[Repository], None]) -> None:
        super().__init__(repo.database)
        self._race: Callable[[Repository], None] | None = race

    def move_canary(self, canary_id: str, **kwargs: Any) -> CanaryInfo:
        race, self._race = self._race, None
        if race is not None:
            race(Repository(self.database))
        return super().move_canary(canary_id, **kwargs)


def _controller_move(
    canary: CanaryInfo, split_dir: Path, state: CanaryState, share: float
) -> Callable[[Repository], None]:
    def move(other: Repository) -> None:
        now = other.get_canary(canary.canary_id)
        assert now is not None
        revision = read_split(split_dir).revision + 1
        write_split(split_dir, split_spec(split_dir), Split(share, revision))
        other.move_canary(
            canary.canary_id,
            from_step=now.step_index,
            to_step=now.step_index + 1,
            state=state,
            share=share,
            split_revision=revision,
            step_outcome="promoted",
            note=AuditNote(
                PolicyAuditAction.CANARY_ADVANCED
                if state is CanaryState.RUNNING
                else PolicyAuditAction.CANARY_COMPLETED,
                "test controller",
                actor="controller",
                detail={"why": "promoted", "share": share},
            ),
        )

    return move


async def test_a_rollback_racing_the_controllers_advance_rolls_back_the_new_step(
    repo: Repository, canary: CanaryInfo, split_dir: Path
) -> None:
    racing = RacingRepository(repo, _controller_move(canary, split_dir, CanaryState.RUNNING, 0.25))
    app = build_app(racing, SecretStr(TOKEN), canary_split=split_spec(split_dir))
    path = f"/v1/canaries/{canary.canary_id}/rollback"
    response = await call(app, "POST", path, json={"why": "p99", "actor": "sre"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "rolled_back"
    assert [s["outcome"] for s in body["steps"]] == ["promoted", "promoted", "rolled_back"]
    assert [a["action"] for a in body["audit"]][-2:] == ["canary_advanced", "canary_rolled_back"]
    assert read_split(split_dir).candidate_share == 0.0


async def test_a_rollback_racing_the_controllers_completion_rolls_the_rollout_back(
    repo: Repository, canary: CanaryInfo, split_dir: Path
) -> None:
    racing = RacingRepository(repo, _controller_move(canary, split_dir, CanaryState.COMPLETED, 1.0))
    app = build_app(racing, SecretStr(TOKEN), canary_split=split_spec(split_dir))
    path = f"/v1/canaries/{canary.canary_id}/rollback"
    response = await call(app, "POST", path, json={"why": "p99", "actor": "sre"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["state"] == "rolled_back"
    assert [a["action"] for a in body["audit"]][-2:] == ["canary_completed", "canary_rolled_back"]
    assert body["audit"][-1]["detail"]["from_state"] == "completed"
    assert read_split(split_dir).candidate_share == 0.0
    again = await call(app, "POST", path, json={"why": "p99", "actor": "sre"})
    assert again.status_code == 409
    assert "rolled_back; nothing to roll back" in again.json()["detail"]
