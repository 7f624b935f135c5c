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
