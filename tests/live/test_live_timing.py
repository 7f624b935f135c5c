"""The real sidecar in front of a real reasoning stream served over a socket: the client
gets every byte and header unchanged (cache headers included), and the capture log records
TTFT at the first reasoning token, TTFC at the first content, and the cache hit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings
from shadoweval.records import HeaderPair
from shadoweval.serving import BackgroundServer
from tests.live.harness import SidecarThread

THINK_S = 0.2
"""Pause between the reasoning and the answer: a lower bound on TTFC − TTFT."""


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "reasoner",
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def _reasoning_then_answer() -> AsyncIterator[bytes]:
    yield _event({"role": "assistant", "content": ""})
    yield _event({"reasoning_content": "Six times seven"})
    await asyncio.sleep(THINK_S / 2)
    yield _event({"reasoning_content": " is forty-two."})
    await asyncio.sleep(THINK_S / 2)
    yield _event({"content": "42"})
    yield _event({}, finish="stop")
    yield b"data: [DONE]\n\n"


async def _chat(request: Request) -> StreamingResponse:
    await request.body()
    return StreamingResponse(
        _reasoning_then_answer(),
        media_type="text/event-stream",
        headers={"X-Cache": "HIT", "Age": "3"},
    )


@pytest.fixture
def reasoning_model() -> Iterator[str]:
    app = Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])
    with BackgroundServer(app) as server:
        yield server.url


@pytest.mark.parametrize("builder", ["process", "thread"])
def test_ttfc_and_cache_hit_captured_through_the_real_sidecar(
    tmp_path: Path, reasoning_model: str, builder: str
) -> None:
    capture_dir = tmp_path / "capture"
    settings = CaptureSettings(
        upstream_url=reasoning_model,
        sinks=("file",),
        file_sink_directory=str(capture_dir),
        builder=builder,
    )
    body = {"model": "reasoner", "stream": True, "messages": [{"role": "user", "content": "6×7?"}]}
    with SidecarThread(settings) as sidecar:
        with httpx.stream(
            "POST", sidecar.url + "/v1/chat/completions", json=body, timeout=60
        ) as response:
            received = b"".join(response.iter_bytes())
            headers = response.headers
        with httpx.stream(
            "POST", reasoning_model + "/v1/chat/completions", json=body, timeout=60
        ) as direct:
            expected = b"".join(direct.iter_bytes())
    # The live path: every byte and the cache headers exactly as the model server sent them.
    assert received == expected
    assert (headers["x-cache"], headers["age"]) == ("HIT", "3")

    [entry] = list(read_capture_log(capture_dir))
    exchange = entry.exchange
    assert exchange is not None, entry.error
    assert exchange.response is not None
    assert exchange.response.text == "42"
    assert exchange.response.reasoning_text == "Six times seven is forty-two."
    assert exchange.response.cache_hit
    assert exchange.response.cache_hit_headers == (
        HeaderPair(name="x-cache", value="HIT"),
        HeaderPair(name="age", value="3"),
    )
    t = exchange.timings
    assert t.ttft_ms is not None
    assert t.ttfc_ms is not None
    assert t.e2e_ms is not None
    assert t.ttfc_ms - t.ttft_ms >= THINK_S * 1000 * 0.95
    assert t.ttfc_ms <= t.e2e_ms
    assert sidecar.metric("shadoweval_capture_cache_hits_total", header="x-cache") == 1
