"""Done means done: an exchange whose terminal event reached the client is ``done``.

The official ``openai`` clients close the connection as soon as they read ``data: [DONE]``.
When the upstream ends its body a little later (here 200 ms later), the proxy sees the
client leave and records the capture as ``cancelled``; the builder must still record the
exchange as ``done`` — the client got everything. A stream cut before its terminal event
stays ``cancelled``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from starlette.types import Receive, Scope, Send

from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.pipeline import CapturePipeline
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sinks.file import FileSink
from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings
from shadoweval.records import ExchangeOutcome, ModelIdentity, utc_now
from tests.capture.upstreams import ProxyHarness, ServerThread, running_proxy

LIVE = ModelIdentity(name="live-model", weights_hash="sha256:w")
WORDS = ["The", " answer", " is", " forty", "-two", "."]
DONE_TO_END_S = 0.2
"""How long the upstream waits between ``data: [DONE]`` and the end of its body."""


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "live-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE_CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "live-model",
    "choices": [],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
}


def stream_events(*, done_marker: bool = True) -> list[bytes]:
    """A complete chat-completion stream: role, words, finish chunk, usage, ``[DONE]``."""
    events = [_event(_chunk({"role": "assistant", "content": ""}))]
    events += [_event(_chunk({"content": w})) for w in WORDS]
    events += [_event(_chunk({}, "stop")), _event(USAGE_CHUNK)]
    if done_marker:
        events.append(b"data: [DONE]\n\n")
    return events


async def late_end_upstream(scope: Scope, receive: Receive, send: Send) -> None:
    """Streams :func:`stream_events`, then ends the body ``DONE_TO_END_S`` after ``[DONE]``."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for event in stream_events():
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await asyncio.sleep(DONE_TO_END_S)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _raw(chunks: list[bytes], outcome: ExchangeOutcome, *, streamed: bool = True) -> RawCapture:
    content_type = b"text/event-stream" if streamed else b"application/json"
    raw = RawCapture(
        exchange_id="ex-1",
        captured_at=utc_now(),
        start_ns=1_000_000_000,
        method="POST",
        path="/v1/chat/completions",
        request_headers=[(b"content-type", b"application/json")],
        request_body=b'{"model": "live-model", "messages": [{"role": "user", "content": "q"}]}',
        status_code=200,
        response_headers=[(b"content-type", content_type)],
        response_start_ns=1_010_000_000,
        outcome=outcome,
        error="client disconnected" if outcome is ExchangeOutcome.CANCELLED else None,
    )
    for i, piece in enumerate(chunks):
        raw.chunks.append((1_020_000_000 + i * 1_000_000, piece))
        raw.captured_bytes += len(piece)
    raw.end_ns = 1_100_000_000
    return raw


def _build(raw: RawCapture) -> tuple[ExchangeOutcome, dict[str, object]]:
    result = ExchangeBuilder(CaptureSettings(), LIVE, "sidecar:test").build(raw)
    return result.outcome, json.loads(result.built.payload)


def test_a_stream_cancelled_after_done_is_done_and_keeps_no_disconnect_error() -> None:
    outcome, record = _build(_raw(stream_events(), ExchangeOutcome.CANCELLED))
    assert outcome is ExchangeOutcome.DONE
    assert record["outcome"] == "done"
    response = record["response"]
    assert isinstance(response, dict)
    assert response["text"] == "".join(WORDS)
    assert response["error_message"] is None


def test_a_stream_without_done_marker_is_done_after_its_finish_chunk_and_usage() -> None:
    outcome, _ = _build(_raw(stream_events(done_marker=False), ExchangeOutcome.CANCELLED))
    assert outcome is ExchangeOutcome.DONE


@pytest.mark.parametrize("keep", [1, 4, 7, 8])
def test_a_stream_cut_before_its_terminal_event_stays_cancelled(keep: int) -> None:
    """Cut after the role chunk, mid-text, after the text, after the finish chunk (no usage)."""
    outcome, record = _build(_raw(stream_events()[:keep], ExchangeOutcome.CANCELLED))
    assert outcome is ExchangeOutcome.CANCELLED
    response = record["response"]
    assert isinstance(response, dict)
    assert "client disconnected" in str(response["error_message"])


def test_a_non_streamed_body_received_whole_is_done_and_a_cut_one_is_not() -> None:
    body = json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "live-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "forty-two"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    ).encode()
    whole, _ = _build(_raw([body[:40], body[40:]], ExchangeOutcome.CANCELLED, streamed=False))
    assert whole is ExchangeOutcome.DONE
    cut, _ = _build(_raw([body[:40]], ExchangeOutcome.CANCELLED, streamed=False))
    assert cut is ExchangeOutcome.CANCELLED


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with ServerThread(late_end_upstream) as server:
        yield server.url


@pytest.fixture
def proxy(upstream_url: str) -> Iterator[ProxyHarness]:
    with running_proxy(upstream_url) as harness:
        yield harness


N_SYNC = 100
N_ASYNC = 100


def _sync_stream(base_url: str) -> str:
    with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="live-model",
            messages=[{"role": "user", "content": "q"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


async def _async_streams(base_url: str, n: int) -> list[str]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0) as client:

        async def one() -> str:
            stream = await client.chat.completions.create(
                model="live-model",
                messages=[{"role": "user", "content": "q"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        return await asyncio.gather(*(one() for _ in range(n)))


def test_200_openai_client_streams_through_the_proxy_are_all_recorded_done(
    proxy: ProxyHarness,
) -> None:
    """100 streams from the sync client (10 threads) and 100 from the async client."""
    base_url = f"{proxy.url}/v1"
    with ThreadPoolExecutor(max_workers=10) as pool:
        sync_texts = list(pool.map(_sync_stream, [base_url] * N_SYNC))
    async_texts = asyncio.run(_async_streams(base_url, N_ASYNC))
    assert sync_texts + async_texts == ["".join(WORDS)] * (N_SYNC + N_ASYNC)

    raws = proxy.collector.wait(N_SYNC + N_ASYNC)
    # The case under test happened: the clients left before the upstream ended the body.
    assert sum(raw.outcome is ExchangeOutcome.CANCELLED for raw in raws) > 0
    builder = ExchangeBuilder(CaptureSettings(), LIVE, "sidecar:test")
    outcomes = [builder.build(raw).outcome for raw in raws]
    assert outcomes.count(ExchangeOutcome.CANCELLED) == 0
    assert outcomes == [ExchangeOutcome.DONE] * (N_SYNC + N_ASYNC)


def test_an_upstream_break_after_done_is_done_and_a_break_mid_text_stays_error() -> None:
    after_done = _raw(stream_events(), ExchangeOutcome.ERROR)
    after_done.error = "upstream failed mid-response: RemoteProtocolError: peer closed"
    outcome, record = _build(after_done)
    assert outcome is ExchangeOutcome.DONE
    response = record["response"]
    assert isinstance(response, dict)
    assert response["error_message"] is None
    mid_text = _raw(stream_events()[:4], ExchangeOutcome.ERROR)
    mid_text.error = "upstream failed mid-response: RemoteProtocolError: peer closed"
    outcome, _ = _build(mid_text)
    assert outcome is ExchangeOutcome.ERROR


@pytest.mark.anyio
async def test_the_built_counter_has_the_records_outcomes(tmp_path: Path) -> None:
    """``captured_total`` counts what the live path saw; ``built_total`` the records."""
    metrics = CaptureMetrics()
    sink = FileSink(tmp_path / "log", metrics)
    builder = ExchangeBuilder(CaptureSettings(), LIVE, source="test")
    async with CapturePipeline(builder, [sink], metrics, mode="inline") as pipeline:
        assert pipeline.offer(_raw(stream_events(), ExchangeOutcome.CANCELLED))
        assert pipeline.offer(_raw(stream_events()[:3], ExchangeOutcome.CANCELLED))
    entries = list(read_capture_log(tmp_path / "log"))
    assert sorted(e.exchange.outcome.value for e in entries if e.exchange) == ["cancelled", "done"]

    def sample(name: str, outcome: str) -> float:
        labels = {"route": "/v1/chat/completions", "outcome": outcome}
        return metrics.registry.get_sample_value(name, labels) or 0.0

    assert sample("shadoweval_capture_captured_total", "cancelled") == 2.0
    assert sample("shadoweval_capture_built_total", "done") == 1.0
    assert sample("shadoweval_capture_built_total", "cancelled") == 1.0
