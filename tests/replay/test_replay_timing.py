"""CandidateClient: TTFC beside TTFT, and candidate answers served from a cache marked.

Seam: ``httpx.MockTransport`` with a body that is an async generator, so reasoning and
content arrive as separate pieces with a pause between them (the pause is a lower bound
on TTFC − TTFT whatever the machine's load; nothing asserts an upper bound).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.capture.table_import import row_to_exchange
from shadoweval.capture_log import LogEntry
from shadoweval.config import CacheHitRule
from shadoweval.records import HeaderPair, ModelIdentity, ReplayErrorKind, ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request
from shadoweval.replay.runner import ReplayRunner, TargetSpec
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.replay.conftest import chat_body, make_exchange, mock_app

pytestmark = pytest.mark.anyio

PAUSE_S = 0.05
BASELINE = ModelIdentity(name="Meta-Llama-3-8B-Instruct")
CANDIDATE = ModelIdentity(name="Meta-Llama-3.1-8B-Instruct-Turbo")


def request(*, stream: bool) -> ReplayRequest:
    built = build_replay_request(make_exchange(chat_body(stream=stream)), api_key="shadow-key")
    assert isinstance(built, ReplayRequest)
    return built


def client(handler: Callable[[httpx.Request], httpx.Response], **kwargs: Any) -> CandidateClient:
    return CandidateClient("http://mock", transport=httpx.MockTransport(handler), **kwargs)


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "cand",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def thinking_stream() -> AsyncIterator[bytes]:
    yield event({"role": "assistant", "content": ""})
    yield event({"reasoning_content": "Let me think."})
    await asyncio.sleep(PAUSE_S)
    yield event({"reasoning_content": " Still thinking."})
    await asyncio.sleep(PAUSE_S)
    yield event({"content": "42"})
    yield event({}, finish="stop")
    yield b"data: [DONE]\n\n"


async def test_stream_ttfc_is_the_first_content_after_the_reasoning() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=thinking_stream()
        )

    async with client(handler) as c:
        result = await c.send(request(stream=True))
    assert result.error_kind is None
    assert result.response is not None
    assert result.response.text == "42"
    assert result.response.reasoning_text == "Let me think. Still thinking."
    t = result.timings
    assert t.ttft_ms is not None
    assert t.ttfc_ms is not None
    assert t.e2e_ms is not None
    # Two pauses separate the first reasoning token from the first content.
    assert t.ttfc_ms - t.ttft_ms >= 2 * PAUSE_S * 1000 * 0.95
    assert t.ttfc_ms <= t.e2e_ms
    assert not result.response.cache_hit


async def test_non_streamed_ttfc_is_e2e() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "cand",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}
        ],
    }

    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    async with client(handler) as c:
        result = await c.send(request(stream=False))
    assert result.timings.ttft_ms is None
    assert result.timings.ttfc_ms == result.timings.e2e_ms
    assert result.timings.e2e_ms is not None


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
async def test_a_cached_candidate_answer_is_marked_with_the_matched_headers(stream: bool) -> None:
    body = (
        event({"content": "42"}, finish="stop") + b"data: [DONE]\n\n"
        if stream
        else orjson.dumps(
            {
                "id": "c",
                "object": "chat.completion",
                "model": "cand",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "42"},
                        "finish_reason": "stop",
                    }
                ],
            }
        )
    )
    content_type = "text/event-stream" if stream else "application/json"

    def handler(_: httpx.Request) -> httpx.Response:
        headers = [
            ("content-type", content_type),
            ("cf-cache-status", "HIT"),
            ("age", "41"),
            ("x-other", "HIT"),
        ]
        return httpx.Response(200, headers=headers, content=body)

    async with client(handler) as c:
        result = await c.send(request(stream=stream))
    assert result.error_kind is None
    assert result.response is not None
    assert result.response.text == "42"  # kept for the quality checks
    assert result.response.cache_hit
    assert result.response.cache_hit_headers == (
        HeaderPair(name="cf-cache-status", value="HIT"),
        HeaderPair(name="age", value="41"),
    )


async def test_rules_are_the_clients_and_can_be_turned_off() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream", "x-cache": "HIT", "x-edge": "cached"},
            content=event({"content": "hi"}, finish="stop") + b"data: [DONE]\n\n",
        )

    async with client(handler, cache_hit_rules=()) as off:
        unmarked = await off.send(request(stream=True))
    assert unmarked.response is not None
    assert not unmarked.response.cache_hit
    rules = (CacheHitRule(header="X-Edge", equals=("cached",)),)
    async with client(handler, cache_hit_rules=rules) as custom:
        marked = await custom.send(request(stream=True))
    assert marked.response is not None
    assert marked.response.cache_hit_headers == (HeaderPair(name="x-edge", value="cached"),)


async def test_an_http_error_from_a_cache_is_marked_and_still_an_error() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, headers={"x-cache": "HIT"}, json={"error": {"message": "overloaded"}}
        )

    async with client(handler) as c:
        result = await c.send(request(stream=True))
    assert result.error_kind is ReplayErrorKind.HTTP_STATUS
    assert result.response is not None
    assert result.response.cache_hit


class CachingFront(httpx.AsyncBaseTransport):
    """A cache in front of the candidate, as a transport seam: every other answer it
    relays says ``X-Cache: HIT``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.relayed = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.relayed += 1
        if self.relayed % 2:
            response.headers["X-Cache"] = "HIT"
        return response


async def test_the_runner_counts_cached_answers_and_stores_them_marked(
    repo: Repository, llama3_rows: list[RecordedRow], llama31_rows: list[RecordedRow]
) -> None:
    exchanges = [
        row_to_exchange(row, stream=True, sampling=None, baseline=BASELINE).model_copy(
            update={"exchange_id": f"ex-{i:05d}"}
        )
        for i, row in enumerate(llama3_rows[:9])
    ]
    run_id = repo.create_run(
        name="cache", baseline=BASELINE, candidate=CANDIDATE, policy_hash="0" * 64, policy_yaml=""
    ).run_id
    front = CachingFront(httpx.ASGITransport(app=mock_app(llama31_rows)))
    target = TargetSpec(
        ReplayTarget.CANDIDATE, CandidateClient("http://c", transport=front), CANDIDATE
    )
    async with target.client:
        entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
        report = await ReplayRunner(repo, run_id, [target], progress=False).run(entries)
    assert front.relayed == 9
    assert dict(report.cache_hits) == {"candidate": 5}
    assert report.as_dict()["cache_hits"] == {"candidate": 5}
    stored = repo.load_outcomes(run_id)
    marked = [o for o in stored if o.response is not None and o.response.cache_hit]
    assert len(marked) == 5
    assert all(
        o.response is not None
        and o.response.cache_hit_headers == (HeaderPair(name="x-cache", value="HIT"),)
        for o in marked
    )
    assert all(o.timings.ttfc_ms is not None for o in stored)
