"""EXPERIMENT for ``benchmarks/sidecar_overhead.py`` only; the sidecar never imports this.

Put this directory on the sidecar's ``PYTHONPATH`` (``--sidecar-env
PYTHONPATH=benchmarks/pool_experiment``) and Python imports it at start-up, before the
sidecar runs. It changes one thing, selected by environment variables:

* ``SIDECAR_EXPERIMENT_POOL=lifo`` (the default when this directory is on the path): every
  ``httpx.AsyncHTTPTransport`` gets, in place of httpcore's ``AsyncConnectionPool``, a
  single-origin HTTP/1.1 pool with a LIFO stack of idle connections. Checking a connection
  out costs O(1) and probes only that connection for keep-alive expiry or a server-side
  close. httpcore 1.0.9's pool instead runs ``_assign_requests_to_connections`` on every
  request and every response close, and that pass calls ``has_expired()`` on *every* pooled
  connection: for an idle one, anyio builds the socket's whole attribute map
  (``getsockname``/``getpeername`` syscalls) and polls the socket, tens of µs each on a
  small VM, plus an O(connections²) count of idle connections (encode/httpcore#1035).
* ``SIDECAR_EXPERIMENT_UVLOOP=1``: use uvloop's event loop (if installed).

This is a measuring device, not a proposed implementation: no HTTP/2, no proxies, one
origin, and it leans on httpx/httpcore internals (``transport._pool``).
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import AsyncIterator
from typing import Any

import httpcore
import httpx
from httpcore._exceptions import ConnectionNotAvailable


class _ReleasingStream:
    """The response body; closing it returns the connection to the pool."""

    def __init__(self, inner: Any, pool: LifoPool, conn: httpcore.AsyncHTTPConnection) -> None:
        self._inner = inner
        self._pool = pool
        self._conn = conn
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._inner:
                yield part
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if hasattr(self._inner, "aclose"):
                await self._inner.aclose()
        finally:
            self._pool.release(self._conn)


class LifoPool:
    """Enough of ``httpcore.AsyncConnectionPool`` for ``httpx.AsyncHTTPTransport``."""

    def __init__(self, max_connections: int, keepalive_expiry: float | None) -> None:
        self._max = max_connections
        self._expiry = keepalive_expiry
        self._idle: collections.deque[httpcore.AsyncHTTPConnection] = collections.deque()
        self._count = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closing: set[asyncio.Task[None]] = set()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        while True:
            conn = await self._acquire(request.url.origin, timeouts.get("pool"))
            try:
                response = await conn.handle_async_request(request)
            except ConnectionNotAvailable:
                self.release(conn)
                continue
            except BaseException:
                self.release(conn)
                raise
            return httpcore.Response(
                status=response.status,
                headers=response.headers,
                content=_ReleasingStream(response.stream, self, conn),
                extensions=response.extensions,
            )

    async def _acquire(
        self, origin: httpcore.Origin, pool_timeout: float | None
    ) -> httpcore.AsyncHTTPConnection:
        while True:
            while self._idle:
                conn = self._idle.pop()
                if conn.is_available() and not conn.has_expired():
                    return conn
                self._count -= 1
                await conn.aclose()
            if self._count < self._max:
                self._count += 1
                return httpcore.AsyncHTTPConnection(origin=origin, keepalive_expiry=self._expiry)
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, pool_timeout)
            except TimeoutError:
                raise httpcore.PoolTimeout("no upstream connection became free") from None

    def release(self, conn: httpcore.AsyncHTTPConnection) -> None:
        if conn.is_idle():
            self._idle.append(conn)
        else:
            self._count -= 1
            if not conn.is_closed():
                task = asyncio.ensure_future(conn.aclose())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def __aenter__(self) -> LifoPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop().aclose()


def _install_pool() -> None:
    original = httpx.AsyncHTTPTransport.__init__

    def patched_init(self: httpx.AsyncHTTPTransport, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        limits: httpx.Limits = kwargs.get("limits") or httpx.Limits()
        if isinstance(self._pool, httpcore.AsyncConnectionPool) and not kwargs.get("http2"):
            self._pool = LifoPool(limits.max_connections or 1000, limits.keepalive_expiry)  # type: ignore[assignment]

    httpx.AsyncHTTPTransport.__init__ = patched_init  # type: ignore[method-assign]


if os.environ.get("SIDECAR_EXPERIMENT_POOL", "lifo") == "lifo":
    _install_pool()
if os.environ.get("SIDECAR_EXPERIMENT_UVLOOP") == "1":
    import importlib

    asyncio.set_event_loop_policy(importlib.import_module("uvloop").EventLoopPolicy())
