"""One client connection of the live-path proxy: :class:`_ClientConnection`.

Part of :mod:`shadoweval.capture.proxy` (moved here unchanged to keep the modules short; the
module docstring there describes the relay, its limits and its failure handling). The
per-chunk path (:meth:`_ClientConnection.on_response_body`) reads the same module globals as
before: the names imported below are bound in this module's namespace.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools

from shadoweval.capture.headers import response_headers_for_client
from shadoweval.capture.proxy.answers import (
    _BODY_PARAM,
    _REASONS,
    _STATUS_CLASSES,
    _UPSTREAM_CODES,
    _body_limit_message,
    _perf_ns,
    _RefusedError,
    _Request,
    has_dot_segment,
    request_error_body,
    upstream_error_body,
)
from shadoweval.capture.upstream_pool import UpstreamConnection
from shadoweval.records import ExchangeOutcome
from shadoweval.routes import normalize_route

if TYPE_CHECKING:
    from shadoweval.capture.proxy import CaptureProxy

# The package's logger: records keep the name they had before the split.
logger = logging.getLogger("shadoweval.capture.proxy")


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
        self.cancel_active("client disconnected")
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
        if sum(name == b"host" for name, _ in req.headers) > 1:
            # RFC 9112 §3.2: a server MUST answer 400 to more than one Host field (which
            # one names the target is ambiguous: request smuggling, cache poisoning)
            proxy._reject_metric("duplicate_host")
            req.local = (
                400,
                request_error_body(
                    "the request has more than one Host header field (RFC 9112 §3.2)",
                    "duplicate_host",
                    "Host",
                ),
                "duplicate_host",
            )
        elif not target.startswith(b"/"):
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

    def cancel_active(self, error: str) -> bool:
        """Cut the exchange in flight, if any (:meth:`_cut`), recorded as cancelled with
        ``error``; returns whether there was one."""
        active = self.active
        if active is None or active.done:
            return False
        if active.raw is not None:
            active.raw.outcome = ExchangeOutcome.CANCELLED
            active.raw.error = error
        self._cut(active)
        return True

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
