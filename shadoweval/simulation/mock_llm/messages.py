"""mock-llm's ``POST /v1/messages``: the Anthropic Messages API, answered from the same
recorded table as chat.

The request (``system`` + ``messages``, string or text/tool blocks) is looked up as the
chat conversation it translates to (:func:`shadoweval.llm_protocol.messages_request.
messages_as_chat`; its ``tools`` as chat tools), so one table row answers both APIs. The
answer follows Anthropic's Messages wire format (Streaming Messages reference):

* non-streamed: ``{"id": "msg_…", "type": "message", "role": "assistant", "model",
  "content": [text block?, tool_use blocks…], "stop_reason", "stop_sequence": null,
  "usage": {"input_tokens", "output_tokens"}}``;
* streamed: named SSE events ``message_start`` (empty content, usage), ``ping``, per block
  ``content_block_start`` / ``content_block_delta`` (``text_delta`` per content piece,
  ``input_json_delta`` per argument fragment) / ``content_block_stop``, then
  ``message_delta`` (``stop_reason``, ``usage.output_tokens``) and ``message_stop``.

Each chat stream delta becomes one Messages event in the same order (a text piece a
``text_delta``; a tool call's first fragment its ``content_block_start``; an argument
fragment an ``input_json_delta``), paced by the same TTFT/ITL schedule. ``stop_reason`` is
the recorded finish reason in Anthropic's words (``stop`` → ``end_turn``, ``length`` →
``max_tokens``, ``tool_calls`` → ``tool_use``, ``content_filter`` → ``refusal``).

Like chat, the mock checks no credential (``x-api-key`` / ``anthropic-version`` are not
required); injected faults apply (error → 500 ``api_error``, html, hang, malformed), and so
does ``interrupt_running`` (a newer request cuts a running stream before its next piece: the
body ends without ``message_stop``); the context-window cut does not. Errors use
Anthropic's shape ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from shadoweval.llm_protocol.messages_request import (
    MessagesRequest,
    UntranslatableRequestError,
    chat_tools,
    messages_as_chat,
)
from shadoweval.simulation.mock_llm.answers import Answer, prompt_excerpt
from shadoweval.simulation.mock_llm.faults import FaultKind
from shadoweval.simulation.mock_llm.latency import Delays
from shadoweval.simulation.mock_llm.wire import (
    MOCK_HEADER,
    PROXY_502_HTML,
    event_stream,
    hang,
    sleep,
)
from shadoweval.tables import prompt_key

if TYPE_CHECKING:
    from shadoweval.simulation.mock_llm.app import MockState

_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
"""A recorded (OpenAI) finish reason in Anthropic's words; others pass as they are."""


def anthropic_error(status: int, kind: str, message: str) -> JSONResponse:
    """An Anthropic-style error response ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status, headers=dict([MOCK_HEADER]))


def event(payload: dict[str, Any]) -> bytes:
    """One named SSE event: ``event: <type>`` and the JSON ``data`` (which repeats it)."""
    name = str(payload["type"]).encode()
    return b"event: " + name + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _input(arguments: str) -> Any:
    """A recorded call's arguments as the ``input`` object (unparsable: ``{}``)."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class MessagesAnswer:
    """An :class:`~shadoweval.simulation.mock_llm.answers.Answer` in the Messages format."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.message_id = answer.completion_id.replace("chatcmpl-", "msg_", 1)
        raw = answer.finish_reason
        self.stop_reason = _STOP_REASONS.get(raw, raw)

    def _envelope(self, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        a = self.answer
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": a.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": a.prompt_tokens,
                "output_tokens": a.completion_tokens if stop is not None else 0,
            },
        }

    def message(self) -> dict[str, Any]:
        """The non-streamed message."""
        a = self.answer
        content: list[dict[str, Any]] = []
        if a.text or not a.tool_calls:
            content.append({"type": "text", "text": a.text or ""})
        content.extend(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": _input(call["function"]["arguments"]),
            }
            for call in a.tool_calls
        )
        return self._envelope(content, self.stop_reason)

    def events(self) -> list[tuple[bool, bytes]]:
        """The stream's events in order, each with whether it is a paced piece (one per
        chat delta) or sent at once after the one before."""
        out: list[tuple[bool, bytes]] = [
            (False, event({"type": "message_start", "message": self._envelope([], None)})),
            (False, event({"type": "ping"})),
        ]
        index = -1
        for delta in self.answer.deltas:
            piece: dict[str, Any]
            block: dict[str, Any]
            if "content" in delta:
                if index < 0:
                    index = 0
                    block = {"type": "text", "text": ""}
                    start = {"type": "content_block_start", "index": 0, "content_block": block}
                    out.append((False, event(start)))
                text = {"type": "text_delta", "text": delta["content"]}
                piece = {"type": "content_block_delta", "index": index, "delta": text}
            else:
                fragment = delta["tool_calls"][0]
                if fragment.get("id") is not None:  # a call's first fragment: a new block
                    if index >= 0:
                        stop = {"type": "content_block_stop", "index": index}
                        out.append((False, event(stop)))
                    index += 1
                    name = fragment["function"]["name"]
                    block = {"type": "tool_use", "id": fragment["id"], "name": name, "input": {}}
                    piece = {"type": "content_block_start", "index": index, "content_block": block}
                else:
                    partial = {"type": "input_json_delta", "partial_json": ""}
                    partial["partial_json"] = fragment["function"]["arguments"]
                    piece = {"type": "content_block_delta", "index": index, "delta": partial}
            out.append((True, event(piece)))
        if index < 0:  # no content at all: one empty text block
            index = 0
            block = {"type": "text", "text": ""}
            out.append(
                (False, event({"type": "content_block_start", "index": 0, "content_block": block}))
            )
        out.append((False, event({"type": "content_block_stop", "index": index})))
        usage = {"output_tokens": self.answer.completion_tokens}
        end = {"stop_reason": self.stop_reason, "stop_sequence": None}
        out.append((False, event({"type": "message_delta", "delta": end, "usage": usage})))
        out.append((False, event({"type": "message_stop"})))
        return out


def _stream(
    answer: MessagesAnswer, delays: Delays, *, malformed: bool, state: MockState, arrival: int
) -> Response:
    """The answer's events, paced; with ``interrupt_running`` a newer request cuts the
    stream before its next piece: the body ends without ``message_delta`` and
    ``message_stop`` (a server that cuts running streams, as llama.cpp does)."""
    ttft_s, itl_s = delays.ttft_s, delays.itl_s

    async def events() -> AsyncIterator[bytes]:
        start = anyio.current_time()
        paced = 0
        for is_piece, data in answer.events():
            if is_piece:
                if await state.cut_before(arrival, start + ttft_s + paced * itl_s):
                    return
                if malformed and paced == 0:
                    data = data[: max(len(data) // 2, 1)] + b"\n\n"
                paced += 1
            yield data
        if not paced:
            await sleep(ttft_s)

    return event_stream(events())


async def _injected(request: Request, fault: FaultKind, hang_limit_s: float) -> Response | None:
    """The answer of an injected error, HTML page or hang; ``None`` for the other faults."""
    match fault:
        case FaultKind.ERROR:
            return anthropic_error(500, "api_error", "mock-llm injected fault: internal error")
        case FaultKind.HTML:
            return HTMLResponse(PROXY_502_HTML, status_code=502, headers=dict([MOCK_HEADER]))
        case FaultKind.HANG:
            return await hang(request, hang_limit_s)
    return None


async def messages_endpoint(request: Request) -> Response:
    """``POST /v1/messages`` (module doc)."""
    state: MockState = request.app.state.mock
    try:
        payload = orjson.loads(await request.body())
        parsed = MessagesRequest.model_validate(payload)
        messages = messages_as_chat(parsed, [])
    except orjson.JSONDecodeError as exc:
        return anthropic_error(400, "invalid_request_error", f"request body is not JSON: {exc}")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = f"invalid Messages request: {where}: {first['msg']}"
        return anthropic_error(400, "invalid_request_error", message)
    except UntranslatableRequestError as exc:
        return anthropic_error(400, "invalid_request_error", f"mock-llm cannot answer: {exc}")
    try:
        tools = chat_tools(parsed.tools) if parsed.tools is not None else None
    except UntranslatableRequestError:
        tools = None
    key = prompt_key(messages)
    attempt = state.next_attempt(key)
    arrival = state.arrive()
    fault = state.fault(key, attempt)
    injected = await _injected(request, fault, state.faults.hang_limit_s)
    if injected is not None:
        return injected
    row = state.index.lookup(messages, tools)
    if row is None:
        message = (
            f"mock-llm: this prompt is not in the recorded table ({len(state.index)} rows): "
            f"{prompt_excerpt(messages)!r}"
        )
        return anthropic_error(404, "not_found_error", message)
    answer = MessagesAnswer(Answer.build(row, messages, model=state.model_name, attempt=attempt))
    delays = state.delays(key, row, answer.answer.pieces)
    malformed = fault is FaultKind.MALFORMED
    if parsed.stream:
        return _stream(answer, delays, malformed=malformed, state=state, arrival=arrival)
    await sleep(delays.total_s(answer.answer.pieces))
    body = orjson.dumps(answer.message())
    if malformed:
        body = body[: max(len(body) // 2, 1)]
    return Response(body, media_type="application/json", headers=dict([MOCK_HEADER]))
