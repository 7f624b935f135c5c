"""A manually committed consumer for replay workers (at-least-once).

Wraps :class:`aiokafka.AIOKafkaConsumer` with ``enable_auto_commit=False``: the worker
commits an offset only after everything before it is persisted (DESIGN §6). Partitions are
plain ``(topic, partition)`` tuples so callers never import aiokafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from shadoweval.bus.errors import BusError, BusTimeoutError
from shadoweval.lifecycle import AsyncLifecycle

logger = logging.getLogger(__name__)

Partition = tuple[str, int]
"""``(topic, partition)``."""

RevokeHook = Callable[[list[Partition]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BusRecord:
    """One consumed record. ``timestamp_ms`` is the broker/producer timestamp."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int

    @property
    def tp(self) -> Partition:
        """``(topic, partition)``."""
        return (self.topic, self.partition)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: BusConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        hook = self.owner.on_revoked
        if hook is not None and revoked:
            await hook([(tp.topic, tp.partition) for tp in revoked])

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        logger.info("assigned partitions: %s", [(tp.topic, tp.partition) for tp in assigned])


class BusConsumer(AsyncLifecycle):
    """Consume one topic in a consumer group, committing offsets by hand.

    Args:
        bootstrap_servers: ``host:port[,host:port]``.
        topic: the topic to read.
        group_id: the consumer group (one per run, so runs read independently).
        client_id: shown in broker logs.
        auto_offset_reset: where a new group starts (``earliest`` replays what is stored).
        on_revoked: awaited before partitions are taken away in a rebalance (flush and
            commit there).
        start_timeout_s: deadline for :meth:`start`.

    Use ``async with`` or :meth:`start`/:meth:`stop` (:mod:`shadoweval.lifecycle`: a failed
    start may be retried; not restartable after stop).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group_id: str,
        *,
        client_id: str = "shadow-eval-replay",
        auto_offset_reset: str = "earliest",
        on_revoked: RevokeHook | None = None,
        start_timeout_s: float = 30.0,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
    ) -> None:
        self.topic = topic
        self.group_id = group_id
        self.on_revoked = on_revoked
        self.start_timeout_s = start_timeout_s
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            client_id=client_id,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
        )

    async def start(self) -> None:
        """Join the group and subscribe.

        Raises:
            BusTimeoutError: the broker did not answer within ``start_timeout_s``.
            BusError: the broker refused.
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            try:
                await asyncio.wait_for(self._consumer.start(), self.start_timeout_s)
            except TimeoutError as exc:
                raise BusTimeoutError(
                    f"consumer start timed out after {self.start_timeout_s} s"
                ) from exc
            except KafkaError as exc:
                raise BusError(f"cannot start consumer: {exc!r}") from exc
            self._consumer.subscribe([self.topic], listener=_Listener(self))

    async def stop(self) -> None:
        """Leave the group; idempotent, never raises."""
        if not self._stopping():
            return
        try:
            await asyncio.wait_for(self._consumer.stop(), 10.0)
        except (TimeoutError, KafkaError, OSError):
            logger.warning("consumer stop failed", exc_info=True)

    async def getmany(self, *, timeout_ms: int = 500, max_records: int = 64) -> list[BusRecord]:
        """Fetch up to ``max_records`` records, waiting at most ``timeout_ms``."""
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaError as exc:
            raise BusError(f"fetch failed: {exc!r}") from exc
        out: list[BusRecord] = []
        for tp, records in batches.items():
            for r in records:
                out.append(
                    BusRecord(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=r.offset,
                        key=r.key,
                        value=r.value,
                        headers=tuple((k, bytes(v)) for k, v in (r.headers or ())),
                        timestamp_ms=r.timestamp,
                    )
                )
        return out

    async def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Commit ``offsets`` (the next offset to read, per partition).

        Raises:
            BusError: the commit failed (e.g. the partition was reassigned meanwhile).
        """
        if not offsets:
            return
        try:
            await self._consumer.commit(
                {TopicPartition(t, p): off for (t, p), off in offsets.items()}
            )
        except (CommitFailedError, KafkaError) as exc:
            raise BusError(f"commit failed: {exc!r}") from exc

    def assignment(self) -> list[Partition]:
        """Partitions currently assigned to this consumer."""
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    async def lag(self) -> dict[Partition, int]:
        """Records behind the partition's high watermark, per assigned partition.

        Uses the high watermark of the last fetch and the consumer's position; a partition
        not fetched yet is left out. Never raises (a failed lookup leaves it out).
        """
        out: dict[Partition, int] = {}
        for tp in list(self._consumer.assignment()):
            high = self._consumer.highwater(tp)
            if high is None:
                continue
            try:
                position = await asyncio.wait_for(self._consumer.position(tp), 1.0)
            except (TimeoutError, KafkaError, AssertionError, ValueError):
                continue
            out[(tp.topic, tp.partition)] = max(0, high - position)
        return out
