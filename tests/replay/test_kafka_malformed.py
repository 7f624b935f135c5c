"""Nothing lost, nothing stuck on Kafka (issue 13): malformed records at a running worker.

One :class:`~shadoweval.replay.kafka_worker.KafkaReplayWorker` runs against a real Kafka-protocol
broker (Tansu) for the whole property test, on SQLite and on PostgreSQL; hypothesis draws
batches of mutations (:mod:`tests.malformed`), each applied to many unique base records,
and every batch is produced to the topic. After each batch the worker must still run, its
committed offsets must reach the end of every partition (the partition moved on), and every
record must be either a stored exchange or a rejected record with a reason at its
``topic/partition@offset`` — count in = stored + rejected — with one dead letter per
rejected record. The candidate is an ``httpx.MockTransport`` seam answering every request.

The defect this replaces: a record with ``body_encoding: base64`` and a body that does not
decode made the worker exit 3 on it every time, storing nothing and writing no dead letter.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadoweval.bus import BusConsumer, BusProducer, ensure_topics
from shadoweval.bus.producer import Delivery, OutgoingRecord
from shadoweval.config import KafkaSettings, WorkerSettings
from shadoweval.records import ModelIdentity, ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.kafka_worker import KafkaReplayWorker, WorkerReport
from shadoweval.replay.runner import TargetSpec
from shadoweval.storage import Repository
from tests.kafka_broker import TansuBroker
from tests.malformed import base_payload, malformed, mutations
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    # aiokafka (in the worker's thread) draws from the global `random` while hypothesis
    # generates an example in this one; hypothesis takes that for a strategy using it.
    pytest.mark.filterwarnings(
        "ignore:Do not use the `random` module:hypothesis.errors.HypothesisDeprecationWarning"
    ),
]

TOPIC = "shadoweval.malformed.v1"
DLQ = "shadoweval.malformed.v1.dlq"
PARTITIONS = 3
EXAMPLES = 20
MUTATIONS_PER_EXAMPLE = 50
RECORDS_PER_MUTATION = 10
"""20 examples × 50 mutations × 10 records = 10,000 records per database."""

CANDIDATE = ModelIdentity(name="candidate-v2")
T = TypeVar("T")


def answer(request: httpx.Request) -> httpx.Response:
    """The candidate: a chat completion for every request."""
    return httpx.Response(
        200,
        json={
            "id": "c",
            "object": "chat.completion",
            "model": CANDIDATE.name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    )  # fmt: skip


class LoopThread:
    """An event loop in a thread: the worker keeps running between hypothesis examples."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return self.submit(coro).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Feed:
    """A running worker of one run, and what was produced to its topic so far."""

    def __init__(self, broker: TansuBroker, repo: Repository) -> None:
        self.repo = repo
        self.run_id = repo.create_run(
            name="malformed",
            baseline=ModelIdentity(name="baseline-v1"),
            candidate=CANDIDATE,
            policy_hash="0" * 64,
            policy_yaml="version: 1\n",
        ).run_id
        self.kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, dead_letter_topic=DLQ)
        self.bootstrap = broker.bootstrap
        self.ends: dict[str, int] = {}
        self.produced = 0
        self.next_index = 0
        self.loop = LoopThread()
        try:
            self.loop.run(self._start())
        except BaseException:
            self.loop.close()
            raise
        self.running: Future[WorkerReport] = self.loop.submit(self.worker.run())

    async def _start(self) -> None:
        """Build and start the producer, the candidate and the worker (inside the loop:
        aiokafka objects belong to the loop they are made in)."""
        await ensure_topics(self.bootstrap, [TOPIC, DLQ], partitions=PARTITIONS)
        self.producer = BusProducer(self.kafka)
        await self.producer.start()
        self.client = CandidateClient("http://candidate", transport=httpx.MockTransport(answer))
        await self.client.start()
        consumer = BusConsumer(
            self.bootstrap, TOPIC, f"malformed.{self.run_id}",
            session_timeout_ms=1500, heartbeat_interval_ms=500,
        )  # fmt: skip
        self.worker = KafkaReplayWorker(
            self.repo,
            self.run_id,
            [TargetSpec(ReplayTarget.CANDIDATE, self.client, CANDIDATE)],
            consumer,
            BusProducer(self.kafka),
            WorkerSettings(max_buffered=512, fetch_max_records=256, commit_interval_s=0.1),
            self.kafka,
            concurrency=32,
        )

    def produce(self, values: list[bytes]) -> list[str]:
        """Produce ``values``; return their ``topic/partition@offset`` locations."""
        records = [OutgoingRecord(value=v, key=f"k{i}".encode()) for i, v in enumerate(values)]
        deliveries = self.loop.run(self.producer.send_many(TOPIC, records))
        locations = []
        for delivery in deliveries:
            assert isinstance(delivery, Delivery), delivery
            label = f"{delivery.topic}/{delivery.partition}"
            self.ends[label] = max(self.ends.get(label, 0), delivery.offset + 1)
            locations.append(f"{label}@{delivery.offset}")
        self.produced += len(values)
        return locations

    def settled(self) -> bool:
        if self.running.done():
            return True  # the assertion below reports the crash
        committed = dict(self.worker.report.committed)
        return all(committed.get(tp, 0) >= end for tp, end in self.ends.items())

    def close(self) -> WorkerReport:
        self.loop.loop.call_soon_threadsafe(self.worker.request_stop)
        report = self.running.result(60)
        self.loop.run(self.client.stop())
        self.loop.run(self.producer.stop())
        self.loop.close()
        return report


@pytest.fixture
def feed(kafka_broker: TansuBroker, repo: Repository) -> Iterator[Feed]:
    running = Feed(kafka_broker, repo)
    try:
        yield running
    finally:
        if not running.running.done():
            running.close()


def test_the_kafka_worker_keeps_or_rejects_every_malformed_record_and_moves_on(
    feed: Feed,
) -> None:
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(mutations, min_size=MUTATIONS_PER_EXAMPLE, max_size=MUTATIONS_PER_EXAMPLE))
    def throw(batch: list[Any]) -> None:
        values = []
        for mutation in batch:
            for _ in range(RECORDS_PER_MUTATION):
                values.append(malformed(mutation, feed.next_index, prefix="kafka"))
                feed.next_index += 1
        before = feed.repo.coverage_counts(feed.run_id)
        locations = feed.produce(values)
        wait_until(feed.settled, "the worker to commit every record of the batch")
        assert not feed.running.done(), feed.running.exception()  # no crash
        after = feed.repo.coverage_counts(feed.run_id)
        rejected = {
            r.location: r
            for r in feed.repo.list_rejected(feed.run_id, stage="capture_log", limit=10**6)
        }
        mine = [rejected[loc] for loc in locations if loc in rejected]
        for record in mine:
            assert record.reason, record
            assert record.detail, record
            assert (record.location or "?") in record.detail, record
        stored = (after.captured - after.rejected) - (before.captured - before.rejected)
        # count in = stored + rejected: nothing lost (every base record is unique)
        assert stored + len(mine) == len(values), (stored, len(mine), len(values))
        assert after.rejected - before.rejected == len(mine)

    # a control: the base record itself is stored and replayed
    control = orjson.dumps(base_payload(10**6, prefix="kafka-control"))
    feed.produce([control])
    wait_until(feed.settled, "the control record")
    throw()
    report = feed.close()
    total = feed.produced
    assert total >= 10_000 + 1
    coverage = feed.repo.coverage_counts(feed.run_id)
    assert coverage.captured == total
    assert report.lines_read == total
    assert sum(report.rejected.values()) == coverage.rejected
    assert sum(report.dead_letter.values()) == coverage.rejected
    assert dict(report.replay_failed) == {}
    assert report.committed == feed.ends
    # every stored exchange was replayed (or skipped with a reason): an outcome each
    members = coverage.captured - coverage.rejected
    assert len(feed.repo.load_outcomes(feed.run_id)) == members
    assert feed.repo.get_exchange("kafka-control-1000000") is not None
    print(  # the numbers of docs/reliability.md
        f"kafka worker: {total} records, {members} stored, {coverage.rejected} rejected "
        f"({dict(report.rejected)}), 0 crashes"
    )
