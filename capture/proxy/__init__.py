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
(``bad_target``); a request with more than one ``Host`` field gets 400
(``duplicate_host``, RFC 9112 §3.2) and is never forwarded; malformed HTTP gets 400
(``bad_request``).

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
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from shadoweval.capture.headers import (
    SHADOW_MARKER,
    has_header,
    request_headers_for_upstream,
)
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.proxy.answers import (
    _BODY_METHODS,
    _DROP_UPSTREAM,
    OTHER_ROUTE,
    _monotonic,
    _perf_ns,
    _Request,
    has_dot_segment,
    request_error_body,
    upstream_error_body,
)
from shadoweval.capture.proxy.client import _ClientConnection
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.upstream_pool import UpstreamConnection, UpstreamError, UpstreamPool
from shadoweval.config import CaptureSettings
from shadoweval.errors import ConfigError
from shadoweval.lifecycle import AsyncLifecycle
from shadoweval.records import new_exchange_id, utc_now
from shadoweval.routes import normalize_route

__all__ = [
    "OTHER_ROUTE",
    "CaptureProxy",
    "has_dot_segment",
    "request_error_body",
    "reuse_port_supported",
    "upstream_error_body",
]

logger = logging.getLogger(__name__)


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
            if client.cancel_active("cancelled (server shutdown)"):
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
