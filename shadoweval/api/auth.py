"""Bearer-token authentication for the HTTP API (RFC 6750), as a pure ASGI middleware.

Every HTTP request except the open paths (``/healthz``) must carry
``Authorization: Bearer <token>``. A missing or malformed header is answered 401 with
``WWW-Authenticate: Bearer realm="shadow-eval"``; a wrong token adds
``error="invalid_token"``. Both have a JSON body (:class:`~shadoweval.api.schemas.ErrorBody`).
The comparison is constant-time (:func:`hmac.compare_digest` on the UTF-8 bytes), and
neither the expected nor the presented token is ever logged or echoed.

A token in the query string (``?token=…``, ``?access_token=…``: any credential-like name,
:func:`shadoweval.redaction.sensitive_name`) is never accepted — URLs end up in access
logs, proxies and browser histories (RFC 6750 §5.3) — and a request that carries one
without a header is told so. Every refusal is counted in
``shadoweval_api_auth_failures_total{reason}`` (:mod:`shadoweval.api.metrics`); wrong tokens
and query tokens are logged as WARNINGs rate-limited per reason (at most one line per
``log_interval_s``, the next one counting those not logged), so a client retrying a wrong
token in a loop cannot flood the log.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Collection
from urllib.parse import unquote_plus

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from shadoweval.api.metrics import ApiMetrics
from shadoweval.api.schemas import ErrorBody
from shadoweval.log_limits import RateLimitedLog
from shadoweval.redaction import sensitive_name

logger = logging.getLogger(__name__)

REALM = "shadow-eval"
OPEN_PATHS: frozenset[str] = frozenset({"/healthz"})
"""Paths served without a token (liveness probes carry no credentials)."""


def presented_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``.

    The scheme is case-insensitive (RFC 7235 §2.1); surrounding blanks are ignored.
    """
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def query_token_names(query_string: bytes) -> list[str]:
    """Names of credential-like parameters (with a value) in a raw query string."""
    names: list[str] = []
    for item in query_string.decode("latin-1").split("&"):
        name, sep, value = item.partition("=")
        decoded = unquote_plus(name)
        if sep and value and sensitive_name(decoded):
            names.append(decoded)
    return names


def token_matches(presented: str, expected: SecretStr) -> bool:
    """Constant-time comparison of a presented token with the expected one."""
    return hmac.compare_digest(
        presented.encode("utf-8"), expected.get_secret_value().encode("utf-8")
    )


def unauthorized(detail: str, *, invalid: bool) -> Response:
    """The 401 answer: JSON error body and a ``WWW-Authenticate: Bearer`` challenge."""
    challenge = f'Bearer realm="{REALM}"'
    if invalid:
        challenge += ', error="invalid_token"'
    body = ErrorBody(error="unauthorized", detail=detail)
    return Response(
        body.model_dump_json(),
        status_code=401,
        media_type="application/json",
        headers={"WWW-Authenticate": challenge, "Cache-Control": "no-store"},
    )


class BearerAuth:
    """ASGI middleware: let a request through only with the right bearer token.

    Args:
        app: the wrapped application.
        token: the token clients must present.
        open_paths: exact paths served without a token.
        metrics: where refusals are counted (``auth_failures{reason}``); a fresh
            :class:`~shadoweval.api.metrics.ApiMetrics` by default.
        warnings: the rate limiter of the WARNING lines about wrong and query tokens;
            default one line per minute and reason.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: SecretStr,
        open_paths: Collection[str] = OPEN_PATHS,
        metrics: ApiMetrics | None = None,
        warnings: RateLimitedLog | None = None,
    ) -> None:
        if not token.get_secret_value():
            raise ValueError("the API token must not be empty")
        self._app = app
        self._token = token
        self._open = frozenset(open_paths)
        self._metrics = metrics or ApiMetrics()
        self._warnings = warnings or RateLimitedLog(logger, interval_s=60.0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self._app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        token = presented_token(header)
        if token is not None and token_matches(token, self._token):
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        where = client[0] if client else "unknown"
        in_query = query_token_names(scope.get("query_string", b""))
        if token is not None:
            reason = "invalid"
            self._warnings.log(
                logging.WARNING,
                "rejected a request to %s with an invalid bearer token from %s",
                scope["path"],
                where,
                key=reason,
            )
            response = unauthorized("invalid bearer token", invalid=True)
        elif header is None and in_query:
            reason = "query_token"
            self._warnings.log(
                logging.WARNING,
                "rejected a request to %s from %s with a credential in the query string "
                "(parameter %s; its value is never logged): send Authorization: Bearer",
                scope["path"],
                where,
                ", ".join(sorted(set(in_query))),
                key=reason,
            )
            response = unauthorized(
                "a token in the query string is not accepted (URLs end up in logs); send "
                "it in the Authorization: Bearer header",
                invalid=True,
            )
        else:
            reason = "missing" if header is None else "malformed"
            response = unauthorized("missing bearer token", invalid=False)
        self._metrics.auth_failures.labels(reason=reason).inc()
        await response(scope, receive, send)
