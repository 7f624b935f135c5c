"""An ``acks=all`` producer, idempotent where the broker allows it.

Wraps :class:`aiokafka.AIOKafkaProducer`. Every wait has a deadline (``send_timeout_s``) so
a slow or unreachable broker surfaces as :class:`BusTimeoutError` instead of a stall; a
record over the producer's ``max_request_size`` raises :class:`RecordTooLargeError` at once.

Idempotence (``enable_idempotence=True``) needs the broker to grant a producer id
(InitProducerId). Some Kafka-protocol brokers refuse it (Tansu 0.6 with in-memory storage
answers UNKNOWN_SERVER_ERROR); with ``idempotence="preferred"`` the producer then restarts
without it, keeping ``acks=all``, and :attr:`BusProducer.idempotent` says which one runs.
Consumers deduplicate on ``exchange_id`` either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, MessageSizeTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from shadoweval.bus.errors import BusError, BusTimeoutError
from shadoweval.config import KafkaSettings
from shadoweval.lifecycle import AsyncLifecycle

logger = logging.getLogger(__name__)


class RecordTooLargeError(BusError):
    """A record larger than the producer's (or broker's) maximum message size."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retriable=False)


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where the broker stored a record."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """One record to produce. ``headers`` values are bytes (Kafka record headers)."""

    value: bytes
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()


def record_size_bytes(record: OutgoingRecord) -> int:
    """The size in bytes ``record`` has for the producer's ``max_request_size`` check: its
    key, value and headers in a record batch of its own (aiokafka's
    ``DefaultRecordBatchBuilder.estimate_size_in_bytes``, the figure
    :meth:`BusProducer.send_many` refuses with :class:`RecordTooLargeError` when it exceeds
    ``max_message_bytes``)."""
    return int(
        DefaultRecordBatchBuilder.estimate_size_in_bytes(
            record.key, record.value, list(record.headers)
        )
    )


class BusProducer(AsyncLifecycle):
    """Produce records with ``acks=all`` and bounded waits.

    Args:
        settings: Kafka settings (bootstrap servers, compression, size limit, timeouts).

    Use ``async with BusProducer(settings) as producer`` or :meth:`start`/:meth:`stop`
    (:mod:`shadoweval.lifecycle`: a failed start may be retried; not restartable after stop).
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.idempotent = False
        self._producer: AIOKafkaProducer | None = None

    @property
    def started(self) -> bool:
        """Whether :meth:`start` succeeded and :meth:`stop` has not run."""
        return self._producer is not None

    def _make(self, idempotent: bool) -> AIOKafkaProducer:
        s = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=s.client_id,
            acks="all",
            enable_idempotence=idempotent,
            compression_type=None if s.compression == "none" else s.compression,
            max_request_size=s.max_message_bytes,
            linger_ms=s.linger_ms,
            request_timeout_ms=s.request_timeout_ms,
            retry_backoff_ms=100,
        )

    async def start(self) -> None:
        """Connect to the cluster.

        Raises:
            BusTimeoutError: no answer within ``send_timeout_s`` (the producer stays
                unstarted: start it again to retry).
            BusError: the broker refused (or refused idempotence with ``required``).
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            await self._connect()

    async def _connect(self) -> None:
        want = self.settings.idempotence != "off"
        try:
            self._producer = await self._start_one(want)
            self.idempotent = want
        except KafkaConnectionError as exc:
            # The broker is unreachable: nothing to say about idempotence yet.
            raise BusError(f"cannot reach broker {self.settings.bootstrap_servers}: {exc}") from exc
        except KafkaError as exc:
            if not want or self.settings.idempotence == "required":
                raise BusError(f"cannot start producer: {exc!r}") from exc
            logger.warning(
                "broker %s refused an idempotent producer id (%r); producing with acks=all "
                "without idempotence",
                self.settings.bootstrap_servers,
                exc,
            )
            try:
                self._producer = await self._start_one(False)
            except KafkaError as exc2:
                raise BusError(f"cannot start producer: {exc2!r}") from exc2
            self.idempotent = False

    async def _start_one(self, idempotent: bool) -> AIOKafkaProducer:
        producer = self._make(idempotent)
        try:
            await asyncio.wait_for(producer.start(), self.settings.send_timeout_s)
        except TimeoutError as exc:
            await self._close_quietly(producer)
            raise BusTimeoutError(
                f"broker {self.settings.bootstrap_servers} did not answer within "
                f"{self.settings.send_timeout_s} s"
            ) from exc
        except BaseException:
            await self._close_quietly(producer)
            raise
        return producer

    async def _close_quietly(self, producer: AIOKafkaProducer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), self.settings.send_timeout_s)
        except TimeoutError:
            logger.warning(
                "producer did not flush within %s s (broker %s hung?): closing its connections",
                self.settings.send_timeout_s,
                self.settings.bootstrap_servers,
            )
            await _abort(producer)
        except (KafkaError, OSError):
            logger.debug("producer stop failed", exc_info=True)

    async def stop(self) -> None:
        """Flush (within ``send_timeout_s``) and disconnect; idempotent, never raises."""
        if not self._stopping():
            return
        producer, self._producer = self._producer, None
        if producer is not None:
            await self._close_quietly(producer)

    async def send(self, topic: str, record: OutgoingRecord) -> Delivery:
        """Produce one record and wait for its acknowledgement.

        Raises:
            RecordTooLargeError: the record exceeds ``max_message_bytes``.
            BusTimeoutError: not acknowledged within ``send_timeout_s``.
            BusError: not started, or the broker failed the request.
        """
        (result,) = await self.send_many(topic, [record])
        if isinstance(result, BusError):
            raise result
        return result

    async def send_many(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Delivery | BusError]:
        """Produce records in order (pipelined) and wait for all acknowledgements.

        Returns one entry per record, in order: its :class:`Delivery` or the
        :class:`BusError` that kept it from being acknowledged within ``send_timeout_s``.
        Never raises for a record's failure.
        """
        producer = self._producer
        if producer is None:
            return [BusError("producer not started") for _ in records]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.send_timeout_s
        futures: list[asyncio.Future[object] | BusError] = []
        failed = False
        for record in records:
            if failed:
                # Never queue a record behind one that could not be queued: if the broker
                # came back now, the later record would be delivered before the earlier one.
                futures.append(BusError("not sent: an earlier record of the batch failed"))
                continue
            remaining = deadline - loop.time()
            try:
                fut = await asyncio.wait_for(
                    producer.send(
                        topic,
                        value=record.value,
                        key=record.key,
                        headers=list(record.headers) or None,
                    ),
                    max(remaining, 0.001),
                )
                fut.add_done_callback(_retrieve_exception)
                futures.append(fut)
            except MessageSizeTooLargeError as exc:
                futures.append(
                    RecordTooLargeError(
                        f"record of {len(record.value)} bytes exceeds max_message_bytes="
                        f"{self.settings.max_message_bytes}: {exc}"
                    )
                )
            except TimeoutError:
                futures.append(BusTimeoutError("broker did not accept the record in time"))
                failed = True
            except KafkaError as exc:
                futures.append(BusError(f"send failed: {exc!r}"))
                failed = True
        results: list[Delivery | BusError] = []
        for fut in futures:
            if isinstance(fut, BusError):
                results.append(fut)
                continue
            remaining = deadline - loop.time()
            try:
                meta = await asyncio.wait_for(asyncio.shield(fut), max(remaining, 0.001))
                results.append(
                    Delivery(
                        topic=meta.topic,  # type: ignore[attr-defined]
                        partition=meta.partition,  # type: ignore[attr-defined]
                        offset=meta.offset,  # type: ignore[attr-defined]
                    )
                )
            except TimeoutError:
                results.append(BusTimeoutError("record not acknowledged in time"))
            except MessageSizeTooLargeError as exc:
                results.append(RecordTooLargeError(f"broker rejected record size: {exc}"))
            except KafkaError as exc:
                results.append(BusError(f"delivery failed: {exc!r}"))
        return results


def _retrieve_exception(fut: asyncio.Future[object]) -> None:
    """Mark a delivery future's exception as seen (a timed-out wait no longer awaits it)."""
    if not fut.cancelled():
        fut.exception()


async def _abort(producer: AIOKafkaProducer) -> None:
    """Close a producer whose ``stop()`` timed out: cancel its sender, close its sockets.

    ``AIOKafkaProducer.stop()`` first waits for the accumulator to drain, so against a hung
    broker (connections open, nothing answers) it never reaches ``client.close()``, and the
    sender keeps its connections open after the cancelled ``stop()``: sockets leaked for the
    life of the process (aiokafka 0.14 ``producer/producer.py``: ``stop`` closes the sender,
    then the client). aiokafka has no public abort; this runs the same two steps ``stop()``
    would, without the drain. Records still queued are not delivered (the sink has spooled
    them). Never raises.
    """
    sender = getattr(producer, "_sender", None)
    for closing in (getattr(sender, "close", None), producer.client.close):
        if closing is None:
            continue
        try:
            await asyncio.wait_for(closing(), 1.0)
        except (TimeoutError, KafkaError, OSError):
            logger.debug("producer abort step failed", exc_info=True)
