"""The API's OpenAPI 3.1 document, assembled from the pydantic response models.

Component schemas come from :func:`pydantic.json_schema.models_json_schema` in
serialization mode (what the server sends); OpenAPI 3.1 schemas are JSON Schema 2020-12,
so they are used unchanged. Paths are written here, next to nothing else, and the test
suite validates real responses against the schema each path declares.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from shadoweval.api.export_params import EXPORT_PARAMETERS
from shadoweval.api.schemas import (
    API_VERSION,
    AuditLog,
    CanaryDetail,
    CanaryList,
    ErrorBody,
    Health,
    RollbackIn,
    RunList,
    VerdictOut,
)
from shadoweval.storage import CanaryState, RunStatus

MAX_LIMIT = 1000
"""Most runs (or canaries) one ``GET /v1/runs`` (``GET /v1/canaries``) returns."""
DEFAULT_LIMIT = 100

_MODELS: tuple[type[BaseModel], ...] = (
    ErrorBody,
    Health,
    RunList,
    VerdictOut,
    AuditLog,
    CanaryList,
    CanaryDetail,
)
_REQUESTS: tuple[type[BaseModel], ...] = (RollbackIn,)


def _json(ref: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref}}}


def openapi_document(*, auth: bool = True) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the API (a JSON-ready ``dict``).

    ``auth=False`` (a server started with ``--insecure-no-auth``) leaves out the bearer
    security requirement.
    """
    refs, top = models_json_schema(
        [(model, "serialization") for model in _MODELS]
        + [(model, "validation") for model in _REQUESTS],
        ref_template="#/components/schemas/{model}",
    )

    def ref(model: type[BaseModel]) -> dict[str, Any]:
        if model in _REQUESTS:
            return dict(refs[(model, "validation")])
        return dict(refs[(model, "serialization")])

    error = ref(ErrorBody)
    unauthorized = _json(error, "Missing or invalid bearer token (WWW-Authenticate: Bearer).")
    not_found = _json(error, "No run with this id.")
    unavailable = _json(error, "The database cannot be reached.")
    run_id = {
        "name": "run_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The run id (as printed by evaluate / replay run).",
    }
    secured: dict[str, Any] = {"401": unauthorized} if auth else {}
    canary_id = {
        "name": "canary_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The canary id (as printed by `shadow-eval canary start`).",
    }
    no_canary = _json(error, "No canary with this id.")
    limit = {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    }
    paths: dict[str, Any] = {
        "/healthz": {
            "get": {
                "summary": "Liveness: the process serves (no token needed).",
                "operationId": "health",
                "security": [],
                "responses": {"200": _json(ref(Health), "Serving.")},
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics: shadoweval_api_auth_failures_total{reason}.",
                "operationId": "metrics",
                "responses": {
                    "200": {
                        "description": "The Prometheus text exposition format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **secured,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document.",
                "operationId": "openapi",
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1."), **secured},
            }
        },
        "/v1/runs": {
            "get": {
                "summary": "Runs, newest first, with their latest decision.",
                "operationId": "listRuns",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": [s.value for s in RunStatus]},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_LIMIT,
                            "default": DEFAULT_LIMIT,
                        },
                    },
                ],
                "responses": {
                    "200": _json(ref(RunList), "The runs."),
                    "400": _json(error, "A bad query parameter."),
                    **secured,
                    "503": unavailable,
                },
            }
        },
        "/v1/runs/{run_id}/verdict": {
            "get": {
                "summary": "The run's latest verdict; computed and stored now if it has none.",
                "description": "Computed through the code path of `shadow-eval gate` "
                "(exit code 0 promote / 1 hold / 2 rollback ⇔ decision).",
                "operationId": "getVerdict",
                "parameters": [run_id],
                "responses": {
                    "200": _json(ref(VerdictOut), "The verdict."),
                    **secured,
                    "404": not_found,
                    "500": _json(error, "The gate failed on this run's data."),
                    "503": unavailable,
                },
            }
        },
        "/v1/runs/{run_id}/audit": {
            "get": {
                "summary": "The run's policy audit log: created / used / refused, oldest first.",
                "operationId": "getAudit",
                "parameters": [run_id],
                "responses": {
                    "200": _json(ref(AuditLog), "The audit log."),
                    **secured,
                    "404": not_found,
                    "503": unavailable,
                },
            }
        },
        "/v1/runs/{run_id}/export": {
            "get": {
                "summary": "A stratified, redacted sample of the run's pairs for analysts (zip).",
                "description": "Up to `per_task_type` pairs of each task type, as "
                "`shadow-eval export` writes them: a zip of `samples.<csv|jsonl|parquet>` "
                "(columns exchange_id, run_id, task_type, captured_at, similarity, "
                "noise_similarity, flags, request, baseline_text, candidate_text, "
                "baseline_tool_calls, candidate_tool_calls, label, label_note) and "
                "`manifest.json` (run, policy hash, filters, order, seed, counts per task "
                "type, redaction rules and hits). Every text is redacted with the capture "
                "body rules (secret keys, e-mail, phone, card numbers). The label columns "
                "are empty; `shadow-eval labels import` reads them back.",
                "operationId": "exportSamples",
                "parameters": [run_id, *EXPORT_PARAMETERS],
                "responses": {
                    "200": {
                        "description": "The zip (Content-Disposition: attachment).",
                        "content": {
                            "application/zip": {
                                "schema": {
                                    "type": "string",
                                    "contentMediaType": "application/zip",
                                }
                            }
                        },
                    },
                    "400": _json(
                        error,
                        "A bad query parameter (named with its value), or a task type the "
                        "run does not have.",
                    ),
                    **secured,
                    "404": not_found,
                    "503": _json(
                        error,
                        "The database cannot be reached, or the server has no export "
                        "redactor configured.",
                    ),
                },
            }
        },
        "/v1/canaries": {
            "get": {
                "summary": "Canaries, newest first.",
                "operationId": "listCanaries",
                "parameters": [
                    {
                        "name": "state",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": [s.value for s in CanaryState]},
                    },
                    limit,
                ],
                "responses": {
                    "200": _json(ref(CanaryList), "The canaries."),
                    "400": _json(error, "A bad query parameter."),
                    **secured,
                    "503": unavailable,
                },
            }
        },
        "/v1/canaries/{canary_id}": {
            "get": {
                "summary": "A canary: its steps (each with its latest step verdict), what was "
                "observed per arm and its audit trail.",
                "description": "The body of `shadow-eval canary status --json`, with each "
                "step's `last_verdict` (decision, reasons, checks) and `last_evaluated_at`.",
                "operationId": "getCanary",
                "parameters": [canary_id],
                "responses": {
                    "200": _json(ref(CanaryDetail), "The canary."),
                    **secured,
                    "404": no_canary,
                    "503": unavailable,
                },
            }
        },
        "/v1/canaries/{canary_id}/rollback": {
            "post": {
                "summary": "Roll the canary back now: share 0, the canary ends rolled_back.",
                "description": "Writes a new split revision with candidate share 0 (every "
                "session goes to the baseline on its next request; streams in flight finish "
                "on their version), then ends the canary `rolled_back` with a "
                "`canary_rolled_back` audit row naming `actor` and `why` — as `shadow-eval "
                "canary rollback` does. Answers the canary after the rollback.",
                "operationId": "rollbackCanary",
                "parameters": [canary_id],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref(RollbackIn)}},
                },
                "responses": {
                    "200": _json(ref(CanaryDetail), "Rolled back: the canary now."),
                    "400": _json(error, "A bad body (the field is named), e.g. an empty why."),
                    **secured,
                    "404": no_canary,
                    "409": _json(error, "The canary is already final, or another caller moved it."),
                    "503": _json(
                        error,
                        "The database cannot be reached, or the server has no Envoy canary "
                        "settings (envoy.canary) to write the split with.",
                    ),
                },
            }
        },
    }
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "shadow-eval API",
            "version": API_VERSION,
            "description": "Verdicts of shadow evaluations of LLM upgrades, for CI.",
        },
        "paths": paths,
        "components": {"schemas": top.get("$defs", {})},
    }
    if auth:
        document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        document["security"] = [{"bearer": []}]
    return document
