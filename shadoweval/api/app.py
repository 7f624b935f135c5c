"""The HTTP API (Starlette): runs, verdicts, policy audit logs and canaries, for CI and ops.

Endpoints (JSON; bodies in :mod:`shadoweval.api.schemas`; document at ``/openapi.json``):

* ``GET /healthz`` — liveness, no token;
* ``GET /metrics`` — Prometheus metrics (:mod:`shadoweval.api.metrics`: auth failures by
  reason), with the token like every other path;
* ``GET /v1/runs?status=&limit=`` — runs newest first, each with its latest decision;
* ``GET /v1/runs/{run_id}/verdict`` — the latest stored verdict; a run without one is
  gated now through ``compute_verdict`` (the CLI passes the function ``shadow-eval gate``
  uses) and the result stored, so the API and the CLI can never disagree;
* ``POST /v1/runs/{run_id}/verdict/expect/{decision}`` — 200 when that verdict (looked up
  or computed as above) is ``decision``, 409 when it is another: a webhook for
  controllers that read only a status code (Flagger's ``confirm-promotion`` and
  ``rollback`` hooks; ``deploy/flagger/``); the optional body is Flagger's payload;
* ``GET /v1/runs/{run_id}/audit`` — the run's policy audit log;
* ``GET /v1/canaries?state=&limit=`` — canaries newest first;
* ``GET /v1/canaries/{canary_id}`` — a canary with its steps (each with its latest step
  verdict), what was observed per arm and its audit trail
  (:func:`shadoweval.application.canary.view_json`);
* ``POST /v1/canaries/{canary_id}/rollback`` with ``{"why": ..., "actor": ...}`` — share 0
  at once and the canary ends ``rolled_back``
  (:func:`shadoweval.application.canary.rollback_canary`, through the split spec the composition
  root
  passes);
* ``GET /v1/runs/{run_id}/export?per_task_type=&order=&seed=&format=&task_type=&flag=
  &min_similarity=&max_similarity=`` — a zip (``application/zip``) of ``samples.<ext>``
  and ``manifest.json``: the export ``shadow-eval export`` writes, redacted by the
  redactor the composition root passes (:func:`shadoweval.application.exporting.export_zip`;
  parameters in :mod:`shadoweval.api.export_params`).

Errors are JSON :class:`~shadoweval.api.schemas.ErrorBody`: 400 bad query or body (naming the
field), 401 token, 404 unknown run, canary or path, 409 the canary is already rolled back
(or, for ``verdict/expect``, the verdict is another decision: a VerdictHookOut body),
500 the gate failed, 503 the database failed (or, for the export, no redactor was
configured; for a rollback, no ``envoy.canary`` settings). The repository
is synchronous; calls run in Starlette's thread pool.

No token reaches a log: the API never logs a header, a token in the query string is
refused (:mod:`shadoweval.api.auth`), and :func:`create_app` installs
:class:`shadoweval.serving.AccessLogRedaction` on uvicorn's access logger, so the access
log shows ``?token=[REDACTED]`` for whatever a client put in its URL.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from enum import StrEnum
from typing import Any, Literal, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, SecretStr, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shadoweval.api.auth import BearerAuth
from shadoweval.api.auth import logger as auth_logger
from shadoweval.api.export_params import BadParameterError, export_request
from shadoweval.api.metrics import ApiMetrics
from shadoweval.api.openapi import DEFAULT_LIMIT, MAX_LIMIT, openapi_document
from shadoweval.api.schemas import (
    AuditEntryOut,
    AuditLog,
    CanaryDetail,
    CanaryList,
    CanaryOut,
    ErrorBody,
    Health,
    RollbackIn,
    RunList,
    RunOut,
    VerdictHookIn,
    VerdictHookOut,
    VerdictOut,
)
from shadoweval.api_settings import ApiSettings, required_token
from shadoweval.application.canary import (
    SplitSpec,
    canary_view,
    list_canaries,
    optional_split_spec,
    rollback_canary,
    view_json,
)
from shadoweval.application.database import open_repository
from shadoweval.application.exporting import ExportRedaction, ExportRequest, export_zip
from shadoweval.application.gating import gate_run
from shadoweval.application.redaction import body_redaction
from shadoweval.config import load_settings
from shadoweval.errors import ConfigError, ShadowEvalError, StorageError
from shadoweval.log_limits import RateLimitedLog
from shadoweval.records import Decision, Verdict
from shadoweval.serving import install_access_log_redaction
from shadoweval.storage import (
    CanaryInfo,
    CanaryState,
    PolicyAuditAction,
    Repository,
    RunInfo,
    RunStatus,
)

logger = logging.getLogger(__name__)

StoredT = TypeVar("StoredT")
EnumT = TypeVar("EnumT", bound=StrEnum)
"""A stored record a route looks up by the id in its path (a run, a canary)."""
BodyT = TypeVar("BodyT", bound=BaseModel)
"""A request body model."""

ComputeVerdict = Callable[[Repository, RunInfo], Verdict]
"""Gate a run now and store the verdict (blocking; called in a worker thread)."""

API_COMMAND = "shadow-eval api"
"""``command`` recorded in the policy audit log for verdicts the API computes."""

VERDICT_ENDPOINT = "GET /v1/runs/{run_id}/verdict"
EXPECT_ENDPOINT = "POST /v1/runs/{run_id}/verdict/expect/{decision}"
"""The routes that may gate a run, as the policy audit row's ``endpoint`` names them."""

ROLLBACK_COMMAND = "shadow-eval api: POST /v1/canaries/{canary_id}/rollback"
"""``command`` recorded in the audit row of a rollback asked through the API."""

NO_CANARY_SPLIT = (
    "this server was started without the Envoy front's canary settings (envoy.canary: "
    "SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL and SHADOWEVAL_ENVOY__CANARY__SPLIT_DIR, with "
    "the front's SHADOWEVAL_CAPTURE__* settings), so it cannot write the split file; roll "
    "back with `shadow-eval canary rollback` where the front's settings are, or restart the "
    "API with them"
)


class ApiError(Exception):
    """An error answer: HTTP status, machine-readable code and human detail."""

    def __init__(self, status_code: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.error = error
        self.detail = detail


def _body(model: BaseModel, status_code: int = 200) -> Response:
    return Response(
        model.model_dump_json(),
        status_code=status_code,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )


def _error(status_code: int, error: str, detail: str) -> Response:
    return _body(ErrorBody(error=error, detail=detail), status_code)


class _Handlers:
    """The endpoint functions over one repository."""

    def __init__(
        self,
        repo: Repository,
        compute_verdict: ComputeVerdict,
        auth: bool,
        export_redaction: ExportRedaction | None = None,
        metrics: ApiMetrics | None = None,
        canary_split: SplitSpec | None = None,
    ) -> None:
        self._repo = repo
        self._split = canary_split
        self._metrics = metrics or ApiMetrics()
        self._compute = compute_verdict
        self._compute_lock = asyncio.Lock()
        self._openapi = openapi_document(auth=auth)
        self._redaction = export_redaction

    async def healthz(self, _: Request) -> Response:
        return _body(Health())

    async def metrics(self, _: Request) -> Response:
        return Response(
            generate_latest(self._metrics.registry),
            media_type=CONTENT_TYPE_LATEST,
            headers={"Cache-Control": "no-store"},
        )

    async def openapi(self, _: Request) -> Response:
        return JSONResponse(self._openapi, headers={"Cache-Control": "no-store"})

    async def runs(self, request: Request) -> Response:
        status = _enum_param(RunStatus, request, "status")
        limit = _limit_param(request.query_params.get("limit"))
        runs = await run_in_threadpool(self._repo.list_runs, status=status, limit=limit)
        latest = await run_in_threadpool(self._repo.latest_decisions, [r.run_id for r in runs])
        return _body(RunList(runs=[RunOut.of(run, latest.get(run.run_id)) for run in runs]))

    async def verdict(self, request: Request) -> Response:
        run = await self._run(request)
        return _body(VerdictOut.of(*await self._verdict_of(run, request, VERDICT_ENDPOINT)))

    async def expect(self, request: Request) -> Response:
        """200 when the run's verdict is the path's decision, 409 (same body) when not."""
        expected = _enum_value(Decision, str(request.path_params["decision"]), "decision")
        run = await self._run(request)
        caller = _json_body(VerdictHookIn, await request.body(), '{"name": ..., "namespace": ...}')
        verdict, source = await self._verdict_of(run, request, EXPECT_ENDPOINT)
        answer = VerdictHookOut.of(verdict, source, expected, caller)
        return _body(answer, 200 if answer.matches else 409)

    async def _verdict_of(
        self, run: RunInfo, request: Request, endpoint: str
    ) -> tuple[Verdict, Literal["stored", "computed"]]:
        """The run's latest stored verdict, or one gated and stored now if it has none
        (audited as asked by ``endpoint``)."""
        stored = await run_in_threadpool(self._repo.latest_verdict, run.run_id)
        if stored is not None:
            return stored, "stored"
        async with self._compute_lock:  # two first requests must not both gate (look 1 twice)
            stored = await run_in_threadpool(self._repo.latest_verdict, run.run_id)
            if stored is not None:
                return stored, "stored"
            return await run_in_threadpool(self._gate, run, _client(request), endpoint), "computed"

    async def audit(self, request: Request) -> Response:
        run = await self._run(request)
        entries = await run_in_threadpool(self._repo.policy_audit, run.run_id)
        return _body(AuditLog(run_id=run.run_id, entries=[AuditEntryOut.of(e) for e in entries]))

    async def export(self, request: Request) -> Response:
        run = await self._run(request)
        try:
            wanted = export_request(run.run_id, request.query_params)
        except BadParameterError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        if self._redaction is None:
            raise ApiError(
                503,
                "export_unavailable",
                "this server was started without an export redactor; exports are refused "
                "rather than served unredacted",
            )
        archive = await run_in_threadpool(self._export, wanted, self._redaction)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", run.run_id)
        return Response(
            archive,
            media_type="application/zip",
            headers={
                "Content-Disposition": f'attachment; filename="shadow-eval-export-{name}.zip"',
                "Cache-Control": "no-store",
            },
        )

    async def canaries(self, request: Request) -> Response:
        state = _enum_param(CanaryState, request, "state")
        limit = _limit_param(request.query_params.get("limit"))
        found = await run_in_threadpool(list_canaries, self._repo, state=state, limit=limit)
        return _body(CanaryList(canaries=[CanaryOut.of(c) for c in found]))

    async def canary(self, request: Request) -> Response:
        canary = await self._canary(request)
        view = await run_in_threadpool(canary_view, self._repo, canary.canary_id)
        return _body(CanaryDetail.model_validate(view_json(view)))

    async def rollback(self, request: Request) -> Response:
        canary = await self._canary(request)
        wanted = _json_body(RollbackIn, await request.body(), '{"why": "...", "actor": "..."}')
        if canary.state is CanaryState.ROLLED_BACK:
            raise _final(canary)
        if self._split is None or self._split.canary is None:
            raise ApiError(503, "canary_split_unavailable", NO_CANARY_SPLIT)
        await run_in_threadpool(self._rollback, canary, wanted, self._split)
        view = await run_in_threadpool(canary_view, self._repo, canary.canary_id)
        return _body(CanaryDetail.model_validate(view_json(view)))

    def _rollback(self, canary: CanaryInfo, wanted: RollbackIn, spec: SplitSpec) -> None:
        """Roll back (blocking). :func:`shadoweval.application.canary.rollback_canary` itself
        retries a
        canary the controller moved meanwhile (and rolls back one it completed); a canary
        someone else rolled back first is 409."""
        try:
            rollback_canary(
                self._repo,
                canary.canary_id,
                spec=spec,
                why=wanted.why,
                actor=wanted.actor,
                command=ROLLBACK_COMMAND,
            )
        except ConfigError as exc:
            now = self._repo.get_canary(canary.canary_id)
            if now is not None and now.state is CanaryState.ROLLED_BACK:
                raise _final(now) from None
            if exc.field == "envoy.canary":
                raise ApiError(503, "canary_split_unavailable", NO_CANARY_SPLIT) from None
            raise ApiError(400, "bad_request", str(exc)) from None

    async def _canary(self, request: Request) -> CanaryInfo:
        return await _stored(self._repo.get_canary, "canary", request, "canary_id")

    def _export(self, wanted: ExportRequest, redaction: ExportRedaction) -> bytes:
        """Build the export and zip it (blocking)."""
        try:
            return export_zip(self._repo, wanted, redact=redaction).data
        except ConfigError as exc:  # a task type the run does not have
            raise ApiError(400, "bad_request", str(exc)) from None

    async def _run(self, request: Request) -> RunInfo:
        return await _stored(self._repo.get_run, "run", request, "run_id")

    def _gate(self, run: RunInfo, client: str, endpoint: str) -> Verdict:
        """Audit the use of the run's frozen policy (``endpoint``: the route asking), then
        gate it (blocking)."""
        self._repo.record_policy_audit(
            run_id=run.run_id,
            policy_hash=run.policy_hash,
            action=PolicyAuditAction.USED,
            command=API_COMMAND,
            detail={
                "policy_source": "run",
                "endpoint": endpoint,
                "client": client,
            },
        )
        return self._compute(self._repo, run)


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _enum_param(values: type[EnumT], request: Request, param: str) -> EnumT | None:
    """The request's query parameter ``param`` as one of ``values`` (``None``: not given).

    Raises:
        ApiError: 400 ``bad_request`` (``{param} {value!r} is not one of …``) for another
            value.
    """
    value = request.query_params.get(param)
    return None if value is None else _enum_value(values, value, param)


def _enum_value(values: type[EnumT], value: str, param: str) -> EnumT:
    """``value`` (of the parameter ``param``) as one of ``values``.

    Raises:
        ApiError: 400 ``bad_request`` (``{param} {value!r} is not one of …``) for another.
    """
    try:
        return values(value)
    except ValueError:
        known = ", ".join(member.value for member in values)
        raise ApiError(400, "bad_request", f"{param} {value!r} is not one of {known}") from None


async def _stored(
    get: Callable[[str], StoredT | None], what: str, request: Request, param: str
) -> StoredT:
    """What ``get`` finds (blocking, in the thread pool) under the request's path
    parameter ``param``.

    Raises:
        ApiError: 404 ``not_found`` (``{what} {id!r} not found``) when it finds nothing.
    """
    key = str(request.path_params[param])
    found = await run_in_threadpool(get, key)
    if found is None:
        raise ApiError(404, "not_found", f"{what} {key!r} not found")
    return found


def _json_body(model: type[BodyT], raw: bytes, expected: str) -> BodyT:
    """The request body as ``model`` (an empty body is ``{}``); a bad one is 400 naming the
    field and what is wrong, and the JSON ``expected`` (an example for the message)."""
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise ApiError(
            400,
            "bad_request",
            f"body field {where!r}: {first['msg']} (expected JSON {expected})",
        ) from None


def _final(canary: CanaryInfo) -> ApiError:
    return ApiError(
        409,
        "conflict",
        f"canary {canary.canary_id!r} is {canary.state.value}; nothing to roll back",
    )


def _limit_param(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, "bad_request", f"limit {value!r} must be an integer 1..{MAX_LIMIT}")
    return limit


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc.status_code, exc.error, exc.detail)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return _error(exc.status_code, code, str(exc.detail))


async def _storage_error(_: Request, exc: Exception) -> Response:
    logger.error("database error: %s", exc)
    return _error(503, "database_unavailable", str(exc))


async def _gate_error(_: Request, exc: Exception) -> Response:
    logger.error("gate failed: %s", exc)
    return _error(500, "gate_failed", str(exc))


def create_app(
    repo: Repository,
    *,
    token: SecretStr | None,
    compute_verdict: ComputeVerdict,
    export_redaction: ExportRedaction | None = None,
    metrics: ApiMetrics | None = None,
    auth_warnings: RateLimitedLog | None = None,
    canary_split: SplitSpec | None = None,
) -> Starlette:
    """The API application over ``repo``.

    Args:
        repo: an open repository at the current schema (the caller owns its database).
        token: the bearer token every request but ``/healthz`` must carry; ``None``
            serves without authentication (only for ``--insecure-no-auth``).
        compute_verdict: gates a run that has no stored verdict yet, and stores it
            (:func:`shadoweval.application.gating.gate_run`'s verdict, wired by the CLI).
        export_redaction: the text redactor of ``GET /v1/runs/{run_id}/export``
            (:func:`shadoweval.application.redaction.body_redaction`, wired by the CLI); ``None``
            answers exports 503 (never unredacted).
        metrics: the metrics ``/metrics`` serves (a fresh registry by default).
        auth_warnings: the rate limiter of the authentication WARNING lines (default one
            line per minute and reason; inject one with a test clock).
        canary_split: the Envoy front's config spec the rollback renders the split file
            with (:func:`shadoweval.application.canary.optional_split_spec`, wired by the
            composition
            root); ``None`` answers ``POST /v1/canaries/{id}/rollback`` 503.

    Also installs :class:`shadoweval.serving.AccessLogRedaction` on uvicorn's access
    logger (idempotent).
    """
    install_access_log_redaction()
    metrics = metrics or ApiMetrics()
    handlers = _Handlers(
        repo,
        compute_verdict,
        auth=token is not None,
        export_redaction=export_redaction,
        metrics=metrics,
        canary_split=canary_split,
    )
    middleware = (
        []
        if token is None
        else [Middleware(BearerAuth, token=token, metrics=metrics, warnings=auth_warnings)]
    )
    exception_handlers: dict[Any, Any] = {
        ApiError: _api_error,
        HTTPException: _http_error,
        StorageError: _storage_error,
        ShadowEvalError: _gate_error,
    }
    return Starlette(
        routes=[
            Route("/healthz", handlers.healthz, methods=["GET"]),
            Route("/openapi.json", handlers.openapi, methods=["GET"]),
            Route("/metrics", handlers.metrics, methods=["GET"]),
            Route("/v1/runs", handlers.runs, methods=["GET"]),
            Route("/v1/runs/{run_id}/verdict", handlers.verdict, methods=["GET"]),
            Route("/v1/runs/{run_id}/verdict/expect/{decision}", handlers.expect, methods=["POST"]),
            Route("/v1/runs/{run_id}/audit", handlers.audit, methods=["GET"]),
            Route("/v1/runs/{run_id}/export", handlers.export, methods=["GET"]),
            Route("/v1/canaries", handlers.canaries, methods=["GET"]),
            Route("/v1/canaries/{canary_id}", handlers.canary, methods=["GET"]),
            Route("/v1/canaries/{canary_id}/rollback", handlers.rollback, methods=["POST"]),
        ],
        middleware=middleware,
        exception_handlers=exception_handlers,
    )


def build_app(
    repo: Repository,
    token: SecretStr | None,
    *,
    auth_log_interval_s: float = 60.0,
    canary_split: SplitSpec | None = None,
) -> Starlette:
    """The API over ``repo``, gating through :func:`shadoweval.application.gating.gate_run`.

    A run without a stored verdict is gated exactly as ``shadow-eval gate`` gates it (the
    verdict is stored with command :data:`API_COMMAND`); exports are redacted with
    :func:`shadoweval.application.redaction.body_redaction`. ``token`` ``None`` serves without
    authentication. ``auth_log_interval_s``: at most one WARNING line per this many
    seconds and reason about refused tokens (``SHADOWEVAL_API__AUTH_LOG_INTERVAL_S``).
    ``canary_split``: the Envoy front's spec canary rollbacks write the split with
    (``None``: they are answered 503).

    Raises:
        ConfigError: the body-redaction settings are invalid.
    """

    def compute(repository: Repository, run: RunInfo) -> Verdict:
        return gate_run(repository, run, command=API_COMMAND).verdict

    return create_app(
        repo,
        token=token,
        compute_verdict=compute,
        export_redaction=body_redaction(),
        auth_warnings=RateLimitedLog(auth_logger, interval_s=auth_log_interval_s),
        canary_split=canary_split,
    )


def app_from_environment() -> Starlette:
    """The application factory ``shadow-eval api serve`` hands uvicorn by import string
    (``shadoweval.api.app:app_from_environment``, ``factory=True``).

    Requires a token: :class:`~shadoweval.api_settings.ApiSettings`
    (``SHADOWEVAL_API__TOKEN`` or ``SHADOWEVAL_API__TOKEN_FILE``); the database is
    ``SHADOWEVAL_DATABASE__URL``; canary rollbacks write the split with the Envoy front's
    settings (``SHADOWEVAL_ENVOY__CANARY__*`` and ``SHADOWEVAL_CAPTURE__*``; without
    ``envoy.canary`` they are answered 503). The repository is opened here (its schema
    must be current) and closed when the server shuts down (the ASGI lifespan). The CLI
    starts the server this way so that it never imports this face.

    Raises:
        ConfigError: no token is configured, or it is unreadable or too short.
        StorageError: the database cannot be reached or is not at the current schema.
    """
    settings = ApiSettings()
    token, _ = required_token(settings, None)
    return _app_over_settings_database(token, settings)


def insecure_app_from_environment() -> Starlette:
    """The factory of ``shadow-eval api serve --insecure-no-auth``: the API WITHOUT
    authentication, for a trusted loopback only. Chosen by that explicit option alone (no
    environment variable turns authentication off).

    Raises:
        ConfigError: a token is configured too (use one or the other).
        StorageError: as :func:`app_from_environment`.
    """
    settings = ApiSettings()
    token, _ = required_token(settings, None, insecure_no_auth=True)
    return _app_over_settings_database(token, settings)


def _app_over_settings_database(token: SecretStr | None, settings: ApiSettings) -> Starlette:
    loaded = load_settings()
    split = optional_split_spec(loaded)
    resources = ExitStack()
    repo = resources.enter_context(open_repository(loaded.database.url, upgrade=False))
    try:
        app = build_app(
            repo, token, auth_log_interval_s=settings.auth_log_interval_s, canary_split=split
        )
    except BaseException:
        resources.close()
        raise

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        with resources:
            yield

    app.router.lifespan_context = lifespan
    return app
