"""The Anthropic Messages API (``POST /v1/messages``) read into one :class:`AssembledResponse`.

Source: Anthropic's "Streaming Messages" and "Messages" API references, and the official
``anthropic`` Python SDK's stream accumulator (``anthropic/lib/streaming/_messages.py``,
``accumulate_event``), which the tests run on the same bytes.

A stream is a series of named SSE events, each carrying its ``type`` in its JSON data too:

* ``message_start`` — ``message`` with ``id``, ``model``, empty ``content`` and ``usage``
  (``input_tokens``, ``cache_read_input_tokens``, ``cache_creation_input_tokens``, an
  initial ``output_tokens``);
* per content block: ``content_block_start`` (``index``, ``content_block``: ``text``,
  ``tool_use`` with ``id`` + ``name`` + ``input: {}``, ``thinking``), any number of
  ``content_block_delta`` (``text_delta.text``, ``input_json_delta.partial_json`` — the
  tool's input JSON in fragments —, ``thinking_delta.thinking``, ``signature_delta``,
  ``citations_delta``) and ``content_block_stop``;
* ``message_delta`` — ``delta.stop_reason`` / ``delta.stop_sequence`` and cumulative
  ``usage`` (``output_tokens``; later counts replace earlier ones, never add);
* ``message_stop`` — the end; ``ping`` — keep-alive; ``error`` — ``{"type": "error",
  "error": {"type", "message"}}`` (e.g. ``overloaded_error``, HTTP 529 when not streamed).

What is kept: ``text`` = the text blocks joined in index order; ``reasoning_text`` = the
thinking blocks joined; ``tool_calls`` = the ``tool_use`` blocks in order (``arguments``:
the ``partial_json`` fragments joined, else the start's ``input`` as compact JSON);
``finish_reason_raw`` = ``stop_reason`` (``end_turn``, ``max_tokens``, ``stop_sequence``,
``tool_use``, ``pause_turn``, ``refusal``, ``model_context_window_exceeded``: normalized by
:mod:`shadoweval.llm_protocol.finish_reason`); usage: ``input_tokens`` → prompt,
``output_tokens`` → completion, their sum → total, ``cache_read_input_tokens`` → cached.
Anthropic's ``input_tokens`` does not include the cached tokens (OpenAI's
``prompt_tokens`` does): the count is kept as the server reported it.

Interruption (:mod:`shadoweval.llm_protocol.interruption`): ``message_stop`` plays the part
of ``data: [DONE]`` (``done_seen``) and a non-null ``stop_reason`` the part of a
``finish_reason`` (``finish_seen``), so a stream cut before them is *interrupted*.

Timings follow :mod:`shadoweval.llm_protocol.assembler`: TTFB = first byte; TTFT = first
token-bearing event (a non-empty text, thinking or ``partial_json`` delta, or the start of
a ``tool_use`` block, which carries its name); TTFC = the first *visible* one (text or a
tool-use event, not thinking); e2e = the last token-bearing event; ITL = gaps between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from shadoweval.llm_protocol.assembler import (
    AssembledResponse,
    ChatStreamAssembler,
    usage_from_model,
)
from shadoweval.llm_protocol.models import UsageModel, body_object
from shadoweval.records import ToolCall, Usage

__all__ = ["MessagesStreamAssembler", "messages_usage", "parse_messages_body"]

Clock = Callable[[], int]

_DELTA_KEYS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}
"""The field of each content-block delta type that carries output."""


@dataclass(slots=True)
class _Block:
    """One content block being streamed: its type and the pieces seen so far."""

    type: str
    pieces: list[str] = field(default_factory=list)
    tool_id: str | None = None
    name: str = ""
    start_input: object = None


def messages_usage(usage: object) -> Usage:
    """An Anthropic ``usage`` object as a :class:`~shadoweval.records.Usage`.

    ``input_tokens`` → ``prompt_tokens``, ``output_tokens`` → ``completion_tokens``
    (``total_tokens`` their sum when both are counts), ``cache_read_input_tokens`` →
    ``cached_tokens``; anything else (not an object, no counts) → ``usage_source = missing``.
    """
    if not isinstance(usage, dict):
        return usage_from_model(None)
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    prompt = prompt if type(prompt) is int else None
    completion = completion if type(completion) is int else None
    cached = usage.get("cache_read_input_tokens")
    total = prompt + completion if prompt is not None and completion is not None else None
    return usage_from_model(
        UsageModel(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total,
            prompt_tokens_details={"cached_tokens": cached} if type(cached) is int else None,
        )
    )


def _arguments(pieces: list[str], start_input: object) -> str:
    """A tool call's arguments: its ``partial_json`` fragments, else its start ``input``."""
    if pieces:
        return "".join(pieces)
    return orjson.dumps(start_input if start_input is not None else {}).decode()


def _event_object(data: str) -> dict[str, Any] | None:
    """An event's JSON data, when it is an object with a string ``type``; else ``None``."""
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    ok = isinstance(payload, dict) and isinstance(payload.get("type"), str)
    return payload if ok else None


def _error_message(payload: dict[str, Any]) -> str:
    """``"<error.type>: <error.message>"`` of an Anthropic error object (what it holds)."""
    err = payload.get("error")
    if not isinstance(err, dict):
        return str(err if err is not None else payload)
    kind, message = err.get("type"), err.get("message")
    if isinstance(message, str):
        return f"{kind}: {message}" if isinstance(kind, str) else message
    return str(err)


class MessagesStreamAssembler(ChatStreamAssembler):
    """Incremental reader of a Messages API SSE stream (module doc): the chat assembler's
    interface, byte handling and clock (:meth:`feed`, :meth:`finish`), reading Anthropic's
    events instead of ``chat.completion.chunk`` objects.

    Args:
        start_ns: monotonic time the request was sent (default: construction time).
        clock: monotonic clock in ns (default ``time.perf_counter_ns``).
    """

    def __init__(self, *, start_ns: int | None = None, clock: Clock = time.perf_counter_ns):
        super().__init__(start_ns=start_ns, clock=clock)
        self._blocks: dict[int, _Block] = {}
        self._anthropic_usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._started = False
        self._finish_seen = False

    def _on_event(self, data: str, now: int) -> None:
        if not data.strip():
            return
        self._events += 1
        payload = _event_object(data)
        if payload is None:
            self._decode_errors += 1
            return
        kind = payload["type"]
        if kind == "message_start":
            self._on_message(payload.get("message"))
        elif kind == "content_block_start":
            self._on_block_start(payload, now)
        elif kind == "content_block_delta":
            self._on_delta(payload, now)
        elif kind == "message_delta":
            self._on_message_delta(payload)
        elif kind == "message_stop":
            self._done = True
        elif kind == "error":
            self._error = _error_message(payload)
        # ping, content_block_stop and event types added later carry nothing kept here

    def _on_message(self, message: object) -> None:
        if not isinstance(message, dict):
            self._decode_errors += 1
            return
        self._started = True
        if isinstance(message.get("model"), str):
            self._model = message["model"]
        if isinstance(message.get("usage"), dict):
            self._anthropic_usage.update(message["usage"])

    def _on_message_delta(self, payload: dict[str, Any]) -> None:
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason") is not None:
            self._stop_reason = str(delta["stop_reason"])
            self._finish_seen = True
        usage = payload.get("usage")
        if isinstance(usage, dict):  # cumulative: present counts replace earlier ones
            self._anthropic_usage.update({k: v for k, v in usage.items() if v is not None})

    def _on_block_start(self, payload: dict[str, Any], now: int) -> None:
        block = payload.get("content_block")
        index = payload.get("index")
        if not isinstance(block, dict) or type(index) is not int:
            self._decode_errors += 1
            return
        kind = str(block.get("type"))
        buf = self._blocks[index] = _Block(kind)
        if kind == "tool_use":
            tool_id, name = block.get("id"), block.get("name")
            buf.tool_id = tool_id if isinstance(tool_id, str) else None
            buf.name = name if isinstance(name, str) else ""
            buf.start_input = block.get("input")
            self._token(now, visible=True)
        elif kind in ("text", "thinking"):
            initial = block.get(kind)
            if isinstance(initial, str) and initial:
                buf.pieces.append(initial)
                self._token(now, visible=kind == "text")

    def _on_delta(self, payload: dict[str, Any], now: int) -> None:
        delta, index = payload.get("delta"), payload.get("index")
        buf = self._blocks.get(index) if type(index) is int else None
        if not isinstance(delta, dict) or buf is None:
            self._decode_errors += 1
            return
        key = _DELTA_KEYS.get(str(delta.get("type")))
        if key is None:
            return  # signature_delta, citations_delta: nothing kept
        piece = delta.get(key)
        if not isinstance(piece, str):
            self._decode_errors += 1
        elif piece:
            buf.pieces.append(piece)
            self._token(now, visible=key != "thinking")

    def _token(self, now: int, *, visible: bool) -> None:
        self._token_ns.append(now)
        if visible and self._content_ns is None:
            self._content_ns = now

    def _result(self) -> AssembledResponse:
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        texts = ["".join(b.pieces) for b in blocks if b.type == "text"]
        thinking = ["".join(b.pieces) for b in blocks if b.type == "thinking"]
        calls = tuple(
            ToolCall(
                index=i,
                id=b.tool_id,
                type="function",
                name=b.name,
                arguments=_arguments(b.pieces, b.start_input),
            )
            for i, b in enumerate(b for b in blocks if b.type == "tool_use")
        )
        # the chat assembler's result holds the counts and timings (it saw no choice)
        return replace(
            super()._result(),
            text="".join(texts) if self._started or blocks else None,
            reasoning_text="".join(thinking) if thinking else None,
            tool_calls=calls,
            finish_reason_raw=self._stop_reason,
            usage=messages_usage(self._anthropic_usage or None),
            finish_seen=self._finish_seen,
            end_event="message_stop",
        )


_WHOLE_BODY: dict[str, Any] = {
    "choices_count": 1,
    "streamed": False,
    "events": 1,
    "comments": 0,
    "decode_errors": 0,
    "done_seen": True,
    "error_message": None,
    "ttft_ms": None,
    "itl_ms": (),
}
"""What every non-streamed body's :class:`AssembledResponse` says the same way."""


def parse_messages_body(
    body: bytes,
    *,
    ttfb_ms: float | None = None,
    e2e_ms: float | None = None,
) -> AssembledResponse:
    """Parse a non-streamed Messages API response (``{"type": "message", "content": [...]}``).

    Content blocks: ``text`` → text (joined), ``thinking`` → reasoning, ``tool_use``
    ``{id, name, input}`` → a tool call whose arguments are ``input`` as compact JSON;
    other blocks (``redacted_thinking``, server tool results) are not kept. As for chat,
    ``ttft_ms`` is ``None`` and ``ttfc_ms`` equals ``e2e_ms`` (milliseconds).

    Raises:
        RecordDecodeError: the body is not JSON, not an object, or has no ``content`` list
            (reason ``invalid_json`` / ``not_object`` / ``schema``).
    """
    from shadoweval.errors import RecordDecodeError

    payload = body_object(body)
    content = payload.get("content")
    if not isinstance(content, list):
        raise RecordDecodeError(
            f"response body is not a Messages API message: content is {type(content).__name__}",
            reason="schema",
        )
    blocks = [b for b in content if isinstance(b, dict)]
    texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    thinking = [str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"]
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    calls = tuple(
        ToolCall(
            index=i,
            id=b["id"] if isinstance(b.get("id"), str) else None,
            type="function",
            name=b["name"] if isinstance(b.get("name"), str) else "",
            arguments=_arguments([], b.get("input")),
        )
        for i, b in enumerate(uses)
    )
    stop = payload.get("stop_reason")
    return AssembledResponse(
        text="".join(texts),
        reasoning_text="".join(thinking) if thinking else None,
        tool_calls=calls,
        finish_reason_raw=str(stop) if stop is not None else None,
        usage=messages_usage(payload.get("usage")),
        model=payload["model"] if isinstance(payload.get("model"), str) else None,
        ttfb_ms=ttfb_ms,
        e2e_ms=e2e_ms,
        ttfc_ms=e2e_ms,
        **_WHOLE_BODY,
        finish_seen=stop is not None,
    )
