"""Issue 30 items 2 and 3: poison of any size is dead-lettered; one decoding rule.

Item 2: a record that does not decode and whose dead-letter copy is over the producer's
``max_message_bytes`` was copied unchanged to the dead-letter topic, which refused it; the
worker took the refusal for a broker failure (exit 3, in-flight replays cancelled, every
restart stuck at the same offset, re-sending dead letters). Now it goes as a bounded
envelope, the partition moves on and it is counted. Item 3: a Kafka record with bytes that
are not UTF-8 was stored with U+FFFD while the capture-log reader refused the same line.

All against a real Kafka-protocol broker (Tansu) and mock-llm under uvicorn.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import orjson
import pytest

from shadoweval.bus import BusProducer, BusRecord, ensure_topics
from shadoweval.bus.producer import Delivery, OutgoingRecord, record_size_bytes
from shadoweval.capture_log import read_capture_log
from shadoweval.config import KafkaSettings
from shadoweval.replay.dead_letter import (
    BadRecord,
    DeadLetterQueue,
    dead_letter_record,
    decode_record,
)
from shadoweval.replay.metrics import WorkerMetrics
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.replay.test_kafka_worker import (
    DLQ,
    TOPIC,
    Harness,
    candidate,
    candidate_url,  # noqa: F401  (a fixture)
    committed_offsets,
    line,
    new_run,
    read_topic,
    rows,  # noqa: F401  (a fixture)
    sqlite_harness,  # noqa: F401  (a fixture)
)
from tests.replay.test_replay_runner import exchanges_for

pytestmark = [pytest.mark.anyio, pytest.mark.kafka]

LIMIT_BYTES = KafkaSettings().max_message_bytes
"""The dead-letter producer's limit (the default ``max_message_bytes``, 1,000,000)."""


def poison_over_the_limit(run_id: str, key: bytes) -> bytes:
    """A value that does not decode (bytes not UTF-8) whose dead-letter copy — value, key
    and headers as :func:`dead_letter_record` writes them — is ``LIMIT_BYTES + 1`` bytes
    by the producer's own measure (:func:`record_size_bytes`). The copy's headers name
    ``topic/partition@offset``: one digit each here, whatever partition the key picks."""
    size = LIMIT_BYTES
    for _ in range(5):
        value = b'{"x": "\xff' + b"x" * size + b'"}'
        probe = BusRecord(TOPIC, 0, 3, key, value, (), 0)
        bad = decode_record(probe)
        assert isinstance(bad, BadRecord)
        assert bad.reason == "invalid_utf8"
        over = record_size_bytes(dead_letter_record(bad, run_id)) - (LIMIT_BYTES + 1)
        if over == 0:
            return value
        size -= over
    raise AssertionError("no value size puts the copy one byte over the limit")


async def produce_big(
    bootstrap: str, values: list[bytes], key: bytes
) -> dict[tuple[str, int], int]:
    """Produce ``values`` (one key: one partition, in order) with a producer that takes
    records up to Kafka's default 1,048,588 bytes; return the end offset per partition."""
    await ensure_topics(bootstrap, [TOPIC, DLQ], partitions=3)
    big = KafkaSettings(bootstrap_servers=bootstrap, max_message_bytes=1_048_588)
    async with BusProducer(big) as producer:
        deliveries = await producer.send_many(
            TOPIC, [OutgoingRecord(value=v, key=key) for v in values]
        )
    ends: dict[tuple[str, int], int] = {}
    for d in deliveries:
        assert isinstance(d, Delivery), d
        ends[(d.topic, d.partition)] = max(ends.get((d.topic, d.partition), 0), d.offset + 1)
    return ends


def envelope_of(record: object) -> tuple[dict[str, str], dict[str, object]]:
    headers = {k: bytes(v).decode() for k, v in record.headers}  # type: ignore[attr-defined]
    return headers, orjson.loads(record.value)  # type: ignore[attr-defined]


async def test_a_poison_record_one_byte_over_the_dead_letter_limit_goes_as_an_envelope(
    sqlite_harness: Harness,  # noqa: F811
    rows: list[RecordedRow],  # noqa: F811
    candidate_url: str,  # noqa: F811
) -> None:
    h = sqlite_harness
    key = b"one-partition"
    poison = poison_over_the_limit(h.run_id, key)
    exchanges = exchanges_for(rows[:6])
    values = [line(e) for e in exchanges[:3]] + [poison] + [line(e) for e in exchanges[3:]]
    ends = await produce_big(h.broker.bootstrap, values, key)
    metrics = WorkerMetrics()

    _, report = await h.run([candidate(candidate_url)], metrics=metrics)

    # the partition moved on: the good records after the poison were replayed, all committed
    assert dict(report.ok) == {"candidate": 6}
    assert report.cancelled == 0
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends
    # counted: in the report and the metrics
    assert dict(report.dead_letter) == {"invalid_utf8": 1}
    assert dict(report.dead_letter_enveloped) == {"invalid_utf8": 1}
    assert report.as_dict()["dead_letter_enveloped"] == {"invalid_utf8": 1}
    sample = metrics.registry.get_sample_value(
        "shadoweval_replay_dead_letter_enveloped_total", {"reason": "invalid_utf8"}
    )
    assert sample == 1
    # the envelope: where from, why, size, hash, first bytes; far under the limit
    (dead,) = await read_topic(h.broker.bootstrap, DLQ, 1)
    headers, body = envelope_of(dead)
    (partition,) = {p for _, p in ends}
    where = f"{TOPIC}/{partition}@3"
    assert headers["form"] == "envelope"
    assert headers["reason"] == "invalid_utf8"
    assert body["dead_letter"] == "envelope"
    assert (body["source_topic"], body["source_partition"], body["source_offset"]) == (
        TOPIC,
        partition,
        3,
    )
    assert body["reason"] == "invalid_utf8"
    assert body["run_id"] == h.run_id
    assert where in str(body["detail"])
    assert body["size_bytes"] == len(poison)
    assert body["sha256"] == hashlib.sha256(poison).hexdigest()
    head = base64.b64decode(str(body["head_base64"]))
    assert head == poison[: len(head)]
    assert body["head_bytes"] == len(head) > 0
    assert len(dead.value) < LIMIT_BYTES // 100
    assert dead.key == key
    # kept: the rejected record, with its reason, at its location
    (stored,) = h.repo.list_rejected(h.run_id)
    assert (stored.reason, stored.location) == ("invalid_utf8", where)

    # A restart that reads everything again (offsets lost): nothing re-sent or re-stored.
    rereader = Harness(h.broker, h.repo, h.run_id, h.settings, "offsets-lost")
    _, again = await rereader.run([candidate(candidate_url)])
    assert again.lines_read == len(values)
    assert dict(again.dead_letter) == {}
    assert len(h.repo.list_rejected(h.run_id)) == 1
    assert len(await read_topic(h.broker.bootstrap, DLQ, 1, then_s=1.0)) == 1


async def test_a_copy_the_producer_refuses_as_too_large_is_sent_as_an_envelope(
    kafka_broker: TansuBroker, sqlite_repo: Repository
) -> None:
    """The refusal path: the queue believes the copy fits (``max_record_bytes`` above the
    producer's), the producer refuses it (``MessageSizeTooLargeError``), the envelope goes."""
    run_id = new_run(sqlite_repo)
    await ensure_topics(kafka_broker.bootstrap, [TOPIC, DLQ], partitions=3)
    value = b"\xfe" + b"y" * (LIMIT_BYTES + 10)
    record = BusRecord(TOPIC, 1, 7, b"k", value, (), 0)
    bad = decode_record(record)
    assert isinstance(bad, BadRecord)
    kafka = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap)
    async with BusProducer(kafka) as producer:
        queue = DeadLetterQueue(
            sqlite_repo, run_id, producer, DLQ, max_record_bytes=10 * LIMIT_BYTES
        )
        ((sent, enveloped),) = await queue.send([bad])
        assert enveloped
        assert sent is bad
        assert await queue.send([bad]) == []  # once
    (dead,) = await read_topic(kafka_broker.bootstrap, DLQ, 1)
    headers, body = envelope_of(dead)
    assert headers["form"] == "envelope"
    assert (body["source_partition"], body["source_offset"]) == (1, 7)
    assert body["size_bytes"] == len(value)
    assert body["sha256"] == hashlib.sha256(value).hexdigest()


# ---------------------------------------------------------------- item 3: one rule


@pytest.mark.parametrize(
    "value",
    [
        b'{"schema_version": 1, "note": "caf\xe9"}',  # Latin-1
        b"\xff\xfe{garbage",
        b'{"a": "\xed\xa0\x80"}',  # an encoded surrogate: not UTF-8
    ],
)
def test_bytes_that_are_not_utf8_are_refused_alike_by_the_reader_and_the_worker(
    value: bytes, tmp_path: Path
) -> None:
    log = tmp_path / "capture.jsonl"
    log.write_bytes(value + b"\n")
    (entry,) = read_capture_log(log)
    bad = decode_record(BusRecord(TOPIC, 0, 5, None, value, (), 0))
    assert isinstance(bad, BadRecord)
    assert entry.error is not None
    assert bad.reason == entry.error.reason == "invalid_utf8"
    # the same wording, each naming where
    assert str(entry.error).replace("capture.jsonl:1", "HERE") == bad.detail.replace(
        f"{TOPIC}/0@5", "HERE"
    )
    assert bad.raw == entry.raw
    assert "\ufffd" in bad.raw  # shown with a replacement character, refused all the same
