"""One HTTP/1.1 request/response exchange on a pooled connection (:mod:`shadoweval.http1.pool`).

:class:`Http1Exchange` is the :class:`~shadoweval.http1.pool.ResponseHandler` of one
request: it writes the request (:func:`encode_request`), then collects the response the
connection's ``httptools`` parser delivers — the head, then each body piece with its
arrival time (``time.perf_counter_ns`` in the parser callback, so a streamed response's
TTFT and ITL are per-piece network arrival times, not the time the consumer got round to
it). The consumer awaits :meth:`Http1Exchange.head`, then either
:meth:`Http1Exchange.read_all` (a whole body) or :meth:`Http1Exchange.next_piece` (one
piece at a time, for SSE), and finally :meth:`Http1Exchange.close`, which gives the
connection back to the pool when the response was read completely and both sides allow
keep-alive, and closes it otherwise (a cancelled or timed-out exchange never leaves a
half-read connection in the pool).

Framing (RFC 9112 §6.3): chunked and ``Content-Length`` bodies end with the parser's
message-complete callback; a body with neither ends when the server closes the
connection cleanly (close-delimited). A connection that closes or resets before the
response is complete raises :class:`ResponseLostError`. 1xx interim responses (100 Continue,
103 Early Hints) are skipped by the connection itself. Content decoding is the
consumer's (:class:`~shadoweval.http1.decoding.BodyDecoder`), so a corrupt body is a
decoding error, not a transport one.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterable, Mapping

from shadoweval.http1.pool import UpstreamConnection, UpstreamPool

_perf_ns = time.perf_counter_ns

_HOP_BY_HOP = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "expect",
    }
)


class ResponseLostError(Exception):
    """The connection closed or broke before the response was complete.

    ``head_seen`` tells whether the status line and headers had arrived.
    """

    def __init__(self, detail: str, *, head_seen: bool) -> None:
        super().__init__(detail)
        self.head_seen = head_seen


def encode_request(
    method: str,
    path: str,
    host_header: str,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes,
) -> list[bytes]:
    """The request's bytes: request line, ``Host``, the given headers, ``Content-Length``.

    Args:
        method, path: e.g. ``"POST"``, ``"/v1/chat/completions"`` (path with query, ASCII).
        host_header: the ``Host`` value (``host`` or ``host:port``).
        headers: a mapping or iterable of ``(name, value)`` strings; hop-by-hop headers,
            ``Host`` and ``Content-Length`` in it are dropped (this writer frames the body).
        body: the request body (``Content-Length`` is its length in bytes).

    Returns:
        Two buffers (head, body) for ``transport.writelines``.

    Raises:
        ValueError: a header name or value containing CR or LF (header injection).
    """
    items = headers.items() if isinstance(headers, Mapping) else headers
    lines = [f"{method} {path} HTTP/1.1\r\nhost: {host_header}\r\n"]
    for name, value in items:
        if name.lower() in _HOP_BY_HOP:
            continue
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} contains CR or LF")
        lines.append(f"{name}: {value}\r\n")
    lines.append(f"content-length: {len(body)}\r\n\r\n")
    head = "".join(lines).encode("latin-1")
    return [head, body]


class Http1Exchange:
    """One request on one pooled connection; see the module docstring.

    Args:
        pool: the pool ``conn`` came from (the connection goes back to it).
        conn: a connection from :meth:`UpstreamPool.acquire`, not carrying another exchange.

    Attributes (after :meth:`head`): ``status`` (int), ``headers`` (``(name, value)`` bytes
    as received), ``head_ns`` (arrival of the head, ``perf_counter_ns``).
    """

    __slots__ = (
        "_close_delimited",
        "_complete",
        "_done",
        "_error",
        "_head_future",
        "_keep_alive",
        "_pieces",
        "_waiter",
        "_want_pieces",
        "conn",
        "head_ns",
        "headers",
        "pool",
        "status",
    )

    def __init__(self, pool: UpstreamPool, conn: UpstreamConnection) -> None:
        self.pool = pool
        self.conn = conn
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_ns = 0
        self._pieces: collections.deque[tuple[int, bytes]] = collections.deque()
        self._complete = False
        self._done = False
        self._error: ResponseLostError | None = None
        self._close_delimited = False
        self._keep_alive = False
        self._head_future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter: asyncio.Future[None] | None = None
        self._want_pieces = False

    def send(self, request: list[bytes]) -> None:
        """Take the connection and write the request (buffers from :func:`encode_request`)."""
        self.conn.owner = self
        self.conn.write(request)

    # -- ResponseHandler (called by the connection) --------------------------------------

    def on_response_head(self, conn: UpstreamConnection) -> None:
        self.head_ns = _perf_ns()
        self.status = conn.parser.get_status_code()
        self.headers = conn.headers
        framed = False
        for name, value in conn.headers:
            lname = name.lower()
            if lname == b"content-length" or (
                lname == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                framed = True
        self._close_delimited = not framed and self.status not in (204, 304)
        if not self._head_future.done():
            self._head_future.set_result(None)

    def on_response_body(self, piece: bytes) -> None:
        self._pieces.append((_perf_ns(), piece))
        if self._want_pieces:
            self._wake()

    def on_response_complete(self, conn: UpstreamConnection) -> None:
        # asked inside the callback: llhttp resets the message's flags once it returns
        self._keep_alive = conn.parser.should_keep_alive()
        self._complete = True
        self._wake()

    def on_upstream_lost(self, conn: UpstreamConnection, exc: BaseException | None) -> None:
        head_seen = self._head_future.done()
        if head_seen and exc is None and self._close_delimited:
            self._complete = True  # a close-delimited body ends with the connection
        elif not self._complete:
            what = f"{type(exc).__name__}: {exc}" if exc is not None else "connection closed"
            stage = "mid-response" if head_seen else "before a response"
            self._error = ResponseLostError(f"{stage}: {what}", head_seen=head_seen)
            if not head_seen:
                self._head_future.set_exception(self._error)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- consumer ----------------------------------------------------------------------

    async def head(self) -> None:
        """Wait for the response head. Raises :class:`ResponseLostError`."""
        await self._head_future

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def next_piece(self) -> tuple[int, bytes] | None:
        """The next body piece ``(arrival_ns, bytes)`` (still content-encoded), or ``None``
        at the end of the body. Raises :class:`ResponseLostError`."""
        while True:
            if self._pieces:
                return self._pieces.popleft()
            if self._complete:
                return None
            if self._error is not None:
                raise self._error
            self._want_pieces = True
            await self._wait()

    async def read_all(self, limit_bytes: int | None = None) -> tuple[int | None, bytes]:
        """The rest of the body, still content-encoded: ``(first_piece_arrival_ns, bytes)``
        (``None`` when there was no body). With ``limit_bytes``, returns once at least that
        many bytes arrived (the connection is then not reused). Raises :class:`ResponseLostError`.
        """
        self._want_pieces = limit_bytes is not None
        while not self._complete:
            if self._error is not None:
                raise self._error
            if limit_bytes is not None and sum(len(p) for _, p in self._pieces) >= limit_bytes:
                break
            await self._wait()
        pieces = self._pieces
        if not pieces:
            return None, b""
        first_ns = pieces[0][0]
        body = pieces[0][1] if len(pieces) == 1 else b"".join(p for _, p in pieces)
        pieces.clear()
        return first_ns, body

    @property
    def complete(self) -> bool:
        """Whether the whole response arrived."""
        return self._complete

    def close(self) -> None:
        """Give the connection back (complete response, keep-alive) or close it."""
        if self._done:
            return
        self._done = True
        conn = self.conn
        if (
            self._complete
            and not self._close_delimited
            and not conn.closed
            and not conn.eof
            and self._keep_alive
        ):
            self.pool.release(conn)
        else:
            self.pool.discard(conn)
