"""``POST /v1/runs/{run_id}/verdict/expect/{decision}``: the verdict as a status code, for
Flagger's confirm-promotion and rollback hooks (deploy/flagger/), over real runs."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette

from shadoweval.api.app import build_app
from shadoweval.records import Decision
from shadoweval.storage import PolicyAuditAction, Repository
from tests.verdict_runs import DECISION_RUNS, seed_decision_runs

from .conftest import TOKEN

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}
FLAGGER_PAYLOAD = {
    "name": "chat-model",
    "namespace": "llm",
    "phase": "Progressing",
    "checksum": "6d5fb9f5b5",
    "metadata": {"token": "a-secret-someone-put-in-metadata"},
}
"""A payload as Flagger POSTs it (Flagger docs, "Webhooks"), ``checksum`` included."""
TEMPLATE = "/v1/runs/{run_id}/verdict/expect/{decision}"


@pytest.fixture
def seeded(repo: Repository) -> Repository:
    seed_decision_runs(repo)
    return repo


@pytest.fixture
def hook_app(seeded: Repository) -> Starlette:
    return build_app(seeded, SecretStr(TOKEN))


async def post(
    app: Starlette, path: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.post(path, headers=AUTH if headers is None else headers, **kwargs)


def validate(document: dict[str, Any], response: httpx.Response) -> None:
    declared = document["paths"][TEMPLATE]["post"]["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    root = {"$ref": "#/x-response", "x-response": schema, "components": document["components"]}
    jsonschema.Draft202012Validator(root).validate(response.json())


async def test_200_only_when_the_verdict_is_the_decision_expected(hook_app: Starlette) -> None:
    transport = httpx.ASGITransport(app=hook_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        document = (await client.get("/openapi.json", headers=AUTH)).json()
    for actual, run_id in DECISION_RUNS.items():
        for expected in Decision:
            response = await post(
                hook_app, f"/v1/runs/{run_id}/verdict/expect/{expected}", json=FLAGGER_PAYLOAD
            )
            validate(document, response)
            body = response.json()
            assert response.status_code == (200 if actual is expected else 409), body
            assert (body["decision"], body["expected"]) == (actual.value, expected.value)
            assert body["matches"] is (actual is expected)
            assert (body["look"], body["source"], body["run_id"]) == (2, "stored", run_id)
            assert body["canary"] == "llm/chat-model"
            assert body["phase"] == "Progressing"
            assert "a-secret-someone-put-in-metadata" not in response.text


async def test_the_body_is_optional(hook_app: Starlette) -> None:
    response = await post(hook_app, "/v1/runs/run-promote/verdict/expect/promote")
    assert response.status_code == 200
    assert (response.json()["canary"], response.json()["phase"]) == (None, None)


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "named"),
    [
        ("/v1/runs/run-promote/verdict/expect/PROMOTED", {}, 400, "'PROMOTED'"),
        ("/v1/runs/run-promote/verdict/expect/promote", {"content": b"name=x"}, 400, "body"),
        ("/v1/runs/run-promote/verdict/expect/promote", {"json": {"name": 3}}, 400, "'name'"),
        ("/v1/runs/nope/verdict/expect/promote", {}, 404, "'nope'"),
    ],
)
async def test_bad_requests_name_what_is_wrong(
    hook_app: Starlette, path: str, kwargs: dict[str, Any], status: int, named: str
) -> None:
    response = await post(hook_app, path, **kwargs)
    assert response.status_code == status, response.text
    assert named in response.json()["detail"]


async def test_needs_the_bearer_token(hook_app: Starlette) -> None:
    response = await post(hook_app, "/v1/runs/run-promote/verdict/expect/promote", headers={})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    wrong = {"Authorization": "Bearer " + "w" * 40}
    response = await post(hook_app, "/v1/runs/run-promote/verdict/expect/promote", headers=wrong)
    assert response.status_code == 401


async def test_a_run_without_a_verdict_is_gated_and_audited_as_the_hook(
    app: Starlette, api_repo: Repository
) -> None:
    """The conftest's ``fresh`` run (real pairs, never gated): gated now, like GET does."""
    response = await post(app, "/v1/runs/fresh/verdict/expect/promote", json=FLAGGER_PAYLOAD)
    assert response.status_code == 409
    assert (response.json()["decision"], response.json()["source"]) == ("rollback", "computed")
    audit = api_repo.policy_audit("fresh")[-1]
    assert audit.action is PolicyAuditAction.USED
    assert audit.detail["endpoint"] == "POST /v1/runs/{run_id}/verdict/expect/{decision}"
    again = await post(app, "/v1/runs/fresh/verdict/expect/rollback")
    assert again.status_code == 200
    assert again.json()["source"] == "stored"
    assert len(api_repo.verdict_history("fresh")) == 1
