"""KafkaSink against a real Kafka-protocol broker (Tansu): delivery, a hung broker, a full
spool, a broker that is not there yet, oversize records, a restart with a non-empty spool.
Every broker test consumes the topic back with :class:`BusConsumer` and checks that each
exchange arrived at least once, in write order per key.

Fakes enter only through ``producer_factory``: a producer in front of the real one that
refuses records over a smaller "broker" limit, and in-memory producers that go down,
raise or refuse to start (fast tests of the DIRECT/SPOOLING switch).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson
import pytest

from shadoweval.bus import (
    BusConsumer,
    BusError,
    BusProducer,
    BusRecord,
    BusTimeoutError,
    ensure_topics,
)
from shadoweval.bus.producer import Delivery, OutgoingRecord, RecordTooLargeError
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sinks.base import BuiltExchange, ExchangeSink
from shadoweval.capture.sinks.kafka import KafkaSink, ProducerLike, SinkMode
from shadoweval.capture.sinks.spool import DiskSpool
from shadoweval.capture_log import read_capture_log
from shadoweval.config import KafkaSettings, SpoolSettings
from shadoweval.records import Exchange
from shadoweval.testing.full_disk import FullDisk
from tests.capture.test_oversize import built_of, make_exchange
from tests.kafka_broker import TansuBroker
from tests.waiting import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def kafka_settings(bootstrap: str, **overrides: object) -> KafkaSettings:
    """Short timeouts so a hung broker shows within a second."""
    base: dict[str, object] = {
        "bootstrap_servers": bootstrap,
        "topic": f"exchanges-{uuid.uuid4().hex[:8]}",
        "send_timeout_s": 1.0,
        "request_timeout_ms": 1000,
        "linger_ms": 2,
    }
    return KafkaSettings.model_validate({**base, **overrides})


def spool_settings(tmp_path: Path, **overrides: object) -> SpoolSettings:
    base: dict[str, object] = {"directory": str(tmp_path / "spool"), "retry_interval_s": 0.1}
    return SpoolSettings.model_validate({**base, **overrides})


def sample(metrics: CaptureMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def produced(metrics: CaptureMetrics) -> float:
    return sample(metrics, "shadoweval_capture_produced_total", sink="kafka")


def dropped(metrics: CaptureMetrics, reason: str) -> float:
    return sample(metrics, "shadoweval_capture_dropped_total", reason=reason)


def total_dropped(metrics: CaptureMetrics) -> float:
    """Exchanges dropped for any reason."""
    return sum(
        s.value
        for metric in metrics.dropped.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    )


def drained(sink: KafkaSink) -> bool:
    spool = sink.spool
    return sink.pending == 0 and sink.mode is SinkMode.DIRECT and spool is not None and spool.empty


async def consume(
    bootstrap: str, topic: str, expect_ids: set[str], timeout_s: float = 60.0
) -> list[BusRecord]:
    """Read ``topic`` from the start until every id in ``expect_ids`` was seen."""
    consumer = BusConsumer(  # a short session: Tansu's group join waits about half of it
        bootstrap,
        topic,
        f"test-{uuid.uuid4().hex[:8]}",
        session_timeout_ms=2000,
        heartbeat_interval_ms=500,
    )
    records: list[BusRecord] = []
    await consumer.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not expect_ids <= {exchange_id(r) for r in records}:
            if time.monotonic() > deadline:
                missing = expect_ids - {exchange_id(r) for r in records}
                raise AssertionError(
                    f"{len(missing)} exchanges never arrived: {sorted(missing)[:5]}"
                )
            records.extend(await consumer.getmany(timeout_ms=300, max_records=1000))
        # a little longer, to see duplicates or strays
        records.extend(await consumer.getmany(timeout_ms=300, max_records=1000))
    finally:
        await consumer.stop()
    return records


def exchange_id(record: BusRecord) -> str:
    assert record.value is not None
    return str(orjson.loads(record.value)["exchange_id"])


def first_seen_order(records: Sequence[BusRecord]) -> dict[bytes, list[str]]:
    """Per key, exchange ids in order of first appearance (partition order)."""
    by_partition = sorted(records, key=lambda r: (r.partition, r.offset))
    out: dict[bytes, list[str]] = {}
    for r in by_partition:
        assert r.key is not None
        ids = out.setdefault(r.key, [])
        eid = exchange_id(r)
        if eid not in ids:
            ids.append(eid)
    return out


def written_order(items: Sequence[BuiltExchange]) -> dict[bytes, list[str]]:
    out: dict[bytes, list[str]] = {}
    for item in items:
        out.setdefault(item.key, []).append(item.exchange_id)
    return out


def stream(n: int, sessions: int = 5, start: int = 1000) -> list[BuiltExchange]:
    """``n`` exchanges spread over ``sessions`` keys; equal payload sizes."""
    return [
        built_of(make_exchange(i, session=f"session-{i % sessions}"))
        for i in range(start, start + n)
    ]


# --------------------------------------------------------------------------- tests


@pytest.mark.kafka
async def test_delivers_keys_values_and_schema_header(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    settings = kafka_settings(kafka_broker.bootstrap)
    await ensure_topics(kafka_broker.bootstrap, [settings.topic], partitions=3)
    metrics = CaptureMetrics()
    items = stream(60)
    sink = KafkaSink(settings, spool_settings(tmp_path), metrics)
    assert isinstance(sink, ExchangeSink)
    async with sink:
        assert sink.mode is SinkMode.DIRECT
        assert sink.ready()
        for item in items:
            await sink.write(item)
        await eventually(lambda: produced(metrics) == 60, "60 acknowledgements")
    records = await consume(kafka_broker.bootstrap, settings.topic, {i.exchange_id for i in items})
    assert len(records) == 60
    sent = {i.exchange_id: i for i in items}
    for r in records:
        item = sent[exchange_id(r)]
        assert (r.key, r.value) == (item.key, item.payload)
        assert dict(r.headers) == {"schema_version": b"1"}
    assert first_seen_order(records) == written_order(items)
    assert sample(metrics, "shadoweval_capture_spooled_total") == 0
    assert sample(metrics, "shadoweval_capture_kafka_spooling") == 0
    assert sample(metrics, "shadoweval_capture_kafka_idempotent") == 0  # Tansu refuses it


@pytest.mark.kafka
async def test_hung_broker_writes_stay_fast_spool_and_every_exchange_arrives(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    """SIGSTOP the broker for 2 s under a steady stream (one write every 5 ms)."""
    settings = kafka_settings(kafka_broker.bootstrap)
    await ensure_topics(kafka_broker.bootstrap, [settings.topic], partitions=3)
    metrics = CaptureMetrics()
    items = stream(500, sessions=7)
    write_s: list[float] = []
    lag_s: list[float] = []
    sink = KafkaSink(settings, spool_settings(tmp_path), metrics)
    await sink.start()
    try:
        for n, item in enumerate(items):
            if n == 60:
                kafka_broker.pause()
                paused_at = time.monotonic()
            if kafka_broker.paused and time.monotonic() - paused_at >= 2.0:
                kafka_broker.resume()
            t0 = time.perf_counter()
            await sink.write(item)
            write_s.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            await asyncio.sleep(0.005)
            lag_s.append(time.perf_counter() - t1 - 0.005)
        if kafka_broker.paused:
            kafka_broker.resume()
        spooled = sample(metrics, "shadoweval_capture_spooled_total")
        await eventually(lambda: drained(sink), "the spool to drain")
    finally:
        await sink.stop(deadline_s=5)
    timeouts = sample(metrics, "shadoweval_capture_produce_errors_total", reason="timeout")
    print(
        f"\nwrite(): max {max(write_s) * 1e3:.3f} ms, p99 "
        f"{sorted(write_s)[int(len(write_s) * 0.99)] * 1e3:.3f} ms over {len(write_s)} writes; "
        f"event-loop lag max {max(lag_s) * 1e3:.1f} ms; spooled {spooled:.0f}; "
        f"timeouts {timeouts:.0f}"
    )
    # Bounds on a hang, not speed checks (the benchmarks measure speed): a write, or the
    # event loop, that waited on the hung broker would take its 1 s send timeout or more.
    assert max(write_s) < settings.send_timeout_s
    assert max(lag_s) < settings.send_timeout_s  # nothing in the sink blocks the event loop
    assert spooled > 100  # the pause was absorbed by the spool
    assert timeouts > 0
    assert sample(metrics, "shadoweval_capture_kafka_spooling") == 0
    assert sample(metrics, "shadoweval_capture_spool_records") == 0
    assert total_dropped(metrics) == 0
    records = await consume(kafka_broker.bootstrap, settings.topic, {i.exchange_id for i in items})
    assert {exchange_id(r) for r in records} == {i.exchange_id for i in items}
    assert first_seen_order(records) == written_order(items)


@pytest.mark.kafka
async def test_absent_broker_at_start_spools_then_drains_when_it_appears(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    late = TansuBroker(kafka_broker.binary, tmp_path / "late.log")  # port chosen, not started
    settings = kafka_settings(late.bootstrap)
    metrics = CaptureMetrics()
    items = stream(40)
    sink = KafkaSink(settings, spool_settings(tmp_path), metrics)
    t0 = time.monotonic()
    await sink.start()
    try:
        # start() gives up on the absent broker and spools (a bound on a hang: waiting for
        # the broker would never end, it starts only below)
        assert time.monotonic() - t0 < settings.send_timeout_s + 10.0
        assert sink.mode is SinkMode.SPOOLING
        assert sink.ready()
        assert sample(metrics, "shadoweval_capture_kafka_spooling") == 1
        for item in items:
            await sink.write(item)
        await eventually(
            lambda: sample(metrics, "shadoweval_capture_spool_records") == 40, "40 spooled"
        )
        assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="connect") >= 1
        late.start()
        await eventually(lambda: drained(sink), "the spool to drain after the broker appears")
        more = stream(10, start=2000)
        for item in more:
            await sink.write(item)
        await eventually(lambda: produced(metrics) >= 50, "50 acknowledgements")
        await sink.stop(deadline_s=5)
        records = await consume(late.bootstrap, settings.topic, {i.exchange_id for i in items})
    finally:
        await sink.stop(deadline_s=5)
        late.stop()
    assert first_seen_order(records) == written_order([*items, *more])
    assert sample(metrics, "shadoweval_capture_spool_bytes") == 0


@pytest.mark.kafka
async def test_full_spool_drops_are_counted_and_nothing_else_is_lost(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    late = TansuBroker(kafka_broker.binary, tmp_path / "late.log")
    settings = kafka_settings(late.bootstrap)
    metrics = CaptureMetrics()
    items = stream(40)
    frame = len(items[0].payload) + len(items[0].key) + 12
    assert {len(i.payload) for i in items} == {len(items[0].payload)}
    spool = spool_settings(tmp_path, max_bytes=15 * frame + 100, segment_bytes=4 * frame)
    sink = KafkaSink(settings, spool, metrics)
    await sink.start()
    try:
        for n, item in enumerate(items):
            await sink.write(item)
            if n % 10 == 9:
                await asyncio.sleep(0.05)  # several batches, several appends
        await eventually(
            lambda: (
                sample(metrics, "shadoweval_capture_spooled_total") + dropped(metrics, "spool_full")
                == 40
            ),
            "every exchange spooled or dropped",
        )
        assert sample(metrics, "shadoweval_capture_spooled_total") == 15
        assert dropped(metrics, "spool_full") == 25
        assert not sink.ready()  # spooling and no room left
        late.start()
        await eventually(lambda: drained(sink), "the spool to drain")
        assert sink.ready()
        await sink.stop(deadline_s=5)
        records = await consume(late.bootstrap, settings.topic, {i.exchange_id for i in items[:15]})
    finally:
        await sink.stop(deadline_s=5)
        late.stop()
    assert first_seen_order(records) == written_order(items[:15])
    assert produced(metrics) == 15


@pytest.mark.kafka
async def test_oversize_raw_body_dropped_and_offloaded(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    settings = kafka_settings(kafka_broker.bootstrap, max_message_bytes=20_000)
    metrics = CaptureMetrics()
    small = make_exchange(1, session="s")
    raw = make_exchange(2, session="s", raw_body="data: " + "r" * 50_000)
    huge = make_exchange(3, session="s", prompt="p" * 50_000, raw_body="data: x")
    after = make_exchange(4, session="s")
    async with KafkaSink(settings, spool_settings(tmp_path), metrics) as sink:
        for ex in (small, raw, huge, after):
            await sink.write(built_of(ex))
        await eventually(lambda: produced(metrics) == 4, "4 acknowledgements")
    records = await consume(
        kafka_broker.bootstrap, settings.topic, {small.exchange_id, after.exchange_id}
    )
    got = [Exchange.model_validate_json(r.value or b"") for r in records]
    assert [g.exchange_id for g in got] == [e.exchange_id for e in (small, raw, huge, after)]
    assert got[0] == small
    assert got[3] == after
    assert got[1].oversize is not None
    assert got[1].oversize.action == "raw_body_dropped"
    assert got[1].response is not None
    assert got[1].response.body is None
    assert got[1].response.text == "Hi!"
    stub = got[2]
    assert stub.oversize is not None
    assert stub.oversize.action == "offloaded"
    assert stub.request.body == ""
    assert stub.response is not None
    assert stub.response.text is None
    assert (stub.task_type, stub.timings, stub.outcome) == (
        huge.task_type,
        huge.timings,
        huge.outcome,
    )
    assert huge.response is not None
    assert stub.response.usage == huge.response.usage
    ref = Path(str(stub.oversize.offload_ref))
    assert ref.is_absolute()
    assert ref.parent == (tmp_path / "spool" / "offload").absolute()
    assert [e.exchange for e in read_capture_log(ref)] == [huge]
    assert all(len(r.value or b"") <= 20_000 - 512 for r in records)
    assert sample(metrics, "shadoweval_capture_oversize_total", action="raw_body_dropped") == 1
    assert sample(metrics, "shadoweval_capture_oversize_total", action="offloaded") == 1


class SmallBrokerProducer:
    """A real :class:`BusProducer` behind a "broker" whose message limit is smaller."""

    def __init__(self, settings: KafkaSettings, broker_limit_bytes: int) -> None:
        self.inner = BusProducer(settings)
        self.broker_limit_bytes = broker_limit_bytes
        self.refused = 0

    @property
    def idempotent(self) -> bool:
        return self.inner.idempotent

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    async def send_many(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Delivery | BusError]:
        fits = [r for r in records if len(r.value) <= self.broker_limit_bytes]
        sent = iter(await self.inner.send_many(topic, fits))
        out: list[Delivery | BusError] = []
        for r in records:
            if len(r.value) <= self.broker_limit_bytes:
                out.append(next(sent))
            else:
                self.refused += 1
                out.append(RecordTooLargeError(f"broker refused {len(r.value)} bytes"))
        return out


@pytest.mark.kafka
async def test_broker_side_too_large_goes_through_the_same_path_and_never_stalls(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    settings = kafka_settings(kafka_broker.bootstrap)  # our limit: 1,000,000 bytes
    fakes: list[SmallBrokerProducer] = []

    def factory(s: KafkaSettings) -> ProducerLike:
        fakes.append(SmallBrokerProducer(s, broker_limit_bytes=3_000))
        return fakes[-1]

    metrics = CaptureMetrics()
    raw = make_exchange(1, session="s", raw_body="data: " + "r" * 10_000)
    huge = make_exchange(2, session="s", prompt="p" * 10_000)
    hopeless = make_exchange(3, session="s", error_message="e" * 5_000, prompt="p" * 5_000)
    after = make_exchange(4, session="s")
    sink = KafkaSink(settings, spool_settings(tmp_path), metrics, producer_factory=factory)
    await sink.start()
    try:
        for ex in (raw, huge, hopeless, after):
            await sink.write(built_of(ex))
        await eventually(
            lambda: produced(metrics) == 3 and dropped(metrics, "oversize") == 1,
            "3 delivered and 1 dropped",
        )
        assert drained(sink)
    finally:
        await sink.stop(deadline_s=5)
    records = await consume(
        kafka_broker.bootstrap,
        settings.topic,
        {raw.exchange_id, huge.exchange_id, after.exchange_id},
    )
    got = {exchange_id(r): Exchange.model_validate_json(r.value or b"") for r in records}
    assert got[raw.exchange_id].oversize is not None
    assert got[raw.exchange_id].oversize.action == "raw_body_dropped"  # type: ignore[union-attr]
    assert got[huge.exchange_id].oversize is not None
    assert got[huge.exchange_id].oversize.action == "offloaded"  # type: ignore[union-attr]
    assert hopeless.exchange_id not in got
    assert sum(f.refused for f in fakes) == 4  # raw once, huge once, hopeless twice
    assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="too_large") == 0


@pytest.mark.kafka
async def test_stop_spools_what_is_left_and_a_restart_resends_it(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    settings = kafka_settings(kafka_broker.bootstrap)
    await ensure_topics(kafka_broker.bootstrap, [settings.topic], partitions=3)
    first, second, third = stream(10), stream(30, start=2000), stream(10, start=3000)
    metrics_a = CaptureMetrics()
    sink_a = KafkaSink(settings, spool_settings(tmp_path), metrics_a)
    await sink_a.start()
    for item in first:
        await sink_a.write(item)
    await eventually(lambda: produced(metrics_a) == 10, "10 acknowledgements")
    kafka_broker.pause()
    try:
        for item in second:
            await sink_a.write(item)
        t0 = time.monotonic()
        await sink_a.stop(deadline_s=0.3)
        stop_s = time.monotonic() - t0
    finally:
        kafka_broker.resume()
    print(f"\nstop(deadline_s=0.3) with a hung broker took {stop_s:.2f} s")
    # deadline + the producer's own stop; a bound on a hang (waiting for the hung broker)
    assert stop_s < 0.3 + settings.send_timeout_s + 10.0
    assert sample(metrics_a, "shadoweval_capture_spool_records") >= 30
    assert total_dropped(metrics_a) == 0

    metrics_b = CaptureMetrics()
    sink_b = KafkaSink(settings, spool_settings(tmp_path), metrics_b)
    await sink_b.start()
    try:
        assert sink_b.mode is SinkMode.SPOOLING  # the previous run's records go first
        for item in third:
            await sink_b.write(item)
        await eventually(lambda: drained(sink_b), "the old spool to drain")
    finally:
        await sink_b.stop(deadline_s=5)
    everything = [*first, *second, *third]
    records = await consume(
        kafka_broker.bootstrap, settings.topic, {i.exchange_id for i in everything}
    )
    assert first_seen_order(records) == written_order(everything)
    assert not any((tmp_path / "spool").glob("segment-*"))


def sockets_to(port: int) -> int:
    """This process's TCP sockets whose remote port is ``port`` (Linux ``/proc``)."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == port and fields[9] in inodes:
            count += 1
    return count


@pytest.mark.kafka
async def test_a_producer_stopped_against_a_hung_broker_closes_its_sockets(
    kafka_broker: TansuBroker,
) -> None:
    """aiokafka's stop() waits for queued batches first; against a hung broker it times out
    before closing the client, and the sockets leaked for the life of the process."""
    # The produce request waits 60 s for the hung broker; stop() gives up after 1 s.
    settings = kafka_settings(kafka_broker.bootstrap, request_timeout_ms=60_000)
    await ensure_topics(kafka_broker.bootstrap, [settings.topic])
    producer = BusProducer(settings)
    await producer.start()
    await producer.send(settings.topic, OutgoingRecord(value=b"first", key=b"k"))
    assert sockets_to(kafka_broker.port) >= 1
    kafka_broker.pause()
    try:
        # Not acknowledged within send_timeout_s: the batch is still in flight in aiokafka.
        results = await producer.send_many(
            settings.topic, [OutgoingRecord(value=b"x", key=b"k")] * 5
        )
        assert all(isinstance(r, BusTimeoutError) for r in results)
        await producer.stop()
        assert sockets_to(kafka_broker.port) == 0
    finally:
        kafka_broker.resume()


@pytest.mark.kafka
async def test_write_after_stop_is_counted(kafka_broker: TansuBroker, tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink = KafkaSink(kafka_settings(kafka_broker.bootstrap), spool_settings(tmp_path), metrics)
    await sink.start()
    await sink.stop(deadline_s=1)
    await sink.stop(deadline_s=1)
    assert not sink.ready()
    await sink.write(stream(1)[0])
    assert dropped(metrics, "shutdown") == 1
    with pytest.raises(RuntimeError, match="start"):
        await sink.start()


# ------------------------------------------------------------- in-memory producers


class MemoryProducer:
    """An in-memory "broker": ``up`` toggles it; ``raise_next`` makes calls raise."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.up = True
        self.start_failures = 0
        self.raise_next = 0
        self.delivered: list[OutgoingRecord] = []
        self.idempotent = True

    async def start(self) -> None:
        if self.start_failures:
            self.start_failures -= 1
            raise BusError("cannot start producer: broker unreachable")

    async def stop(self) -> None:
        pass

    async def send_many(
        self, topic: str, records: Sequence[OutgoingRecord]
    ) -> list[Delivery | BusError]:
        await asyncio.sleep(0.001)
        if self.raise_next:
            self.raise_next -= 1
            raise RuntimeError("a producer bug")
        if not self.up:
            return [BusTimeoutError("record not acknowledged in time") for _ in records]
        self.delivered.extend(records)
        return [Delivery(topic, 0, len(self.delivered) - 1) for _ in records]


def memory_sink(
    tmp_path: Path,
    metrics: CaptureMetrics,
    setup: Callable[[MemoryProducer], None] = lambda p: None,
) -> tuple[KafkaSink, list[MemoryProducer]]:
    made: list[MemoryProducer] = []

    def factory(settings: KafkaSettings) -> ProducerLike:
        made.append(MemoryProducer(settings))
        setup(made[-1])
        return made[-1]

    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topic="t")
    return KafkaSink(settings, spool_settings(tmp_path), metrics, producer_factory=factory), made


def delivered_ids(producer: MemoryProducer) -> list[str]:
    """Exchange ids in order of first delivery."""
    return list(
        dict.fromkeys(str(orjson.loads(r.value)["exchange_id"]) for r in producer.delivered)
    )


async def test_switches_to_spooling_and_back_keeping_order(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink, made = memory_sink(tmp_path, metrics)
    items = stream(150)
    await sink.start()
    (producer,) = made
    try:
        assert sink.mode is SinkMode.DIRECT
        assert sample(metrics, "shadoweval_capture_kafka_idempotent") == 1
        for item in items[:50]:
            await sink.write(item)
        await eventually(lambda: produced(metrics) == 50, "50 delivered")
        producer.up = False
        for item in items[50:100]:
            await sink.write(item)
        await eventually(lambda: sink.mode is SinkMode.SPOOLING, "SPOOLING")
        await eventually(lambda: sink.pending == 0, "the deque to empty")
        # the deque empties when the sender takes the batch; the spool append ends later
        await eventually(
            lambda: sample(metrics, "shadoweval_capture_spool_records") == 50, "50 spooled"
        )
        assert sample(metrics, "shadoweval_capture_kafka_spooling") == 1
        assert sample(metrics, "shadoweval_capture_spool_records") == 50
        assert sink.ready()
        producer.up = True
        for item in items[100:]:
            await sink.write(item)
        await eventually(lambda: drained(sink), "the spool to drain")
    finally:
        await sink.stop(deadline_s=2)
    assert delivered_ids(producer) == [i.exchange_id for i in items]
    assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="timeout") >= 50
    assert sample(metrics, "shadoweval_capture_spooled_total") >= 50
    assert total_dropped(metrics) == 0


async def test_a_raising_producer_never_stops_the_sink_or_loses_records(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink, made = memory_sink(tmp_path, metrics)
    items = stream(30)
    await sink.start()
    (producer,) = made
    try:
        producer.raise_next = 3  # the sender's send and two drainer probes raise
        for item in items:
            await sink.write(item)
        await eventually(lambda: drained(sink) and produced(metrics) >= 30, "all delivered")
    finally:
        await sink.stop(deadline_s=2)
    assert delivered_ids(producer) == [i.exchange_id for i in items]
    assert total_dropped(metrics) == 0


async def test_a_producer_that_cannot_start_spools_until_it_can(tmp_path: Path) -> None:
    metrics = CaptureMetrics()

    def refuse_three_starts(p: MemoryProducer) -> None:
        p.start_failures = 3

    sink, made = memory_sink(tmp_path, metrics, refuse_three_starts)
    items = stream(20)
    await sink.start()
    (producer,) = made
    try:
        assert sink.mode is SinkMode.SPOOLING
        for item in items:
            await sink.write(item)
        await eventually(lambda: drained(sink), "the spool to drain once started")
    finally:
        await sink.stop(deadline_s=2)
    assert sample(metrics, "shadoweval_capture_produce_errors_total", reason="connect") == 3
    assert delivered_ids(producer) == [i.exchange_id for i in items]


async def test_writes_before_a_start_that_never_comes_are_counted(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink, _ = memory_sink(tmp_path, metrics)
    for item in stream(3):
        await sink.write(item)
    await sink.stop(deadline_s=1)
    assert dropped(metrics, "shutdown") == 3


async def test_in_memory_backlog_is_bounded(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink, _ = memory_sink(tmp_path, metrics)
    sink.max_pending_records = 5
    for item in stream(8):
        await sink.write(item)  # not started: nothing takes them from the deque
    assert sink.pending == 5
    assert dropped(metrics, "sink_backlog") == 3
    await sink.stop(deadline_s=1)


# ------------------------------------------------------------------ a full disk


class RecordedSleep:
    """The drainer's waits after a failure (the ``sleep`` seam): each records how many
    exchanges the spool still held, and blocks until ``passed`` is set (the test says when
    "time has passed"); after that it returns at once."""

    def __init__(self) -> None:
        self.sink: KafkaSink | None = None
        self.held: list[int] = []
        self.passed = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        spool = self.sink.spool if self.sink is not None else None
        self.held.append(spool.record_count if spool is not None else -1)
        await self.passed.wait()


async def test_a_full_disk_does_not_slow_the_drain_and_the_position_is_saved_after(
    tmp_path: Path,
) -> None:
    """Issue 13: with the disk full the spool could not save its read position; each
    commit failed and the drainer waited retry_interval_s after every record (about 1
    record/s). Now 300 spooled exchanges drain with no wait between batches while the
    disk is still full, and the position is saved once space returns."""
    metrics = CaptureMetrics()
    disk = FullDisk(tmp_path / "spool")
    sleep = RecordedSleep()
    made: list[MemoryProducer] = []

    def factory(settings: KafkaSettings) -> ProducerLike:
        made.append(MemoryProducer(settings))
        made[-1].up = False  # connected, but nothing is acknowledged: the broker is down
        return made[-1]

    sink = KafkaSink(
        KafkaSettings(bootstrap_servers="127.0.0.1:1", topic="t"),
        spool_settings(tmp_path, retry_interval_s=0.05),
        metrics,
        producer_factory=factory,
        spool_opener=disk,
        sleep=sleep,
    )
    sleep.sink = sink
    items = stream(300)
    await sink.start()
    (producer,) = made
    try:
        for item in items:
            await sink.write(item)
        await eventually(
            lambda: sample(metrics, "shadoweval_capture_spool_records") == 300, "300 spooled"
        )
        await eventually(lambda: sleep.held, "the drainer to back off from the down broker")
        disk.fill()
        producer.up = True
        waits_before = len(sleep.held)
        sleep.passed.set()
        await eventually(lambda: drained(sink), "the spool to drain")
        # No wait while exchanges were left: batch after batch, the disk still full.
        assert [held for held in sleep.held[waits_before:] if held > 0] == []
        assert delivered_ids(producer) == [i.exchange_id for i in items]
        assert sample(metrics, "shadoweval_capture_spool_cursor_unsaved") == 1
        assert sink.spool is not None
        assert not sink.spool.cursor_saved
        assert disk.failures > 0
        disk.recover()
        await eventually(
            lambda: sample(metrics, "shadoweval_capture_spool_cursor_unsaved") == 0,
            "the read position saved once the disk has room",
        )
    finally:
        await sink.stop(deadline_s=2)
    assert total_dropped(metrics) == 0
    with DiskSpool(tmp_path / "spool", max_bytes=1 << 20) as spool:
        assert spool.empty  # a restart re-sends nothing
