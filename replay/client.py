"""The candidate client: send one replay and measure what comes back.

Transport: by default the core's raw HTTP/1.1 pool (:mod:`shadoweval.http1`, the same
connections, ``httptools`` parser and stale keep-alive checks as the live proxy), with each
body piece timed as it arrives; httpx's pool walks every connection per request
(encode/httpcore#1035) and made throughput *fall* as concurrency rose
(``docs/benchmarks.md``, "Replay throughput"). With a ``transport=`` (an httpx transport,
the tests' seam) the request goes through ``httpx.AsyncClient`` instead, with the same
results. A connection the server had closed while idle is discarded before use, never
written to; a request already written is never retried.

Failures are data: every call returns a :class:`ReplayResult`, with ``error_kind`` set
(``timeout``, ``connect``, ``http_status``, ``decode``, ``interrupted``: a 200 stream cut
before its ``finish_reason``, :mod:`shadoweval.llm_protocol.interruption`) when no usable
response came back.
Only connection *establishment* errors are retried (the request never reached the model,
so a retry cannot duplicate work), with exponential backoff and jitter. The whole request
— headers and every body byte — is bounded by ``timeout_s`` (``asyncio.timeout``), so a
server that keeps a stream alive with pings, or accepts and never answers, still ends as
``timeout`` (GoReplay #420).

A response whose headers match one of the ``cache_hit_rules``
(:class:`~shadoweval.config.CacheHitRule`) is kept as usual and marked ``cache_hit``
with the matched headers (:func:`shadoweval.cache_hits.mark_cache_hit` on every received
header, though only a few are recorded): a candidate answer a cache served is left out of
the latency checks.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

from shadoweval.cache_hits import mark_cache_hit
from shadoweval.config import DEFAULT_CACHE_HIT_RULES, CacheHitRule
from shadoweval.errors import RecordDecodeError, ReplayError
from shadoweval.http1.decoding import BodyDecoder, ContentDecodingError, supported_codings
from shadoweval.http1.exchange import Http1Exchange, ResponseLostError, encode_request
from shadoweval.http1.fd_limit import ensure_fd_limit
from shadoweval.http1.pool import UpstreamError, UpstreamPool
from shadoweval.lifecycle import AsyncLifecycle, aclose_all
from shadoweval.llm_protocol.assembler import AssembledResponse
from shadoweval.llm_protocol.dialects import Dialect, dialect_for
from shadoweval.records import (
    HeaderPair,
    ReplayErrorKind,
    ResponseRecord,
    Timings,
    TimingSource,
)
from shadoweval.replay.rewrite import ReplayRequest

logger = logging.getLogger(__name__)

MAX_ERROR_BODY_BYTES = 64 * 1024
_KEPT_RESPONSE_HEADERS = frozenset({"content-type", "x-request-id", "openai-model", "server"})


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Outcome of one send: the response (if any), its timings, and the error if failed."""

    response: ResponseRecord | None
    timings: Timings
    error_kind: ReplayErrorKind | None
    error_detail: str | None
    attempts: int


class CandidateClient(AsyncLifecycle):
    """An httpx client bound to one shadow target.

    Args:
        base_url: the target's base URL (``http://host:port``); request paths such as
            ``/v1/chat/completions`` are appended.
        timeout_s: limit on one whole request (headers and full body), seconds.
        connect_timeout_s: limit on establishing a connection, seconds.
        connect_retries: retries after a connection could not be established.
        backoff_s: first backoff; doubles per retry, with ±50% jitter.
        max_connections: connection-pool size (set it ≥ replay concurrency).
        keep_raw_body: keep the raw (content-decoded) body of every response on the record;
            without it only failed responses keep theirs (up to 64 KiB). Reassembled text,
            tool calls, usage and timings are always kept.
        transport: an httpx transport seam for tests (``httpx.MockTransport``,
            ``httpx.ASGITransport``).
        cache_hit_rules: response headers that mark an answer served from a cache
            (default :data:`~shadoweval.config.DEFAULT_CACHE_HIT_RULES`; ``()`` none).

    Use as an async context manager, or call :meth:`start` / :meth:`stop`
    (:mod:`shadoweval.lifecycle`: started once, not restartable).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        connect_retries: int = 3,
        backoff_s: float = 0.5,
        max_connections: int = 64,
        keep_raw_body: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        seed: int | None = None,
        cache_hit_rules: tuple[CacheHitRule, ...] = DEFAULT_CACHE_HIT_RULES,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ReplayError(f"base_url must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_retries = connect_retries
        self.backoff_s = backoff_s
        self.keep_raw_body = keep_raw_body
        self.cache_hit_rules = cache_hit_rules
        self._rng = random.Random(seed)
        self._client_kwargs = {
            "base_url": self.base_url,
            "timeout": httpx.Timeout(timeout_s, connect=connect_timeout_s),
            "limits": httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            "transport": transport,
            "follow_redirects": False,
        }
        self._client: httpx.AsyncClient | None = None
        self._use_httpx = transport is not None
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        url = urllib.parse.urlsplit(self.base_url)
        if not url.hostname:
            raise ReplayError(f"base_url has no host: {base_url!r}")
        self._tls = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port or (443 if self._tls else 80)
        default_port = self._port == (443 if self._tls else 80)
        self._host_header = url.netloc.rpartition("@")[2] if not default_port else url.hostname
        self._path_prefix = url.path.rstrip("/")
        self._pool: UpstreamPool | None = None
        self._accept_encoding = ", ".join(
            c for c in ("gzip", "deflate", "br", "zstd") if c in supported_codings()
        )

    async def start(self) -> None:
        """Open the connection pool.

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
            ConfigError: ``max_connections`` does not fit the open-file limit even after
                raising the soft limit to the hard one (:func:`ensure_fd_limit`).
        """
        with self._starting():
            if self._use_httpx:
                self._client = httpx.AsyncClient(**self._client_kwargs)  # type: ignore[arg-type]
            else:
                ensure_fd_limit(self.max_connections)
                tls = ssl.create_default_context() if self._tls else None
                self._pool = UpstreamPool(
                    self._host,
                    self._port,
                    tls=tls,
                    server_hostname=self._host if tls else None,
                    max_connections=self.max_connections,
                    connect_timeout_s=self.connect_timeout_s,
                    keepalive_expiry_s=2.0,
                    pool_timeout_s=self.timeout_s,
                )
                self._pool.start()

    async def stop(self) -> None:
        """Close the pool (idempotent)."""
        if self._stopping():
            client, self._client = self._client, None
            pool, self._pool = self._pool, None
            await aclose_all(client, pool)

    async def send(self, request: ReplayRequest) -> ReplayResult:
        """Send one replay; never raises for candidate failures (they are returned)."""
        if self._pool is not None:
            return await self._send_http1(self._pool, request)
        if self._client is None:
            raise ReplayError("CandidateClient is not started")
        attempt = 0
        while True:
            attempt += 1
            start_ns = time.perf_counter_ns()
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await self._send_once(self._client, request, start_ns, attempt)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt > self.connect_retries:
                    return _failure(
                        ReplayErrorKind.CONNECT, f"{type(exc).__name__}: {exc}", attempt
                    )
                delay = self.backoff_s * 2 ** (attempt - 1) * self._rng.uniform(0.5, 1.5)
                logger.debug("connect failed for %s, retry in %.2fs", request.exchange_id, delay)
                await asyncio.sleep(delay)
            except (TimeoutError, httpx.TimeoutException) as exc:
                detail = f"no complete response within {self.timeout_s:g}s"
                if isinstance(exc, httpx.TimeoutException):
                    detail = f"{type(exc).__name__}: {exc or detail}"
                return _failure(ReplayErrorKind.TIMEOUT, detail, attempt, start_ns)
            except httpx.TransportError as exc:
                return _failure(
                    ReplayErrorKind.CONNECT,
                    f"connection lost mid-response: {type(exc).__name__}: {exc}",
                    attempt,
                )
            except httpx.DecodingError as exc:
                # The body could not be content-decoded (a bad gzip/deflate/br stream): the
                # server answered, but with bytes no reader can use.
                return _failure(
                    ReplayErrorKind.DECODE,
                    f"response body could not be content-decoded: {exc}",
                    attempt,
                )

    async def _send_http1(self, pool: UpstreamPool, request: ReplayRequest) -> ReplayResult:
        """:meth:`send` over the core's HTTP/1.1 pool (the default transport)."""
        headers = dict(request.headers)
        names = {k.lower() for k in headers}
        if "accept-encoding" not in names:  # httpx's default: the codings decoded here
            headers["accept-encoding"] = self._accept_encoding
        if "accept" not in names:
            headers["accept"] = "*/*"
        wire = encode_request(
            "POST", self._path_prefix + request.path, self._host_header, headers, request.body
        )
        attempt = 0
        while True:
            attempt += 1
            start_ns = time.perf_counter_ns()
            exchange: Http1Exchange | None = None
            try:
                async with asyncio.timeout(self.timeout_s):
                    conn = await pool.acquire()
                    exchange = Http1Exchange(pool, conn)
                    exchange.send(wire)
                    return await self._read_http1(exchange, request, start_ns, attempt)
            except UpstreamError as exc:
                if exc.kind == "pool_timeout":
                    return _failure(ReplayErrorKind.TIMEOUT, str(exc), attempt, start_ns)
                if attempt > self.connect_retries:
                    return _failure(ReplayErrorKind.CONNECT, f"{exc.kind}: {exc}", attempt)
                delay = self.backoff_s * 2 ** (attempt - 1) * self._rng.uniform(0.5, 1.5)
                logger.debug("connect failed for %s, retry in %.2fs", request.exchange_id, delay)
                await asyncio.sleep(delay)
            except TimeoutError:
                detail = f"no complete response within {self.timeout_s:g}s"
                return _failure(ReplayErrorKind.TIMEOUT, detail, attempt, start_ns)
            except ResponseLostError as exc:
                return _failure(
                    ReplayErrorKind.CONNECT, f"connection lost mid-response: {exc}", attempt
                )
            except ContentDecodingError as exc:
                return _failure(
                    ReplayErrorKind.DECODE,
                    f"response body could not be content-decoded: {exc}",
                    attempt,
                )
            finally:
                if exchange is not None:
                    exchange.close()

    async def _read_http1(
        self, exchange: Http1Exchange, request: ReplayRequest, start_ns: int, attempt: int
    ) -> ReplayResult:
        await exchange.head()
        status = exchange.status
        content_type = ""
        encoding: list[str] = []
        kept: list[HeaderPair] = []
        all_headers: list[tuple[str, str]] = []
        for raw_name, raw_value in exchange.headers:
            name = raw_name.decode("latin-1").lower()
            value = raw_value.decode("latin-1")
            all_headers.append((name, value))
            if name in _KEPT_RESPONSE_HEADERS:
                kept.append(HeaderPair(name=name, value=value))
            if name == "content-type":
                content_type = value
            elif name == "content-encoding":
                encoding.append(value)
        headers = tuple(kept)
        decoder = _decoder(encoding)
        if status >= 400:
            _, body = await exchange.read_all(MAX_ERROR_BODY_BYTES)
            result = _http_error_body(
                status, headers, _decode_all(decoder, body), start_ns, attempt
            )
        elif request.stream and "text/event-stream" in content_type:
            result = await self._finish_stream(
                dialect_for(request.path),
                status,
                headers,
                _http1_pieces(exchange, decoder),
                start_ns,
                attempt,
            )
        else:
            first_ns, body = await exchange.read_all()
            end_ns = time.perf_counter_ns()
            result = self._finish_body(
                dialect_for(request.path),
                status,
                headers,
                content_type or "?",
                _decode_all(decoder, body),
                first_ns,
                end_ns,
                start_ns,
                attempt,
            )
        return self._cache_hit_pairs(result, all_headers)

    async def _send_once(
        self, client: httpx.AsyncClient, request: ReplayRequest, start_ns: int, attempt: int
    ) -> ReplayResult:
        dialect = dialect_for(request.path)
        async with client.stream(
            "POST", request.path, content=request.body, headers=dict(request.headers)
        ) as response:
            headers = tuple(
                HeaderPair(name=k.lower(), value=v)
                for k, v in response.headers.items()
                if k.lower() in _KEPT_RESPONSE_HEADERS
            )
            if response.status_code >= 400:
                result = await _http_error(response, headers, start_ns, attempt)
            elif request.stream and "text/event-stream" in response.headers.get("content-type", ""):
                result = await self._finish_stream(
                    dialect,
                    response.status_code,
                    headers,
                    _httpx_pieces(response),
                    start_ns,
                    attempt,
                )
            else:
                result = await self._read_body(dialect, response, headers, start_ns, attempt)
            return self._cache_hit(result, response)

    def _cache_hit(self, result: ReplayResult, response: httpx.Response) -> ReplayResult:
        """``result`` with its response marked when a cache-hit rule matched a header."""
        if result.response is None or not self.cache_hit_rules:
            return result
        return self._cache_hit_pairs(result, response.headers.multi_items())

    def _cache_hit_pairs(
        self, result: ReplayResult, headers: list[tuple[str, str]]
    ) -> ReplayResult:
        """``result`` marked when a cache-hit rule matched one of ``headers`` (lower-case)."""
        if result.response is None or not self.cache_hit_rules:
            return result
        marked = mark_cache_hit(result.response, self.cache_hit_rules, headers)
        if marked is result.response:
            return result
        return ReplayResult(
            marked, result.timings, result.error_kind, result.error_detail, result.attempts
        )

    async def _finish_stream(
        self,
        dialect: Dialect,
        status_code: int,
        headers: tuple[HeaderPair, ...],
        pieces: AsyncIterator[tuple[int | None, bytes]],
        start_ns: int,
        attempt: int,
    ) -> ReplayResult:
        """Feed ``(arrival_ns or None = now, decoded piece)`` to ``dialect``'s assembler;
        the result."""
        asm = dialect.stream_assembler(start_ns=start_ns)
        raw: list[bytes] = []
        async for arrival_ns, piece in pieces:
            asm.feed(piece, arrival_ns)
            raw.append(piece)
        result = asm.finish()
        failed = (
            result.error_message is not None
            or result.decode_errors > 0
            or (result.events == 0 and not result.done_seen)
            or result.interruption() is not None
        )
        body: str | None = None
        if self.keep_raw_body or failed:  # a failed stream is always kept, for diagnosis
            body = b"".join(raw).decode("utf-8", errors="replace")
            body = body if self.keep_raw_body else body[:MAX_ERROR_BODY_BYTES]
        record = result.to_response_record(status_code, headers, body)
        timings = result.timings()
        if result.error_message is not None:
            return ReplayResult(
                record,
                timings,
                ReplayErrorKind.HTTP_STATUS,
                f"error event in stream (HTTP {status_code}): {result.error_message}",
                attempt,
            )
        kind = None
        if result.decode_errors or (result.events == 0 and not result.done_seen):
            kind, detail = ReplayErrorKind.DECODE, _decode_detail(result)
        elif (cut := result.interruption()) is not None:  # HTTP 200, cut: never an answer
            kind, detail = ReplayErrorKind.INTERRUPTED, cut.detail
        if kind is None:
            return ReplayResult(record, timings, None, None, attempt)
        # The record says why, as the capture side's record of the same stream does.
        record = record.model_copy(update={"error_message": detail})
        return ReplayResult(record, timings, kind, detail, attempt)

    async def _read_body(
        self,
        dialect: Dialect,
        response: httpx.Response,
        headers: tuple[HeaderPair, ...],
        start_ns: int,
        attempt: int,
    ) -> ReplayResult:
        first_byte_ns: int | None = None
        chunks: list[bytes] = []
        async for piece in response.aiter_bytes():
            if first_byte_ns is None and piece:
                first_byte_ns = time.perf_counter_ns()
            chunks.append(piece)
        end_ns = time.perf_counter_ns()
        return self._finish_body(
            dialect,
            response.status_code,
            headers,
            response.headers.get("content-type", "?"),
            b"".join(chunks),
            first_byte_ns,
            end_ns,
            start_ns,
            attempt,
        )

    def _finish_body(
        self,
        dialect: Dialect,
        status_code: int,
        headers: tuple[HeaderPair, ...],
        content_type: str,
        body: bytes,
        first_byte_ns: int | None,
        end_ns: int,
        start_ns: int,
        attempt: int,
    ) -> ReplayResult:
        """The result of a whole (decoded) non-streamed body, read as ``dialect``."""
        ttfb_ms = None if first_byte_ns is None else (first_byte_ns - start_ns) / 1e6
        e2e_ms = (end_ns - start_ns) / 1e6
        text_body = body.decode("utf-8", errors="replace")
        try:
            parsed = dialect.parse_body(body, ttfb_ms=ttfb_ms, e2e_ms=e2e_ms)
        except RecordDecodeError as exc:
            record = ResponseRecord(
                status_code=status_code,
                headers=headers,
                body=text_body[:MAX_ERROR_BODY_BYTES],
                error_message=str(exc),
            )
            timings = Timings(ttfb_ms=ttfb_ms, e2e_ms=e2e_ms, source=TimingSource.MEASURED)
            return ReplayResult(
                record,
                timings,
                ReplayErrorKind.DECODE,
                f"{exc} (content-type {content_type})",
                attempt,
            )
        record = parsed.to_response_record(
            status_code, headers, text_body if self.keep_raw_body else None
        )
        return ReplayResult(record, parsed.timings(), None, None, attempt)


def _decode_detail(result: AssembledResponse) -> str:
    if result.decode_errors:
        return f"{result.decode_errors} stream event(s) were not valid JSON chunks"
    return "stream ended without any completion chunk event (chat or text_completion)"


async def _http_error(
    response: httpx.Response, headers: tuple[HeaderPair, ...], start_ns: int, attempt: int
) -> ReplayResult:
    chunks: list[bytes] = []
    size = 0
    async for piece in response.aiter_bytes():
        chunks.append(piece)
        size += len(piece)
        if size >= MAX_ERROR_BODY_BYTES:
            break
    return _http_error_body(response.status_code, headers, b"".join(chunks), start_ns, attempt)


def _http_error_body(
    status_code: int, headers: tuple[HeaderPair, ...], raw: bytes, start_ns: int, attempt: int
) -> ReplayResult:
    """An HTTP error's result; ``raw`` is the decoded body (kept up to 64 KiB)."""
    e2e_ms = (time.perf_counter_ns() - start_ns) / 1e6
    body = raw[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    message = _error_message(body)
    record = ResponseRecord(
        status_code=status_code, headers=headers, body=body, error_message=message
    )
    return ReplayResult(
        record,
        Timings(e2e_ms=e2e_ms, source=TimingSource.MEASURED),
        ReplayErrorKind.HTTP_STATUS,
        f"HTTP {status_code}: {message}",
        attempt,
    )


async def _httpx_pieces(response: httpx.Response) -> AsyncIterator[tuple[int | None, bytes]]:
    """httpx's decoded pieces, timed by the assembler's clock when fed."""
    async for piece in response.aiter_bytes():
        yield None, piece


async def _http1_pieces(
    exchange: Http1Exchange, decoder: BodyDecoder | None
) -> AsyncIterator[tuple[int | None, bytes]]:
    """The exchange's body pieces, decoded, each with its network arrival time."""
    last_ns: int | None = None
    while True:
        item = await exchange.next_piece()
        if item is None:
            break
        last_ns, piece = item
        if decoder is not None:
            piece = decoder.decode(piece)
        if piece:
            yield last_ns, piece
    if decoder is not None:
        tail = decoder.finish()
        if tail:
            yield last_ns, tail


def _decoder(content_encoding: list[str]) -> BodyDecoder | None:
    """A decoder for the codings httpx decoded (gzip, deflate, br, zstd; unknown ones are
    passed through as httpx does), or ``None`` for identity."""
    if not content_encoding:
        return None
    supported = supported_codings()
    codings = [
        c.strip()
        for value in content_encoding
        for c in value.split(",")
        if c.strip().lower() in supported and c.strip().lower() != "identity"
    ]
    return BodyDecoder(", ".join(codings)) if codings else None


def _decode_all(decoder: BodyDecoder | None, body: bytes) -> bytes:
    """``body`` content-decoded (raises ContentDecodingError)."""
    if decoder is None:
        return body
    return decoder.decode(body) + decoder.finish()


def _error_message(body: str) -> str:
    """The message of an HTTP error body, in each model server's shape: OpenAI
    ``{"error": {"message"}}`` (llama-cpp-python, Ollama, recent vLLM), TGI's
    ``{"error": "...", "error_type"}``, older vLLM / SGLang ``{"object": "error",
    "message"}``, FastAPI's ``{"detail"}``; else the body's text (cut to 200 characters).
    """
    import orjson

    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return " ".join(body.split())[:200] or "(empty body)"
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:500]
        if isinstance(err, str) and err:
            return err[:500]
        for key in ("message", "detail"):
            value = payload.get(key)
            if isinstance(value, str) and value:
                return value[:500]
    return body[:200]


def _failure(
    kind: ReplayErrorKind, detail: str, attempt: int, start_ns: int | None = None
) -> ReplayResult:
    """A send with no response: no latency is recorded (errors are gated separately)."""
    if start_ns is not None:
        detail = f"{detail} (gave up after {(time.perf_counter_ns() - start_ns) / 1e6:.0f} ms)"
    return ReplayResult(None, Timings(source=TimingSource.MISSING), kind, detail, attempt)
