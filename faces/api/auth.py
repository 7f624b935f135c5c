"""Bearer-token authentication for the HTTP API (RFC 6750), as a pure ASGI middleware.

Every HTTP request except the open paths (``/healthz``) must carry
``Authorization: Bearer <token>``. A missing or malformed header is answered 401 with
``WWW-Authenticate: Bearer realm="shadow-eval"``; a wrong token adds
``error="invalid_token"``. Both have a JSON body (:class:`~faces.api.schemas.ErrorBody`).
The comparison is constant-time (:func:`hmac.compare_digest` on the UTF-8 bytes), and
neither the expected nor the presented token is ever logged or echoed.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Collection

from pydantic import SecretStr
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from faces.api.schemas import ErrorBody

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
    """

    def __init__(
        self, app: ASGIApp, *, token: SecretStr, open_paths: Collection[str] = OPEN_PATHS
    ) -> None:
        if not token.get_secret_value():
            raise ValueError("the API token must not be empty")
        self._app = app
        self._token = token
        self._open = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            await self._app(scope, receive, send)
            return
        token = presented_token(Headers(scope=scope).get("authorization"))
        if token is None:
            response = unauthorized("missing bearer token", invalid=False)
        elif not token_matches(token, self._token):
            client = scope.get("client")
            logger.warning(
                "rejected a request to %s with an invalid bearer token from %s",
                scope["path"],
                client[0] if client else "unknown",
            )
            response = unauthorized("invalid bearer token", invalid=True)
        else:
            await self._app(scope, receive, send)
            return
        await response(scope, receive, send)
