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

A dead letter that cannot be written whole (issue 30) — its copy is over the producer's
``max_message_bytes`` (decided before sending, :func:`shadoweval.bus.producer.record_size_bytes`),
or the producer or the broker refuses it as too large (:class:`RecordTooLargeError`) — is
written as a bounded envelope instead (:func:`envelope_record`: where it came from, the
reason, its size, its SHA-256 and its first bytes), so the partition moves on; it is
counted apart (``enveloped``). Only a refusal of the envelope itself stops the worker.

Decoding follows the capture-log reader's rule (:func:`shadoweval.capture_log.line_entry`):
a value with bytes that are not UTF-8 is rejected as ``invalid_utf8`` naming the first such
byte, never read with replacement characters (issue 30).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, NoReturn

import orjson

from shadoweval.bus import BusError, BusProducer, BusRecord
from shadoweval.bus.producer import OutgoingRecord, RecordTooLargeError, record_size_bytes
from shadoweval.capture_log import line_entry
from shadoweval.records import Exchange
from shadoweval.redaction import scrub_secrets
from shadoweval.replay.exchange_replay import rejected_record
from shadoweval.storage import RejectedRecord, RejectStage, Repository

REJECTED_STAGES: tuple[RejectStage, ...] = (RejectStage.CAPTURE_LOG, RejectStage.REPLAY)
"""Stages of the rejected records a dead letter is stored as."""

DLQ_DETAIL_MAX_CHARS = 1000
"""The ``detail`` header of a dead-letter record is cut to this many characters."""

ENVELOPE_HEAD_BYTES = 1024
"""An envelope carries at most this many first bytes of the record's value (fewer when
the producer's ``max_message_bytes`` is small: an eighth of it)."""

ENVELOPE_DETAIL_MAX_CHARS = 200
"""An envelope's ``detail`` (header and field) is cut to this many characters."""

ENVELOPE_KEY_MAX_BYTES = 256
"""An envelope keeps the record's key up to this size (a longer one is left out)."""

logger = logging.getLogger(__name__)


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
    space ignored), or the :class:`BadRecord` saying why there is none: ``empty`` for a
    missing or blank value, else the capture-log reader's reason for the same line
    (:func:`shadoweval.capture_log.line_entry`: ``invalid_utf8`` naming the first byte
    that is not UTF-8, or the decode error's reason, ``invalid`` by default)."""
    location = record_location(record)
    value = record.value or b""
    # surrogateescape, as the capture-log reader reads: a byte that is not UTF-8 stays
    # visible (a lone surrogate) so the line is refused, not stored with U+FFFD.
    text = value.decode("utf-8", errors="surrogateescape")
    if not text.strip():
        return BadRecord(record, "empty", f"{location}: the record has no value", text)
    entry = line_entry(text.strip().removeprefix("\ufeff"), location)
    if entry.exchange is not None:
        return entry.exchange
    error = entry.error
    reason = (error.reason if error is not None else None) or "invalid"
    return BadRecord(record, reason, str(error or f"{location}: invalid"), entry.raw)


def _headers(bad: BadRecord, run_id: str, detail: str, form: str) -> tuple[tuple[str, bytes], ...]:
    record = bad.record
    return (
        ("reason", bad.reason.encode()),
        ("source_topic", record.topic.encode()),
        ("source_partition", str(record.partition).encode()),
        ("source_offset", str(record.offset).encode()),
        ("run_id", run_id.encode()),
        ("detail", detail.encode()),
        ("form", form.encode()),
    )


def dead_letter_record(bad: BadRecord, run_id: str) -> OutgoingRecord:
    """The dead-letter copy of ``bad``: its value and key, with headers ``reason``,
    ``source_topic``, ``source_partition``, ``source_offset``, ``run_id``, ``detail``
    (secrets scrubbed, cut to :data:`DLQ_DETAIL_MAX_CHARS` characters) and ``form``
    (``whole``)."""
    detail, _ = scrub_secrets(bad.detail[:DLQ_DETAIL_MAX_CHARS])
    headers = _headers(bad, run_id, detail, "whole")
    return OutgoingRecord(value=bad.record.value or b"", key=bad.record.key, headers=headers)


def envelope_record(bad: BadRecord, run_id: str, max_record_bytes: int) -> OutgoingRecord:
    """The bounded stand-in for a dead letter too large to be written whole.

    Its value is a JSON object: ``dead_letter`` (``"envelope"``), ``source_topic``,
    ``source_partition``, ``source_offset``, ``run_id``, ``reason``, ``detail`` (scrubbed,
    cut to :data:`ENVELOPE_DETAIL_MAX_CHARS`), ``size_bytes`` and ``key_size_bytes`` (of
    the original value and key), ``sha256`` (hex, of the original value), ``head_bytes``
    and ``head_base64`` (its first ``min(ENVELOPE_HEAD_BYTES, max_record_bytes // 8)``
    bytes). Headers as :func:`dead_letter_record`'s, ``form`` ``envelope``; the key is kept
    when at most :data:`ENVELOPE_KEY_MAX_BYTES`. Its size stays under a few kilobytes
    whatever the record's, well under any ``max_message_bytes`` (at least 1024).
    """
    record = bad.record
    value = record.value or b""
    key = record.key or b""
    head = value[: min(ENVELOPE_HEAD_BYTES, max_record_bytes // 8)]
    detail, _ = scrub_secrets(bad.detail[:ENVELOPE_DETAIL_MAX_CHARS])
    body = {
        "dead_letter": "envelope",
        "source_topic": record.topic,
        "source_partition": record.partition,
        "source_offset": record.offset,
        "run_id": run_id,
        "reason": bad.reason,
        "detail": detail,
        "size_bytes": len(value),
        "key_size_bytes": len(key),
        "sha256": hashlib.sha256(value).hexdigest(),
        "head_bytes": len(head),
        "head_base64": base64.b64encode(head).decode("ascii"),
    }
    return OutgoingRecord(
        value=orjson.dumps(body),
        key=record.key if len(key) <= ENVELOPE_KEY_MAX_BYTES else None,
        headers=_headers(bad, run_id, detail, "envelope"),
    )


class SentDeadLetter(NamedTuple):
    """A record newly dead-lettered: ``enveloped`` when it went as an envelope."""

    bad: BadRecord
    enveloped: bool


class DeadLetterQueue:
    """Produces bad records to the dead-letter topic and stores them as rejected, once.

    Args:
        repo: storage (rejected records of ``run_id``).
        run_id: the run the records belong to.
        producer: produces to ``topic``; started and stopped by its owner.
        topic: the dead-letter topic (``kafka.dead_letter_topic``).
        max_record_bytes: a copy larger than this (:func:`record_size_bytes`) goes as an
            envelope without being tried; the producer's ``max_message_bytes`` by default.
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        producer: BusProducer,
        topic: str,
        *,
        max_record_bytes: int | None = None,
    ) -> None:
        self.repo = repo
        self.run_id = run_id
        self.producer = producer
        self.topic = topic
        self.max_record_bytes = max_record_bytes or producer.settings.max_message_bytes
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

    def _outgoing(self, bad: BadRecord) -> tuple[OutgoingRecord, bool]:
        """The record to produce for ``bad``, and whether it is an envelope."""
        whole = dead_letter_record(bad, self.run_id)
        if record_size_bytes(whole) <= self.max_record_bytes:
            return whole, False
        return envelope_record(bad, self.run_id, self.max_record_bytes), True

    async def _produce(self, new: list[BadRecord]) -> list[bool]:
        """Produce ``new``; return, per record, whether it went as an envelope. A copy the
        producer or the broker refuses as too large is sent again as an envelope (after
        the others of the batch: the dead-letter topic's order is not the source's)."""
        planned = [self._outgoing(b) for b in new]
        enveloped = [env for _, env in planned]
        deliveries = await self.producer.send_many(self.topic, [o for o, _ in planned])
        retry: list[int] = []
        for index, delivery in enumerate(deliveries):
            if isinstance(delivery, RecordTooLargeError) and not enveloped[index]:
                retry.append(index)
            elif isinstance(delivery, BusError):
                self._refused(new[index], delivery)
        if not retry:
            return enveloped
        envelopes = [envelope_record(new[i], self.run_id, self.max_record_bytes) for i in retry]
        for index, delivery in zip(
            retry, await self.producer.send_many(self.topic, envelopes), strict=True
        ):
            if isinstance(delivery, BusError):
                self._refused(new[index], delivery, "the envelope of ")
            enveloped[index] = True
        return enveloped

    def _refused(self, bad: BadRecord, error: BusError, what: str = "") -> NoReturn:
        raise BusError(
            f"dead-letter topic {self.topic} refused {what}{record_location(bad.record)}: {error}"
        )

    async def send(self, bad: Sequence[BadRecord]) -> list[SentDeadLetter]:
        """Produce and store the records of ``bad`` not rejected before: each whole, or as
        an envelope (:func:`envelope_record`) when too large to be written whole.

        Returns:
            The records newly dead-lettered, each with whether it went as an envelope
            (the caller counts them by reason).

        Raises:
            BusError: the dead-letter topic did not acknowledge a record, or refused an
                envelope (nothing is stored, so the records are re-delivered after a
                restart).
            StorageError: the rejected records could not be stored.
        """
        new = [b for b in bad if record_location(b.record) not in self._rejected_at]
        if not new:
            return []
        enveloped = await self._produce(new)
        for b, env in zip(new, enveloped, strict=True):
            if env:
                logger.warning(
                    "dead letter %s (%s, %d bytes) is over %d bytes: written as an envelope",
                    record_location(b.record),
                    b.reason,
                    len(b.record.value or b""),
                    self.max_record_bytes,
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
        return [SentDeadLetter(b, env) for b, env in zip(new, enveloped, strict=True)]
