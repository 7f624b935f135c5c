"""Dead-letter handling of the Kafka replay worker (:mod:`shadoweval.replay.kafka_worker`).

A fetched record that cannot be replayed — no value, not a capture-log line
(:func:`decode_record`), an exchange id already stored (or fetched in the same batch)
with different content, a replay request that cannot be built, or any other exception
while it is processed — goes to ``kafka.dead_letter_topic`` with its value and key
unchanged and headers saying why (:func:`dead_letter_record`), and is stored as a rejected
record of the run (:class:`DeadLetterQueue`); its offset is then finished, so the
partition moves on. A record whose exchange was stored but whose replay raised
(``send_failed``) is dead-lettered the same way, stored at stage ``replay`` (the exchange
already counts as captured). A record already rejected at the same
``topic/partition@offset`` for this run (a re-delivery after a crash) is neither produced
nor stored again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from shadoweval.bus import BusError, BusProducer, BusRecord
from shadoweval.bus.producer import OutgoingRecord
from shadoweval.capture_log import decode_exchange_line
from shadoweval.errors import RecordDecodeError
from shadoweval.records import Exchange
from shadoweval.redaction import scrub_secrets
from shadoweval.replay.exchange_replay import rejected_record
from shadoweval.storage import RejectedRecord, RejectStage, Repository

REJECTED_STAGES: tuple[RejectStage, ...] = (RejectStage.CAPTURE_LOG, RejectStage.REPLAY)
"""Stages of the rejected records a dead letter is stored as."""

DLQ_DETAIL_MAX_CHARS = 1000
"""The ``detail`` header of a dead-letter record is cut to this many characters."""


def record_location(record: BusRecord) -> str:
    """Where a record came from: ``topic/partition@offset`` (a rejected record's location)."""
    return f"{record.topic}/{record.partition}@{record.offset}"


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A fetched record bound for the dead-letter topic.

    ``reason``: the rejection reason (``empty``, a :class:`RecordDecodeError` reason,
    ``conflicting_duplicate``, ``unreplayable``, ``unprocessable``, ``send_failed``);
    ``detail``: a human-readable explanation; ``raw``: the text stored with the rejected
    record; ``stage``: the rejected record's stage (``capture_log``, or ``replay`` for an
    exchange already stored as a member of the run).
    """

    record: BusRecord
    reason: str
    detail: str
    raw: str
    stage: RejectStage = RejectStage.CAPTURE_LOG


def decode_record(record: BusRecord) -> Exchange | BadRecord:
    """The exchange in a record's value (one capture-log line, UTF-8, surrounding white
    space ignored), or the :class:`BadRecord` saying why there is none (``empty`` for a
    missing or blank value, else the decode error's reason, ``invalid`` by default)."""
    location = record_location(record)
    value = record.value or b""
    text = value.decode("utf-8", errors="replace")
    if not text.strip():
        return BadRecord(record, "empty", f"{location}: the record has no value", text)
    try:
        return decode_exchange_line(text.strip().removeprefix("\ufeff"), location)
    except RecordDecodeError as exc:
        return BadRecord(record, exc.reason or "invalid", str(exc), text)


def dead_letter_record(bad: BadRecord, run_id: str) -> OutgoingRecord:
    """The dead-letter copy of ``bad``: its value and key, with headers ``reason``,
    ``source_topic``, ``source_partition``, ``source_offset``, ``run_id`` and ``detail``
    (secrets scrubbed, cut to :data:`DLQ_DETAIL_MAX_CHARS` characters)."""
    detail, _ = scrub_secrets(bad.detail[:DLQ_DETAIL_MAX_CHARS])
    record = bad.record
    headers = (
        ("reason", bad.reason.encode()),
        ("source_topic", record.topic.encode()),
        ("source_partition", str(record.partition).encode()),
        ("source_offset", str(record.offset).encode()),
        ("run_id", run_id.encode()),
        ("detail", detail.encode()),
    )
    return OutgoingRecord(value=record.value or b"", key=record.key, headers=headers)


class DeadLetterQueue:
    """Produces bad records to the dead-letter topic and stores them as rejected, once.

    Args:
        repo: storage (rejected records of ``run_id``).
        run_id: the run the records belong to.
        producer: produces to ``topic``; started and stopped by its owner.
        topic: the dead-letter topic (``kafka.dead_letter_topic``).
    """

    def __init__(self, repo: Repository, run_id: str, producer: BusProducer, topic: str) -> None:
        self.repo = repo
        self.run_id = run_id
        self.producer = producer
        self.topic = topic
        self._rejected_at: set[str] = set()

    async def load_rejected_locations(self, page: int = 1000) -> None:
        """Remember the ``topic/partition@offset`` locations already rejected for the run
        (read from storage ``page`` rows at a time, stages :data:`REJECTED_STAGES`)."""
        for stage in REJECTED_STAGES:
            offset = 0
            while True:
                rows = await asyncio.to_thread(
                    self.repo.list_rejected,
                    self.run_id,
                    stage=stage.value,
                    limit=page,
                    offset=offset,
                )
                self._rejected_at.update(
                    r.location for r in rows if r.location and "@" in r.location
                )
                if len(rows) < page:
                    break
                offset += page

    def already_rejected(self, record: BusRecord) -> bool:
        """Whether ``record``'s location was dead-lettered for this run before."""
        return record_location(record) in self._rejected_at

    async def send(self, bad: Sequence[BadRecord]) -> list[BadRecord]:
        """Produce and store the records of ``bad`` not rejected before.

        Returns:
            The records newly dead-lettered (the caller counts them by reason).

        Raises:
            BusError: the dead-letter topic did not acknowledge a record (nothing is
                stored, so the records are re-delivered after a restart).
            StorageError: the rejected records could not be stored.
        """
        new = [b for b in bad if record_location(b.record) not in self._rejected_at]
        if not new:
            return []
        outgoing = [dead_letter_record(b, self.run_id) for b in new]
        for item, delivery in zip(
            new, await self.producer.send_many(self.topic, outgoing), strict=True
        ):
            if isinstance(delivery, BusError):
                raise BusError(
                    f"dead-letter topic {self.topic} refused {record_location(item.record)}: "
                    f"{delivery}"
                )
        rows: list[RejectedRecord] = [
            rejected_record(
                self.run_id, record_location(b.record), b.reason, b.detail, b.raw, stage=b.stage
            )
            for b in new
        ]
        await asyncio.to_thread(self.repo.save_rejected_many, rows)
        for b in new:
            self._rejected_at.add(record_location(b.record))
        return new
