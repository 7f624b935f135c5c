"""The one exception tree of shadow-eval.

Every error the project raises on purpose derives from :class:`ShadowEvalError`;
third-party errors are wrapped at the edges (storage, replay client, table reading)
with ``raise ... from exc`` so callers never have to import httpx, SQLAlchemy or
pandas exception types::

    ShadowEvalError
    ├── ConfigError            bad settings or a bad gate policy (names field and value)
    ├── RecordDecodeError      a capture-log line, table row or payload that cannot be decoded
    ├── TableMappingError      a table that lacks a mapped column, or an unknown preset
    ├── StorageError           the database refused an operation
    ├── ReplayError            a replay that could not even be attempted (not a candidate failure:
    │   │                      candidate failures are data on ReplayOutcome.error_kind)
    │   └── PreflightError     a target failed the preflight request (URL, status, body named)
    ├── LifecycleError         a long-lived object started twice or after stop (.lifecycle)
    ├── InsufficientDataError  a statistic asked for on too little data
    └── InvalidDataError       values a statistic cannot use (NaN, infinite, out of range)

Warnings: :class:`DegenerateDataWarning` (constant arms, zero variance) follows
``scipy.stats.DegenerateDataWarning``.
"""

from __future__ import annotations


class ShadowEvalError(Exception):
    """Root of every error raised by shadow-eval on purpose."""


class ConfigError(ShadowEvalError, ValueError):
    """Invalid configuration or gate policy.

    Attributes:
        field: dotted path of the offending field (``"metrics.similarity.margin"``), or ``""``.
        value: the offending value, as read.
    """

    def __init__(self, message: str, *, field: str = "", value: object = None) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class RecordDecodeError(ShadowEvalError, ValueError):
    """A record (capture-log line, table row, Kafka payload) that cannot be decoded.

    Attributes:
        location: where the record came from (``"capture.jsonl.gz:17"``).
        reason: short machine-friendly reason (``"invalid_json"``, ``"schema"``).
    """

    def __init__(self, message: str, *, location: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.location = location
        self.reason = reason


class TableMappingError(ShadowEvalError, ValueError):
    """A table does not fit its field mapping (missing column, unknown preset)."""


class StorageError(ShadowEvalError):
    """The database refused or failed an operation (wraps SQLAlchemy errors)."""


class ReplayError(ShadowEvalError):
    """A replay that cannot run at all (bad base URL, unreadable source)."""


class PreflightError(ReplayError):
    """A shadow target failed the one real request sent before a replay
    (:mod:`shadoweval.replay.preflight`): the message names the URL requested, the HTTP
    status (or the connection error) and the first bytes of the body.

    Attributes:
        target: the target (``candidate``, ``baseline_repeat``, ``judge``).
        url: the URL actually requested.
        status: the HTTP status, or ``None`` when no response came back.
    """

    def __init__(self, message: str, *, target: str, url: str, status: int | None) -> None:
        super().__init__(message)
        self.target = target
        self.url = url
        self.status = status


class LifecycleError(ShadowEvalError, RuntimeError):
    """``start()`` on an object that is already started, or that was stopped.

    Every long-lived object (clients, producers, consumers, sinks, the capture pipeline, the
    sidecar, background servers) follows :mod:`shadoweval.lifecycle`: started once, stopped
    once, never restarted. A :class:`RuntimeError` too, as these errors were before.
    """


class InsufficientDataError(ShadowEvalError, ValueError):
    """A statistic was asked for on too little data (empty arm, n below a minimum)."""


class InvalidDataError(ShadowEvalError, ValueError):
    """Input values a statistic cannot use: NaN, infinite, or outside the allowed range.

    Attributes:
        name: what the values are (``"divergence"``, ``"candidate e2e_ms"``).
        count: how many values are invalid.
    """

    def __init__(self, message: str, *, name: str = "", count: int = 0) -> None:
        super().__init__(message)
        self.name = name
        self.count = count


class DegenerateDataWarning(RuntimeWarning):
    """Data on which a statistic is defined but uninformative (no variance, no discordance)."""
