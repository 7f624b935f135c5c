"""Interrupted is not empty (issue 29, item 8): one rule for a 200 stream cut before its
finish_reason, applied by the replay client and read back by compare and gate.

Seams: mock-llm (the test double) under real uvicorn in its llama.cpp modes
(:class:`~shadoweval.simulation.mock_llm.StreamCuts`: a running stream cut when a new
request arrives; a context window), and ``httpx.MockTransport`` for the exact byte shapes
the rule tells apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.capture.table_import import row_to_exchange
from shadoweval.llm_protocol.interruption import failure_cause, stream_interruption
from shadoweval.records import (
    INTERRUPTED_WORDS,
    FailureCause,
    ModelIdentity,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
)
from shadoweval.replay.client import CandidateClient, ReplayResult
from shadoweval.replay.exchange_replay import ReplayReport
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request
from shadoweval.simulation.mock_llm import (
    FaultConfig,
    FixedLatency,
    NoLatency,
    StreamCuts,
    create_app,
)
from shadoweval.simulation.mock_llm.app import MockState
from shadoweval.simulation.mock_llm.cuts import prompt_pieces
from shadoweval.simulation.mock_llm.pieces import split_pieces
from shadoweval.tables import RecordedRow
from tests.replay.conftest import ServeFn

pytestmark = pytest.mark.anyio

BASE = ModelIdentity(name="baseline-v1")


def replay_request(row: RecordedRow, *, stream: bool = True) -> ReplayRequest:
    exchange = row_to_exchange(row, stream=stream, sampling=None, baseline=BASE)
    request = build_replay_request(exchange, model="candidate-v2")
    assert isinstance(request, ReplayRequest)
    return request


@pytest.fixture(scope="module")
def rows(llama31_rows: list[RecordedRow]) -> list[RecordedRow]:
    """AlpacaEval answers of some length (at least 20 word pieces)."""
    return [r for r in llama31_rows if len(split_pieces(r.output_text or "")) >= 20][:6]


def cause(result: ReplayResult) -> FailureCause | None:
    return failure_cause(result.error_kind, result.response, result.error_detail)


# ------------------------------------------------------------ the rule on byte shapes


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"
ROLE = chunk({"role": "assistant"})
SHAPES: dict[str, tuple[bytes, ReplayErrorKind | None, FailureCause | None]] = {
    # llama-cpp-python's interrupt_requests at its defaults: role chunk, then [DONE]
    "role_then_done": (ROLE + DONE, ReplayErrorKind.INTERRUPTED, FailureCause.INTERRUPTED),
    # the same, after some content: still cut, by the server
    "content_then_done": (
        ROLE + chunk({"content": "Paris is"}) + DONE,
        ReplayErrorKind.INTERRUPTED,
        FailureCause.INTERRUPTED,
    ),
    # its context window: content, then the body ends (no finish chunk, no [DONE])
    "content_then_end": (
        ROLE + chunk({"content": "Paris is the"}),
        ReplayErrorKind.INTERRUPTED,
        FailureCause.CONTEXT_LENGTH,
    ),
    "role_then_end": (ROLE, ReplayErrorKind.INTERRUPTED, FailureCause.INTERRUPTED),
    # finished streams are answers, whatever they say
    "finished": (ROLE + chunk({"content": "Paris."}, "stop") + DONE, None, None),
    "finished_without_done": (ROLE + chunk({"content": "Paris."}, "stop"), None, None),
    "empty_but_finished": (ROLE + chunk({}, "stop") + DONE, None, None),
}


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_the_rule_on_each_stream_shape(shape: str, rows: list[RecordedRow]) -> None:
    body, kind, expected_cause = SHAPES[shape]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    transport = httpx.MockTransport(handler)
    async with CandidateClient("http://mock", transport=transport) as client:
        result = await client.send(replay_request(rows[0]))
    assert result.error_kind is kind
    assert cause(result) is expected_cause
    if kind is not None:
        assert result.error_detail is not None
        assert result.error_detail.startswith(INTERRUPTED_WORDS)
        assert result.response is not None
        assert result.response.body
    assert ("context length" in (result.error_detail or "")) is (
        expected_cause is FailureCause.CONTEXT_LENGTH
    )


def test_the_rule_needs_no_finish_reason_to_be_missing() -> None:
    assert stream_interruption(output_chars=0, finish_seen=True, done_seen=False) is None
    found = stream_interruption(output_chars=0, finish_seen=False, done_seen=True)
    assert found is not None
    assert found.cause is FailureCause.INTERRUPTED


# ------------------------------------------------ mock-llm in llama.cpp's modes, over HTTP


def arrived(state: MockState, n: int) -> bool:
    """The server has seen ``n`` chat requests."""
    return state.arrivals >= n


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (the server runs in its own thread)."""
    while not condition():  # noqa: ASYNC110 - the condition is set on the server's thread
        await asyncio.sleep(0.005)


async def cut_all_but_the_last(
    serve: ServeFn, rows: list[RecordedRow], requests: list[ReplayRequest]
) -> list[ReplayResult]:
    """Send ``requests`` one after another to a mock that interrupts running streams, its
    first token due only after a minute: every stream is still waiting for it when the next
    request arrives, so each one but the last is cut, deterministically. Their results."""
    app = create_app(
        rows,
        latency=FixedLatency(ttft_ms=60_000, itl_ms=10),
        faults=FaultConfig(),
        seed=0,
        model_name="candidate-v2",
        cuts=StreamCuts(interrupt_running=True),
    )
    state: MockState = app.state.mock
    with serve(app) as server:
        async with CandidateClient(server.url, timeout_s=120) as client:
            sends: list[asyncio.Task[ReplayResult]] = []
            for n, request in enumerate(requests, start=1):
                sends.append(asyncio.create_task(client.send(request)))
                await until(partial(arrived, state, n))
            cut = await asyncio.gather(*sends[:-1])
            sends[-1].cancel()
    return list(cut)


async def test_a_new_request_cuts_the_running_stream(
    serve: ServeFn, rows: list[RecordedRow]
) -> None:
    # The first token is due only after a minute: every stream is still waiting for it
    # when the next request arrives, so each one but the last is cut, deterministically.
    cut = await cut_all_but_the_last(serve, rows, [replay_request(row) for row in rows[:4]])
    for result in cut:
        assert result.error_kind is ReplayErrorKind.INTERRUPTED, result
        assert result.response is not None
        assert result.response.status_code == 200
        assert not result.response.text
        assert cause(result) is FailureCause.INTERRUPTED
        assert "without content" in (result.error_detail or "")


def dialect_request(row: RecordedRow, route: str, n: int) -> ReplayRequest:
    """A streamed Messages or Responses request for ``row``'s conversation."""
    body: dict[str, Any] = {"model": "candidate-v2", "stream": True}
    if route == "/v1/messages":
        body |= {"max_tokens": 512, "messages": row.messages}
    else:
        body |= {"input": row.messages, "store": False}
    return ReplayRequest(
        exchange_id=f"x{n}",
        path=route,
        body=orjson.dumps(body),
        headers={"content-type": "application/json", "accept": "text/event-stream"},
        stream=True,
    )


@pytest.mark.parametrize(
    ("route", "end_event"),
    [("/v1/messages", "message_stop"), ("/v1/responses", "response.completed")],
)
async def test_a_new_request_cuts_a_running_messages_or_responses_stream(
    serve: ServeFn, rows: list[RecordedRow], route: str, end_event: str
) -> None:
    # A server that cuts running streams (the mock with interrupt_running) is named as
    # such on the Messages and Responses APIs too: an interruption, never the context
    # length, never an empty answer.
    requests = [dialect_request(row, route, n) for n, row in enumerate(rows[:3], start=1)]
    cut = await cut_all_but_the_last(serve, rows, requests)
    for result in cut:
        assert result.error_kind is ReplayErrorKind.INTERRUPTED, result
        assert result.response is not None
        assert result.response.status_code == 200
        assert cause(result) is FailureCause.INTERRUPTED
        assert f"without {end_event}" in (result.error_detail or "")


async def test_one_request_at_a_time_is_never_cut(serve: ServeFn, rows: list[RecordedRow]) -> None:
    app = create_app(
        rows,
        latency=NoLatency(),
        faults=FaultConfig(),
        seed=0,
        model_name="candidate-v2",
        cuts=StreamCuts(interrupt_running=True),
    )
    with serve(app) as server:
        async with CandidateClient(server.url) as client:
            results = [await client.send(replay_request(row)) for row in rows]
    assert [r.error_kind for r in results] == [None] * len(rows)
    assert [r.response.text if r.response else None for r in results] == [
        r.output_text for r in rows
    ]


async def test_a_context_window_cuts_after_content_or_refuses_the_prompt(
    serve: ServeFn, rows: list[RecordedRow]
) -> None:
    row = rows[0]
    prompt = prompt_pieces(row.messages)
    fits = create_app(
        rows,
        latency=NoLatency(),
        faults=FaultConfig(),
        seed=0,
        model_name="candidate-v2",
        cuts=StreamCuts(context_tokens=prompt + 5),
    )
    too_small = create_app(
        rows,
        latency=NoLatency(),
        faults=FaultConfig(),
        seed=0,
        model_name="candidate-v2",
        cuts=StreamCuts(context_tokens=prompt),
    )
    with serve(fits) as server:
        async with CandidateClient(server.url, keep_raw_body=True) as client:
            streamed = await client.send(replay_request(row))
            whole = await client.send(replay_request(row, stream=False))
    with serve(too_small) as server:
        async with CandidateClient(server.url) as client:
            refused = await client.send(replay_request(row))
    assert streamed.error_kind is ReplayErrorKind.INTERRUPTED
    assert streamed.response is not None
    assert streamed.response.text == "".join(split_pieces(row.output_text or "")[:5])
    assert "[DONE]" not in (streamed.response.body or "")
    assert cause(streamed) is FailureCause.CONTEXT_LENGTH
    for failed in (whole, refused):
        assert failed.error_kind is ReplayErrorKind.HTTP_STATUS
        assert "exceed context window" in (failed.error_detail or "")
        assert cause(failed) is FailureCause.CONTEXT_LENGTH


# ------------------------------------------------------------- a burst in the report


def outcome(target: ReplayTarget, kind: ReplayErrorKind | None, i: int) -> ReplayOutcome:
    from shadoweval.records import ResponseRecord

    return ReplayOutcome(
        run_id="r",
        exchange_id=f"e{i}",
        target=target,
        model=BASE,
        response=ResponseRecord(status_code=200, streamed=True),
        error_kind=kind,
    )


@pytest.mark.parametrize(
    ("concurrency", "cut", "advised"), [(16, 2, True), (16, 1, False), (1, 9, False)]
)
def test_a_burst_of_interruptions_under_concurrency_is_named_with_what_to_do(
    concurrency: int, cut: int, advised: bool
) -> None:
    report = ReplayReport(run_id="r", concurrency=concurrency)
    for i in range(10):
        kind = ReplayErrorKind.INTERRUPTED if i < cut else None
        report.count_outcome(outcome(ReplayTarget.CANDIDATE, kind, i))
    advice = report.interruption_advice()
    assert (advice is not None) is advised
    counts = report.as_dict()
    assert counts["interrupted"] == ({"candidate": cut} if cut else {})
    assert counts["streamed"] == {"candidate": 10}
    if advised:
        assert advice is not None
        assert f"{cut} of 10 streamed replays" in advice
        assert "lower --concurrency (to 1)" in advice
        assert report.replay_pass("capture_log").interruption_advice() == advice
