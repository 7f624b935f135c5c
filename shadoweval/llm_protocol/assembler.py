"""Reassembly of chat-completion responses, streamed or not, with timings.

:class:`ChatStreamAssembler` takes the raw bytes of an SSE ``chat.completion.chunk``
stream (or a legacy ``/v1/completions`` ``text_completion`` stream, whose choices carry
``text`` instead of ``delta``) as they arrive and rebuilds exactly what the server sent:

* per-choice content and reasoning text (choice 0 is the reported text);
* tool calls assembled by (choice index, tool index); later fragments that carry
  ``id: null`` or no ``index`` are attached to the right call (LiteLLM bugs #7621, #20711);
* the *last* usage seen (vLLM ``continuous_usage_stats`` sends cumulative usage on every
  chunk: take the last, never sum), including a final usage-only chunk with ``choices: []``;
* raw and normalized ``finish_reason``;
* ``data: [DONE]``, comment/ping lines, and undecodable events (counted, never fatal);
* error events: ``{"error": {...}}`` (OpenAI, vLLM), ``{"error": "...", "error_type"}``
  (TGI), the unwrapped ``{"object": "error", "message"}`` (older vLLM, SGLang) and
  llama.cpp ``llama-server``'s ``error: {...}`` SSE field (:class:`~.sse.SSEEvent` ``error``).

Timings use a monotonic nanosecond clock (``time.perf_counter_ns`` by default) from the
moment the request was sent (``start_ns``). Definitions follow vLLM's
``benchmarks/serve.py`` with the content check of SGLang's router (sgl-project/sglang#29251):
TTFB = first byte; TTFT = first event carrying content, reasoning or a tool-call fragment
(the role-only first chunk does not count, vllm-project/vllm#3759); e2e = last such
token-bearing event (a usage-only chunk does not count); ITL = gaps between consecutive
token-bearing events; TPOT = (e2e − TTFT) / (completion_tokens − 1), only when the server
reported ``completion_tokens`` > 1.

TTFC (time to first content) = the first event carrying *visible* output: a non-empty
``delta.content`` (or legacy ``text``) or a tool-call fragment. Reasoning deltas
(``delta.reasoning_content``, DeepSeek/SGLang; ``delta.reasoning``, vLLM ≥ 0.10) count
for TTFT but not for TTFC, so a reasoning model's TTFC − TTFT is its thinking time. A
non-streamed body shows everything at once: TTFC = e2e there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from shadoweval.llm_protocol.finish_reason import normalize_finish_reason
from shadoweval.llm_protocol.interruption import (
    Interruption,
    output_chars,
    stream_interruption,
)
from shadoweval.llm_protocol.latency import summarize_itl as summarize_itl
from shadoweval.llm_protocol.latency import tpot_ms
from shadoweval.llm_protocol.models import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatMessage,
    UsageModel,
    body_object,
)
from shadoweval.llm_protocol.plain_chunk import plain_choices
from shadoweval.llm_protocol.sse import SSEDecoder
from shadoweval.records import (
    INT64_MAX,
    HeaderPair,
    ResponseRecord,
    Timings,
    TimingSource,
    ToolCall,
    Usage,
    UsageSource,
    same_named,
)

Clock = Callable[[], int]
_models_logger = logging.getLogger("shadoweval.llm_protocol.models")


@dataclass(slots=True)
class _ToolCallBuffer:
    index: int
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _ChoiceBuffer:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tools: dict[int, _ToolCallBuffer] = field(default_factory=dict)
    last_tool_index: int | None = None
    finish_reason_raw: str | None = None
    finish_seen: bool = False


@dataclass(frozen=True, slots=True)
class AssembledResponse:
    """What a response said, reassembled. Produced by :class:`ChatStreamAssembler` or
    :func:`parse_completion_body`.

    ``decode_errors`` counts events or bodies that were not valid JSON chunks;
    ``done_seen`` tells whether ``data: [DONE]`` arrived (or ``end_event``, the terminal
    event of a dialect that has one: ``response.completed``, ``message_stop``; ``None`` for
    chat), ``finish_seen`` whether a choice carried a non-null ``finish_reason``;
    ``response_id``: the Responses API's response id
    (``None`` for chat); ``itl_ms`` lists inter-token
    latencies in milliseconds; ``ttfc_ms`` is the time to first visible content (module
    doc), ``None`` for a stream that carried none.
    """

    text: str | None
    reasoning_text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason_raw: str | None
    usage: Usage
    model: str | None
    choices_count: int
    streamed: bool
    events: int
    comments: int
    decode_errors: int
    done_seen: bool
    error_message: str | None
    ttfb_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    itl_ms: tuple[float, ...]
    ttfc_ms: float | None = None
    finish_seen: bool = False
    end_event: str | None = None
    response_id: str | None = None

    @property
    def is_empty(self) -> bool:
        """True when the response carries neither text nor tool calls."""
        return not (self.text or "").strip() and not self.tool_calls

    def interruption(self) -> Interruption | None:
        """The stream's :class:`~shadoweval.llm_protocol.interruption.Interruption`: cut
        before its ``finish_reason``
        (:func:`~shadoweval.llm_protocol.interruption.stream_interruption`); ``None`` for a
        finished stream, a non-streamed body, or one with an error event."""
        if not self.streamed or self.error_message is not None:
            return None
        return stream_interruption(
            output_chars=output_chars(self.text, self.reasoning_text, self.tool_calls),
            finish_seen=self.finish_seen,
            done_seen=self.done_seen,
            end_event=self.end_event,
        )

    def timings(self) -> Timings:
        """Return the measured :class:`Timings` (TPOT from reported completion tokens)."""
        return Timings(
            ttfb_ms=self.ttfb_ms,
            ttft_ms=self.ttft_ms,
            ttfc_ms=self.ttfc_ms,
            e2e_ms=self.e2e_ms,
            tpot_ms=tpot_ms(self.e2e_ms, self.ttft_ms, self.usage.completion_tokens),
            itl=summarize_itl(self.itl_ms),
            source=TimingSource.MEASURED if self.ttfb_ms is not None else TimingSource.MISSING,
        )

    def to_response_record(
        self,
        status_code: int,
        headers: tuple[HeaderPair, ...] = (),
        body: str | None = None,
    ) -> ResponseRecord:
        """Build the :class:`ResponseRecord` (``body`` = raw body kept, if any)."""
        return ResponseRecord(
            status_code=status_code,
            headers=headers,
            body=body,
            finish_reason=normalize_finish_reason(self.finish_reason_raw),
            **same_named(self, _RECORD_FIELDS),
        )


_RECORD_FIELDS = (
    "streamed",
    "model",
    "text",
    "reasoning_text",
    "tool_calls",
    "finish_reason_raw",
    "usage",
    "choices_count",
    "error_message",
    "response_id",
)
"""What :meth:`AssembledResponse.to_response_record` copies as it is, under the same name."""


def _count(value: int | None) -> int | None:
    """A reported token count, or ``None`` when it is no count (negative, or beyond 64 bits:
    a server bug that must not make the record invalid)."""
    return value if value is not None and 0 <= value <= INT64_MAX else None


def usage_from_model(usage: UsageModel | None) -> Usage:
    """Convert a server ``usage`` object; ``None`` → ``usage_source = missing``.

    A count the server reported as negative or beyond 64 bits is read as not reported
    (``None``), never stored as it came (a :class:`~shadoweval.records.Usage` refuses it).
    """
    if usage is None:
        return Usage(usage_source=UsageSource.MISSING)
    prompt, completion = _count(usage.prompt_tokens), _count(usage.completion_tokens)
    if prompt is None and completion is None:
        return Usage(usage_source=UsageSource.MISSING)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=_count(usage.total_tokens),
        cached_tokens=_count(usage.cached_tokens()),
        reasoning_tokens=_count(usage.reasoning_tokens()),
        usage_source=UsageSource.REPORTED,
    )


class ChatStreamAssembler:
    """Incremental reader of a ``chat.completion.chunk`` SSE stream.

    Usage::

        asm = ChatStreamAssembler(start_ns=sent_ns)
        async for piece in response.aiter_raw():
            asm.feed(piece)
        result = asm.finish()

    Args:
        start_ns: monotonic time the request was sent (default: construction time).
        clock: monotonic clock in ns (default ``time.perf_counter_ns``); injectable for tests.
    """

    def __init__(self, *, start_ns: int | None = None, clock: Clock = time.perf_counter_ns):
        self._clock = clock
        self._start_ns = clock() if start_ns is None else start_ns
        self._sse = SSEDecoder()
        self._choices: dict[int, _ChoiceBuffer] = {}
        self._usage: UsageModel | None = None
        self._model: str | None = None
        self._events = 0
        self._decode_errors = 0
        self._done = False
        self._error: str | None = None
        self._first_byte_ns: int | None = None
        self._token_ns: list[int] = []
        self._content_ns: int | None = None
        self._finished: AssembledResponse | None = None

    def feed(self, data: bytes, now_ns: int | None = None) -> None:
        """Add bytes as read from the network; ``now_ns`` defaults to the clock."""
        if not data:
            return
        now = self._clock() if now_ns is None else now_ns
        if self._first_byte_ns is None:
            self._first_byte_ns = now
        for event in self._sse.feed(data):
            if event.error is not None:
                self._on_error_field(event.error)
            self._on_event(event.data, now)

    def finish(self, now_ns: int | None = None) -> AssembledResponse:
        """End of stream: flush buffers and return the :class:`AssembledResponse`."""
        if self._finished is not None:
            return self._finished
        now = self._clock() if now_ns is None else now_ns
        for event in self._sse.close():
            if event.error is not None:
                self._on_error_field(event.error)
            self._on_event(event.data, now)
        self._finished = self._result()
        return self._finished

    # -- internals -----------------------------------------------------------------

    def _ms(self, ns: int | None) -> float | None:
        return None if ns is None else (ns - self._start_ns) / 1e6

    def _on_error_field(self, text: str) -> None:
        """An ``error:`` SSE field (llama.cpp ``llama-server``): its JSON ``message`` (or
        ``error.message``), else the text itself, becomes the stream's error."""
        try:
            payload = orjson.loads(text)
        except orjson.JSONDecodeError:
            payload = None
        message: object = text
        if isinstance(payload, dict):
            inner = payload.get("error")
            if isinstance(inner, dict):
                payload = inner
            elif isinstance(inner, str):
                message = inner
            if isinstance(payload, dict) and isinstance(payload.get("message"), str):
                message = payload["message"]
        self._error = str(message)

    def _on_event(self, data: str, now: int) -> None:
        if data == "":
            return
        if data.strip() == "[DONE]":
            self._done = True
            return
        self._events += 1
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            self._decode_errors += 1
            return
        if type(payload) is dict:  # orjson gives plain dicts
            if "error" in payload and "choices" not in payload:
                err = payload["error"]
                self._error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
                return
            if payload.get("object") == "error" and "choices" not in payload:
                # older vLLM / SGLang ErrorResponse, not wrapped in {"error": ...}
                self._error = str(payload.get("message", payload))
                return
            # The plain reading skips the model's debug log of unknown fields: not when on.
            if not _models_logger.isEnabledFor(logging.DEBUG) and self._apply_plain_chunk(
                payload, now
            ):
                return
        try:
            chunk = ChatCompletionChunk.model_validate(payload)
        except ValidationError:
            self._decode_errors += 1
            return
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            self._usage = chunk.usage  # cumulative: the last one wins
        token_bearing = False
        content_bearing = False
        for choice in chunk.choices:
            buf = self._choices.setdefault(choice.index, _ChoiceBuffer())
            if choice.delta is not None:
                bearing, visible = self._apply_delta(buf, choice.delta)
                token_bearing = token_bearing or bearing
                content_bearing = content_bearing or visible
            elif choice.text:  # legacy /v1/completions
                buf.content.append(choice.text)
                token_bearing = content_bearing = True
            if choice.finish_reason is not None or "finish_reason" in (choice.model_extra or {}):
                buf.finish_reason_raw = choice.finish_reason
                buf.finish_seen = True
        if token_bearing:
            self._token_ns.append(now)
        if content_bearing and self._content_ns is None:
            self._content_ns = now

    def _apply_plain_chunk(self, payload: dict[str, Any], now: int) -> bool:
        """Apply a chunk of the common plain shape straight from the decoded JSON
        (:func:`~shadoweval.llm_protocol.plain_chunk.plain_choices`): the same result as
        validating it into :class:`ChatCompletionChunk` and applying that. Anything else
        returns ``False`` before changing any state, and goes through the model."""
        parsed = plain_choices(payload)
        if parsed is None:
            return False
        model = payload.get("model")
        if model:
            self._model = model
        token_bearing = visible = False
        for index, content, reasoning, finish in parsed:
            buf = self._choices.get(index)
            if buf is None:
                buf = self._choices[index] = _ChoiceBuffer()
            if content:
                buf.content.append(content)
                token_bearing = visible = True
            if reasoning:
                buf.reasoning.append(reasoning)
                token_bearing = True
            if finish is not None:
                buf.finish_reason_raw = finish
                buf.finish_seen = True
        if token_bearing:
            self._token_ns.append(now)
            if visible and self._content_ns is None:
                self._content_ns = now
        return True

    @staticmethod
    def _apply_delta(buf: _ChoiceBuffer, delta: ChatMessage) -> tuple[bool, bool]:
        """Apply one delta; returns (token-bearing, carries visible content or a tool call)."""
        bearing = False
        if isinstance(delta.content, str) and delta.content != "":
            buf.content.append(delta.content)
            bearing = True
        elif isinstance(delta.content, list):
            text = delta.text()
            if text:
                buf.content.append(text)
                bearing = True
        visible = bearing
        reasoning = delta.reasoning()
        if reasoning:
            buf.reasoning.append(reasoning)
            bearing = True
        for fragment in delta.tool_calls or ():
            index = fragment.index
            if index is None:
                # No index: a fragment with a new id starts a call, one repeating a known id
                # (llama.cpp-style servers repeat it on every fragment) continues that call,
                # one with no id continues the last.
                known = next(
                    (i for i, t in buf.tools.items() if fragment.id and t.id == fragment.id),
                    None,
                )
                if known is not None:
                    index = known
                elif fragment.id is not None or buf.last_tool_index is None:
                    index = len(buf.tools)
                else:
                    index = buf.last_tool_index
            call = buf.tools.setdefault(index, _ToolCallBuffer(index=index))
            buf.last_tool_index = index
            if fragment.id:
                call.id = call.id or fragment.id
            if fragment.type:
                call.type = call.type or fragment.type
            if fragment.function is not None:
                if fragment.function.name and not call.name:
                    call.name = fragment.function.name
                if fragment.function.arguments:
                    call.arguments.append(fragment.function.arguments)
            bearing = visible = True
        return bearing, visible

    def _result(self) -> AssembledResponse:
        first = self._choices.get(0) or (
            self._choices[min(self._choices)] if self._choices else None
        )
        text = "".join(first.content) if first else None
        reasoning = "".join(first.reasoning) if first and first.reasoning else None
        tools = (
            tuple(
                ToolCall(
                    index=i,
                    id=t.id,
                    type=t.type or "function",
                    name=t.name,
                    arguments="".join(t.arguments),
                )
                for i, t in sorted(first.tools.items())
            )
            if first
            else ()
        )
        return AssembledResponse(
            text=text,
            reasoning_text=reasoning,
            tool_calls=tools,
            finish_reason_raw=first.finish_reason_raw if first else None,
            usage=usage_from_model(self._usage),
            model=self._model,
            choices_count=max(len(self._choices), 1),
            done_seen=self._done,
            finish_seen=any(c.finish_seen for c in self._choices.values()),
            **self._stream_facts(),
        )

    def _stream_facts(self) -> dict[str, Any]:
        """What every stream reader reports the same way: counts, error and timings (ms)."""
        itl = tuple((b - a) / 1e6 for a, b in zip(self._token_ns, self._token_ns[1:], strict=False))
        return {
            "streamed": True,
            "events": self._events,
            "comments": self._sse.comments,
            "decode_errors": self._decode_errors,
            "error_message": self._error,
            "ttfb_ms": self._ms(self._first_byte_ns),
            "ttft_ms": self._ms(self._token_ns[0]) if self._token_ns else None,
            "e2e_ms": self._ms(self._token_ns[-1]) if self._token_ns else None,
            "itl_ms": itl,
            "ttfc_ms": self._ms(self._content_ns),
        }


def parse_completion_body(
    body: bytes,
    *,
    ttfb_ms: float | None = None,
    e2e_ms: float | None = None,
) -> AssembledResponse:
    """Parse a non-streamed ``chat.completion`` (or legacy ``text_completion``) body.

    A non-streamed response shows no first token, so ``ttft_ms`` is ``None`` (TTFT is
    reported only for streams); ``e2e_ms`` is when the complete body was read, and
    ``ttfc_ms`` equals it (the client sees no content before the whole body).

    Raises:
        RecordDecodeError: the body is not JSON or not a chat completion object.
    """
    from shadoweval.errors import RecordDecodeError

    payload = body_object(body)
    try:
        resp = ChatCompletionResponse.model_validate(payload)
    except ValidationError as exc:
        raise RecordDecodeError(
            f"response body is not a chat completion: {exc.errors()[0]['msg']}",
            reason="schema",
        ) from exc
    if not resp.choices:
        raise RecordDecodeError("response body has no choices", reason="no_choices")
    first = min(resp.choices, key=lambda c: c.index)
    msg = first.message or ChatMessage()
    tools = tuple(
        ToolCall(
            index=i,
            id=tc.id,
            type=tc.type or "function",
            name=(tc.function.name if tc.function else None) or "",
            arguments=(tc.function.arguments if tc.function else None) or "",
        )
        for i, tc in enumerate(msg.tool_calls or ())
    )
    if first.message is None and first.text is not None:  # legacy /v1/completions
        text: str | None = first.text
    else:
        text = msg.text() if msg.content is not None else ("" if tools else None)
    return AssembledResponse(
        text=text,
        reasoning_text=msg.reasoning(),
        tool_calls=tools,
        finish_reason_raw=first.finish_reason,
        usage=usage_from_model(resp.usage),
        model=resp.model,
        choices_count=len(resp.choices),
        streamed=False,
        events=1,
        comments=0,
        decode_errors=0,
        done_seen=True,
        error_message=None,
        ttfb_ms=ttfb_ms,
        ttft_ms=None,
        e2e_ms=e2e_ms,
        itl_ms=(),
        ttfc_ms=e2e_ms,
        finish_seen=first.finish_reason is not None,
    )
