"""The live-path proxy of the capture sidecar: :class:`CaptureProxy`, an HTTP/1.1 byte relay.

Every request, on any path and method, is forwarded to the upstream (the live model server)
and its response is passed back **as received**: status, headers (minus hop-by-hop ones,
see :mod:`shadoweval.capture.headers`) and the body bytes piece by piece as they arrive from the
upstream socket, still content-encoded (gzip/br pass through byte-identical), so SSE events
reach the client when they arrive. The rule above all: the sidecar never fails, slows or
alters a client's request or response. Capture is a side copy that cannot break the live
path.

How (no HTTP library objects per request): the client side and each upstream connection
are :class:`asyncio.Protocol` objects with an ``httptools`` (llhttp) parser; a request is
read whole (it is small, and the capture needs it), then written upstream as one buffer —
``METHOD <base path><target as received> HTTP/1.1``, ``Host`` of the upstream, the
client's headers, ``Content-Length`` — on a pooled connection
(:mod:`shadoweval.capture.upstream_pool`). Each response body piece the parser yields is written to
the client at once (re-chunked when the upstream sent no ``Content-Length``; an upstream
``Content-Length`` passes through) and the same ``bytes`` object is appended to the
capture: one copy, made by the parser. Reading from the upstream pauses while the
client's socket buffer is full (a slow client never makes the sidecar buffer a stream).
Decoding, reassembly and redaction happen in the builder process, never here.

Capture (DESIGN §2): only ``POST`` to a path in ``settings.routes`` (exact match, on the
percent-decoded path with trailing slashes ignored — ``/v1/chat/completions/`` is captured
as ``/v1/chat/completions``, and still forwarded with its slash), never a request carrying
``x-shadow-eval`` (shadow-eval's own replay traffic), and only when the sticky sampler says
so (decided when the request headers are read; unsampled requests count
``shadoweval_capture_unsampled_total``). For a captured
request the proxy appends ``(time.perf_counter_ns(), piece)`` per piece to a
:class:`~shadoweval.capture.raw.RawCapture` — the only per-piece work — up to
``settings.max_capture_bytes`` (beyond it the copy stops, ``truncated`` is set and the
outcome is ``truncated``; the client still gets every byte). When the exchange ends —
normally, with an upstream error, or cancelled — ``on_capture`` is called exactly once with
the RawCapture, synchronously, guarded (an exception is logged at debug and ignored).

Failure handling:

* **Client disconnect** (the client's connection closes or resets): the upstream
  connection is closed at once, so the model server sees the disconnect and stops
  generating; the capture's outcome is ``cancelled`` with the chunks received so far
  (the builder decides whether a terminal event had reached the client). A client that
  half-closes (sends FIN) after an HTTP/1.0 request or one with ``Connection: close`` is
  still answered (it said it sends nothing more); for any other request a FIN counts as a
  disconnect.
* **Upstream unreachable before a response**: the client gets an OpenAI-style error
  ``{"error": {"message", "type": "upstream_error", "code"}}`` — 504 for a timeout (connect,
  or waiting for a pooled connection), 502 otherwise; ``upstream_errors{kind}`` counts it and
  the capture has outcome ``error``, ``error`` text and ``status_code=None``. A pooled
  connection found closed by the upstream before use is never used (no byte is written on
  it, nothing to retry; :mod:`shadoweval.capture.upstream_pool`).
* **Upstream breaks mid-body** (connection reset, incomplete chunked body): the client's
  response is left incomplete and its connection closed — what a direct connection would
  have shown the client; ``upstream_errors{kind="mid_stream"}`` and outcome ``error``.

Limits (each a :class:`~shadoweval.config.CaptureSettings` field; refusals are
OpenAI-style JSON errors naming the setting, counted in ``rejected{reason}``):
``header_read_timeout_s`` (408 or close, reason ``header_timeout``), ``body_read_timeout_s``
(408, ``body_timeout``), ``client_keepalive_timeout_s`` (an idle connection is closed, not
counted), ``max_request_header_bytes`` (431, ``headers_too_large``),
``max_request_body_bytes`` (413 before the body is read when ``Content-Length`` says so,
else when the limit is passed; ``body_too_large``), ``max_client_connections`` (503 and
close, ``connection_limit``). Request targets: the path and query are forwarded as
received (never normalised); with a base path in ``upstream_url`` a target whose path has a
``.`` or ``..`` segment (also percent-encoded, or behind an encoded slash) is refused with
400 (``dot_segment``) so it cannot climb out of the base path; ``OPTIONS *`` is answered
204 by the sidecar; other non-origin-form targets (``*``, ``http://…``, ``CONNECT``) get 400
(``bad_target``); malformed HTTP gets 400 (``bad_request``).

Metrics: ``proxied{route, status_class}`` once per forwarded request (``route`` is the
captured route's path or ``other``; ``status_class`` is what the client got: ``2xx`` …
``5xx``, or ``none`` when the client left before a response started);
``upstream_errors{kind}`` (``connect``, ``connect_timeout``, ``pool_timeout``,
``protocol``, ``network``, ``mid_stream``); ``upstream_stale``; ``rejected{reason}``;
``client_connections``; ``unsampled``. ``captured`` is counted by the tee
(:meth:`shadoweval.capture.pipeline.CapturePipeline.offer`), not here.

Serving: :meth:`CaptureProxy.listen` binds the port (optionally ``SO_REUSEPORT``);
shutdown is :meth:`CaptureProxy.close_listeners` then :meth:`CaptureProxy.drain` (wait for
in-flight exchanges up to a grace period, then cut the rest, captured ``cancelled``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, unquote_to_bytes, urlsplit

import httptools

from shadoweval.capture.headers import (
    SHADOW_MARKER,
    has_header,
    request_headers_for_upstream,
    response_headers_for_client,
)
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.upstream_pool import UpstreamConnection, UpstreamError, UpstreamPool
from shadoweval.config import CaptureSettings
from shadoweval.errors import ConfigError
from shadoweval.lifecycle import AsyncLifecycle
from shadoweval.records import ExchangeOutcome, new_exchange_id, utc_now
from shadoweval.routes import normalize_route

logger = logging.getLogger(__name__)

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


class _ClientConnection(asyncio.Protocol):
    """One client connection: parses requests, runs their exchanges one at a time."""

    def __init__(self, proxy: CaptureProxy) -> None:
        self.proxy = proxy
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.peer: tuple[str, int] | None = None
        self.reading: _Request | None = None  # the request being parsed
        self.header_bytes = 0
        self.queue: collections.deque[_Request] = collections.deque()
        self.active: _Request | None = None
        self.closed = False
        self.peer_eof = False
        self.paused_upstream = False
        self.paused_reading = False
        self.stop_reading = False
        self.timer: asyncio.TimerHandle | None = None
        self.timer_kind = ""

    # -- connection --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        proxy = self.proxy
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        if len(proxy._clients) >= proxy._max_clients:
            self.stop_reading = True
            proxy._reject_metric("connection_limit")
            self._write_local_and_close(
                503,
                request_error_body(
                    f"too many open connections (capture.max_client_connections = "
                    f"{proxy._max_clients})",
                    "connection_limit",
                    "capture.max_client_connections",
                ),
            )
            return
        proxy._clients.add(self)
        proxy._metrics.client_connections.inc()
        self._arm("header", proxy._header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.stop_reading:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.stop_reading = True  # bytes after an upgrade request are not HTTP/1.1
        except httptools.HttpParserError as exc:
            if self.stop_reading:  # a callback refused the request (already answered)
                return
            self.proxy._reject_metric("bad_request")
            self._refuse(400, "bad_request", f"malformed HTTP request ({exc})", None)

    def eof_received(self) -> bool | None:
        req = self.active or (self.queue[0] if self.queue else None)
        if req is not None and self.reading is None and (req.http_10 or not req.keep_alive):
            self.peer_eof = True  # a half-close after the last request: answer it
            return True
        return None  # closes the transport: connection_lost handles the rest

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._disarm()
        proxy = self.proxy
        if self in proxy._clients:
            proxy._clients.discard(self)
            proxy._metrics.client_connections.dec()
        reading, self.reading = self.reading, None
        if reading is not None and reading.raw is not None:
            self._emit_unforwarded(
                reading, "client disconnected before the request body was complete"
            )
        active = self.active
        if active is not None and not active.done:
            if active.raw is not None:
                active.raw.outcome = ExchangeOutcome.CANCELLED
                active.raw.error = "client disconnected"
            self._cut(active)
        while self.queue:
            queued = self.queue.popleft()
            if queued.raw is not None:
                self._emit_unforwarded(queued, "client disconnected before the request was sent")

    def pause_writing(self) -> None:
        req = self.active
        if req is not None and req.upstream is not None and req.upstream.transport is not None:
            req.upstream.transport.pause_reading()
            self.paused_upstream = True

    def resume_writing(self) -> None:
        if self.paused_upstream:
            self.paused_upstream = False
            req = self.active
            if req is not None and req.upstream is not None and req.upstream.transport is not None:
                req.upstream.transport.resume_reading()

    # -- timers -------------------------------------------------------------------------

    def _arm(self, kind: str, delay_s: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_kind = kind
        self.timer = self.proxy._loop.call_later(delay_s, self._timed_out)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self) -> None:
        self.timer = None
        if self.closed:
            return
        proxy = self.proxy
        kind = self.timer_kind
        if kind == "idle":
            self._close()
            return
        if self.active is not None or self.queue:
            return  # a request is being answered: no read is awaited
        self.stop_reading = True
        if kind == "header":
            proxy._reject_metric("header_timeout")
            if self.reading is None and self.header_bytes == 0:
                self._close()  # nothing was sent at all
                return
            limit = f"capture.header_read_timeout_s = {proxy._header_timeout_s:g}"
            message = f"request headers not received within {limit} s"
            self._refuse(408, "header_timeout", message, "capture.header_read_timeout_s")
        else:
            proxy._reject_metric("body_timeout")
            limit = f"capture.body_read_timeout_s = {proxy._body_timeout_s:g}"
            message = f"request body not received within {limit} s"
            self._refuse(408, "body_timeout", message, "capture.body_read_timeout_s")

    # -- httptools request callbacks ----------------------------------------------------

    def on_message_begin(self) -> None:
        self.reading = _Request()
        self.header_bytes = 0
        if self.timer_kind == "idle":
            self._arm("header", self.proxy._header_timeout_s)

    def on_url(self, url: bytes) -> None:
        req = self.reading
        if req is not None:
            req.target += url
            self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        req = self.reading
        if req is not None:
            self._count_header_bytes(len(name) + len(value) + 4)
            # After the header section (method set) these are trailer fields of a chunked
            # body: never forwarded as headers (RFC 9110 §6.5.1 — a recipient must not merge
            # trailers into the header section), so a client cannot add Authorization,
            # X-Shadow-Eval or X-Forwarded-For through them.
            if not req.method:
                req.headers.append((name.lower(), value))

    def _count_header_bytes(self, n: int) -> None:
        self.header_bytes += n
        limit = self.proxy._max_header_bytes
        if self.header_bytes > limit:
            self.proxy._reject_metric("headers_too_large")
            raise _RefusedError(
                431,
                "headers_too_large",
                f"request line and headers exceed capture.max_request_header_bytes = {limit}",
                "capture.max_request_header_bytes",
            )

    def on_headers_complete(self) -> None:
        req = self.reading
        if req is None:
            return
        proxy = self.proxy
        parser = self.parser
        req.method = parser.get_method()
        req.http_10 = parser.get_http_version() == "1.0"
        req.keep_alive = parser.should_keep_alive() and not req.http_10
        target = req.target
        if not target.startswith(b"/"):
            if target == b"*" and req.method == b"OPTIONS":
                req.local = (204, b"", "")
            else:
                proxy._reject_metric("bad_target")
                req.local = (
                    400,
                    request_error_body(
                        f"request target {target[:200].decode('latin-1')!r} is not forwarded: "
                        "the sidecar forwards origin-form targets (a path) only",
                        "bad_target",
                        "request_target",
                    ),
                    "bad_target",
                )
        else:
            raw_path = target.split(b"?", 1)[0]
            if proxy._base_path and has_dot_segment(raw_path):
                proxy._reject_metric("dot_segment")
                req.local = (
                    400,
                    request_error_body(
                        f"request path {raw_path[:200].decode('latin-1')!r} has a '.' or '..' "
                        "segment, which would leave the upstream base path "
                        f"{proxy._base_path.decode('latin-1')!r}",
                        "dot_segment",
                        "request_target",
                    ),
                    "dot_segment",
                )
            text = raw_path.decode("latin-1")
            req.path = unquote(text, encoding="latin-1") if "%" in text else text
        limit = proxy._max_body_bytes
        expect_continue = False
        for name, value in req.headers:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    proxy._reject_metric("body_too_large")
                    raise _RefusedError(
                        413, "body_too_large", _body_limit_message(limit), _BODY_PARAM
                    )
            elif name == b"expect" and value.lower() == b"100-continue":
                expect_continue = not req.http_10
        if expect_continue and self.active is None and not self.queue and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # we read the body
        route = normalize_route(req.path) if req.path.endswith("/") else req.path
        if req.local is None and route in proxy._routes:
            req.route = route  # decision and name only: the target goes upstream as sent
            if req.method == b"POST":
                req.raw = proxy._decide_capture(req)
        self._arm("body", proxy._body_timeout_s)

    def on_body(self, body: bytes) -> None:
        req = self.reading
        if req is not None:
            req.body_bytes += len(body)
            if req.body_bytes > self.proxy._max_body_bytes:
                self.proxy._reject_metric("body_too_large")
                limit = self.proxy._max_body_bytes
                raise _RefusedError(413, "body_too_large", _body_limit_message(limit), _BODY_PARAM)
            req.body.append(body)

    def on_message_complete(self) -> None:
        req, self.reading = self.reading, None
        if req is None:
            return
        self._disarm()
        self.queue.append(req)
        if self.active is None:
            self._next()
        elif len(self.queue) > 16 and self.transport is not None and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()  # a client pipelining far ahead waits

    # -- exchanges ------------------------------------------------------------------------

    def _next(self) -> None:
        """Start the next queued request, or wait for one (keep-alive) or close."""
        while self.queue and not self.closed:
            req = self.queue.popleft()
            if req.local is not None:
                status, body, reason = req.local
                close = bool(reason) or not req.keep_alive or self.proxy._draining
                self._write_local(status, body, close=close)
                if close:
                    self._close()
                    return
                continue
            self.active = req
            self.proxy._start_exchange(self, req)
            return
        if self.closed:
            return
        if self.peer_eof or self.proxy._draining:
            self._close()
            return
        if self.paused_reading and self.transport is not None and not self.stop_reading:
            self.paused_reading = False
            self.transport.resume_reading()
        self._arm("idle", self.proxy._keepalive_timeout_s)

    def _finished(self, req: _Request) -> None:
        """The exchange of ``req`` ended (completely, or with its client response closed)."""
        if req.done:
            return
        req.done = True
        proxy = self.proxy
        raw = req.raw
        if raw is not None:
            raw.end_ns = _perf_ns()
            proxy._emit(raw)
        proxy._count_proxied(req.route, req.status_class)
        proxy._in_flight -= 1
        if proxy._in_flight == 0 and proxy._idle_event is not None:
            proxy._idle_event.set()
        if self.active is req:
            self.active = None
        if self.closed:
            return
        if req.close_after or not req.keep_alive:
            self._close()
        else:
            self._next()

    def _cut(self, req: _Request) -> None:
        """End ``req`` now: close its upstream connection (the model server sees it)."""
        task = req.connect_task
        if task is not None and not task.done():
            task.cancel()
        conn, req.upstream = req.upstream, None
        if conn is not None:
            conn.owner = None
            conn.abort()
        req.close_after = True
        self._finished(req)

    def _emit_unforwarded(self, req: _Request, reason: str) -> None:
        raw = req.raw
        if raw is None:
            return
        raw.outcome = ExchangeOutcome.CANCELLED
        raw.error = reason
        raw.end_ns = _perf_ns()
        self.proxy._emit(raw)

    # -- upstream response (ResponseHandler) ------------------------------------------

    def on_response_head(self, conn: UpstreamConnection) -> None:
        """Write the response's status line and headers to the client."""
        req = self.active
        if req is None or req.upstream is not conn or self.transport is None:
            return
        status = conn.parser.get_status_code()
        out = response_headers_for_client(conn.headers)
        has_length = False
        chunked = False
        for name, value in conn.headers:
            lname = name.lower()
            if lname == b"content-length":
                has_length = True
            elif lname == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        no_body = req.method == b"HEAD" or status in (204, 304)
        head_out = out
        if not no_body and (chunked or not has_length):
            req.eof_body = not chunked
            if req.http_10:
                req.close_after = True  # close-delimited, as HTTP/1.0 frames it
            else:
                req.chunked_out = True
                head_out = [*out, (b"transfer-encoding", b"chunked")]
                if has_length:  # both: Transfer-Encoding wins (RFC 9112 §6.3)
                    head_out = [h for h in head_out if h[0] != b"content-length"]
        if not req.keep_alive or self.proxy._draining or self.peer_eof:
            req.close_after = True
        if req.close_after:
            head_out = [*head_out, (b"connection", b"close")]
        raw = req.raw
        if raw is not None:
            raw.response_start_ns = _perf_ns()
            raw.status_code = status
            raw.response_headers = out
        req.status_class = _STATUS_CLASSES[status // 100] if 100 <= status < 600 else "other"
        reason = conn.reason or _REASONS.get(status, b"")
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        lines.extend(b"%s: %s\r\n" % (k, v) for k, v in head_out)
        lines.append(b"\r\n")
        self.transport.write(b"".join(lines))
        if req.method == b"HEAD":  # the parser would wait for a body: end here
            req.upstream = None
            self.proxy._pool.discard(conn)
            self._finished(req)

    def on_response_body(self, piece: bytes) -> None:
        """Write one body piece to the client and copy it to the capture (one reference)."""
        req = self.active
        transport = self.transport
        if req is None or transport is None:
            return
        raw = req.raw
        if raw is not None and not raw.truncated:
            size = raw.captured_bytes + len(piece)
            if size > self.proxy._max_capture:
                raw.truncated = True
                raw.outcome = ExchangeOutcome.TRUNCATED
            else:
                raw.chunks.append((_perf_ns(), piece))
                raw.captured_bytes = size
        if req.chunked_out:
            n = len(piece)
            if n < 65536:
                transport.write(b"%x\r\n%b\r\n" % (n, piece))
            else:
                transport.writelines((b"%x\r\n" % n, piece, b"\r\n"))
        else:
            transport.write(piece)

    def on_response_complete(self, conn: UpstreamConnection) -> None:
        """The upstream's response is complete: end the client's, pool the connection."""
        req = self.active
        if req is None or req.upstream is not conn:
            return
        req.upstream = None
        if req.chunked_out and self.transport is not None:
            self.transport.write(b"0\r\n\r\n")
        self.proxy._upstream_outcome(True, "responded")
        if conn.parser.should_keep_alive() and not conn.eof:
            self.proxy._pool.release(conn)
        else:
            self.proxy._pool.discard(conn)
        self._finished(req)

    def on_upstream_lost(self, conn: UpstreamConnection, exc: BaseException | None) -> None:
        """The upstream connection closed or broke while carrying ``self.active``."""
        req = self.active
        if req is None or req.upstream is not conn or req.done:
            return
        req.upstream = None
        proxy = self.proxy
        if conn.head_seen:
            if exc is None and req.eof_body:  # a close-delimited body ends with the connection
                if req.chunked_out and self.transport is not None:
                    self.transport.write(b"0\r\n\r\n")
                proxy._upstream_outcome(True, "responded")
                self._finished(req)
                return
            proxy._metrics.upstream_errors.labels(kind="mid_stream").inc()
            if req.raw is not None:
                req.raw.outcome = ExchangeOutcome.ERROR
                what = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
                req.raw.error = f"upstream failed mid-response: {what}"
            req.close_after = True  # the client sees the same incomplete response
            self._finished(req)
            return
        kind = "network" if isinstance(exc, OSError) else "protocol"
        what = f"{type(exc).__name__}: {exc}" if exc is not None else "closed before a response"
        self.upstream_failed(req, kind, what)

    def upstream_failed(self, req: _Request, kind: str, detail: str) -> None:
        """No response came: answer the client 502/504 (OpenAI-style) and end ``req``."""
        proxy = self.proxy
        proxy._metrics.upstream_errors.labels(kind=kind).inc()
        proxy._upstream_outcome(False, f"upstream {kind}: {detail}")
        status, code = _UPSTREAM_CODES.get(kind, _UPSTREAM_CODES["internal"])
        if req.raw is not None:
            req.raw.outcome = ExchangeOutcome.ERROR
            req.raw.error = f"upstream {kind}: {detail}"
        req.status_class = "5xx"
        if not self.closed:
            close = not req.keep_alive or proxy._draining
            self._write_local(status, upstream_error_body(kind, code), close=close)
        self._finished(req)

    # -- local answers ------------------------------------------------------------------

    def _write_local(self, status: int, body: bytes, *, close: bool) -> None:
        if self.transport is None or self.closed:
            return
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
        if body:
            head.append(b"content-type: application/json\r\n")
        head.append(b"content-length: %d\r\n" % len(body))
        if close:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.transport.write(b"".join(head) + body)

    def _write_local_and_close(self, status: int, body: bytes) -> None:
        self._write_local(status, body, close=True)
        self._close()

    def _refuse(self, status: int, code: str, message: str, param: str | None) -> None:
        """Refuse the request being read: answered in order after any in-flight ones, then
        the connection closes."""
        self.stop_reading = True
        req, self.reading = self.reading, None
        if req is not None and req.raw is not None:
            self._emit_unforwarded(req, f"request refused: {message}")
        refused = _Request()
        refused.local = (status, request_error_body(message, code, param), code)
        self.queue.append(refused)
        self._disarm()
        if self.active is None:
            self._next()

    def _close(self) -> None:
        self._disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # after the buffered bytes are written


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


def _refusing(method: Callable[..., None]) -> Callable[..., None]:
    """Wrap a client parser callback so :class:`_RefusedError` becomes a refusal."""

    def wrapper(self: _ClientConnection, *args: Any) -> None:
        try:
            method(self, *args)
        except _RefusedError as refused:
            self._refuse(refused.status, refused.code, refused.message, refused.param)
            raise

    wrapper.__doc__ = method.__doc__
    wrapper.__name__ = method.__name__
    return wrapper


# Refusals raise out of the callback so llhttp stops parsing; data_received then sees an
# HttpParserCallbackError after the refusal was queued and ignores it.
for _name in ("on_url", "on_header", "on_headers_complete", "on_body"):
    setattr(_ClientConnection, _name, _refusing(getattr(_ClientConnection, _name)))


class CaptureProxy(AsyncLifecycle):
    """The live-path proxy (an asyncio HTTP/1.1 relay); see the module docstring.

    Args:
        settings: ``upstream_url`` (``http(s)://host[:port][/base-path]``; a base path is
            prepended to every forwarded path), ``routes``, ``max_capture_bytes``,
            ``upstream_connect_timeout_s``, ``upstream_max_connections``,
            ``upstream_keepalive_expiry_s`` and the limits (module docstring).
        sampler: decides which requests on captured routes are copied.
        on_capture: the tee, called once per captured request when it ends; its return value
            (``False`` = dropped) and exceptions are ignored. Called on the event loop: it
            must not block.
        metrics: the sidecar's metrics.
        max_client_connections: this process's share of ``settings.max_client_connections``
            (default: all of it).

    Started once (:mod:`shadoweval.lifecycle`): by ``async with`` or :meth:`start` (creates
    the upstream pool, opens no connection), then :meth:`listen`; not restartable.

    Raises:
        ConfigError: ``upstream_url`` is not an absolute http(s) URL.
    """

    def __init__(
        self,
        settings: CaptureSettings,
        sampler: StickySampler,
        on_capture: Callable[[RawCapture], bool],
        metrics: CaptureMetrics,
        *,
        max_client_connections: int | None = None,
    ) -> None:
        base = urlsplit(settings.upstream_url)
        if base.scheme not in ("http", "https") or not base.hostname:
            raise ConfigError(
                "capture.upstream_url must be an absolute http(s) URL",
                field="capture.upstream_url",
                value=settings.upstream_url,
            )
        self.settings = settings
        self._sampler = sampler
        self._on_capture = on_capture
        self._metrics = metrics
        self._routes = frozenset(normalize_route(route) for route in settings.routes)
        self._max_capture = settings.max_capture_bytes
        self._tls = base.scheme == "https"
        self._host = base.hostname
        self._port = base.port or (443 if self._tls else 80)
        host = f"[{base.hostname}]" if ":" in base.hostname else base.hostname
        self._host_header = (host + (f":{base.port}" if base.port else "")).encode("idna")
        self._base_path = base.path.rstrip("/").encode("latin-1")
        self._header_timeout_s = settings.header_read_timeout_s
        self._body_timeout_s = settings.body_read_timeout_s
        self._keepalive_timeout_s = settings.client_keepalive_timeout_s
        self._max_header_bytes = settings.max_request_header_bytes
        self._max_body_bytes = settings.max_request_body_bytes
        self._max_clients = max_client_connections or settings.max_client_connections
        self._pool: UpstreamPool = None  # type: ignore[assignment]  # set by start()
        self._loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._servers: list[asyncio.Server] = []
        self._clients: set[_ClientConnection] = set()
        self._in_flight = 0
        self._idle_event: asyncio.Event | None = None
        self._draining = False
        self._running = False
        self._proxied: dict[tuple[str, str], Any] = {}
        self.last_upstream_outcome: tuple[bool, str, float] | None = None
        """``(ok, detail, monotonic time)`` of the latest relayed request's upstream outcome."""

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the proxy forwards requests (between :meth:`start` and :meth:`stop`)."""
        return self._running

    @property
    def in_flight(self) -> int:
        """Exchanges being forwarded now."""
        return self._in_flight

    async def start(self) -> None:
        """Create the upstream connection pool. Opens no connection yet.

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            s = self.settings
            self._loop = asyncio.get_running_loop()
            self._pool = UpstreamPool(
                self._host,
                self._port,
                tls=ssl.create_default_context(cafile=s.upstream_ca_file) if self._tls else None,
                server_hostname=self._host,
                max_connections=s.upstream_max_connections,
                connect_timeout_s=s.upstream_connect_timeout_s,
                keepalive_expiry_s=s.upstream_keepalive_expiry_s,
                on_stale=self._metrics.upstream_stale.inc,
            )
            self._pool.start()
            self._running = True

    async def listen(
        self, host: str, port: int, *, reuse_port: bool = False, backlog: int = 2048
    ) -> int:
        """Accept client connections on ``host:port`` (``0``: any free port).

        Args:
            reuse_port: set ``SO_REUSEPORT`` so several worker processes share the port
                (the kernel spreads connections over them).

        Returns:
            The bound port.
        """
        server = await self._loop.create_server(
            lambda: _ClientConnection(self),
            host,
            port,
            reuse_port=reuse_port or None,
            backlog=backlog,
        )
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    @property
    def bound_port(self) -> int | None:
        """The first listening port, once :meth:`listen` has run."""
        if not self._servers or not self._servers[0].sockets:
            return None
        return int(self._servers[0].sockets[0].getsockname()[1])

    def close_listeners(self) -> None:
        """Stop accepting connections and keep-alive: idle client connections close now,
        busy ones after their current response (``Connection: close``)."""
        self._draining = True
        for server in self._servers:
            server.close()
        for client in list(self._clients):
            if client.active is None and not client.queue:
                client._close()

    async def drain(self, grace_s: float | None) -> int:
        """Wait up to ``grace_s`` seconds (``None``: no limit; ``0``: none) for in-flight
        exchanges, then cut the rest (captured ``cancelled``, error ``cancelled (server
        shutdown)``; the clients' connections are closed).

        Returns:
            The number of exchanges cut.
        """
        self.close_listeners()
        if self._in_flight and (grace_s is None or grace_s > 0):
            self._idle_event = asyncio.Event()
            try:
                async with asyncio.timeout(grace_s):
                    await self._idle_event.wait()
            except TimeoutError:
                pass
            finally:
                self._idle_event = None
        return self.cut_all()

    def cut_all(self) -> int:
        """Cut every in-flight exchange now (see :meth:`drain`); returns how many."""
        cut = 0
        for client in list(self._clients):
            req = client.active
            if req is not None and not req.done:
                if req.raw is not None:
                    req.raw.outcome = ExchangeOutcome.CANCELLED
                    req.raw.error = "cancelled (server shutdown)"
                client._cut(req)
                cut += 1
            if client.transport is not None:
                client.transport.abort()
        return cut

    async def stop(self) -> None:
        """Stop listening, cut what is still in flight, close the upstream pool
        (idempotent); call :meth:`drain` first for a graceful stop."""
        if not self._stopping():
            return
        self._running = False
        self.close_listeners()
        self.cut_all()
        for server in self._servers:
            server.close()
            try:
                async with asyncio.timeout(5):
                    await server.wait_closed()
            except TimeoutError:
                logger.debug("listener did not close in 5 s")
        if self._pool is not None:
            await self._pool.aclose()

    # -- exchanges ------------------------------------------------------------------------

    def _start_exchange(self, client: _ClientConnection, req: _Request) -> None:
        self._in_flight += 1
        if not self._running:
            req.status_class = "5xx"
            client._write_local(
                503,
                request_error_body("the sidecar is stopping", "proxy_not_started", None),
                close=True,
            )
            req.close_after = True
            client._finished(req)
            return
        conn = self._pool.take_idle()
        if conn is not None:
            self._send(client, req, conn)
        else:
            req.connect_task = self._loop.create_task(self._connect_and_send(client, req))

    async def _connect_and_send(self, client: _ClientConnection, req: _Request) -> None:
        try:
            conn = await self._pool.acquire()
        except UpstreamError as exc:
            if not req.done:
                client.upstream_failed(req, exc.kind, str(exc))
            return
        except asyncio.CancelledError:
            return
        except Exception as exc:  # never let a bug leave the client hanging
            logger.warning("could not forward a request upstream", exc_info=exc)
            if not req.done:
                client.upstream_failed(req, "internal", f"{type(exc).__name__}: {exc}")
            return
        if req.done or client.closed:
            self._pool.release(conn)
            return
        self._send(client, req, conn)

    def _send(self, client: _ClientConnection, req: _Request, conn: UpstreamConnection) -> None:
        """Write the request on ``conn`` (one buffer: head + body)."""
        out = request_headers_for_upstream(req.headers, client.peer, "http")
        body = req.body[0] if len(req.body) == 1 else b"".join(req.body)
        parts = [
            b"%s %s%s HTTP/1.1\r\nhost: %s\r\n"
            % (req.method, self._base_path, req.target, self._host_header)
        ]
        parts.extend(b"%s: %s\r\n" % (k, v) for k, v in out if k not in _DROP_UPSTREAM)
        if body or req.method in _BODY_METHODS:
            parts.append(b"content-length: %d\r\n" % len(body))
        parts.append(b"\r\n")
        head = b"".join(parts)
        conn.owner = client
        req.upstream = conn
        raw = req.raw
        if raw is not None:
            raw.request_body = body
            raw.start_ns = _perf_ns()
        if len(body) < 65536:
            conn.write(head + body)
        else:
            conn.write([head, body])

    # -- capture, metrics ------------------------------------------------------------------

    def _decide_capture(self, req: _Request) -> RawCapture | None:
        """A fresh RawCapture when this request is to be captured, else ``None``."""
        try:
            headers = req.headers
            if has_header(headers, SHADOW_MARKER):
                return None
            key_hash = self._sampler.session_key_hash(headers)
            exchange_id = new_exchange_id()
            if not self._sampler.sampled(key_hash, exchange_id):
                self._metrics.unsampled.inc()
                return None
            target = req.target
            query = target.split(b"?", 1)[1] if b"?" in target else b""
            return RawCapture(
                exchange_id=exchange_id,
                captured_at=utc_now(),
                start_ns=_perf_ns(),
                method="POST",
                path=req.path,
                matched_route=req.route,
                query=query.decode("latin-1"),
                request_headers=list(headers),
                session_key_hash=key_hash,
            )
        except Exception:  # capture must never break the live path
            logger.debug("capture decision failed; request not captured", exc_info=True)
            return None

    def _emit(self, raw: RawCapture) -> None:
        try:
            self._on_capture(raw)
        except Exception:
            logger.debug("on_capture raised; capture %s ignored", raw.exchange_id, exc_info=True)

    def _count_proxied(self, route: str, status_class: str) -> None:
        key = (route, status_class)
        child = self._proxied.get(key)
        if child is None:
            child = self._metrics.proxied.labels(route=route, status_class=status_class)
            self._proxied[key] = child
        child.inc()

    def _reject_metric(self, reason: str) -> None:
        self._metrics.rejected.labels(reason=reason).inc()

    def _upstream_outcome(self, ok: bool, detail: str) -> None:
        self.last_upstream_outcome = (ok, detail, _monotonic())


def reuse_port_supported() -> bool:
    """Whether this platform has ``SO_REUSEPORT`` (several workers on one port)."""
    return hasattr(socket, "SO_REUSEPORT")
