"""Reader of the OpenAI Responses API (``POST /v1/responses``), streamed or not.

Source: the OpenAI API reference, "Responses" and "Streaming events" (the event names and
payloads below), checked against the official ``openai`` Python SDK's stream accumulator
(``openai.lib.streaming.responses``). A Responses answer is a list of *output items*:

* ``message`` (role ``assistant``) with ``output_text`` content parts → the answer text
  (the parts of every message item, in order);
* ``function_call`` ``{name, arguments, call_id}`` → a :class:`~shadoweval.records.ToolCall`
  whose ``id`` is the ``call_id`` (what a later ``function_call_output`` names);
* ``reasoning`` (summary or reasoning text) → ``reasoning_text``, kept apart from the answer
  and never compared as answer text; reasoning is *counted* through
  ``usage.output_tokens_details.reasoning_tokens`` (``Usage.reasoning_tokens``).

A stream is ``event: <type>`` + ``data: {json}`` events, each with a ``sequence_number``, and
no ``data: [DONE]``: it ends with ``response.completed``, ``response.incomplete`` or
``response.failed`` carrying the whole response (``id``, ``model``, ``status``, ``usage``
``{input_tokens, output_tokens, total_tokens, input_tokens_details.cached_tokens,
output_tokens_details.reasoning_tokens}``). Deltas read here: ``response.output_text.delta``,
``response.reasoning_summary_text.delta`` / ``response.reasoning_text.delta``,
``response.function_call_arguments.delta`` (the call's name and ``call_id`` come with its
``response.output_item.added``; ``response.output_item.done`` and
``response.function_call_arguments.done`` carry the whole call). An ``error`` event (or a
``response.failed`` with ``response.error``) sets ``error_message``.

Mapping onto :class:`~shadoweval.llm_protocol.assembler.AssembledResponse`:

* ``finish_reason_raw``: ``completed`` → ``stop`` (``tool_calls`` when it made function
  calls); ``incomplete`` → ``incomplete_details.reason`` (``max_output_tokens``, read as
  ``length``; ``content_filter``); ``failed`` → ``failed`` (``unknown``);
* ``done_seen`` and ``finish_seen``: the terminal event arrived, so a stream cut before it is
  an interruption (:mod:`shadoweval.llm_protocol.interruption`);
* ``response_id``: the response's ``id`` (what a later ``previous_response_id`` names);
* timings as :mod:`shadoweval.llm_protocol.assembler` defines them: token-bearing events are
  text, reasoning and argument deltas and a function call's ``output_item.added``; visible
  (TTFC) ones are text deltas and function-call events.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from shadoweval.llm_protocol.assembler import (
    AssembledResponse,
    ChatStreamAssembler,
    usage_from_model,
)
from shadoweval.llm_protocol.models import UsageModel, body_object
from shadoweval.records import ToolCall

__all__ = [
    "ResponsesStreamAssembler",
    "finish_reason_of",
    "parse_responses_body",
    "responses_usage",
]

Clock = Callable[[], int]

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_REASONING_DELTAS = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)


def responses_usage(usage: object) -> UsageModel | None:
    """A Responses ``usage`` object as the chat :class:`UsageModel` (``input_tokens`` →
    prompt, ``output_tokens`` → completion, ``input_tokens_details.cached_tokens``,
    ``output_tokens_details.reasoning_tokens``); ``None`` when there is none."""
    if not isinstance(usage, Mapping):
        return None
    return UsageModel.model_validate(
        {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens"),
            "prompt_tokens_details": _dict(usage.get("input_tokens_details")),
            "completion_tokens_details": _dict(usage.get("output_tokens_details")),
        }
    )


def _dict(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def finish_reason_of(response: Mapping[str, Any], *, made_calls: bool) -> str | None:
    """The raw finish reason of a Responses ``response`` object (module doc); ``None``
    while it is not finished (``in_progress``, ``queued``, no ``status``)."""
    status = response.get("status")
    if status == "completed":
        return "tool_calls" if made_calls else "stop"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return reason if isinstance(reason, str) and reason else "incomplete"
    if status in ("failed", "cancelled"):
        return str(status)
    return None


def _error_of(response: Mapping[str, Any]) -> str | None:
    error = response.get("error")
    if isinstance(error, Mapping):
        return str(error.get("message") or error.get("code") or dict(error))
    return None


@dataclass(slots=True)
class _Call:
    """One function call being assembled (by its ``output_index``)."""

    call_id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    final_arguments: str | None = None

    def take_item(self, item: Mapping[str, Any]) -> None:
        if isinstance(item.get("call_id"), str):
            self.call_id = item["call_id"]
        if isinstance(item.get("name"), str) and item["name"]:
            self.name = item["name"]
        if isinstance(item.get("arguments"), str) and item["arguments"]:
            self.final_arguments = item["arguments"]


@dataclass(slots=True)
class _Output:
    """Text, reasoning and function calls read from output items or deltas."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    messages: int = 0

    def take_items(self, items: object) -> None:
        """Read a whole ``output`` list (a body, or a terminal event's response)."""
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if not isinstance(item, Mapping):
                continue
            kind = item.get("type")
            if kind == "message":
                self.messages += 1
                for part in item.get("content") or ():
                    if isinstance(part, Mapping) and part.get("type") == "output_text":
                        self.text.append(str(part.get("text") or ""))
            elif kind == "function_call":
                self.calls.setdefault(index, _Call()).take_item(item)
            elif kind == "reasoning":
                for key in ("summary", "content"):
                    for part in item.get(key) or ():
                        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                            self.reasoning.append(part["text"])

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(
                index=i,
                id=call.call_id,
                type="function",
                name=call.name,
                arguments=(
                    call.final_arguments
                    if call.final_arguments is not None
                    else "".join(call.arguments)
                ),
            )
            for i, (_, call) in enumerate(sorted(self.calls.items()))
        )

    def text_or_none(self) -> str | None:
        if self.text or self.messages:
            return "".join(self.text)
        return "" if self.calls else None


def _assembled(output: _Output, response: Mapping[str, Any], **rest: Any) -> AssembledResponse:
    """The :class:`AssembledResponse` of ``output`` and the ``response`` object's status,
    usage, model and id; ``rest`` are the stream's (or body's) counts and timings."""
    calls = output.tool_calls()
    model = response.get("model")
    response_id = response.get("id")
    return AssembledResponse(
        text=output.text_or_none(),
        reasoning_text="".join(output.reasoning) if output.reasoning else None,
        tool_calls=calls,
        finish_reason_raw=finish_reason_of(response, made_calls=bool(calls)),
        usage=usage_from_model(responses_usage(response.get("usage"))),
        model=model if isinstance(model, str) else None,
        choices_count=1,
        response_id=response_id if isinstance(response_id, str) else None,
        **rest,
    )


def parse_responses_body(
    body: bytes, *, ttfb_ms: float | None = None, e2e_ms: float | None = None
) -> AssembledResponse:
    """Read a non-streamed Responses body (``object: "response"`` with ``output`` items).

    Timings as :func:`shadoweval.llm_protocol.assembler.parse_completion_body` (no TTFT;
    TTFC = e2e). A ``failed`` response's ``error.message`` becomes ``error_message``.

    Raises:
        RecordDecodeError: the body is not JSON, not an object, or has no ``output`` list.
    """
    from shadoweval.errors import RecordDecodeError

    payload = body_object(body)
    if not isinstance(payload.get("output"), list):
        raise RecordDecodeError(
            "response body is not a Responses API response: no 'output' list", reason="schema"
        )
    output = _Output()
    output.take_items(payload["output"])
    finished = finish_reason_of(payload, made_calls=bool(output.calls)) is not None
    return _assembled(
        output,
        payload,
        streamed=False,
        events=1,
        comments=0,
        decode_errors=0,
        done_seen=True,
        error_message=_error_of(payload),
        ttfb_ms=ttfb_ms,
        ttft_ms=None,
        e2e_ms=e2e_ms,
        itl_ms=(),
        ttfc_ms=e2e_ms,
        finish_seen=finished,
    )


class ResponsesStreamAssembler(ChatStreamAssembler):
    """Incremental reader of a Responses API event stream (module doc).

    The interface of :class:`~shadoweval.llm_protocol.assembler.ChatStreamAssembler`, whose
    SSE framing, clock and ``error:`` field handling it shares: ``feed(bytes, now_ns)`` as
    they arrive, ``finish(now_ns)`` → :class:`AssembledResponse` (never raises; events that
    are not JSON objects are counted in ``decode_errors``).

    Args:
        start_ns: monotonic time the request was sent (default: construction time).
        clock: monotonic clock in ns (default ``time.perf_counter_ns``).
    """

    def __init__(self, *, start_ns: int | None = None, clock: Clock = time.perf_counter_ns):
        super().__init__(start_ns=start_ns, clock=clock)
        self._deltas = _Output()
        self._final: _Output | None = None
        self._response: dict[str, Any] = {}
        self._terminal = False

    def _on_event(self, data: str, now: int) -> None:
        if data.strip() in ("", "[DONE]"):
            return
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            payload = None  # counted below
        self._events += 1
        if not isinstance(payload, dict):
            self._decode_errors += 1
            return
        kind = payload.get("type")
        if kind == "error" or (kind is None and "error" in payload):
            inner = payload.get("error")
            source = inner if isinstance(inner, Mapping) else payload
            self._error = str(source.get("message") or source.get("code") or source)
            return
        response = payload.get("response")
        if isinstance(response, dict) and isinstance(kind, str) and kind.startswith("response."):
            self._response.update(response)
            if kind in _TERMINAL:
                self._terminal = True
                self._error = _error_of(response) or self._error
                if response.get("output"):
                    self._final = _Output()
                    self._final.take_items(response["output"])
            return
        self._on_output_event(kind, payload, now)

    def _on_output_event(self, kind: object, payload: dict[str, Any], now: int) -> None:
        index = payload.get("output_index")
        index = index if isinstance(index, int) else len(self._deltas.calls)
        delta = payload.get("delta")
        bearing = visible = False
        if kind == "response.output_text.delta" and isinstance(delta, str) and delta:
            self._deltas.text.append(delta)
            bearing = visible = True
        elif kind in _REASONING_DELTAS and isinstance(delta, str) and delta:
            self._deltas.reasoning.append(delta)
            bearing = True
        elif kind == "response.function_call_arguments.delta" and isinstance(delta, str):
            self._deltas.calls.setdefault(index, _Call()).arguments.append(delta)
            bearing = visible = True
        elif kind == "response.function_call_arguments.done":
            arguments = payload.get("arguments")
            if isinstance(arguments, str):
                self._deltas.calls.setdefault(index, _Call()).final_arguments = arguments
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = payload.get("item")
            if isinstance(item, Mapping) and item.get("type") == "message":
                self._deltas.messages += kind == "response.output_item.added"
            elif isinstance(item, Mapping) and item.get("type") == "function_call":
                self._deltas.calls.setdefault(index, _Call()).take_item(item)
                bearing = visible = kind == "response.output_item.added"
        if bearing:
            self._token_ns.append(now)
        if visible and self._content_ns is None:
            self._content_ns = now

    def _result(self) -> AssembledResponse:
        output = self._deltas
        if self._final is not None and not output.text and not output.calls:
            output = self._final  # no deltas came: the terminal event's items say it
        response = self._response if self._terminal else {**self._response, "status": None}
        terminal = self._terminal
        return replace(
            _assembled(
                output, response, done_seen=terminal, finish_seen=terminal, **self._stream_facts()
            ),
            end_event="response.completed",
        )
