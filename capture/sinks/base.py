"""The sink interface and the unit sinks receive: :class:`BuiltExchange`.

A sink receives exchanges already built, redacted and serialized (by
:mod:`shadoweval.capture.builder`, off the hot path). ``write`` never raises and never waits on a
broker or disk beyond its own bounded deadline; a sink that cannot deliver keeps the record
(spool) or counts the drop with its reason. ``stop`` flushes within a deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class BuiltExchange:
    """One exchange ready for the sinks.

    * ``exchange_id``: the record's id (ULID, sorts by capture time).
    * ``key``: the Kafka key — the session key hash when there is one, else the id.
    * ``payload``: the Exchange as compact JSON (one capture-log line without its newline).
      Redaction has already run: no secret is in it.
    """

    exchange_id: str
    key: bytes
    payload: bytes

    @property
    def size_bytes(self) -> int:
        """Payload size in bytes."""
        return len(self.payload)


@runtime_checkable
class ExchangeSink(Protocol):
    """Where built exchanges go (Kafka with its spool, capture-log files)."""

    name: str

    async def start(self) -> None:
        """Open resources; must not fail because a broker is down (fail-open).

        Raises :class:`~shadoweval.errors.LifecycleError` when called twice or after
        :meth:`stop` (:mod:`shadoweval.lifecycle`).
        """

    async def write(self, built: BuiltExchange) -> None:
        """Deliver or keep one exchange; never raises, never blocks without a deadline."""

    async def stop(self, deadline_s: float) -> None:
        """Flush what can be flushed within ``deadline_s``, then release resources.

        Idempotent; on a never-started sink it only counts what was written as dropped.
        """

    def ready(self) -> bool:
        """Whether the sink can accept exchanges now (for ``/readyz``)."""
