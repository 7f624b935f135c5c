"""The API dialects an exchange may speak, chosen by its route.

A model swap is judged on what the answers *say* — text, reasoning, tool calls, the finish
reason, usage, timings — whatever wire format carried them. Each dialect turns its own
wire format into one :class:`~shadoweval.llm_protocol.assembler.AssembledResponse`, so the
capture builder, the replay client and every scorer downstream stay dialect-blind:

=============================  ==========================  =================================
route                          dialect                     reader
=============================  ==========================  =================================
``/v1/chat/completions``       ``openai-chat``             :class:`~.assembler.ChatStreamAssembler`
``/v1/completions``            ``openai-completions``      the same (``text`` choices)
``/v1/responses``              ``openai-responses``        :mod:`.responses_api`
``/v1/messages``               ``anthropic-messages``      ``MessagesStreamAssembler``
=============================  ==========================  =================================

A route with no dialect of its own (a gateway's custom path) is read as chat completions,
as it always was. :func:`dialect_for` is the one lookup; the capture side
(:mod:`shadoweval.capture.response_assembly`) and the replay side
(:mod:`shadoweval.replay.client`) both ask it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from shadoweval.llm_protocol.assembler import (
    AssembledResponse,
    ChatStreamAssembler,
    parse_completion_body,
)
from shadoweval.llm_protocol.messages_api import MessagesStreamAssembler, parse_messages_body
from shadoweval.llm_protocol.responses_api import (
    ResponsesStreamAssembler,
    parse_responses_body,
)
from shadoweval.routes import CHAT_COMPLETIONS, COMPLETIONS, MESSAGES, RESPONSES, normalize_route

__all__ = [
    "CHAT",
    "DIALECTS",
    "BodyParser",
    "Dialect",
    "StreamAssembler",
    "dialect_for",
]

Clock = Callable[[], int]


class StreamAssembler(Protocol):
    """Rebuilds one streamed response from its raw bytes as they arrive.

    ``feed(data, now_ns)``: the next piece of the (content-decoded) body and its arrival
    time on the monotonic nanosecond clock (``None`` = now); ``finish(now_ns)``: the
    :class:`AssembledResponse` (never raises: undecodable events are counted in it).
    """

    def feed(self, data: bytes, now_ns: int | None = None) -> None:
        """Take the next piece of the body."""

    def finish(self, now_ns: int | None = None) -> AssembledResponse:
        """The response the pieces fed so far make."""


class BodyParser(Protocol):
    """Reads one whole non-streamed body into an :class:`AssembledResponse`.

    Raises :class:`shadoweval.errors.RecordDecodeError` when the body is not a response
    of the dialect (its reason names what is missing; the body itself is not quoted).
    """

    def __call__(
        self, body: bytes, *, ttfb_ms: float | None, e2e_ms: float | None
    ) -> AssembledResponse:
        """The response ``body`` holds; timings in milliseconds."""


class StreamAssemblerFactory(Protocol):
    """Makes a :class:`StreamAssembler` for a stream sent at ``start_ns``."""

    def __call__(self, *, start_ns: int | None = None, clock: Clock = ...) -> StreamAssembler:
        """A new assembler; ``start_ns`` is when the request was sent."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """One wire format: its name, route, stream reader and body reader.

    ``name``: a stable id (``openai-chat``, ``openai-completions``, …) used in reports;
    ``route``: the path it is served on (``/v1/chat/completions``);
    ``new_stream``: a :class:`StreamAssemblerFactory`; ``parse_body``: a :class:`BodyParser`.
    """

    name: str
    route: str
    new_stream: StreamAssemblerFactory
    parse_body: BodyParser

    def stream_assembler(self, start_ns: int | None = None) -> StreamAssembler:
        """A fresh :class:`StreamAssembler` for a stream sent at ``start_ns`` (ns)."""
        return self.new_stream(start_ns=start_ns, clock=time.perf_counter_ns)


CHAT = Dialect("openai-chat", CHAT_COMPLETIONS, ChatStreamAssembler, parse_completion_body)
"""OpenAI chat completions (and the default for a route with no dialect of its own)."""

DIALECTS: Mapping[str, Dialect] = {
    CHAT_COMPLETIONS: CHAT,
    COMPLETIONS: Dialect(
        "openai-completions", COMPLETIONS, ChatStreamAssembler, parse_completion_body
    ),
    RESPONSES: Dialect(
        "openai-responses", RESPONSES, ResponsesStreamAssembler, parse_responses_body
    ),
    MESSAGES: Dialect("anthropic-messages", MESSAGES, MessagesStreamAssembler, parse_messages_body),
}
"""Every dialect by route."""


def dialect_for(route: str) -> Dialect:
    """The dialect of a request path or route (query and trailing ``/`` ignored).

    ``dialect_for("/v1/chat/completions/")`` is :data:`CHAT`; a route no dialect claims is
    read as chat completions (:data:`CHAT`). Never raises.
    """
    return DIALECTS.get(normalize_route(route), CHAT)
