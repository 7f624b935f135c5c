"""mock-llm's ``POST /v1/responses``: the OpenAI Responses API, answered from the same table.

The request's conversation — the stored one a ``previous_response_id`` names, then
``input`` (a string or input items) — is read as chat messages
(:func:`shadoweval.llm_protocol.responses_request.messages_of`, ``instructions`` as a
first ``system`` message) and looked up in the recorded table as a chat request is; the
recorded answer comes back as output items: an ``assistant`` ``message`` with one
``output_text`` part, then one ``function_call`` item per recorded tool call.

* non-streamed: one ``response`` object (``status`` ``completed``; ``incomplete`` with
  ``incomplete_details.reason`` ``max_output_tokens`` / ``content_filter`` when the row's
  finish reason is ``length`` / ``content_filter``) with ``usage`` ``{input_tokens,
  output_tokens, total_tokens, input_tokens_details.cached_tokens,
  output_tokens_details.reasoning_tokens}``, after the same wait as chat;
* streamed (``event:`` + ``data:`` SSE, ``sequence_number`` from 0, no ``[DONE]``):
  ``response.created``, ``response.in_progress``, then per item ``response.output_item.added``
  (+ ``response.content_part.added``), its deltas (``response.output_text.delta`` /
  ``response.function_call_arguments.delta``) paced as chat's pieces are (the first after
  TTFT, each further one ITL later), its ``…done`` events and ``response.output_item.done``,
  and last ``response.completed`` (or ``response.incomplete``) with the whole response.

State, as OpenAI keeps it: a response is stored unless the request said ``store: false``;
``previous_response_id`` naming a response this server did not store answers 400
``{"error": {"message": "Previous response with id '…' not found.", "type":
"invalid_request_error", "param": "previous_response_id", "code":
"previous_response_not_found"}}``. Injected ``error`` and ``hang`` faults apply as on chat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shadoweval.llm_protocol.responses_request import (
    ResponsesRequest,
    input_items,
    messages_of,
    response_tools,
)
from shadoweval.simulation.mock_llm.answers import Answer, prompt_excerpt
from shadoweval.simulation.mock_llm.faults import FaultKind
from shadoweval.simulation.mock_llm.latency import Delays
from shadoweval.simulation.mock_llm.wire import (
    MOCK_HEADER,
    error_json,
    event_stream,
    hang,
    json_object_body,
    sleep,
)
from shadoweval.tables import prompt_key

if TYPE_CHECKING:
    from shadoweval.simulation.mock_llm.app import MockState

__all__ = ["responses_endpoint"]

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""A recorded finish reason that makes an ``incomplete`` response, and its reason."""

MAX_STORED_RESPONSES = 10_000
"""Responses this server keeps for ``previous_response_id`` (the oldest go first)."""


@dataclass(frozen=True, slots=True)
class _Reply:
    """One Responses answer: the chat :class:`Answer` and the request fields it echoes."""

    answer: Answer
    response_id: str
    request: ResponsesRequest

    def _id(self, kind: str, index: int) -> str:
        return f"{kind}_{self.answer.completion_id.removeprefix('chatcmpl-')}{index:02d}"

    def message_item(self, text: str, status: str = "completed") -> dict[str, Any]:
        """The ``assistant`` message item (one ``output_text`` part, none while open)."""
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        return {
            "id": self._id("msg", 0),
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content if status == "completed" else [],
        }

    def call_item(self, index: int, status: str = "completed") -> dict[str, Any]:
        """Function call ``index`` as an output item (no arguments while open)."""
        call = self.answer.tool_calls[index]
        return {
            "id": self._id("fc", index + 1),
            "type": "function_call",
            "status": status,
            "call_id": call["id"],
            "name": call["function"]["name"],
            "arguments": call["function"]["arguments"] if status == "completed" else "",
        }

    @property
    def has_message(self) -> bool:
        return self.answer.text is not None and (
            bool(self.answer.text) or not self.answer.tool_calls
        )

    def output(self) -> list[dict[str, Any]]:
        """The finished output items."""
        items = [self.message_item(self.answer.text or "")] if self.has_message else []
        return items + [self.call_item(i) for i in range(len(self.answer.tool_calls))]

    def response(self, *, done: bool) -> dict[str, Any]:
        """The ``response`` object (``in_progress`` with no output, or finished)."""
        answer, request = self.answer, self.request
        incomplete = _INCOMPLETE.get(answer.finish_reason)
        status = ("incomplete" if incomplete else "completed") if done else "in_progress"
        usage = {
            "input_tokens": answer.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": answer.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        }
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": answer.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": incomplete} if done and incomplete else None,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "model": answer.model,
            "output": self.output() if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": request.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": request.store is not False,
            "temperature": request.temperature if request.temperature is not None else 1.0,
            "text": request.text or {"format": {"type": "text"}},
            "tool_choice": request.tool_choice or "auto",
            "tools": request.tools or [],
            "top_p": request.top_p if request.top_p is not None else 1.0,
            "truncation": "disabled",
            "usage": usage if done else None,
            "metadata": {},
        }

    def piece_events(self) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """Per chat delta (a paced piece), the events sent when it is due; then the closing
        events (as the last list)."""
        plan = _StreamPlan(self)
        for delta in self.answer.deltas:
            yield plan.piece(delta)
        opening = plan.open_message() if self.has_message and not self.answer.deltas else []
        yield opening + plan.close()


_Event = tuple[str, dict[str, Any]]


class _StreamPlan:
    """Which item is open while a reply's pieces are streamed, and the events each makes."""

    def __init__(self, reply: _Reply) -> None:
        self.reply = reply
        self.message_open = False
        self.call: int | None = None
        self.text: list[str] = []
        self.arguments: list[str] = []
        self.output_index = -1

    def close(self) -> list[_Event]:
        """The ``…done`` events of the open item (none when no item is open)."""
        events: list[_Event] = []
        index = self.output_index
        if self.message_open:
            item = self.reply.message_item("".join(self.text))
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events += [
                ("response.output_text.done", where | {"text": part["text"], "logprobs": []}),
                ("response.content_part.done", where | {"part": part}),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
        if self.call is not None:
            item = self.reply.call_item(self.call)
            done = {"item_id": item["id"], "output_index": index, "name": item["name"]}
            events += [
                ("response.function_call_arguments.done", done | {"arguments": item["arguments"]}),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
        self.message_open, self.call = False, None
        return events

    def open_message(self) -> list[_Event]:
        """Close the open item; open the message item and its one ``output_text`` part."""
        events = self.close()
        self.output_index += 1
        self.message_open = True
        item = self.reply.message_item("", status="in_progress")
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": item["id"], "output_index": self.output_index, "content_index": 0}
        added = {"output_index": self.output_index, "item": item}
        return [
            *events,
            ("response.output_item.added", added),
            ("response.content_part.added", where | {"part": part}),
        ]

    def piece(self, delta: dict[str, Any]) -> list[_Event]:
        """The events of one chat delta: a text piece, a call's start or an argument piece."""
        if "content" in delta:
            events = [] if self.message_open else self.open_message()
            self.text.append(delta["content"])
            where = {"item_id": self.reply.message_item("")["id"], "content_index": 0}
            text = {"output_index": self.output_index, "delta": delta["content"], "logprobs": []}
            return [*events, ("response.output_text.delta", where | text)]
        fragment = delta["tool_calls"][0]
        if fragment.get("id") is not None:  # a new call starts
            events = self.close()
            self.output_index += 1
            self.call, self.arguments = fragment["index"], []
            item = self.reply.call_item(fragment["index"], status="in_progress")
            added = {"output_index": self.output_index, "item": item}
            return [*events, ("response.output_item.added", added)]
        piece = fragment["function"]["arguments"]
        self.arguments.append(piece)
        item_id = self.reply.call_item(self.call or 0)["id"]
        where = {"item_id": item_id, "output_index": self.output_index, "delta": piece}
        return [("response.function_call_arguments.delta", where)]


def _sse(kind: str, payload: dict[str, Any], sequence: int) -> bytes:
    data = orjson.dumps({"type": kind, "sequence_number": sequence} | payload)
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _stream(reply: _Reply, delays: Delays, state: MockState, arrival: int) -> AsyncIterator[bytes]:
    """The reply's events, paced; with ``interrupt_running`` a newer request cuts the
    stream before its next piece: the body ends without a terminal ``response.*`` event
    (a server that cuts running streams, as llama.cpp does)."""

    async def events() -> AsyncIterator[bytes]:
        sequence = 0
        for kind in ("response.created", "response.in_progress"):
            yield _sse(kind, {"response": reply.response(done=False)}, sequence)
            sequence += 1
        start = anyio.current_time()
        pieces = list(reply.piece_events())
        for i, group in enumerate(pieces):
            paced = i < len(pieces) - 1 or len(pieces) == 1  # the closing group is not paced
            due = start + delays.ttft_s + i * delays.itl_s
            if paced and await state.cut_before(arrival, due):
                return
            for kind, payload in group:
                yield _sse(kind, payload, sequence)
                sequence += 1
        final = reply.response(done=True)
        terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
        yield _sse(terminal, {"response": final}, sequence)

    return events()


async def _read(request: Request) -> ResponsesRequest | JSONResponse:
    """The request body as a :class:`ResponsesRequest`, or the 400 answer naming why not."""
    payload = await json_object_body(
        request, not_json="request body is not valid JSON", not_object="body must be an object"
    )
    if isinstance(payload, JSONResponse):
        return payload
    try:
        return ResponsesRequest.model_validate(payload)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = [str(part) for part in error["loc"]]
        message = f"invalid Responses request: {'.'.join(where)}: {error['msg']}"
        kind = {"type_": "invalid_request_error", "code": "invalid_request"}
        return error_json(400, message, param=where[0] if where else None, **kind)


def _stored(request: Request) -> dict[str, list[dict[str, Any]]]:
    """The conversations this server stored, by response id (oldest first)."""
    store: dict[str, list[dict[str, Any]]] | None = getattr(
        request.app.state, "responses_store", None
    )
    if store is None:
        store = request.app.state.responses_store = {}
    return store


async def _injected(request: Request, fault: FaultKind, hang_limit_s: float) -> Response:
    """The answer of an injected ``error`` (500) or ``hang`` fault."""
    if fault is FaultKind.HANG:
        return await hang(request, hang_limit_s)
    return error_json(500, "mock-llm injected fault", type_="server_error", code="injected_error")


async def responses_endpoint(request: Request) -> Response:
    """``POST /v1/responses`` (module doc)."""
    parsed = await _read(request)
    if isinstance(parsed, JSONResponse):
        return parsed
    state: MockState = request.app.state.mock
    stored = _stored(request)
    prior: list[dict[str, Any]] = []
    if parsed.previous_response_id is not None:
        if parsed.previous_response_id not in stored:
            return error_json(
                400,
                f"Previous response with id '{parsed.previous_response_id}' not found.",
                type_="invalid_request_error",
                code="previous_response_not_found",
                param="previous_response_id",
            )
        prior = stored[parsed.previous_response_id]
    conversation = prior + input_items(parsed.input)
    messages = messages_of(conversation, parsed.instructions)
    key = prompt_key(messages)
    attempt = state.next_attempt(key)
    arrival = state.arrive()
    fault = state.fault(key, attempt)
    if fault in (FaultKind.ERROR, FaultKind.HANG):
        return await _injected(request, fault, state.faults.hang_limit_s)
    tools = [tool.model_dump(exclude_none=True) for tool in response_tools(parsed.tools)]
    row = state.index.lookup(messages, tools or None)
    if row is None:
        excerpt = prompt_excerpt(messages)
        why = f"this prompt is not in the recorded table ({len(state.index)} rows): {excerpt!r}"
        kind = {"type_": "invalid_request_error", "code": "prompt_not_recorded"}
        return error_json(404, f"mock-llm: {why}", param="input", **kind)
    answer = Answer.build(row, messages, model=state.model_name, attempt=attempt)
    reply = _Reply(answer, "resp_" + answer.completion_id.removeprefix("chatcmpl-"), parsed)
    if parsed.store is not False:
        stored[reply.response_id] = conversation + reply.output()
        while len(stored) > MAX_STORED_RESPONSES:
            del stored[next(iter(stored))]
    delays = state.delays(key, row, answer.pieces)
    if parsed.stream:
        return event_stream(_stream(reply, delays, state, arrival))
    await sleep(delays.total_s(answer.pieces))
    return JSONResponse(reply.response(done=True), headers=dict([MOCK_HEADER]))
