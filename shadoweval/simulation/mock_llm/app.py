"""The mock LLM server: a Starlette app that answers from recorded outputs.

This is a **test double** of an OpenAI-compatible model server, for demos and tests of the
replay path. It knows only the prompts in its table; it does not run a model.

Endpoints:

* ``GET /v1/models`` — lists the one model (``owned_by: "shadow-eval-mock"``).
* ``POST /v1/chat/completions`` — the recorded answer, streamed (SSE) or as JSON
  (formats in :mod:`shadoweval.simulation.mock_llm.answers`), paced by a latency profile
  (:mod:`shadoweval.simulation.mock_llm.latency`), with seeded injected faults
  (:mod:`shadoweval.simulation.mock_llm.faults`) and, when asked, llama.cpp's stream cuts
  (:mod:`shadoweval.simulation.mock_llm.cuts`). The request's ``model`` is not checked;
  responses name ``model_name``.
* ``POST /v1/completions`` — the legacy completions API: the ``prompt`` (a string, or a
  list of strings joined by newlines) is looked up as one user message, and the recorded
  text comes back as a ``text_completion`` (streamed or not; tool calls are left out),
  paced like chat, with the injected error and hang faults.
* ``POST /v1/responses`` — the Responses API from the same table, with ``store`` and
  ``previous_response_id`` (:mod:`shadoweval.simulation.mock_llm.responses`).
* ``POST /v1/messages`` — the Anthropic Messages API from the same table
  (:mod:`shadoweval.simulation.mock_llm.messages`).
* ``GET /health`` — ``{"status": "ok", "rows": N}``.

Errors use OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``: a body that is
not JSON or not a chat request → 400 (``invalid_json`` / ``invalid_request``); a prompt not
in the table → 404 ``prompt_not_recorded``; unknown paths → 404 ``not_found``. Every
response carries ``x-mock-llm: shadow-eval test double``.

Timing: streamed responses send the role chunk at once, the first piece after TTFT and each
further piece ITL later; non-streamed responses wait TTFT + (pieces − 1) × ITL (the
moment the stream's last piece would arrive, so a ``table`` profile reproduces the
recorded latency) and then answer. ``time_scale`` multiplies every delay.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from shadoweval.llm_protocol import ChatCompletionRequest, CompletionRequest
from shadoweval.simulation.mock_llm.answers import (
    SSE_DONE,
    Answer,
    RecordedIndex,
    prompt_excerpt,
    sse,
)
from shadoweval.simulation.mock_llm.cuts import StreamCuts, prompt_pieces
from shadoweval.simulation.mock_llm.faults import FaultConfig, FaultKind, seeded_int, seeded_unit
from shadoweval.simulation.mock_llm.latency import Delays, LatencyProfile
from shadoweval.simulation.mock_llm.responses import responses_endpoint
from shadoweval.simulation.mock_llm.wire import (
    MOCK_HEADER,
    OWNED_BY,
    PROXY_502_HTML,
    error_json,
    json_object_body,
)
from shadoweval.simulation.mock_llm.wire import event_stream as _event_stream
from shadoweval.simulation.mock_llm.wire import hang as _hang
from shadoweval.simulation.mock_llm.wire import sleep as _sleep
from shadoweval.simulation.mock_llm.wire import sleep_until as _sleep_until
from shadoweval.tables import RecordedRow, prompt_key


class MockState:
    """Everything a running mock server holds: table, profile, faults, attempt counters."""

    def __init__(
        self,
        rows: Sequence[RecordedRow],
        *,
        latency: LatencyProfile,
        faults: FaultConfig,
        seed: int,
        model_name: str,
        time_scale: float,
        cuts: StreamCuts | None = None,
    ) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.index = RecordedIndex(rows)
        self.latency = latency
        self.faults = faults
        self.seed = seed
        self.model_name = model_name
        self.time_scale = time_scale
        self.cuts = cuts or StreamCuts()
        self.arrivals = 0
        """Chat requests arrived so far (a stream started as request ``k`` is cut by
        ``cuts.interrupt_running`` once this passes ``k``)."""
        self._next_arrival: anyio.Event | None = None
        self._attempts: dict[str, int] = {}

    def arrive(self) -> int:
        """Count one more chat request (waking streams that wait for a newer one); its
        1-based arrival number."""
        self.arrivals += 1
        if self._next_arrival is not None:
            self._next_arrival.set()
            self._next_arrival = None
        return self.arrivals

    async def cut_before(self, arrival: int, deadline: float) -> bool:
        """Wait until ``deadline`` (the next piece is due) on the event loop's clock;
        ``True`` when the stream that arrived as request ``arrival`` must be cut then:
        ``cuts.interrupt_running`` is on and a newer request arrived (which wakes it at
        once, as the request waiting for llama.cpp's lock does)."""
        if not self.cuts.interrupt_running:
            await _sleep_until(deadline)
            return False
        if self.arrivals == arrival:
            if self._next_arrival is None:
                self._next_arrival = anyio.Event()
            with anyio.CancelScope(deadline=deadline):
                await self._next_arrival.wait()
        return self.arrivals > arrival

    def next_attempt(self, key: str) -> int:
        """Count one more request for prompt ``key``; return its 0-based attempt number."""
        attempt = self._attempts.get(key, 0)
        self._attempts[key] = attempt + 1
        return attempt

    def fault(self, key: str, attempt: int) -> FaultKind:
        """The fault drawn for this prompt and attempt."""
        return self.faults.pick(seeded_unit(self.seed, "fault", key, attempt))

    def delays(self, key: str, row: RecordedRow, pieces: int) -> Delays:
        """The delays drawn for this prompt (seeded by prompt key, not arrival order)."""
        rng = random.Random(seeded_int(self.seed, "latency", key))
        raw = self.latency.delays(row, pieces, rng)
        return Delays(raw.ttft_s * self.time_scale, raw.itl_s * self.time_scale)


@dataclass(frozen=True, slots=True)
class _Cut:
    """How one stream may be cut (:mod:`shadoweval.simulation.mock_llm.cuts`): before each
    content piece, a newer request cuts it (``[DONE]``, no finish chunk) when ``state``
    interrupts running streams; after ``budget`` pieces the body ends (no finish chunk,
    no ``[DONE]``)."""

    state: MockState | None = None
    arrival: int = 0
    budget: int | None = None

    async def due(self, deadline: float) -> bool:
        """Wait until the piece is due; ``True`` when the stream is interrupted instead."""
        if self.state is None:
            await _sleep_until(deadline)
            return False
        return await self.state.cut_before(self.arrival, deadline)


def _stream(
    answer: Answer, delays: Delays, *, include_usage: bool, malformed: bool, cut: _Cut = _Cut()
) -> Response:
    async def events() -> AsyncIterator[bytes]:
        yield sse(answer.role_chunk())
        # Token i is due at start + TTFT + i·ITL: on a schedule, as a model server emits
        # them, so a late wake-up (a loaded event loop) delays one token, never all later ones.
        start = anyio.current_time()
        for i, delta in enumerate(answer.deltas):
            if await cut.due(start + delays.ttft_s + i * delays.itl_s):
                yield SSE_DONE
                return
            if cut.budget is not None and i >= cut.budget:
                return
            if malformed and i == 0:
                yield b"data: " + orjson.dumps(answer.chunk(delta))[:40] + b"\n\n"
            else:
                yield sse(answer.chunk(delta))
        if not answer.deltas:
            await _sleep(delays.ttft_s)
        if malformed and not answer.deltas:
            yield b"data: " + orjson.dumps(answer.finish_chunk())[:40] + b"\n\n"
        else:
            yield sse(answer.finish_chunk())
        if include_usage:
            yield sse(answer.usage_chunk())
        yield SSE_DONE

    return _event_stream(events())


async def _chat(request: Request) -> Response:
    state: MockState = request.app.state.mock
    payload = await json_object_body(
        request,
        not_json="request body is not valid JSON",
        not_object="request body must be a JSON object",
    )
    if isinstance(payload, JSONResponse):
        return payload
    try:
        parsed = ChatCompletionRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return error_json(
            400,
            f"invalid chat completion request: {where}: {first['msg']}",
            type_="invalid_request_error",
            code="invalid_request",
            param=str(first["loc"][0]) if first["loc"] else None,
        )
    messages: list[dict[str, Any]] = payload["messages"]
    tools: list[dict[str, Any]] | None = payload.get("tools")
    key = prompt_key(messages)
    attempt = state.next_attempt(key)
    arrival = state.arrive()
    fault = state.fault(key, attempt)
    prompt_tokens = prompt_pieces(messages)
    context_error = state.cuts.context_error(prompt_tokens)
    if context_error is not None:
        return error_json(500, context_error, type_="server_error", code="context_window")
    if fault is FaultKind.ERROR:
        return error_json(
            500,
            "mock-llm injected fault: the server had an error while processing your request",
            type_="server_error",
            code="injected_error",
        )
    if fault is FaultKind.HTML:
        return HTMLResponse(PROXY_502_HTML, status_code=502, headers=dict([MOCK_HEADER]))
    if fault is FaultKind.HANG:
        return await _hang(request, state.faults.hang_limit_s)

    row = state.index.lookup(messages, tools)
    if row is None:
        return error_json(
            404,
            "mock-llm: this prompt is not in the recorded table "
            f"({len(state.index)} rows), so this test double cannot answer it: "
            f"{prompt_excerpt(messages)!r}",
            type_="invalid_request_error",
            code="prompt_not_recorded",
            param="messages",
        )
    answer = Answer.build(row, messages, model=state.model_name, attempt=attempt)
    delays = state.delays(key, row, answer.pieces)
    malformed = fault is FaultKind.MALFORMED
    budget = state.cuts.budget(prompt_tokens)
    if parsed.stream:
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        cut = _Cut(state, arrival, budget)
        return _stream(answer, delays, include_usage=include_usage, malformed=malformed, cut=cut)
    if budget is not None and answer.pieces > budget:
        message = state.cuts.context_error(state.cuts.context_tokens or 0)
        return error_json(500, message or "", type_="server_error", code="context_window")
    await _sleep(delays.total_s(answer.pieces))
    body = orjson.dumps(answer.completion())
    if malformed:
        body = body[: max(len(body) // 2, 1)]
    return Response(body, media_type="application/json", headers={MOCK_HEADER[0]: MOCK_HEADER[1]})


def _stream_text(answer: Answer, delays: Delays, *, include_usage: bool) -> Response:
    async def events() -> AsyncIterator[bytes]:
        start = anyio.current_time()
        pieces = answer.text_pieces
        for i, piece in enumerate(pieces):
            await _sleep_until(start + delays.ttft_s + i * delays.itl_s)
            yield sse(answer.text_chunk(piece))
        if not pieces:
            await _sleep(delays.ttft_s)
        yield sse(answer.text_chunk("", answer.text_completion()["choices"][0]["finish_reason"]))
        if include_usage:
            yield sse(answer.usage_chunk() | {"object": "text_completion"})
        yield SSE_DONE

    return _event_stream(events())


async def _completions(request: Request) -> Response:
    state: MockState = request.app.state.mock
    raw = await request.body()
    try:
        payload = orjson.loads(raw)
        parsed = CompletionRequest.model_validate(payload)
    except (orjson.JSONDecodeError, ValidationError) as exc:
        return error_json(
            400,
            f"invalid completion request: {exc}",
            type_="invalid_request_error",
            code="invalid_request",
            param="prompt",
        )
    prompt = parsed.prompt_text()
    if prompt is None:
        return error_json(
            400,
            "mock-llm answers text prompts only (not token ids)",
            type_="invalid_request_error",
            code="invalid_request",
            param="prompt",
        )
    messages = [{"role": "user", "content": prompt}]
    key = prompt_key(messages)
    attempt = state.next_attempt(key)
    fault = state.fault(key, attempt)
    if fault is FaultKind.ERROR:
        return error_json(
            500, "mock-llm injected fault", type_="server_error", code="injected_error"
        )
    if fault is FaultKind.HANG:
        return await _hang(request, state.faults.hang_limit_s)
    row = state.index.lookup(messages, None)
    if row is None:
        return error_json(
            404,
            f"mock-llm: this prompt is not in the recorded table: {prompt[:80]!r}",
            type_="invalid_request_error",
            code="prompt_not_recorded",
            param="prompt",
        )
    answer = Answer.build(row, messages, model=state.model_name, attempt=attempt)
    delays = state.delays(key, row, max(len(answer.text_pieces), 1))
    if parsed.stream:
        include_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
        return _stream_text(answer, delays, include_usage=include_usage)
    await _sleep(delays.total_s(max(len(answer.text_pieces), 1)))
    return Response(
        orjson.dumps(answer.text_completion()),
        media_type="application/json",
        headers={MOCK_HEADER[0]: MOCK_HEADER[1]},
    )


async def _models(request: Request) -> Response:
    state: MockState = request.app.state.mock
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {"id": state.model_name, "object": "model", "created": 0, "owned_by": OWNED_BY}
            ],
        },
        headers=dict([MOCK_HEADER]),
    )


async def _health(request: Request) -> Response:
    state: MockState = request.app.state.mock
    return JSONResponse({"status": "ok", "rows": len(state.index)}, headers=dict([MOCK_HEADER]))


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    code = "not_found" if status == 404 else "method_not_allowed" if status == 405 else "error"
    return error_json(
        status,
        f"mock-llm: {request.method} {request.url.path}: {getattr(exc, 'detail', exc)}",
        type_="invalid_request_error",
        code=code,
    )


def create_app(
    rows: Sequence[RecordedRow],
    *,
    latency: LatencyProfile,
    faults: FaultConfig,
    seed: int,
    model_name: str,
    time_scale: float = 1.0,
    cuts: StreamCuts | None = None,
) -> Starlette:
    """Build the mock server (a test double of an OpenAI-compatible model server).

    Args:
        rows: recorded rows to answer from (see :func:`shadoweval.tables.load_recorded_rows`).
        latency: how to pace answers
        (:func:`~shadoweval.simulation.mock_llm.latency.parse_latency_profile`).
        faults: injected fault rates.
        seed: seeds latency draws and faults (with the prompt key, never arrival order).
        model_name: the model id served and echoed in responses.
        time_scale: multiplies every delay (``0.01`` in tests; ``0`` = no waiting).
        cuts: llama.cpp's stream cuts to reproduce
            (:class:`~shadoweval.simulation.mock_llm.cuts.StreamCuts`; none by default).

    Returns:
        A Starlette ASGI app; run it with uvicorn or call it through
        ``httpx.ASGITransport``.
    """
    from shadoweval.simulation.mock_llm.messages import messages_endpoint  # imports this module

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", _chat, methods=["POST"]),
            Route("/v1/completions", _completions, methods=["POST"]),
            Route("/v1/responses", responses_endpoint, methods=["POST"]),
            Route("/v1/messages", messages_endpoint, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error},
    )
    app.state.mock = MockState(
        rows,
        latency=latency,
        faults=faults,
        seed=seed,
        model_name=model_name,
        time_scale=time_scale,
        cuts=cuts,
    )
    return app
