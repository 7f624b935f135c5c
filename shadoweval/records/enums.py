"""Enumerations of the records: finish reasons, sources, outcomes, decisions."""

from __future__ import annotations

import enum

# --------------------------------------------------------------------------- enums


class FinishReason(enum.StrEnum):
    """Normalized ``finish_reason``; the raw value is always kept beside it."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    ABORT = "abort"
    UNKNOWN = "unknown"


class UsageSource(enum.StrEnum):
    """Where token counts came from. ``missing`` is never silently turned into 0."""

    REPORTED = "reported"
    MISSING = "missing"


class TimingSource(enum.StrEnum):
    """How a response's timings were obtained."""

    MEASURED = "measured"
    """Measured on a monotonic clock by our own reader (sidecar or replay client)."""
    RECORDED = "recorded"
    """Copied from an imported table (e.g. a benchmark harness's latency column)."""
    MISSING = "missing"
    """No timing is known."""


class ExchangeOutcome(enum.StrEnum):
    """How a captured request ended on the live path."""

    DONE = "done"
    ERROR = "error"
    CANCELLED = "cancelled"
    TRUNCATED = "truncated"


class ReplayTarget(enum.StrEnum):
    """Which shadow replica a replay went to."""

    CANDIDATE = "candidate"
    BASELINE_REPEAT = "baseline_repeat"


class ReplayErrorKind(enum.StrEnum):
    """Why a replay produced no usable response. Failures are data, never dropped."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    DECODE = "decode"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"
    """HTTP 200, but the stream was cut before its ``finish_reason``
    (:mod:`shadoweval.llm_protocol.interruption`): infrastructure, never an empty answer."""


INTERRUPTED_WORDS = "interrupted stream (HTTP 200, cut before its finish_reason)"
"""How every reason names an interruption (replay detail, compare, gate, canary)."""
CONTEXT_LENGTH_WORDS = "the candidate's context length"
"""How every reason names a failure that the candidate's context window caused."""
INTERRUPTION_BURST_SHARE = 0.2
"""A replay target whose streamed replays were interrupted at least this often while the
replay ran more than one request at a time has a server that interrupts running streams
under concurrency (:meth:`shadoweval.records.ReplayPass.interruption_advice`)."""


class FailureCause(enum.StrEnum):
    """Why a side failed, where the failure says more than its error kind
    (:func:`shadoweval.llm_protocol.interruption.failure_cause`)."""

    INTERRUPTED = "interrupted"
    """The server cut a 2xx stream before its ``finish_reason``: its setting (llama.cpp's
    ``interrupt_requests``) or the replay's concurrency; infrastructure."""
    CONTEXT_LENGTH = "context_length"
    """The candidate's context window: a stream cut after content without a finish chunk
    or ``[DONE]``, or an HTTP error naming the context length."""


class Decision(enum.StrEnum):
    """Gate decision. PROMOTE and ROLLBACK are terminal for a run."""

    PROMOTE = "promote"
    HOLD = "hold"
    ROLLBACK = "rollback"


class CheckOutcome(enum.StrEnum):
    """Outcome of one check (one metric in one task type)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
