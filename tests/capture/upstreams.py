"""Test upstreams for the proxy tests, and a harness that runs the proxy on a real socket.

* :class:`ScriptedUpstream` — a tiny raw ASGI app whose behaviour is chosen by the query
  string (``?mode=...``) on any path, so captured routes can be exercised with every
  behaviour: ``echo`` (default: what it received, as JSON), ``sse`` (events ``gap_ms``
  apart, recording disconnects), ``sleep`` (answers after ``ms``, recording a disconnect),
  ``pieces`` (``n`` body pieces of ``size`` bytes), ``gzip``/``br`` (fixed compressed
  bodies with ``Content-Length``), ``gzip_stream`` (chunked gzip pieces), ``hop`` (a
  response carrying hop-by-hop headers), ``break`` (one piece, then the connection drops).
* :class:`ServerThread` — :class:`~shadoweval.serving.BackgroundServer` with test
  timeouts (the upstreams).
* :func:`running_proxy` — a :class:`~shadoweval.capture.proxy.CaptureProxy` listening on a real
  loopback port, on its own event loop in a thread, with a :class:`CaptureCollector` as
  its tee.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import brotli
from starlette.types import Receive, Scope, Send

from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.proxy import CaptureProxy
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sampling import StickySampler
from shadoweval.config import CaptureSettings
from shadoweval.serving import BackgroundServer

PLAIN_BODY = (
    b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"' + b"compressible text " * 200 + b'"}}]}'
)
GZIP_BODY = gzip.compress(PLAIN_BODY, mtime=0)
BR_BODY: bytes = brotli.compress(PLAIN_BODY)
GZIP_STREAM_PIECES = 4


def gzip_stream_pieces() -> list[bytes]:
    """The compressed pieces ``mode=gzip_stream`` sends (one SSE event per piece)."""
    comp = zlib.compressobj(wbits=31)
    pieces = []
    for i in range(GZIP_STREAM_PIECES):
        event = b'data: {"i": %d, "text": "%s"}\n\n' % (i, b"abc" * 50)
        pieces.append(comp.compress(event) + comp.flush(zlib.Z_SYNC_FLUSH))
    pieces.append(comp.flush())
    return pieces


GZIP_STREAM = gzip_stream_pieces()


def piece_bytes(i: int, size: int) -> bytes:
    """Body piece ``i`` of ``mode=pieces``: ``size`` bytes, distinct per piece."""
    return (b"%04d" % i + b"." * size)[:size]


@dataclass
class UpstreamLog:
    """What the upstream observed (thread-safe appends; times are ``time.perf_counter()``)."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnects: list[float] = field(default_factory=list)
    events_sent: list[float] = field(default_factory=list)


async def _wait_disconnect(receive: Receive, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``http.disconnect``; True when it came."""
    try:
        async with asyncio.timeout(timeout_s):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True


Params = dict[str, str]


class ScriptedUpstream:
    """Raw ASGI test upstream; behaviour by ``?mode=`` (see the module docstring)."""

    def __init__(self) -> None:
        self.log = UpstreamLog()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        params = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        mode = params.get("mode", "echo")
        record = {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": (scope.get("raw_path") or b"").decode("latin-1"),
            "query": scope["query_string"].decode("latin-1"),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "body": body.decode("latin-1"),
        }
        self.log.requests.append(record)
        handler = getattr(self, f"_{mode}")
        await handler(params, record, receive, send)

    @staticmethod
    async def _start(send: Send, headers: list[tuple[bytes, bytes]], status: int = 200) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})

    @staticmethod
    async def _body(send: Send, data: bytes, more: bool = True) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": more})

    async def _echo(self, params: Params, record: Any, _rc: Receive, send: Send) -> None:
        data = json.dumps(record).encode()
        status = int(params.get("status", "200"))
        await self._start(
            send,
            [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"x-upstream", b"scripted"),
                (b"set-cookie", b"affinity=abc; Path=/"),
            ],
            status,
        )
        await self._body(send, data, more=False)

    async def _sse(self, params: Params, _r: Any, receive: Receive, send: Send) -> None:
        n = int(params.get("n", "5"))
        gap_s = int(params.get("gap_ms", "500")) / 1000
        await self._start(
            send, [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        )
        for i in range(n):
            if i and await _wait_disconnect(receive, gap_s):
                self.log.disconnects.append(time.perf_counter())
                return
            await self._body(send, b'data: {"i": %d}\n\n' % i)
            self.log.events_sent.append(time.perf_counter())
        await self._body(send, b"data: [DONE]\n\n", more=False)

    async def _sleep(self, params: Params, _r: Any, receive: Receive, send: Send) -> None:
        if await _wait_disconnect(receive, int(params.get("ms", "5000")) / 1000):
            self.log.disconnects.append(time.perf_counter())
            return
        await self._start(send, [(b"content-length", b"2")])
        await self._body(send, b"ok", more=False)

    async def _pieces(self, params: Params, _r: Any, _rc: Receive, send: Send) -> None:
        n, size = int(params.get("n", "10")), int(params.get("size", "500"))
        await self._start(send, [(b"content-type", b"application/octet-stream")])
        for i in range(n):
            await self._body(send, piece_bytes(i, size))
            await asyncio.sleep(0.002)
        await self._body(send, b"", more=False)

    async def _gzip(self, _p: Params, _r: Any, _rc: Receive, send: Send) -> None:
        await self._fixed(send, GZIP_BODY, b"gzip")

    async def _br(self, _p: Params, _r: Any, _rc: Receive, send: Send) -> None:
        await self._fixed(send, BR_BODY, b"br")

    async def _fixed(self, send: Send, data: bytes, encoding: bytes) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-encoding", encoding),
            (b"content-length", str(len(data)).encode()),
            (b"vary", b"Accept-Encoding"),
        ]
        await self._start(send, headers)
        half = len(data) // 2  # two pieces, to show they pass as sent
        await self._body(send, data[:half])
        await asyncio.sleep(0.01)
        await self._body(send, data[half:], more=False)

    async def _gzip_stream(self, _p: Params, _r: Any, _rc: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"content-encoding", b"gzip")]
        await self._start(send, headers)
        for piece in GZIP_STREAM:
            await self._body(send, piece)
            await asyncio.sleep(0.01)
        await self._body(send, b"", more=False)

    async def _hop(self, _p: Params, _r: Any, _rc: Receive, send: Send) -> None:
        data = b"hop"
        headers = [
            (b"content-length", b"3"),
            (b"connection", b"X-Hop-Resp"),
            (b"x-hop-resp", b"1"),
            (b"keep-alive", b"timeout=5"),
            (b"proxy-connection", b"keep-alive"),
            (b"trailer", b"x-checksum"),
            (b"x-end-to-end", b"kept"),
        ]
        await self._start(send, headers)
        await self._body(send, data, more=False)

    async def _break(self, _p: Params, _r: Any, _rc: Receive, send: Send) -> None:
        await self._start(send, [(b"content-type", b"text/event-stream")])
        await self._body(send, b'data: {"i": 0}\n\n')
        await asyncio.sleep(0.05)
        # return without completing: uvicorn closes the connection mid-body


class ServerThread(BackgroundServer):
    """:class:`~shadoweval.serving.BackgroundServer` on a free loopback port, given 60 s to
    start (a loaded machine) and 10 s to stop.

    ``options`` go to :class:`uvicorn.Config` (defaults: ``lifespan="off"``,
    ``log_level="warning"``, ``ws="none"``).
    """

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(
            app,
            start_timeout_s=60.0,
            stop_timeout_s=10.0,
            thread_name="test-upstream",
            **options,
        )


class CaptureCollector:
    """The tee for tests: keeps every RawCapture; ``result`` is what it returns, ``fail``
    makes it raise."""

    def __init__(self, *, result: bool = True, fail: bool = False) -> None:
        self.captures: list[RawCapture] = []
        self.result = result
        self.fail = fail
        self._cond = threading.Condition()

    def __call__(self, raw: RawCapture) -> bool:
        with self._cond:
            self.captures.append(raw)
            self._cond.notify_all()
        if self.fail:
            raise RuntimeError("tee failure injected by the test")
        return self.result

    def wait(self, n: int = 1, timeout_s: float = 60.0) -> list[RawCapture]:
        """Wait until ``n`` captures arrived; return them all (may be more than ``n``)."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.captures) >= n, timeout_s)
            assert ok, f"expected {n} capture(s) within {timeout_s} s, got {len(self.captures)}"
            return list(self.captures)


@dataclass
class ProxyHarness:
    """A running proxy: its ``url``, tee, metrics and the proxy object."""

    url: str
    collector: CaptureCollector
    metrics: CaptureMetrics
    proxy: CaptureProxy

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the proxy's registry (0.0 when never incremented)."""
        value = self.metrics.registry.get_sample_value(name, labels)
        return value or 0.0


class ProxyThread:
    """Run ``proxy`` on its own event loop in a daemon thread, listening on loopback.

    ``url`` is ``http://127.0.0.1:PORT``; :meth:`call` runs a coroutine function on the
    proxy's loop and returns its result; leaving the context drains with ``grace_s`` and
    stops the proxy.
    """

    def __init__(self, proxy: CaptureProxy, *, grace_s: float = 0.0) -> None:
        self.proxy = proxy
        self.grace_s = grace_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.url = ""

    def call(self, fn: Any, timeout_s: float = 60.0) -> Any:
        """Run ``fn()`` (a coroutine function) on the proxy's loop; wait for its result."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout_s)

    def __enter__(self) -> ProxyThread:
        self._thread.start()

        async def up() -> int:
            await self.proxy.start()
            return await self.proxy.listen("127.0.0.1", 0)

        self.url = f"http://127.0.0.1:{self.call(up)}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def down() -> None:
            await self.proxy.drain(self.grace_s)
            await self.proxy.stop()

        try:
            self.call(down)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self.loop.close()


@contextmanager
def running_proxy(
    upstream_url: str,
    *,
    collector: CaptureCollector | None = None,
    **settings: Any,
) -> Iterator[ProxyHarness]:
    """Serve a CaptureProxy in front of ``upstream_url`` on a loopback port."""
    cap = CaptureSettings(upstream_url=upstream_url, **settings)
    collector = collector or CaptureCollector()
    metrics = CaptureMetrics()
    sampler = StickySampler(cap.sample_percent, cap.session_headers, "test-salt")
    proxy = CaptureProxy(cap, sampler, collector, metrics)
    with ProxyThread(proxy) as server:
        yield ProxyHarness(server.url, collector, metrics, proxy)
