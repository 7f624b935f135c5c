"""The API's OpenAPI 3.1 document, assembled from the pydantic response models.

Component schemas come from :func:`pydantic.json_schema.models_json_schema` in
serialization mode (what the server sends); OpenAPI 3.1 schemas are JSON Schema 2020-12,
so they are used unchanged. Paths are written here, next to nothing else, and the test
suite validates real responses against the schema each path declares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    VerdictHookIn,
    VerdictHookOut,
    VerdictOut,
)
from shadoweval.records import Decision
from shadoweval.storage import CanaryState, RunStatus

MAX_LIMIT = 1000
"""Most runs (or canaries) one ``GET /v1/runs`` (``GET /v1/canaries``) returns."""
DEFAULT_LIMIT = 100

_MODELS: tuple[type[BaseModel], ...] = (
    ErrorBody,
    Health,
    RunList,
    VerdictOut,
    VerdictHookOut,
    AuditLog,
    CanaryList,
    CanaryDetail,
)
_REQUESTS: tuple[type[BaseModel], ...] = (RollbackIn, VerdictHookIn)


def _json(ref: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ref}}}


def _path_parameter(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": description,
    }


def _limit() -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    }


_NO_RUN = "No run with this id."


@dataclass(frozen=True)
class _Shared:
    """What the paths share: component references and the common error responses.

    ``ref``: the ``$ref`` of a component schema (a fresh ``dict`` each call); ``error``:
    the :class:`ErrorBody` reference; ``secured``: the ``401`` response when the server
    asks for a bearer token, else nothing; ``unavailable``: the ``503`` response;
    ``run_id``, ``canary_id``, ``limit``: the parameters several paths take.
    """

    ref: Callable[[type[BaseModel]], dict[str, Any]]
    error: dict[str, Any]
    secured: dict[str, Any]
    unavailable: dict[str, Any]
    run_id: dict[str, Any]
    canary_id: dict[str, Any]
    limit: dict[str, Any]


def _listing(
    s: _Shared,
    summary: str,
    operation_id: str,
    query_filter: tuple[str, list[str]],
    found: tuple[type[BaseModel], str],
) -> dict[str, Any]:
    """A ``GET`` listing: one filter of the query (its name and its values), ``limit``,
    and the list model with its description."""
    name, values = query_filter
    model, description = found
    return {
        "summary": summary,
        "operationId": operation_id,
        "parameters": [
            {
                "name": name,
                "in": "query",
                "required": False,
                "schema": {"type": "string", "enum": values},
            },
            s.limit,
        ],
        "responses": {
            "200": _json(s.ref(model), description),
            "400": _json(s.error, "A bad query parameter."),
            **s.secured,
            "503": s.unavailable,
        },
    }


def _service_paths(s: _Shared) -> dict[str, Any]:
    """``/healthz``, ``/metrics`` and ``/openapi.json``."""
    return {
        "/healthz": {
            "get": {
                "summary": "Liveness: the process serves (no token needed).",
                "operationId": "health",
                "security": [],
                "responses": {"200": _json(s.ref(Health), "Serving.")},
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
                    **s.secured,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document.",
                "operationId": "openapi",
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1."), **s.secured},
            }
        },
    }


def _run_paths(s: _Shared) -> dict[str, Any]:
    """``/v1/runs``, a run's verdict and its audit log."""
    return {
        "/v1/runs": {
            "get": _listing(
                s,
                "Runs, newest first, with their latest decision.",
                "listRuns",
                ("status", [status.value for status in RunStatus]),
                (RunList, "The runs."),
            )
        },
        "/v1/runs/{run_id}/verdict": {
            "get": {
                "summary": "The run's latest verdict; computed and stored now if it has none.",
                "description": "Computed through the code path of `shadow-eval gate` "
                "(exit code 0 promote / 1 hold / 2 rollback ⇔ decision).",
                "operationId": "getVerdict",
                "parameters": [s.run_id],
                "responses": {
                    "200": _json(s.ref(VerdictOut), "The verdict."),
                    **s.secured,
                    "404": _json(s.error, _NO_RUN),
                    "500": _json(s.error, "The gate failed on this run's data."),
                    "503": s.unavailable,
                },
            }
        },
        "/v1/runs/{run_id}/verdict/expect/{decision}": {"post": _expect_operation(s)},
        "/v1/runs/{run_id}/audit": {
            "get": {
                "summary": "The run's policy audit log: created / used / refused, oldest first.",
                "operationId": "getAudit",
                "parameters": [s.run_id],
                "responses": {
                    "200": _json(s.ref(AuditLog), "The audit log."),
                    **s.secured,
                    "404": _json(s.error, _NO_RUN),
                    "503": s.unavailable,
                },
            }
        },
    }


def _expect_operation(s: _Shared) -> dict[str, Any]:
    """``POST /v1/runs/{run_id}/verdict/expect/{decision}``: the verdict as a status code."""
    hook = s.ref(VerdictHookOut)
    return {
        "summary": "200 if the run's verdict is `decision`, 409 if it is another (a webhook).",
        "description": "For controllers that read only the status code of a POST: "
        "Flagger's `confirm-promotion` hook expects `promote`, its `rollback` hook "
        "`rollback` (deploy/flagger/). The verdict is the one `GET "
        "/v1/runs/{run_id}/verdict` answers (computed and stored now if the run has "
        "none). The optional body is Flagger's webhook payload; its `metadata` is "
        "ignored and never echoed.",
        "operationId": "expectVerdict",
        "parameters": [
            s.run_id,
            {
                "name": "decision",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "enum": [d.value for d in Decision]},
                "description": "The decision expected.",
            },
        ],
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": s.ref(VerdictHookIn)}},
        },
        "responses": {
            "200": _json(hook, "The verdict is the decision expected."),
            "400": _json(s.error, "An unknown decision, or a body that is not the payload."),
            **s.secured,
            "404": _json(s.error, _NO_RUN),
            "409": _json(hook, "The verdict is another decision (named in the body)."),
            "500": _json(s.error, "The gate failed on this run's data."),
            "503": s.unavailable,
        },
    }


def _export_paths(s: _Shared) -> dict[str, Any]:
    """``/v1/runs/{run_id}/export``: the analysts' sample of a run."""
    return {
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
                "parameters": [s.run_id, *EXPORT_PARAMETERS],
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
                        s.error,
                        "A bad query parameter (named with its value), or a task type the "
                        "run does not have.",
                    ),
                    **s.secured,
                    "404": _json(s.error, _NO_RUN),
                    "503": _json(
                        s.error,
                        "The database cannot be reached, or the server has no export "
                        "redactor configured.",
                    ),
                },
            }
        },
    }


def _canary_paths(s: _Shared) -> dict[str, Any]:
    """``/v1/canaries``, one canary and its rollback."""
    return {
        "/v1/canaries": {
            "get": _listing(
                s,
                "Canaries, newest first.",
                "listCanaries",
                ("state", [state.value for state in CanaryState]),
                (CanaryList, "The canaries."),
            )
        },
        "/v1/canaries/{canary_id}": {
            "get": {
                "summary": "A canary: its steps (each with its latest step verdict), what was "
                "observed per arm and its audit trail.",
                "description": "The body of `shadow-eval canary status --json`, with each "
                "step's `last_verdict` (decision, reasons, checks) and `last_evaluated_at`.",
                "operationId": "getCanary",
                "parameters": [s.canary_id],
                "responses": {
                    "200": _json(s.ref(CanaryDetail), "The canary."),
                    **s.secured,
                    "404": _json(s.error, "No canary with this id."),
                    "503": s.unavailable,
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
                "parameters": [s.canary_id],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": s.ref(RollbackIn)}},
                },
                "responses": {
                    "200": _json(s.ref(CanaryDetail), "Rolled back: the canary now."),
                    "400": _json(s.error, "A bad body (the field is named), e.g. an empty why."),
                    **s.secured,
                    "404": _json(s.error, "No canary with this id."),
                    "409": _json(
                        s.error, "The canary is already final, or another caller moved it."
                    ),
                    "503": _json(
                        s.error,
                        "The database cannot be reached, or the server has no Envoy canary "
                        "settings (envoy.canary) to write the split with.",
                    ),
                },
            }
        },
    }


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
    shared = _Shared(
        ref=ref,
        error=error,
        secured={"401": unauthorized} if auth else {},
        unavailable=_json(error, "The database cannot be reached."),
        run_id=_path_parameter("run_id", "The run id (as printed by evaluate / replay run)."),
        canary_id=_path_parameter(
            "canary_id", "The canary id (as printed by `shadow-eval canary start`)."
        ),
        limit=_limit(),
    )
    paths: dict[str, Any] = {
        **_service_paths(shared),
        **_run_paths(shared),
        **_export_paths(shared),
        **_canary_paths(shared),
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
