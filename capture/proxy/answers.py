"""What the live-path proxy answers by itself, and the request it holds while relaying.

Part of :mod:`shadoweval.capture.proxy` (moved here unchanged to keep the modules short): the
OpenAI-style error bodies of refusals and upstream failures, the status reasons and codes, the
dot-segment check of request targets, and :class:`_Request`, one request read from a client.
"""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import unquote_to_bytes

from shadoweval.capture.raw import RawCapture
from shadoweval.capture.upstream_pool import UpstreamConnection

OTHER_ROUTE = "other"
"""``route`` label of a request whose path is not a captured route."""

_perf_ns = time.perf_counter_ns
_monotonic = time.monotonic
_STATUS_CLASSES = ("1xx", "1xx", "2xx", "3xx", "4xx", "5xx")
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})
_DROP_UPSTREAM = frozenset({b"content-length", b"expect"})
_REASONS = {
    204: b"No Content",
    400: b"Bad Request",
    408: b"Request Timeout",
    413: b"Content Too Large",
    431: b"Request Header Fields Too Large",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}

_CLIENT_MESSAGES = {
    "connect": "the upstream model server refused or failed the connection",
    "connect_timeout": "the upstream model server did not accept a connection in time",
    "pool_timeout": "no upstream connection became free in time",
    "protocol": "the upstream model server closed the connection or answered malformed HTTP",
    "network": "the connection to the upstream model server failed",
    "internal": "the request could not be forwarded to the upstream model server",
}
_UPSTREAM_CODES = {
    "connect": (502, "upstream_connect_error"),
    "connect_timeout": (504, "upstream_connect_timeout"),
    "pool_timeout": (504, "upstream_pool_timeout"),
    "protocol": (502, "upstream_protocol_error"),
    "network": (502, "upstream_network_error"),
    "internal": (502, "upstream_error"),
}


def upstream_error_body(kind: str, code: str) -> bytes:
    """The OpenAI-style JSON error body sent for an upstream failure of ``kind``."""
    message = f"shadow-eval sidecar: {_CLIENT_MESSAGES.get(kind, _CLIENT_MESSAGES['internal'])}"
    payload = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return json.dumps(payload).encode()


def request_error_body(message: str, code: str, param: str | None) -> bytes:
    """OpenAI-style ``invalid_request_error`` body for a request the sidecar refuses."""
    payload = {
        "error": {
            "message": f"shadow-eval sidecar: {message}",
            "type": "invalid_request_error",
            "param": param,
            "code": code,
        }
    }
    return json.dumps(payload).encode()


def has_dot_segment(path: bytes) -> bool:
    """Whether a request path has a ``.`` or ``..`` segment (RFC 3986 §3.3), also when
    percent-encoded (``%2e%2e``) or separated by an encoded slash or a backslash."""
    decoded = unquote_to_bytes(path) if b"%" in path else path
    return any(seg in (b".", b"..") for seg in decoded.replace(b"\\", b"/").split(b"/"))


class _Request:
    """One request read from a client (whole), waiting for or in its exchange."""

    __slots__ = (
        "body",
        "body_bytes",
        "chunked_out",
        "close_after",
        "connect_task",
        "done",
        "eof_body",
        "headers",
        "http_10",
        "keep_alive",
        "local",
        "method",
        "path",
        "raw",
        "route",
        "status_class",
        "target",
        "upstream",
    )

    def __init__(self) -> None:
        self.method = b""
        self.target = b""
        self.path = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.http_10 = False
        self.keep_alive = True
        self.raw: RawCapture | None = None
        self.route = OTHER_ROUTE
        self.local: tuple[int, bytes, str] | None = None  # (status, body, reason) answered here
        self.done = False
        self.upstream: UpstreamConnection | None = None
        self.status_class = "none"
        self.chunked_out = False
        self.close_after = False
        self.eof_body = False  # the upstream body ends when its connection closes
        self.connect_task: asyncio.Task[None] | None = None


class _RefusedError(Exception):
    """Raised from a parser callback to refuse the request being read."""

    def __init__(self, status: int, code: str, message: str, param: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param


_BODY_PARAM = "capture.max_request_body_bytes"


def _body_limit_message(limit: int) -> str:
    return f"request body exceeds capture.max_request_body_bytes = {limit} bytes"
