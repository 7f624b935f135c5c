"""The replay client's default transport (:mod:`shadoweval.http1`) against real sockets.

Each test runs a tiny asyncio server that writes exact bytes, so framing, keep-alive,
stale connections, interim responses and failures are under the test's control.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import orjson

from shadoweval.records import ReplayErrorKind
from shadoweval.replay.client import CandidateClient, ReplayResult
from shadoweval.replay.rewrite import ReplayRequest

COMPLETION = orjson.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
)


def _sse_events(n: int) -> list[bytes]:
    events = [
        b"data: "
        + orjson.dumps(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}],
            }
        )
        + b"\n\n"
        for i in range(n)
    ]
    # A stream that ends without a finish_reason was cut (issue 29): a real one finishes.
    finish = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    events.append(b"data: " + orjson.dumps(finish) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


T = TypeVar("T")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


class Server:
    """An asyncio server running ``handler`` per connection; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open_now = 0
        self.max_open = 0
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.max_open = max(self.max_open, self.open_now)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open_now -= 1
            writer.close()
            self.closed.set()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head + Content-Length body), or ``None`` at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head + await reader.readexactly(length)


def response(body: bytes, *, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: %d\r\n\r\n" % len(body)
        + body
    )


def request(stream: bool = False) -> ReplayRequest:
    return ReplayRequest(
        exchange_id="x1",
        path="/v1/chat/completions",
        body=b'{"model": "m", "messages": []}',
        headers={"content-type": "application/json", "authorization": "Bearer k"},
        stream=stream,
    )


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _send(
    base_url: str, n: int = 1, stream: bool = False, **kw: object
) -> list[ReplayResult]:
    async with CandidateClient(base_url, **kw) as client:  # type: ignore[arg-type]
        return [await client.send(request(stream)) for _ in range(n)]


def test_keepalive_reuses_one_connection() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await read_request(reader) is not None:
            writer.write(response(COMPLETION))

    async def main() -> tuple[list[ReplayResult], int]:
        server = Server(handler)
        async with server as url:
            results = await _send(url, 5)
        return results, server.connections

    results, connections = run(main())
    assert [r.error_kind for r in results] == [None] * 5
    assert all(r.response is not None and r.response.text == "hi" for r in results)
    assert connections == 1


def test_stale_idle_connection_is_not_used() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        if await read_request(reader) is not None:
            writer.write(response(COMPLETION))  # keep-alive, then the server closes anyway
            await writer.drain()

    async def main() -> tuple[list[ReplayResult], int]:
        server = Server(handler)
        async with server as url, CandidateClient(url, connect_retries=0) as client:
            first = await client.send(request())
            await server.closed.wait()  # the server closed its idle side
            second = await client.send(request())
        return [first, second], server.connections

    results, connections = run(main())
    assert [r.error_kind for r in results] == [None, None]
    assert connections == 2


def _framing_handler(framing: str) -> Handler:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        if framing == "chunked":
            half = len(COMPLETION) // 2
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
                + b"%x\r\n%b\r\n" % (half, COMPLETION[:half])
                + b"%x\r\n%b\r\n" % (len(COMPLETION) - half, COMPLETION[half:])
                + b"0\r\n\r\n"
            )
        elif framing == "close":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + COMPLETION)
            await writer.drain()
            writer.close()
        else:
            writer.write(response(COMPLETION))
        await writer.drain()

    return handler


def test_chunked_content_length_and_close_delimited_bodies() -> None:
    for framing in ("chunked", "length", "close"):

        async def main(framing: str = framing) -> list[ReplayResult]:
            async with Server(_framing_handler(framing)) as url:
                return await _send(url)

        (result,) = run(main())
        assert result.error_kind is None, (framing, result.error_detail)
        assert result.response is not None, framing
        assert result.response.text == "hi", framing


def test_incremental_sse_timings() -> None:
    events = _sse_events(6)

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for event in events:
            writer.write(b"%x\r\n%b\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.02)  # traffic shape: each event its own segment
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url, stream=True)

    (result,) = run(main())
    assert result.error_kind is None, result.error_detail
    assert result.response is not None
    assert result.response.text == "".join(f"t{i} " for i in range(6))
    timings = result.timings
    assert timings.ttft_ms is not None
    assert timings.e2e_ms is not None
    assert timings.ttft_ms < timings.e2e_ms
    assert timings.itl is not None
    assert timings.itl.count == 5


def test_gzip_body_is_decoded() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        req = await read_request(reader)
        assert req is not None
        assert b"accept-encoding: gzip" in req.lower()
        writer.write(response(gzip.compress(COMPLETION), extra=b"content-encoding: gzip\r\n"))

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url)

    (result,) = run(main())
    assert result.error_kind is None, result.error_detail
    assert result.response is not None
    assert result.response.text == "hi"


def test_corrupt_gzip_is_a_decode_error() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        writer.write(response(b"\x1f\x8bnot gzip at all", extra=b"content-encoding: gzip\r\n"))

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url)

    (result,) = run(main())
    assert result.error_kind is ReplayErrorKind.DECODE


def test_connection_refused_is_connect_after_retries() -> None:
    async def main() -> list[ReplayResult]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await _send(f"http://127.0.0.1:{port}", connect_retries=2, backoff_s=0.001)

    (result,) = run(main())
    assert result.error_kind is ReplayErrorKind.CONNECT
    assert result.attempts == 3


def test_server_that_never_answers_is_a_timeout() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        await reader.read()  # never answers; returns when the client gives up

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url, timeout_s=0.3)

    (result,) = run(main())
    assert result.error_kind is ReplayErrorKind.TIMEOUT


def test_mid_body_drop_is_connection_lost() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
            + COMPLETION[:20]
        )
        await writer.drain()
        writer.close()

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url, connect_retries=0)

    (result,) = run(main())
    assert result.error_kind is ReplayErrorKind.CONNECT
    assert result.error_detail is not None
    assert result.error_detail.startswith("connection lost mid-response")


def test_max_connections_is_respected() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await read_request(reader) is not None:
            await asyncio.sleep(0)  # let the other requests queue
            writer.write(response(COMPLETION))

    async def main() -> tuple[list[ReplayResult], Server]:
        server = Server(handler)
        async with server as url, CandidateClient(url, max_connections=3) as client:
            results = await asyncio.gather(*(client.send(request()) for _ in range(40)))
        return list(results), server

    results, server = run(main())
    assert [r.error_kind for r in results] == [None] * 40
    assert server.connections <= 3
    assert server.max_open <= 3


def test_interim_responses_are_skipped() -> None:
    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n"
            + response(COMPLETION)
        )

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url)

    (result,) = run(main())
    assert result.error_kind is None, result.error_detail
    assert result.response is not None
    assert result.response.status_code == 200
    assert result.response.text == "hi"


def test_http_500_keeps_the_error_body() -> None:
    body = b'{"error": {"message": "engine overloaded", "type": "server_error"}}'

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader)
        writer.write(response(body, status="500 Internal Server Error"))

    async def main() -> list[ReplayResult]:
        async with Server(handler) as url:
            return await _send(url)

    (result,) = run(main())
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    assert result.response is not None
    assert result.response.status_code == 500
    assert result.response.body == body.decode()
    assert result.error_detail == "HTTP 500: engine overloaded"


def test_a_connection_handed_to_a_cancelled_waiter_is_not_lost() -> None:
    from shadoweval.http1.pool import UpstreamPool

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await reader.read()

    async def main() -> tuple[int, int]:
        async with Server(handler) as url:
            port = int(url.rsplit(":", 1)[1])
            pool = UpstreamPool(
                "127.0.0.1",
                port,
                tls=None,
                server_hostname=None,
                max_connections=1,
                connect_timeout_s=5.0,
                keepalive_expiry_s=60.0,
            )
            held = await pool.acquire()
            waiter = asyncio.ensure_future(pool.acquire())
            await asyncio.sleep(0)  # one loop turn: the waiter runs up to its queueing
            assert pool._waiters
            pool.release(held)  # handed to the waiter ...
            waiter.cancel()  # ... which is cancelled before it runs
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
            idle, open_ = pool.idle_connections, pool.open_connections
            await pool.aclose()
            return idle, open_

    idle, open_ = run(main())
    assert (idle, open_) == (1, 1)
