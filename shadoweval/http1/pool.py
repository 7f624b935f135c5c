"""HTTP/1.1 connection pool to one upstream: raw asyncio connections, no client library.

Each pooled connection is an :class:`asyncio.Protocol` with its own ``httptools`` response
parser (llhttp, the parser of Node.js and of uvicorn's fast path); the live proxy
(:mod:`shadoweval.capture.proxy`) and the replay client (through
:class:`shadoweval.http1.exchange.Http1Exchange`) write the request bytes on it and
receive the parsed response callbacks. Idle connections are a stack (the most recently
used is reused first, so the set in use stays small); there is no walk over every
connection per request (the
quadratic walk of httpcore 1.0's pool, encode/httpcore#1035, was 77% of the old proxy's
event loop at 200 streams, ``docs/benchmarks.md``).

**Stale keep-alive.** An idle connection the upstream has closed must never take a request.
A connection is discarded (counted ``shadoweval_proxy_upstream_stale_total``) instead of
used when, at the moment of use, it has seen the peer's FIN or any unsolicited byte, its
transport is closing, or its socket is readable (``select`` with a zero timeout: the FIN
has arrived but the event loop has not processed it yet); the request then goes on
another idle connection or a fresh one — no byte of it was written, so nothing is
retried. Idle connections older than ``keepalive_expiry_s`` are closed (lazily at use and
by a sweep every ``keepalive_expiry_s / 2``); keep it below the upstream's own keep-alive
timeout so the upstream never closes a connection the pool might hand out (uvicorn's,
hence vLLM's and SGLang's, default is 5 s; the default here is 2 s). The same check as Go's
``net/http`` transport (which retries only when nothing was written), done before use.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import select
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

import httptools

_monotonic = time.monotonic


class UpstreamError(Exception):
    """No upstream connection could be had; ``kind`` is the ``upstream_errors`` label.

    Kinds: ``connect`` (refused/unreachable), ``connect_timeout`` (no connection within
    ``connect_timeout_s``), ``pool_timeout`` (all ``max_connections`` busy for
    ``connect_timeout_s``).
    """

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


class ResponseHandler(Protocol):
    """What an :class:`UpstreamConnection` calls while it carries one exchange."""

    def on_response_head(self, conn: UpstreamConnection) -> None: ...
    def on_response_body(self, piece: bytes) -> None: ...
    def on_response_complete(self, conn: UpstreamConnection) -> None: ...
    def on_upstream_lost(self, conn: UpstreamConnection, exc: BaseException | None) -> None: ...


class UpstreamConnection(asyncio.Protocol):
    """One HTTP/1.1 connection to the upstream with its response parser.

    ``owner`` is the exchange currently using it (``None`` while idle); parsed response
    events go to it. ``headers`` and ``reason`` hold the current response's head (names as
    received); ``interim`` is true while a 1xx response (not forwarded) is being parsed.
    """

    __slots__ = (
        "closed",
        "eof",
        "fileno",
        "head_seen",
        "headers",
        "idle_since",
        "interim",
        "owner",
        "parser",
        "pool",
        "reason",
        "transport",
        "uses",
    )

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.owner: ResponseHandler | None = None
        self.idle_since = 0.0
        self.uses = 0
        self.eof = False
        self.closed = False
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.interim = False
        self.head_seen = False
        self.fileno = -1

    # -- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("sslcontext") is None:
            self.fileno = sock.fileno()

    def data_received(self, data: bytes) -> None:
        owner = self.owner
        if owner is None:  # unsolicited bytes on an idle connection: unusable
            self.eof = True
            self.abort()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.owner = None
            self.abort()
            owner.on_upstream_lost(self, exc)

    def eof_received(self) -> bool | None:
        self.eof = True
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        owner, self.owner = self.owner, None
        if owner is not None:
            owner.on_upstream_lost(self, exc)

    # -- httptools callbacks -----------------------------------------------------------

    def on_message_begin(self) -> None:
        self.headers = []
        self.reason = b""
        self.head_seen = False

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.interim = True  # 100 Continue / 103 Early Hints: not forwarded
            return
        self.head_seen = True
        owner = self.owner
        if owner is not None:
            owner.on_response_head(self)

    def on_body(self, body: bytes) -> None:
        owner = self.owner
        if owner is not None:
            owner.on_response_body(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        owner = self.owner
        if owner is not None:
            owner.on_response_complete(self)

    # -- helpers ---------------------------------------------------------------------

    def write(self, data: bytes | list[bytes]) -> None:
        """Send request bytes (one buffer, or several written with ``writelines``)."""
        assert self.transport is not None
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)

    def abort(self) -> None:
        """Close the connection at once (the upstream sees the disconnect)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def usable(self, now: float, expiry_s: float) -> bool:
        """Whether this idle connection may carry a request (see the module docstring)."""
        if self.closed or self.eof or self.transport is None or self.transport.is_closing():
            return False
        if now - self.idle_since > expiry_s:
            return False
        if self.fileno >= 0:
            try:
                readable, _, _ = select.select([self.fileno], [], [], 0)
            except (OSError, ValueError):
                return False
            if readable:  # a FIN (or stray bytes) not yet seen by the event loop
                return False
        return True


class UpstreamPool:
    """Connections to one upstream ``host:port``; see the module docstring.

    Args:
        host, port: the upstream's address.
        tls: an :class:`ssl.SSLContext` for an ``https`` upstream, else ``None``.
        server_hostname: the TLS server name (``https`` only).
        max_connections: open + connecting connections at most (≥ 1).
        connect_timeout_s: limit on establishing a connection, and (unless
            ``pool_timeout_s`` is given) on waiting for a free one when
            ``max_connections`` are busy, seconds.
        keepalive_expiry_s: an idle connection older than this is closed, seconds.
        on_stale: called once per idle connection discarded because the peer had closed it.
        pool_timeout_s: limit on waiting for a free connection, seconds (default
            ``connect_timeout_s``; the replay client waits up to its request timeout).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None,
        server_hostname: str | None,
        max_connections: int,
        connect_timeout_s: float,
        keepalive_expiry_s: float,
        on_stale: Callable[[], Any] = lambda: None,
        pool_timeout_s: float | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections!r} must be ≥ 1")
        self.host = host
        self.port = port
        self.tls = tls
        self.server_hostname = server_hostname
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_expiry_s = keepalive_expiry_s
        self.pool_timeout_s = connect_timeout_s if pool_timeout_s is None else pool_timeout_s
        self._on_stale = on_stale
        self._idle: collections.deque[UpstreamConnection] = collections.deque()
        self._open = 0  # connected + connecting
        self._waiters: collections.deque[asyncio.Future[UpstreamConnection | None]] = (
            collections.deque()
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def open_connections(self) -> int:
        """Connections open or being opened."""
        return self._open

    @property
    def idle_connections(self) -> int:
        """Connections waiting in the pool."""
        return len(self._idle)

    def start(self) -> None:
        """Start the idle sweep (needs a running event loop)."""
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="pool-sweep")

    def take_idle(self) -> UpstreamConnection | None:
        """A usable idle connection (most recently used first), or ``None``. Never waits."""
        idle = self._idle
        if not idle:
            return None
        now = _monotonic()
        expiry = self.keepalive_expiry_s
        while idle:
            conn = idle.pop()
            if conn.usable(now, expiry):
                conn.uses += 1
                return conn
            if now - conn.idle_since <= expiry:
                self._on_stale()
            conn.abort()
        return None

    async def acquire(self) -> UpstreamConnection:
        """An idle connection, a new one, or the next one released.

        Raises:
            UpstreamError: ``connect``, ``connect_timeout`` or ``pool_timeout``.
        """
        conn = self.take_idle()
        if conn is not None:
            return conn
        if self._open >= self.max_connections:
            future: asyncio.Future[UpstreamConnection | None] = (
                asyncio.get_running_loop().create_future()
            )
            self._waiters.append(future)
            try:
                async with asyncio.timeout(self.pool_timeout_s):
                    handed = await future
            except BaseException as exc:
                self._abandon(future)
                if isinstance(exc, TimeoutError):
                    raise UpstreamError(
                        "pool_timeout",
                        f"all {self.max_connections} upstream connections busy for "
                        f"{self.pool_timeout_s} s",
                    ) from None
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(future)
            if handed is not None:
                handed.uses += 1
                return handed
        return await self._connect()

    async def _connect(self) -> UpstreamConnection:
        self._open += 1
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConnection(self),
                    self.host,
                    self.port,
                    ssl=self.tls,
                    server_hostname=self.server_hostname if self.tls else None,
                )
        except TimeoutError:
            self._slot_freed()
            raise UpstreamError(
                "connect_timeout", f"no connection within {self.connect_timeout_s} s"
            ) from None
        except OSError as exc:
            self._slot_freed()
            raise UpstreamError("connect", f"{type(exc).__name__}: {exc}") from None
        except BaseException:
            self._slot_freed()
            raise
        conn.uses = 1
        return conn

    def release(self, conn: UpstreamConnection) -> None:
        """Give back a connection whose response was read completely and may be reused."""
        conn.owner = None
        if conn.closed or self._closed:
            conn.abort()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        conn.idle_since = _monotonic()
        self._idle.append(conn)

    def _abandon(self, future: asyncio.Future[UpstreamConnection | None]) -> None:
        """A waiter gave up (timeout, cancellation): what it was handed goes to the next one.

        Without this a connection (or a free slot) handed to a waiter in the same loop
        iteration as its timeout or cancellation would be lost for good.
        """
        if not future.done():
            future.cancel()
            return
        if future.cancelled():
            return
        handed = future.result()
        if handed is not None:
            self.release(handed)
            return
        while self._waiters:  # the freed slot passes to the next waiter
            waiter = self._waiters.popleft()
            if waiter is not future and not waiter.done():
                waiter.set_result(None)
                return

    def discard(self, conn: UpstreamConnection) -> None:
        """Close a connection that must not be reused (its slot is freed when it closes)."""
        conn.owner = None
        conn.abort()

    def _forget(self, conn: UpstreamConnection) -> None:
        """Called by a connection when it closes."""
        if conn in self._idle:
            self._idle.remove(conn)
        self._slot_freed()

    def _slot_freed(self) -> None:
        self._open = max(0, self._open - 1)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the waiter opens a new connection
                return

    async def _sweep(self) -> None:
        period = max(0.05, self.keepalive_expiry_s / 2)
        while True:
            await asyncio.sleep(period)
            now = _monotonic()
            idle = self._idle
            while idle and now - idle[0].idle_since > self.keepalive_expiry_s:
                idle.popleft().abort()

    async def aclose(self) -> None:
        """Close every idle connection and stop the sweep (busy ones close with their
        exchange)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        while self._idle:
            self._idle.pop().abort()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
