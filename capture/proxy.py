"""The live-path proxy of the capture sidecar: :class:`CaptureProxy`, a raw ASGI app.

Every request, on any path and method, is forwarded to the upstream (the live model server)
and its response is passed back **as received**: status, headers (minus hop-by-hop ones,
see :mod:`capture.headers`) and the body bytes piece by piece, still content-encoded
(gzip/br pass through byte-identical), each piece sent to the client as soon as it is read
(``more_body=True``, no buffering, no re-chunking), so SSE events reach the client when
they arrive. The rule above all: the sidecar never fails, slows or alters a client's
request or response. Capture is a side copy that cannot break the live path.

Capture (DESIGN §2): only ``POST`` to a path in ``settings.routes`` (exact match), never a
request carrying ``x-shadow-eval`` (shadow-eval's own replay traffic), and only when the
sticky sampler says so (decided at request start; unsampled requests count
``shadoweval_capture_unsampled_total``). For a captured request the proxy appends
``(time.perf_counter_ns(), piece)`` per piece to a :class:`~capture.raw.RawCapture` — the
only per-piece work — up to ``settings.max_capture_bytes`` (beyond it the copy stops,
``truncated`` is set and the outcome is ``truncated``; the client still gets every byte).
When the exchange ends — normally, with an upstream error, or cancelled — ``on_capture``
is called exactly once with the RawCapture, synchronously, guarded (an exception is logged
at debug and ignored; its return value is ignored).

Failure handling:

* **Client disconnect** (``http.disconnect`` from ``receive``, watched by a small task for
  the whole exchange, or ``send`` raising): the upstream request is cancelled at once — its
  connection is closed, so the model server sees the disconnect and stops generating — and
  the capture's outcome is ``cancelled``.
* **Upstream unreachable before a response**: the client gets an OpenAI-style error
  ``{"error": {"message", "type": "upstream_error", "code"}}`` — 504 for a timeout (connect,
  or waiting for a pooled connection), 502 otherwise; ``upstream_errors{kind}`` counts it and
  the capture has outcome ``error``, ``error`` text and ``status_code=None``.
* **Upstream breaks mid-body** (connection reset, incomplete chunked body): the client's
  response is left incomplete and the server closes the client's connection — what a direct
  connection would have shown the client; ``upstream_errors{kind="mid_stream"}`` and
  outcome ``error``. (uvicorn logs "ASGI callable returned without completing response"
  for it.)

Upstream HTTP: one pooled :class:`httpx.AsyncHTTPTransport` (``upstream_max_connections``
connections, HTTP/1.1, no retries, connect timeout ``upstream_connect_timeout_s``, the same
limit on waiting for a free pooled connection, **no read or write timeout**: LLM streams are
long). Requests go straight to the transport, not through an ``httpx.AsyncClient``: the
client layer would add default headers (``User-Agent``, ``Accept-Encoding``...), keep a
process-wide cookie jar filled from users' ``Set-Cookie`` responses, add basic auth and
inspect redirects (raising on an invalid ``Location``), and log every request at INFO —
none of which belongs on a transparent live path. ``Host`` and ``Content-Length`` are the
only headers httpx sets.

Metrics: ``proxied{route, status_class}`` once per forwarded request (``route`` is the
captured route's path or ``other``; ``status_class`` is what the client got: ``2xx`` …
``5xx``, or ``none`` when the client left before a response started);
``upstream_errors{kind}`` (``connect``, ``connect_timeout``, ``pool_timeout``, ``timeout``,
``protocol``, ``network``, ``internal``, ``mid_stream``); ``unsampled``. ``captured`` is
counted by the tee (:meth:`capture.pipeline.CapturePipeline.offer`), not here.

Serving: run it under uvicorn with :data:`UVICORN_OPTIONS` — ``server_header=False,
date_header=False`` (otherwise uvicorn adds its own ``Server``/``Date`` headers beside the
upstream's) and ``proxy_headers=False`` (otherwise uvicorn replaces the peer address with
the request's ``X-Forwarded-For`` when the peer is trusted, and the client would appear twice
in the forwarded list). ``lifespan`` may be on (startup calls :meth:`CaptureProxy.start`,
shutdown :meth:`CaptureProxy.stop`) or off (the owner calls them).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast
from urllib.parse import quote

import httpx
from starlette.types import Message, Receive, Scope, Send

from capture.headers import (
    SHADOW_MARKER,
    has_header,
    request_headers_for_upstream,
    response_headers_for_client,
)
from capture.metrics import CaptureMetrics
from capture.raw import RawCapture
from capture.sampling import StickySampler
from capture.upstream_pool import ShardedTransport
from shadoweval.config import CaptureSettings
from shadoweval.errors import ConfigError
from shadoweval.lifecycle import AsyncLifecycle
from shadoweval.records import ExchangeOutcome, new_exchange_id, utc_now

logger = logging.getLogger(__name__)

UVICORN_OPTIONS: dict[str, Any] = {
    "server_header": False,
    "date_header": False,
    "proxy_headers": False,
}
"""``uvicorn.Config`` options the proxy needs to stay transparent (see the module docstring)."""

OTHER_ROUTE = "other"
"""``route`` label of a request whose path is not a captured route."""

_perf_ns = time.perf_counter_ns
_STATUS_CLASSES = ("1xx", "1xx", "2xx", "3xx", "4xx", "5xx")
_JSON_HEADERS = [(b"content-type", b"application/json")]


class _ClientGoneError(Exception):
    """``send`` failed: the client's connection is gone (ASGI spec 2.4: an ``OSError``)."""


class _Flow:
    """Per-exchange flags shared by the forwarding task and its disconnect watcher."""

    __slots__ = ("client_gone", "finished")

    def __init__(self) -> None:
        self.finished = False  # past the point where a disconnect should cancel the task
        self.client_gone = False  # the watcher saw http.disconnect and cancelled the task


def classify_upstream_error(exc: BaseException) -> tuple[str, int, str]:
    """Map an error raised before the upstream's response headers to what the client gets.

    Returns:
        ``(kind, status, code)``: ``kind`` is the ``upstream_errors`` label, ``status``
        the HTTP status for the client (504 for timeouts, 502 otherwise), ``code`` the
        OpenAI-style error code.
    """
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect_timeout", 504, "upstream_connect_timeout"
    if isinstance(exc, httpx.PoolTimeout):
        return "pool_timeout", 504, "upstream_pool_timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", 504, "upstream_timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect", 502, "upstream_connect_error"
    if isinstance(exc, httpx.ProtocolError):
        return "protocol", 502, "upstream_protocol_error"
    if isinstance(exc, httpx.NetworkError):
        return "network", 502, "upstream_network_error"
    return "internal", 502, "upstream_error"


_CLIENT_MESSAGES = {
    "connect": "the upstream model server refused or failed the connection",
    "connect_timeout": "the upstream model server did not accept a connection in time",
    "pool_timeout": "no upstream connection became free in time",
    "timeout": "the upstream model server did not answer in time",
    "protocol": "the upstream model server closed the connection or answered malformed HTTP",
    "network": "the connection to the upstream model server failed",
    "internal": "the request could not be forwarded to the upstream model server",
}


def upstream_error_body(kind: str, code: str) -> bytes:
    """The OpenAI-style JSON error body sent for an upstream failure of ``kind``."""
    message = f"shadow-eval sidecar: {_CLIENT_MESSAGES.get(kind, _CLIENT_MESSAGES['internal'])}"
    payload = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return json.dumps(payload).encode()


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or ``None`` when the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any], flow: _Flow) -> None:
    """Wait for ``http.disconnect``; cancel ``task`` if the exchange is still running."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:  # a server whose receive fails: nothing to watch
        logger.debug("receive failed while watching for a disconnect", exc_info=True)
        return
    if not flow.finished:
        flow.client_gone = True
        task.cancel()


class CaptureProxy(AsyncLifecycle):
    """The live-path proxy (raw ASGI 3 application); see the module docstring.

    Args:
        settings: ``upstream_url`` (``http(s)://host[:port][/base-path]``; a base path is
            prepended to every forwarded path), ``routes``, ``max_capture_bytes``,
            ``upstream_connect_timeout_s``, ``upstream_max_connections``.
        sampler: decides which requests on captured routes are copied.
        on_capture: the tee, called once per captured request when it ends; its return value
            (``False`` = dropped) and exceptions are ignored. Called on the event loop: it
            must not block.
        metrics: the sidecar's metrics.
        transport: the upstream transport (a seam for tests). Default: a pooled
            :class:`httpx.AsyncHTTPTransport` created by :meth:`start` and closed by
            :meth:`stop`; a transport passed in is never closed here.

    Started once (:mod:`shadoweval.lifecycle`): by ``async with``, :meth:`start`, or the
    ASGI lifespan when the proxy is not started yet; not restartable.

    Raises:
        ConfigError: ``upstream_url`` is not an absolute http(s) URL.
    """

    def __init__(
        self,
        settings: CaptureSettings,
        sampler: StickySampler,
        on_capture: Callable[[RawCapture], bool],
        metrics: CaptureMetrics,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base = httpx.URL(settings.upstream_url)
        if base.scheme not in ("http", "https") or not base.host:
            raise ConfigError(
                "capture.upstream_url must be an absolute http(s) URL",
                field="capture.upstream_url",
                value=settings.upstream_url,
            )
        self.settings = settings
        self._sampler = sampler
        self._on_capture = on_capture
        self._metrics = metrics
        self._given_transport = transport
        self._transport: httpx.AsyncBaseTransport | None = None
        self._lifespan_started = False
        self._routes = frozenset(settings.routes)
        self._max_capture = settings.max_capture_bytes
        origin = f"{base.scheme}://{base.netloc.decode('ascii')}"
        self._base = origin + base.path.rstrip("/")
        wait_s = settings.upstream_connect_timeout_s
        self._timeout = httpx.Timeout(connect=wait_s, read=None, write=None, pool=wait_s).as_dict()
        self._proxied: dict[tuple[str, str], Any] = {}

    # -- lifecycle ---------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether the proxy forwards requests (between :meth:`start` and :meth:`stop`)."""
        return self._transport is not None

    async def start(self) -> None:
        """Create the upstream connection pool. Opens no connection yet.

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            if self._given_transport is not None:
                self._transport = self._given_transport
            else:
                self._transport = ShardedTransport(self.settings.upstream_max_connections)

    async def stop(self) -> None:
        """Close the upstream pool (idempotent); requests after this get 503."""
        if not self._stopping():
            return
        transport, self._transport = self._transport, None
        if transport is not None and transport is not self._given_transport:
            await transport.aclose()

    # -- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI 3 entry point: ``http`` is proxied, ``lifespan`` starts/stops the pool."""
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":  # not proxied: refuse the handshake (403)
            await send({"type": "websocket.close", "code": 1008})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    if not self.started:
                        await self.start()
                        self._lifespan_started = True
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._lifespan_started:
                    await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        transport = self._transport
        if transport is None:
            await self._send_error(send, 503, "internal", "proxy_not_started")
            return
        path: str = scope["path"]
        route = path if path in self._routes else OTHER_ROUTE
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        method: str = scope["method"]
        raw: RawCapture | None = None
        if route is not OTHER_ROUTE and method == "POST":
            raw = self._decide_capture(headers, method, path, scope)
        body = await _read_body(receive)
        if body is None:  # the client left before its request was complete: not forwarded
            if raw is not None:
                raw.outcome = ExchangeOutcome.CANCELLED
                raw.error = "client disconnected before the request body was complete"
                raw.end_ns = _perf_ns()
                self._emit(raw)
            return
        raw_path: bytes = scope.get("raw_path") or quote(path).encode("ascii")
        query: bytes = scope.get("query_string", b"")
        target = raw_path.decode("latin-1")
        if query:
            target = f"{target}?{query.decode('latin-1')}"
        out_headers = request_headers_for_upstream(
            headers, scope.get("client"), scope.get("scheme", "http")
        )
        if raw is not None:
            raw.request_body = body
        await self._forward(
            transport, method, self._base + target, out_headers, body, raw, route, receive, send
        )

    def _decide_capture(
        self, headers: list[tuple[bytes, bytes]], method: str, path: str, scope: Scope
    ) -> RawCapture | None:
        """A fresh RawCapture when this request is to be captured, else ``None``."""
        try:
            if has_header(headers, SHADOW_MARKER):
                return None
            key_hash = self._sampler.session_key_hash(headers)
            exchange_id = new_exchange_id()
            if not self._sampler.sampled(key_hash, exchange_id):
                self._metrics.unsampled.inc()
                return None
            query: bytes = scope.get("query_string", b"")
            return RawCapture(
                exchange_id=exchange_id,
                captured_at=utc_now(),
                start_ns=_perf_ns(),
                method=method,
                path=path,
                query=query.decode("latin-1"),
                request_headers=list(headers),
                session_key_hash=key_hash,
            )
        except Exception:  # capture must never break the live path
            logger.debug("capture decision failed; request not captured", exc_info=True)
            return None

    async def _forward(
        self,
        transport: httpx.AsyncBaseTransport,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        raw: RawCapture | None,
        route: str,
        receive: Receive,
        send: Send,
    ) -> None:
        """Send the request upstream and stream the response back (see module docstring)."""
        task = asyncio.current_task()
        flow = _Flow()
        watcher = (
            asyncio.get_running_loop().create_task(_watch_disconnect(receive, task, flow))
            if task is not None
            else None
        )
        response: httpx.Response | None = None
        status_class = "none"
        try:
            try:
                request = httpx.Request(
                    method,
                    url,
                    headers=headers,
                    content=body,
                    extensions={"timeout": self._timeout},
                )
                if raw is not None:
                    raw.start_ns = _perf_ns()
                response = await transport.handle_async_request(request)
                if not isinstance(response.stream, httpx.AsyncByteStream):
                    raise TypeError("the upstream transport returned a synchronous stream")
            except Exception as exc:
                flow.finished = True
                status_class = "5xx"
                await self._upstream_failed(exc, raw, send)
                return
            response.request = request
            status = response.status_code
            status_class = _STATUS_CLASSES[status // 100] if 100 <= status < 600 else "other"
            out = response_headers_for_client(response.headers.raw)
            if raw is not None:
                raw.response_start_ns = _perf_ns()
                raw.status_code = status
                raw.response_headers = out
            await self._relay(response, raw, send, {"status": status, "headers": out}, flow)
        except _ClientGoneError:
            if raw is not None:
                raw.outcome = ExchangeOutcome.CANCELLED
                raw.error = "client disconnected (send failed)"
        except asyncio.CancelledError:
            if raw is not None:
                raw.outcome = ExchangeOutcome.CANCELLED
            if not flow.client_gone or task is None or task.uncancel() > 0:
                if raw is not None:
                    raw.error = "cancelled (server shutdown)"
                raise  # cancelled from outside (server shutdown): let it propagate
            if raw is not None:
                raw.error = "client disconnected"
        finally:
            flow.finished = True
            if watcher is not None:
                watcher.cancel()
            if raw is not None:
                raw.end_ns = _perf_ns()
                self._emit(raw)
            self._count_proxied(route, status_class)
            if response is not None:
                try:
                    await response.aclose()  # a partly read response: closes the connection
                except Exception:
                    logger.debug("closing the upstream response failed", exc_info=True)

    async def _relay(
        self,
        response: httpx.Response,
        raw: RawCapture | None,
        send: Send,
        start: Message,
        flow: _Flow,
    ) -> None:
        """Send the response start, every body piece as read, and the end of the body.

        Raises:
            _ClientGoneError: ``send`` failed (the client's connection is gone).
        """
        stream = cast(httpx.AsyncByteStream, response.stream)  # checked by _forward
        start["type"] = "http.response.start"
        try:
            await send(start)
        except Exception as exc:
            raise _ClientGoneError from exc
        # The raw pieces, as Response.aiter_raw() yields them, minus its re-chunking layer
        # and its consumed-state check (a transport seam may return a pre-read response).
        pieces = stream.__aiter__()
        try:
            await self._pump(pieces, raw, send)
        except _ClientGoneError:
            raise
        except Exception as exc:  # the upstream broke mid-body: leave the client's response
            # incomplete, so the server closes the client's connection like a direct one
            flow.finished = True
            self._metrics.upstream_errors.labels(kind="mid_stream").inc()
            if raw is not None:
                raw.outcome = ExchangeOutcome.ERROR
                raw.error = f"upstream failed mid-response: {type(exc).__name__}: {exc}"
            return
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:
                    logger.debug("closing the upstream body iterator failed", exc_info=True)
        flow.finished = True
        try:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception as exc:
            raise _ClientGoneError from exc

    async def _pump(self, pieces: AsyncIterator[bytes], raw: RawCapture | None, send: Send) -> None:
        """Send each upstream piece as it arrives; copy it aside first when capturing.

        The only per-piece capture work: one ``perf_counter_ns()`` and one list append, until
        ``max_capture_bytes`` would be exceeded (then ``truncated``; no copy after that).
        Upstream errors propagate; a failing ``send`` raises :class:`_ClientGoneError`.
        """
        if raw is not None:
            limit = self._max_capture
            chunks = raw.chunks
            async for piece in pieces:
                size = raw.captured_bytes + len(piece)
                if size > limit:
                    raw.truncated = True
                    raw.outcome = ExchangeOutcome.TRUNCATED
                else:
                    chunks.append((_perf_ns(), piece))
                    raw.captured_bytes = size
                try:
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                except Exception as exc:
                    raise _ClientGoneError from exc
                if raw.truncated:
                    break
        async for piece in pieces:
            try:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            except Exception as exc:
                raise _ClientGoneError from exc

    # -- error answers, capture hand-off, metrics ----------------------------------------

    async def _upstream_failed(self, exc: Exception, raw: RawCapture | None, send: Send) -> None:
        kind, status, code = classify_upstream_error(exc)
        self._metrics.upstream_errors.labels(kind=kind).inc()
        if kind == "internal":
            logger.warning("could not forward a request upstream", exc_info=exc)
        if raw is not None:
            raw.outcome = ExchangeOutcome.ERROR
            raw.error = f"upstream {kind}: {type(exc).__name__}: {exc}"
        try:
            await self._send_error(send, status, kind, code)
        except Exception:  # the client is gone too
            logger.debug("could not send the upstream error to the client", exc_info=True)

    @staticmethod
    async def _send_error(send: Send, status: int, kind: str, code: str) -> None:
        body = upstream_error_body(kind, code)
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode("ascii"))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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
