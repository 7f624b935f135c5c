"""CandidateClient: reassembly, timings, error kinds, retries, the whole-request timeout.

Seams: mock-llm through ``httpx.ASGITransport`` (content only: it buffers whole bodies, so
no timing), mock-llm under real uvicorn (timings, hangs, closed ports) and
``httpx.MockTransport`` for what mock-llm cannot do (transport errors, odd bodies).
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.capture.table_import import row_to_exchange
from shadoweval.errors import LifecycleError, ReplayError
from shadoweval.records import (
    FinishReason,
    ModelIdentity,
    ReplayErrorKind,
    TimingSource,
    UsageSource,
)
from shadoweval.replay.client import CandidateClient, ReplayResult
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency
from shadoweval.tables import RecordedRow
from tests.replay.conftest import ServeFn, chat_body, make_exchange, mock_app

pytestmark = pytest.mark.anyio

BASE = ModelIdentity(name="baseline-v1")


def replay_request(row: RecordedRow, *, stream: bool, api_key: str | None = None) -> ReplayRequest:
    """The replay request of a recorded row, built the way the runner builds it."""
    exchange = row_to_exchange(row, stream=stream, sampling=None, baseline=BASE)
    request = build_replay_request(exchange, model="candidate-v2", api_key=api_key)
    assert isinstance(request, ReplayRequest)
    return request


def asgi_client(app: Any, **kwargs: Any) -> CandidateClient:
    return CandidateClient("http://mock", transport=httpx.ASGITransport(app=app), **kwargs)


def mock_client(handler: Callable[..., Any], **kwargs: Any) -> CandidateClient:
    return CandidateClient("http://mock", transport=httpx.MockTransport(handler), **kwargs)


def plain_request(*, stream: bool = False) -> ReplayRequest:
    request = build_replay_request(make_exchange(chat_body(stream=stream)), api_key="shadow-key")
    assert isinstance(request, ReplayRequest)
    return request


def completion(text: str = "hello") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


def sse(*payloads: Any, done: bool = True) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads)
    return out + (b"data: [DONE]\n\n" if done else b"")


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition`` (from a worker thread) until true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def text_rows(llama31_rows: list[RecordedRow]) -> list[RecordedRow]:
    """A few AlpacaEval answers: Unicode, code fences, a one-word answer."""
    picked = [llama31_rows[i] for i in (0, 196, 262, 537)]
    picked += [r for r in llama31_rows if "```" in (r.output_text or "")][:2]
    return picked


@pytest.fixture(scope="module")
def tool_rows(bfcl_rows: list[RecordedRow]) -> list[RecordedRow]:
    """BFCL rows answered with tool calls, including one with several calls."""
    with_calls = [r for r in bfcl_rows if r.tool_calls]
    several = [r for r in with_calls if len(r.tool_calls) > 1][:2]
    return with_calls[:4] + several


# ------------------------------------------------------------------ reassembly


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_text_reassembled_equal_to_recorded(
    text_rows: list[RecordedRow], stream: bool
) -> None:
    app = mock_app(text_rows)
    async with asgi_client(app) as client:
        for row in text_rows:
            result = await client.send(replay_request(row, stream=stream))
            assert result.error_kind is None, result.error_detail
            assert result.attempts == 1
            assert result.response is not None
            assert result.response.text == row.output_text
            assert result.response.status_code == 200
            assert result.response.streamed is stream
            assert result.response.model == "candidate-v2"
            assert result.response.finish_reason is FinishReason.STOP
            assert result.response.usage.usage_source is UsageSource.REPORTED
    assert app.chat_requests == len(text_rows)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_tool_calls_reassembled_equal_to_recorded(
    tool_rows: list[RecordedRow], stream: bool
) -> None:
    async with asgi_client(mock_app(tool_rows)) as client:
        for row in tool_rows:
            result = await client.send(replay_request(row, stream=stream))
            assert result.error_kind is None, result.error_detail
            assert result.response is not None
            got = [(c.name, c.arguments) for c in result.response.tool_calls]
            assert got == [(c.name, c.arguments) for c in row.tool_calls]
            assert [c.index for c in result.response.tool_calls] == list(range(len(got)))
            assert all(c.id for c in result.response.tool_calls)
            assert result.response.finish_reason is FinishReason.TOOL_CALLS


async def test_streamed_usage_is_read_from_the_usage_chunk(text_rows: list[RecordedRow]) -> None:
    row = text_rows[0]
    async with asgi_client(mock_app([row])) as client:
        result = await client.send(replay_request(row, stream=True))
    assert result.response is not None
    usage = result.response.usage
    assert usage.usage_source is UsageSource.REPORTED
    assert usage.completion_tokens is not None
    assert usage.completion_tokens > 1
    assert usage.total_tokens == (usage.prompt_tokens or 0) + usage.completion_tokens


async def test_raw_body_is_dropped_by_default_and_nothing_else(
    text_rows: list[RecordedRow],
) -> None:
    row = text_rows[0]
    for stream in (True, False):
        async with asgi_client(mock_app([row])) as client:
            result = await client.send(replay_request(row, stream=stream))
        assert result.response is not None
        assert result.response.body is None
        assert result.response.text == row.output_text


async def test_raw_sse_body_is_kept_on_request(text_rows: list[RecordedRow]) -> None:
    row = text_rows[2]
    async with asgi_client(mock_app([row]), keep_raw_body=True) as client:
        result = await client.send(replay_request(row, stream=True))
    assert result.response is not None
    assert result.response.body is not None
    assert result.response.body.startswith("data: ")
    assert result.response.body.rstrip().endswith("data: [DONE]")


# ---------------------------------------------------------------------- timings


async def test_timings_measured_over_a_real_socket(
    text_rows: list[RecordedRow], serve: ServeFn
) -> None:
    rows = [r for r in text_rows if len((r.output_text or "").split()) > 20][:2]
    app = mock_app(rows, latency=FixedLatency(ttft_ms=60, itl_ms=1))
    with serve(app) as server:
        async with CandidateClient(server.url, timeout_s=10) as client:
            for row in rows:
                streamed = await client.send(replay_request(row, stream=True))
                plain = await client.send(replay_request(row, stream=False))
                assert streamed.error_kind is None
                assert plain.error_kind is None
                s, p = streamed.timings, plain.timings
                assert s.source is TimingSource.MEASURED
                assert p.source is TimingSource.MEASURED
                assert s.ttft_ms is not None
                assert s.e2e_ms is not None
                assert s.ttfb_ms is not None
                assert s.ttfb_ms <= s.ttft_ms
                assert 60 <= s.ttft_ms < s.e2e_ms  # the role chunk does not count as TTFT
                assert s.itl is not None
                assert s.itl.count >= 20
                assert s.tpot_ms is not None
                assert s.tpot_ms > 0
                assert p.ttft_ms is None  # a JSON body shows no first token
                assert p.e2e_ms is not None
                assert p.e2e_ms >= 60


# ------------------------------------------------------------- fault → error kind


FAULTS = {
    "error": FaultConfig(error_rate=1.0),
    "html": FaultConfig(html_rate=1.0),
    "malformed": FaultConfig(malformed_rate=1.0),
}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_injected_500_is_http_status_with_the_error_message(
    text_rows: list[RecordedRow], stream: bool
) -> None:
    row = text_rows[0]
    async with asgi_client(mock_app([row], faults=FAULTS["error"])) as client:
        result = await client.send(replay_request(row, stream=stream))
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    message = "mock-llm injected fault: the server had an error while processing your request"
    assert result.error_detail == f"HTTP 500: {message}"
    assert result.response is not None
    assert result.response.status_code == 500
    assert result.response.error_message == message
    assert result.attempts == 1  # the request reached the server: never retried


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_proxy_html_502_is_http_status(text_rows: list[RecordedRow], stream: bool) -> None:
    row = text_rows[0]
    async with asgi_client(mock_app([row], faults=FAULTS["html"])) as client:
        result = await client.send(replay_request(row, stream=stream))
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    assert result.response is not None
    assert result.response.status_code == 502
    assert result.error_detail is not None
    assert "502 Bad Gateway" in result.error_detail
    assert result.response.body is not None
    assert "<html>" in result.response.body


async def test_malformed_json_body_is_decode(text_rows: list[RecordedRow]) -> None:
    row = text_rows[0]
    async with asgi_client(mock_app([row], faults=FAULTS["malformed"])) as client:
        result = await client.send(replay_request(row, stream=False))
    assert result.error_kind is ReplayErrorKind.DECODE
    assert result.error_detail is not None
    assert "not JSON" in result.error_detail
    assert result.response is not None
    assert result.response.status_code == 200
    assert result.response.error_message is not None


async def test_malformed_stream_chunk_is_decode_with_the_rest_kept(
    text_rows: list[RecordedRow],
) -> None:
    row = text_rows[0]
    async with asgi_client(mock_app([row], faults=FAULTS["malformed"])) as client:
        result = await client.send(replay_request(row, stream=True))
    assert result.error_kind is ReplayErrorKind.DECODE
    assert result.error_detail == "1 stream event(s) were not valid JSON chunks"
    assert result.response is not None
    assert result.response.text is not None
    # The first content chunk was cut; everything after it still arrived.
    assert (row.output_text or "").endswith(result.response.text)
    assert result.response.text != row.output_text


async def test_hang_is_timeout_within_about_timeout_s(
    text_rows: list[RecordedRow], serve: ServeFn
) -> None:
    row = text_rows[0]
    app = mock_app([row], faults=FaultConfig(hang_rate=1.0, hang_limit_s=30))
    with serve(app) as server:
        for stream in (True, False):
            async with CandidateClient(server.url, timeout_s=0.5, connect_retries=3) as client:
                started = time.perf_counter()
                result = await client.send(replay_request(row, stream=stream))
                elapsed = time.perf_counter() - started
            assert result.error_kind is ReplayErrorKind.TIMEOUT
            assert result.response is None
            assert result.attempts == 1  # a timeout is never retried
            assert result.timings.source is TimingSource.MISSING
            assert result.timings.e2e_ms is None  # no latency for a failed send
            # not before the timeout; the upper end only bounds a hang: without the
            # client's timeout the mock would hold the request for its 30 s
            assert 0.45 <= elapsed < 10.0, elapsed
        # Every hung request was released when the client gave up.
        assert await asyncio.to_thread(wait_until, lambda: app.in_flight == 0, 60.0)


async def test_stream_kept_alive_by_pings_still_times_out() -> None:
    """GoReplay #420: headers arrive, then only SSE comments, forever."""

    async def pings() -> AsyncIterator[bytes]:
        yield b"data: " + orjson.dumps(chunk({"role": "assistant", "content": ""})) + b"\n\n"
        while True:
            await asyncio.sleep(0.02)
            yield b": ping\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pings())

    async with mock_client(handler, timeout_s=0.4) as client:
        started = time.perf_counter()
        result = await client.send(plain_request(stream=True))
        elapsed = time.perf_counter() - started
    assert result.error_kind is ReplayErrorKind.TIMEOUT
    assert result.error_detail is not None
    assert result.error_detail.startswith("no complete response within 0.4s")
    assert 0.35 <= elapsed < 10.0  # the upper end bounds a hang: the pings never end


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_200_html_body_is_decode(stream: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/html"}, content=b"<html>maintenance</html>"
        )

    async with mock_client(handler) as client:
        result = await client.send(plain_request(stream=stream))
    assert result.error_kind is ReplayErrorKind.DECODE
    assert result.error_detail is not None
    assert "content-type text/html" in result.error_detail
    assert result.response is not None
    assert result.response.body == "<html>maintenance</html>"


@pytest.mark.parametrize("body", [b"", b"[]", b'{"object": "chat.completion", "choices": []}'])
async def test_200_json_that_is_no_completion_is_decode(body: bytes) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"}, content=body)

    async with mock_client(handler) as client:
        result = await client.send(plain_request())
    assert result.error_kind is ReplayErrorKind.DECODE


async def test_empty_event_stream_is_decode() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"")

    async with mock_client(handler) as client:
        result = await client.send(plain_request(stream=True))
    assert result.error_kind is ReplayErrorKind.DECODE
    assert result.error_detail == (
        "stream ended without any completion chunk event (chat or text_completion)"
    )


async def test_bad_content_encoding_is_decode_not_a_crash() -> None:
    """A body that says gzip but is not: httpx.DecodingError must become data."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
            content=b"this is not gzip",
        )

    async with mock_client(handler) as client:
        result = await client.send(plain_request())
    assert result.error_kind is ReplayErrorKind.DECODE
    assert result.error_detail is not None
    assert "content-decoded" in result.error_detail
    assert result.attempts == 1


async def test_gzip_body_is_decoded_before_parsing() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
            content=gzip.compress(orjson.dumps(completion("zipped"))),
        )

    async with mock_client(handler) as client:
        result = await client.send(plain_request())
    assert result.error_kind is None
    assert result.response is not None
    assert result.response.text == "zipped"


async def test_error_event_mid_stream_is_http_status_with_partial_text() -> None:
    body = sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hello "}),
        chunk({"content": "wor"}),
        {"error": {"message": "model overloaded, try later", "type": "server_error"}},
        done=False,
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with mock_client(handler) as client:
        result = await client.send(plain_request(stream=True))
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    assert result.error_detail == ("error event in stream (HTTP 200): model overloaded, try later")
    assert result.response is not None
    assert result.response.text == "Hello wor"
    assert result.response.error_message == "model overloaded, try later"


async def test_stream_request_answered_with_json_is_read_as_json() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=completion("no stream here"))

    async with mock_client(handler) as client:
        result = await client.send(plain_request(stream=True))
    assert result.error_kind is None
    assert result.response is not None
    assert result.response.text == "no stream here"
    assert result.response.streamed is False
    assert result.timings.ttft_ms is None


@pytest.mark.parametrize("status", [400, 404, 429, 503])
async def test_error_statuses_keep_the_openai_error_message(status: int) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": f"nope {status}"}})

    async with mock_client(handler) as client:
        result = await client.send(plain_request())
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    assert result.error_detail == f"HTTP {status}: nope {status}"
    assert result.attempts == 1


async def test_large_error_body_is_capped() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, content=b"x" * (1024 * 1024))

    async with mock_client(handler) as client:
        result = await client.send(plain_request())
    assert result.response is not None
    assert result.response.body is not None
    assert len(result.response.body) == 64 * 1024


# --------------------------------------------------------------- what goes out


async def test_wire_request_carries_only_the_shadow_credential() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=completion())

    exchange = make_exchange(
        chat_body(temperature=0.3),
        headers=(
            ("authorization", "Bearer sk-live-CLIENT"),
            ("cookie", "sid=COOKIE"),
            ("x-api-key", "KEY-CLIENT"),
        ),
    )
    request = build_replay_request(exchange, model="candidate-v2", api_key="shadow-key")
    assert isinstance(request, ReplayRequest)
    async with mock_client(handler) as client:
        result = await client.send(request)
    assert result.error_kind is None
    (wire,) = seen
    assert wire.url == "http://mock/v1/chat/completions"
    assert wire.headers["authorization"] == "Bearer shadow-key"
    assert wire.headers["x-shadow-eval"] == "replay"
    assert "cookie" not in wire.headers
    assert "x-api-key" not in wire.headers
    raw = b"".join(f"{k}: {v}".encode() for k, v in wire.headers.items()) + wire.content
    for secret in (b"sk-live-CLIENT", b"COOKIE", b"KEY-CLIENT"):
        assert secret not in raw
    assert orjson.loads(wire.content) == {**chat_body(temperature=0.3), "model": "candidate-v2"}


# ---------------------------------------------------------------- retries


def counting_transport(
    exc: type[httpx.TransportError],
) -> tuple[httpx.MockTransport, list[float]]:
    attempts: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(time.perf_counter())
        raise exc("refused", request=request)

    return httpx.MockTransport(handler), attempts


@pytest.mark.parametrize("retries", [0, 1, 3])
@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ConnectTimeout])
async def test_connection_errors_retried_exactly_retries_plus_one(
    retries: int, exc: type[httpx.TransportError]
) -> None:
    transport, attempts = counting_transport(exc)
    client = CandidateClient(
        "http://mock", transport=transport, connect_retries=retries, backoff_s=0.001, seed=1
    )
    async with client:
        result = await client.send(plain_request())
    assert len(attempts) == retries + 1
    assert result.attempts == retries + 1
    assert result.error_kind is ReplayErrorKind.CONNECT
    assert result.response is None
    assert result.error_detail == f"{exc.__name__}: refused"


async def test_retry_backoff_doubles_with_bounded_jitter() -> None:
    transport, attempts = counting_transport(httpx.ConnectError)
    client = CandidateClient(
        "http://mock", transport=transport, connect_retries=3, backoff_s=0.04, seed=7
    )
    async with client:
        await client.send(plain_request())
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert len(gaps) == 3
    for i, gap in enumerate(gaps):
        nominal = 0.04 * 2**i
        # The lower end is the backoff (a loaded machine only sleeps longer); the upper
        # end bounds a hang. The jitter's upper bound is not checkable on a wall clock.
        assert 0.5 * nominal * 0.9 <= gap <= 1.5 * nominal + 5.0, (i, gap)


async def test_connect_error_then_success_counts_attempts() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=completion("third time"))

    async with mock_client(handler, connect_retries=3, backoff_s=0.001) as client:
        result = await client.send(plain_request())
    assert result.error_kind is None
    assert result.attempts == 3
    assert result.response is not None
    assert result.response.text == "third time"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (httpx.ReadTimeout, ReplayErrorKind.TIMEOUT),
        (httpx.WriteTimeout, ReplayErrorKind.TIMEOUT),
        (httpx.PoolTimeout, ReplayErrorKind.TIMEOUT),
        (httpx.ReadError, ReplayErrorKind.CONNECT),
        (httpx.RemoteProtocolError, ReplayErrorKind.CONNECT),
    ],
)
async def test_errors_after_the_request_was_sent_are_not_retried(
    exc: type[httpx.TransportError], kind: ReplayErrorKind
) -> None:
    transport, attempts = counting_transport(exc)
    async with CandidateClient("http://mock", transport=transport, connect_retries=5) as client:
        result = await client.send(plain_request())
    assert len(attempts) == 1
    assert result.attempts == 1
    assert result.error_kind is kind
    assert result.response is None


async def test_closed_port_is_connect_after_retries_plus_one() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with CandidateClient(url, connect_retries=2, backoff_s=0.01) as client:
        started = time.perf_counter()
        result = await client.send(plain_request())
    assert result.error_kind is ReplayErrorKind.CONNECT
    assert result.attempts == 3
    assert result.response is None
    # a bound on a hang: a refused port fails at once, a connect timeout would take 10 s
    assert time.perf_counter() - started < 10.0


# ------------------------------------------------------------------- lifecycle


async def test_start_twice_raises() -> None:
    client = mock_client(lambda r: httpx.Response(200, json=completion()))
    await client.start()
    try:
        with pytest.raises(LifecycleError, match="called twice"):
            await client.start()
    finally:
        await client.stop()


async def test_restart_after_stop_raises_and_stop_is_idempotent() -> None:
    client = mock_client(lambda r: httpx.Response(200, json=completion()))
    async with client:
        pass
    await client.stop()
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await client.start()
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        async with client:
            pass


async def test_send_before_start_or_after_stop_raises() -> None:
    client = mock_client(lambda r: httpx.Response(200, json=completion()))
    with pytest.raises(ReplayError, match="not started"):
        await client.send(plain_request())
    async with client:
        assert (await client.send(plain_request())).error_kind is None
    with pytest.raises(ReplayError, match="not started"):
        await client.send(plain_request())


@pytest.mark.parametrize("url", ["localhost:8000", "ftp://host", ""])
async def test_base_url_needs_a_http_scheme(url: str) -> None:
    with pytest.raises(ReplayError, match="http:// or https://"):
        CandidateClient(url)


async def test_concurrent_sends_share_one_client(text_rows: list[RecordedRow]) -> None:
    app = mock_app(text_rows)
    async with asgi_client(app, max_connections=4) as client:
        results: Sequence[ReplayResult] = await asyncio.gather(
            *(client.send(replay_request(r, stream=True)) for r in text_rows * 3)
        )
    assert [r.response.text if r.response else None for r in results] == [
        r.output_text for r in text_rows * 3
    ]
