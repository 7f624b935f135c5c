"""The live path's sharded upstream pool: requests spread over small httpx pools, the total
connection limit holds, and closing closes every shard."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from capture.upstream_pool import ShardedTransport
from tests.capture.upstreams import ServerThread


def _slow_app(peers: set[int], in_flight: list[int], hold_until: int) -> Starlette:
    """Each request is held until ``hold_until`` are in flight at once (a condition, not a
    clock; 60 s bound a hang), then 0.2 s more, the window for any over the limit to arrive."""
    full = asyncio.Event()

    async def slow(request: Request) -> PlainTextResponse:
        assert request.client is not None
        peers.add(request.client.port)
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        if in_flight[0] >= hold_until:
            full.set()
        with contextlib.suppress(TimeoutError):  # never full: the test's assertion says so
            await asyncio.wait_for(full.wait(), 60)
        await asyncio.sleep(0.2)
        in_flight[0] -= 1
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", slow)])


def test_shard_count_and_sizes() -> None:
    assert len(ShardedTransport(1000).shards) == 32
    assert len(ShardedTransport(32).shards) == 1
    assert len(ShardedTransport(100, shards=8).shards) == 8
    assert len(ShardedTransport(3, shards=8).shards) == 3  # never more shards than connections
    with pytest.raises(ValueError, match="max_connections=0"):
        ShardedTransport(0)


def test_requests_spread_over_shards_within_the_total_limit() -> None:
    peers: set[int] = set()
    in_flight = [0, 0]
    with ServerThread(_slow_app(peers, in_flight, hold_until=64)) as server:

        async def main() -> list[int]:
            transport = ShardedTransport(64, shards=4)
            try:
                async with httpx.AsyncClient(
                    transport=transport, base_url=server.url, timeout=60
                ) as client:  # the held requests wait for all 64: a loaded machine takes a while
                    responses = await asyncio.gather(*(client.get("/") for _ in range(96)))
            finally:
                await transport.aclose()
            return [r.status_code for r in responses]

        codes = asyncio.run(main())
    assert codes == [200] * 96
    # 96 requests, 64 connections at most: the limit holds across shards, and it was used.
    assert in_flight[1] == 64
    assert len(peers) == 64
