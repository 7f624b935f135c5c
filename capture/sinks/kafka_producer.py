"""The Kafka sink's producer seam and its small types (:mod:`shadoweval.capture.sinks.kafka`
re-exports the public names): what the sink needs from a producer, the sink's modes, the
record header every exchange carries, and the reason a failed send is counted under.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shadoweval.bus.errors import BusError, BusTimeoutError
from shadoweval.bus.producer import Delivery, OutgoingRecord, RecordTooLargeError
from shadoweval.config import KafkaSettings
from shadoweval.records import SCHEMA_VERSION

SCHEMA_HEADER = ("schema_version", str(SCHEMA_VERSION).encode())
"""The record header every exchange carries (consumers route on it without decoding)."""


class ProducerLike(Protocol):
    """What the sink needs from a producer (:class:`BusProducer`, or a test fake)."""

    @property
    def idempotent(self) -> bool:
        """Whether the broker granted an idempotent producer id (valid after start)."""
        ...

    async def start(self) -> None:
        """Connect; raise :class:`BusError` when the broker is unreachable."""

    async def stop(self) -> None:
        """Flush within a bounded wait and disconnect; never raise."""

    async def send_many(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Delivery | BusError]:
        """Produce in order; one :class:`Delivery` or :class:`BusError` per record."""
        ...


ProducerFactory = Callable[[KafkaSettings], ProducerLike]
Sleep = Callable[[float], Awaitable[None]]
"""How the drainer waits after a failure (:func:`asyncio.sleep`; a seam for tests)."""


class SinkMode(enum.StrEnum):
    """Where the Kafka sink sends new exchanges."""

    DIRECT = "direct"
    SPOOLING = "spooling"


@dataclass(frozen=True, slots=True)
class _Rec:
    """One exchange on its way: the Kafka key and value."""

    key: bytes
    value: bytes


def _reason(error: BusError) -> str:
    """The ``produce_errors`` reason of a failed send."""
    if isinstance(error, BusTimeoutError):
        return "timeout"
    if isinstance(error, RecordTooLargeError):
        return "too_large"
    if "not started" in str(error):
        return "not_connected"
    return "broker_error"
