"""The live path's connection pool to the upstream: several small httpx pools, not one big one.

httpcore 1.0's pool walks every connection it holds on each request start and response
close, and for each idle connection recounts them all (quadratic; encode/httpcore#1035),
probing sockets for expiry as it goes. With ~200 concurrent streams that walk took 77% of
the sidecar's event loop and made requests wait seconds for a connection
(``docs/benchmarks.md``, "Capture sidecar overhead"). Sharding the same library's pool
keeps every walk short: with ``shards`` pools of ``max_connections / shards`` connections
the per-request cost falls by about the shard count and the quadratic part by its square.

Requests are spread round-robin, so keep-alive connections spread evenly; each shard is
a standard :class:`httpx.AsyncHTTPTransport` (the same timeouts, errors and keep-alive).
"""

from __future__ import annotations

import itertools
import math

import httpx

CONNECTIONS_PER_SHARD = 32
"""Target size of one shard: walks over ≤ 32 connections cost microseconds."""


class ShardedTransport(httpx.AsyncBaseTransport):
    """Round-robin over ``shards`` :class:`httpx.AsyncHTTPTransport` pools.

    Args:
        max_connections: total connection limit across all shards (≥ 1).
        shards: number of pools; default ``ceil(max_connections / 32)``.
        keepalive_expiry_s: idle time after which a pooled connection is closed.
    """

    def __init__(
        self,
        max_connections: int,
        *,
        shards: int | None = None,
        keepalive_expiry_s: float = 5.0,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections!r} must be ≥ 1")
        count = shards or max(1, math.ceil(max_connections / CONNECTIONS_PER_SHARD))
        count = min(count, max_connections)
        per_shard = math.ceil(max_connections / count)
        self.shards: tuple[httpx.AsyncHTTPTransport, ...] = tuple(
            httpx.AsyncHTTPTransport(
                limits=httpx.Limits(
                    max_connections=per_shard,
                    max_keepalive_connections=per_shard,
                    keepalive_expiry=keepalive_expiry_s,
                ),
                retries=0,
            )
            for _ in range(count)
        )
        self._next = itertools.cycle(self.shards)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on the next shard (round-robin)."""
        return await next(self._next).handle_async_request(request)

    async def aclose(self) -> None:
        """Close every shard."""
        for shard in self.shards:
            await shard.aclose()
