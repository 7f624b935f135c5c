"""``/openapi.json`` is a valid OpenAPI 3.1 document whose schemas match real responses."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from starlette.applications import Starlette

from .conftest import TOKEN

pytestmark = pytest.mark.anyio

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def fetch(app: Starlette, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return await client.get(path, headers=AUTH if headers is None else headers)


def validate(document: dict[str, Any], template: str, response: httpx.Response) -> None:
    """Validate ``response``'s JSON against the schema ``template`` declares for its status."""
    operation = document["paths"][template]["get"]
    declared = operation["responses"][str(response.status_code)]
    schema = declared["content"]["application/json"]["schema"]
    # OpenAPI 3.1 schemas are JSON Schema 2020-12; "#/components/..." refs resolve
    # against a root that carries the document's components.
    root = {"$ref": "#/x-response", "x-response": schema, "components": document["components"]}
    jsonschema.Draft202012Validator(root).validate(response.json())


async def test_document_is_openapi_3_1_with_valid_component_schemas(app: Starlette) -> None:
    response = await fetch(app, "/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"] == "3.1.0"
    assert document["info"]["title"] == "shadow-eval API"
    assert set(document["paths"]) == {
        "/healthz",
        "/metrics",
        "/openapi.json",
        "/v1/runs",
        "/v1/runs/{run_id}/verdict",
        "/v1/runs/{run_id}/verdict/expect/{decision}",
        "/v1/runs/{run_id}/audit",
        "/v1/runs/{run_id}/export",
        "/v1/canaries",
        "/v1/canaries/{canary_id}",
        "/v1/canaries/{canary_id}/rollback",
    }
    assert document["security"] == [{"bearer": []}]
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert document["paths"]["/healthz"]["get"]["security"] == []
    schemas = document["components"]["schemas"]
    assert {"VerdictOut", "CheckOut", "RunList", "RunOut", "AuditLog", "ErrorBody"} <= set(schemas)
    for schema in schemas.values():
        jsonschema.Draft202012Validator.check_schema(schema)
    # every $ref points at a component that exists
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/")
        assert ref.removeprefix("#/components/schemas/") in schemas
    verdict = schemas["VerdictOut"]
    assert set(verdict["required"]) >= {"decision", "checks", "coverage", "policy_hash", "look"}


async def test_real_responses_validate_against_the_document(app: Starlette) -> None:
    document = (await fetch(app, "/openapi.json")).json()
    cases: list[tuple[str, str, dict[str, str] | None]] = [
        ("/healthz", "/healthz", {}),
        ("/v1/runs", "/v1/runs", None),
        ("/v1/runs?status=held", "/v1/runs", None),
        ("/v1/runs?limit=0", "/v1/runs", None),  # 400
        ("/v1/runs", "/v1/runs", {}),  # 401
        ("/v1/runs/rolled/verdict", "/v1/runs/{run_id}/verdict", None),  # stored
        ("/v1/runs/held/verdict", "/v1/runs/{run_id}/verdict", None),
        ("/v1/runs/fresh/verdict", "/v1/runs/{run_id}/verdict", None),  # computed
        ("/v1/runs/nope/verdict", "/v1/runs/{run_id}/verdict", None),  # 404
        ("/v1/runs/rolled/audit", "/v1/runs/{run_id}/audit", None),
        ("/v1/runs/nope/audit", "/v1/runs/{run_id}/audit", None),  # 404
    ]
    statuses = set()
    for path, template, headers in cases:
        response = await fetch(app, path, headers)
        validate(document, template, response)
        statuses.add(response.status_code)
    assert statuses == {200, 400, 401, 404}


async def test_a_response_that_breaks_the_contract_is_caught(app: Starlette) -> None:
    """The validation above is not vacuous: a verdict without its decision fails it."""
    document = (await fetch(app, "/openapi.json")).json()
    response = await fetch(app, "/v1/runs/rolled/verdict")
    body = response.json()
    del body["decision"]
    broken = httpx.Response(200, json=body)
    with pytest.raises(jsonschema.ValidationError, match="decision"):
        validate(document, "/v1/runs/{run_id}/verdict", broken)
    body = response.json()
    body["checks"][0]["n"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        validate(document, "/v1/runs/{run_id}/verdict", httpx.Response(200, json=body))
