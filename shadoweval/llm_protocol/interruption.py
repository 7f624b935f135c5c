"""The one rule for a streamed answer that was cut: an *interruption*, not an answer.

A streamed chat completion that came back with HTTP 2xx and no error event is
**interrupted** when no choice ever carried a ``finish_reason``: a server that finished
sends one (OpenAI reference), so a stream that ends without one was cut. Two shapes are
common on real servers:

1. a role chunk (or a few content chunks) and then ``data: [DONE]``: llama.cpp's
   ``llama-cpp-python`` server at its defaults (``interrupt_requests``) answers a running
   stream with ``[DONE]`` as soon as another request waits for the model, so under
   concurrency most streams end without content and without a finish_reason;
2. content and then the end of the body, without a finish chunk *and* without ``[DONE]``:
   the same server's stream that runs into its context window (``n_ctx``) just stops.

Such a stream says nothing about the answer the model would have given, so it is never
scored as an empty, truncated or unfinished answer: the replay stores it as ``error_kind
interrupted`` (an infrastructure failure, :func:`shadoweval.records.is_infra_failure`), and
compare, gate and canary read it through :func:`response_interrupted` and
:func:`failure_cause`, with the wording of :data:`INTERRUPTED_WORDS` everywhere.

Cause: shape 2 (a cut after content without ``[DONE]``), or an HTTP error whose message
names the context window (:func:`mentions_context_length`), is the candidate's own
**context length** configuration, and the gate's policy (``infra_error_rate.context_length``)
says what verdict that gets; every other interruption is the server's (a setting such as
``interrupt_requests``, or the replay's concurrency): infrastructure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shadoweval.records import (
    CONTEXT_LENGTH_WORDS,
    INTERRUPTED_WORDS,
    FailureCause,
    ReplayErrorKind,
    ResponseRecord,
    ToolCall,
)

__all__ = [
    "CONTEXT_LENGTH_WORDS",
    "INTERRUPTED_WORDS",
    "FailureCause",
    "Interruption",
    "failure_cause",
    "mentions_context_length",
    "output_chars",
    "response_interrupted",
    "stream_interruption",
]


@dataclass(frozen=True, slots=True)
class Interruption:
    """An interrupted stream: its ``cause`` and the ``detail`` a replay outcome keeps."""

    cause: FailureCause
    detail: str


def stream_interruption(
    *, output_chars: int, finish_seen: bool, done_seen: bool, end_event: str | None = None
) -> Interruption | None:
    """Apply the rule (module doc) to what a 2xx stream without an error event carried.

    Args:
        output_chars: characters of output (text, reasoning, tool-call names and
            arguments); 0 for none.
        finish_seen: a choice carried a non-null ``finish_reason``.
        done_seen: ``data: [DONE]`` arrived (or the dialect's ``end_event``).
        end_event: the terminal event of a dialect that names its own ending (the Responses
            API's ``response.completed``, Anthropic's ``message_stop``), ``None`` for chat
            completions. Such a dialect reports its context window as a stop reason
            (``max_output_tokens``, ``model_context_window_exceeded``), so a cut without
            its terminal event is never read as the context length: it is the server's or
            the connection's interruption.

    Returns:
        ``None`` for a stream that finished, else the :class:`Interruption` (its
        ``detail`` names the context length exactly when the cause is the context length,
        so :func:`failure_cause` reads the cause back from a stored detail).
    """
    if finish_seen:
        return None
    what = f"after {output_chars} characters" if output_chars else "without content"
    if end_event is not None:
        end = f"with {end_event}" if done_seen else f"without {end_event}"
        return Interruption(
            FailureCause.INTERRUPTED,
            f"{INTERRUPTED_WORDS}: the stream ended {end} {what} and without a stop reason "
            "(the server or the connection cut it; this API reports a full window as a "
            "stop reason, so this is not the model's limit)",
        )
    if output_chars and not done_seen:
        return Interruption(
            FailureCause.CONTEXT_LENGTH,
            f"{INTERRUPTED_WORDS}: cut after {output_chars} characters without a finish "
            f"chunk and without [DONE]: likely {CONTEXT_LENGTH_WORDS} (the server stopped "
            "at its context window, e.g. llama.cpp n_ctx)",
        )
    end = "with [DONE]" if done_seen else "without [DONE]"
    return Interruption(
        FailureCause.INTERRUPTED,
        f"{INTERRUPTED_WORDS}: the stream ended {end} {what} and without a finish_reason "
        "(a server that cuts a running stream when another request arrives does this, "
        "e.g. llama-cpp-python's interrupt_requests)",
    )


def output_chars(text: str | None, reasoning: str | None, tool_calls: Sequence[ToolCall]) -> int:
    """Characters of output the rule counts: the text (stripped), the reasoning, and each
    tool call's name and arguments."""
    calls = sum(len(c.name) + len(c.arguments) for c in tool_calls)
    return len((text or "").strip()) + len(reasoning or "") + calls


def response_interrupted(response: ResponseRecord | None) -> Interruption | None:
    """The rule on a stored response (a live answer, or a replay stored before the rule):
    a streamed 2xx response without a ``finish_reason`` and without an error message.

    A stored record does not keep whether ``[DONE]`` arrived, so its cause is the
    server's interruption (:attr:`FailureCause.INTERRUPTED`); the replay client, which
    sees the end of the stream, tells a cut at the context length apart
    (:func:`stream_interruption`).
    """
    if (
        response is None
        or not response.streamed
        or not 200 <= response.status_code < 300
        or response.finish_reason_raw is not None
        or response.error_message is not None
    ):
        return None
    return stream_interruption(
        output_chars=output_chars(response.text, response.reasoning_text, response.tool_calls),
        finish_seen=False,
        done_seen=True,
    )


_CONTEXT_PATTERN = re.compile(
    r"n_ctx|context[ _-]?(?:window|length|size|limit)|maximum context|"
    r"context_length_exceeded|exceeds? (?:the )?(?:model'?s? )?(?:max(?:imum)? )?context",
    re.IGNORECASE,
)


def mentions_context_length(message: str | None) -> bool:
    """Whether a server's error message names the context window (``Requested tokens (70)
    exceed context window of 64``, vLLM's ``maximum context length is 2048 tokens``,
    OpenAI's ``context_length_exceeded``, llama.cpp's ``n_ctx``)."""
    return message is not None and _CONTEXT_PATTERN.search(message) is not None


def failure_cause(
    error_kind: ReplayErrorKind | None, response: ResponseRecord | None, detail: str | None = None
) -> FailureCause | None:
    """Why a replay (or a live answer) failed, when the rule or the message says so.

    * ``interrupted`` replays: :attr:`FailureCause.CONTEXT_LENGTH` when their detail (or
      the response's ``error_message``, which keeps it) names the context length, else
      :attr:`FailureCause.INTERRUPTED`;
    * an HTTP error (``http_status``, or a response with status ≥ 400) whose message
      names the context window: :attr:`FailureCause.CONTEXT_LENGTH`;
    * no error kind, and a stored stream the rule finds interrupted
      (:func:`response_interrupted`): :attr:`FailureCause.INTERRUPTED`;
    * else ``None`` (the error kind says all there is).
    """
    message = response.error_message if response is not None else None
    named = mentions_context_length(message) or mentions_context_length(detail)
    if error_kind is ReplayErrorKind.INTERRUPTED:
        return FailureCause.CONTEXT_LENGTH if named else FailureCause.INTERRUPTED
    status = response.status_code if response is not None else None
    if error_kind is ReplayErrorKind.HTTP_STATUS or (status is not None and status >= 400):
        return FailureCause.CONTEXT_LENGTH if named else None
    if error_kind is None:
        found = response_interrupted(response)
        return found.cause if found is not None else None
    return None
