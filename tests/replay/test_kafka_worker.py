"""KafkaReplayWorker against a real Kafka-protocol broker (Tansu) and mock-llm candidates.

The exchanges are AlpacaEval Llama-3-8B answers (the baseline) with fixed ids; the
candidate is mock-llm under real uvicorn serving the Llama-3.1-8B answers to the same
prompts. Offsets are checked against the broker: the group's committed position per
partition must equal the end of what was produced (read from the producer's acks —
Tansu's ListOffsets answer is not usable).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from shadoweval.bus import BusConsumer, BusProducer, ensure_topics
from shadoweval.bus.producer import Delivery, OutgoingRecord
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.config import KafkaSettings, WorkerSettings
from shadoweval.records import (
    Exchange,
    ModelIdentity,
    OversizeNote,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.kafka_worker import KafkaReplayWorker, WorkerReport
from shadoweval.replay.metrics import WorkerMetrics, metrics_app
from shadoweval.replay.offload import OffloadUnavailable, resolve_offloaded
from shadoweval.replay.runner import TargetSpec, in_sample
from shadoweval.simulation.mock_llm import FixedLatency
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_replay_runner import exchanges_for

pytestmark = [pytest.mark.anyio, pytest.mark.kafka]

TOPIC = "shadoweval.exchanges.v1"
DLQ = "shadoweval.exchanges.v1.dlq"
PARTITIONS = 3
CANDIDATE = ModelIdentity(name="Meta-Llama-3.1-8B-Instruct-Turbo")
REPEAT = ModelIdentity(name="Meta-Llama-3-8B-Instruct", base_url="http://repeat")
BASELINE = ModelIdentity(name="Meta-Llama-3-8B-Instruct")
Partition = tuple[str, int]
SESSION_TIMEOUT_MS = 1500
"""Tansu takes about half the session timeout to form a group, and a member of its first
generation (0) does not send LeaveGroup (aiokafka leaves only from generation > 0), so the
next member waits for it to expire: a short session keeps each worker start near 1 s."""


# ------------------------------------------------------------------------ helpers


def new_run(repo: Repository, name: str = "kafka-run", run_id: str | None = None) -> str:
    return repo.create_run(
        run_id=run_id,
        name=name,
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id


def line(exchange: Exchange) -> bytes:
    """One capture-log line (the topic's value format)."""
    return orjson.dumps(exchange.model_dump(mode="json"))


async def produce(
    bootstrap: str,
    values: Sequence[bytes],
    *,
    topic: str = TOPIC,
    keys: Sequence[bytes] = (),
    partitions: int = PARTITIONS,
) -> dict[Partition, int]:
    """Create the topics, produce ``values``; return the end offset per partition."""
    await ensure_topics(bootstrap, [topic, DLQ], partitions=partitions)
    records = [
        OutgoingRecord(value=v, key=keys[i] if keys else f"k{i}".encode())
        for i, v in enumerate(values)
    ]
    async with BusProducer(KafkaSettings(bootstrap_servers=bootstrap)) as producer:
        deliveries = await producer.send_many(topic, records)
    ends: dict[Partition, int] = {}
    for d in deliveries:
        assert isinstance(d, Delivery), d
        ends[(d.topic, d.partition)] = max(ends.get((d.topic, d.partition), 0), d.offset + 1)
    return ends


async def committed_offsets(
    bootstrap: str, group: str, *, partitions: int = PARTITIONS
) -> dict[Partition, int]:
    """The group's committed positions on ``TOPIC`` (partitions with none are left out)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        out: dict[Partition, int] = {}
        for p in range(partitions):
            position = await consumer.committed(TopicPartition(TOPIC, p))
            if position is not None:
                out[(TOPIC, p)] = position
        return out
    finally:
        await consumer.stop()


async def read_topic(
    bootstrap: str, topic: str, count: int, timeout_s: float = 60.0, then_s: float = 0.0
) -> list[Any]:
    """Read ``count`` records of ``topic`` from the beginning (no group), and any that
    arrive within ``then_s`` seconds more (to see that there are no others)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend(records)
        settled = time.monotonic() + then_s
        while len(got) >= count and time.monotonic() < settled:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                got.extend(records)
        return got
    finally:
        await consumer.stop()


@dataclass
class Harness:
    """Builds workers for one broker, one database and one run."""

    broker: TansuBroker
    repo: Repository
    run_id: str
    settings: WorkerSettings
    group_id: str = ""

    @property
    def group(self) -> str:
        return self.group_id or f"shadoweval-replay.{self.run_id}"

    def worker(
        self,
        targets: list[TargetSpec],
        *,
        settings: WorkerSettings | None = None,
        metrics: WorkerMetrics | None = None,
        **kwargs: Any,
    ) -> KafkaReplayWorker:
        kafka = KafkaSettings(bootstrap_servers=self.broker.bootstrap, dead_letter_topic=DLQ)
        consumer = BusConsumer(
            self.broker.bootstrap,
            TOPIC,
            self.group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=SESSION_TIMEOUT_MS // 3,
        )
        return KafkaReplayWorker(
            self.repo,
            self.run_id,
            targets,
            consumer,
            BusProducer(kafka),
            settings or self.settings,
            kafka,
            metrics=metrics,
            **kwargs,
        )

    async def run(
        self, targets: list[TargetSpec], *, until_idle_s: float = 1.0, **kwargs: Any
    ) -> tuple[KafkaReplayWorker, WorkerReport]:
        worker = self.worker(targets, **kwargs)
        clients = {id(t.client): t.client for t in targets}
        for client in clients.values():
            await client.start()
        try:
            report = await asyncio.wait_for(worker.run(until_idle_s=until_idle_s), 60)
        finally:
            for client in clients.values():
                await client.stop()
        return worker, report


@pytest.fixture
def harness(kafka_broker: TansuBroker, repo: Repository) -> Harness:
    return Harness(
        kafka_broker,
        repo,
        new_run(repo),
        WorkerSettings(max_buffered=32, fetch_max_records=16, commit_interval_s=0.2),
    )


@pytest.fixture
def sqlite_harness(kafka_broker: TansuBroker, sqlite_repo: Repository) -> Harness:
    return Harness(
        kafka_broker,
        sqlite_repo,
        new_run(sqlite_repo),
        WorkerSettings(max_buffered=32, fetch_max_records=16, commit_interval_s=0.2),
    )


def candidate(url: str, **kwargs: Any) -> TargetSpec:
    client = CandidateClient(url, **kwargs)
    return TargetSpec(ReplayTarget.CANDIDATE, client, CANDIDATE, model_name=CANDIDATE.name)


def repeat(url: str, share: float) -> TargetSpec:
    return TargetSpec(ReplayTarget.BASELINE_REPEAT, CandidateClient(url), REPEAT, share=share)


async def wait_for_outcomes(repo: Repository, run_id: str, n: int, timeout_s: float = 30) -> None:
    """Return once ``n`` outcomes of the run are stored."""
    deadline = time.monotonic() + timeout_s
    while True:
        if len(await asyncio.to_thread(repo.load_outcomes, run_id)) >= n:
            return
        assert time.monotonic() < deadline, f"fewer than {n} outcomes after {timeout_s} s"
        await asyncio.sleep(0.05)


class HoldAfter:
    """An ASGI wrapper that lets the first ``answers`` chat completions through and holds
    later ones until ``released`` is set (a test's lever on when a shadow answers)."""

    def __init__(self, app: Any, *, answers: int) -> None:
        self.app = app
        self.answers = answers
        self.seen = 0
        self.released = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            self.seen += 1
            if self.seen > self.answers:
                await asyncio.to_thread(self.released.wait)
        await self.app(scope, receive, send)


async def wait_for_assignment(worker: KafkaReplayWorker, timeout_s: float = 60) -> None:
    """Return once ``worker``'s consumer holds at least one partition."""
    deadline = time.monotonic() + timeout_s
    while not worker.consumer.assignment():
        assert time.monotonic() < deadline, f"no partition assigned after {timeout_s} s"
        await asyncio.sleep(0.05)


def outcome_counts(outcomes: list[ReplayOutcome]) -> Counter[tuple[str, ReplayTarget]]:
    return Counter((o.exchange_id, o.target) for o in outcomes)


@pytest.fixture(scope="module")
def rows(llama3_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama3_rows[:60]


@pytest.fixture
def candidate_url(llama31_rows: list[RecordedRow], serve: ServeFn) -> Iterator[str]:
    with serve(mock_app(llama31_rows, model_name=CANDIDATE.name)) as server:
        yield server.url


# ---------------------------------------------------------------------- happy path


async def test_every_exchange_gets_one_outcome_and_offsets_reach_the_end(
    harness: Harness, rows: list[RecordedRow], candidate_url: str
) -> None:
    exchanges = exchanges_for(rows)
    ends = await produce(harness.broker.bootstrap, [line(e) for e in exchanges])
    assert len(ends) == PARTITIONS  # spread over every partition
    share = 0.1
    sampled = {e.exchange_id for e in exchanges if in_sample(e.exchange_id, share)}
    assert 1 <= len(sampled) <= 15
    metrics = WorkerMetrics()

    worker, report = await harness.run(
        [candidate(candidate_url), repeat(candidate_url, share)],
        metrics=metrics,
        warmup_requests=2,
        concurrency=8,
    )

    assert report.lines_read == 60
    assert report.exchanges == 60
    assert dict(report.ok) == {"candidate": 60, "baseline_repeat": len(sampled)}
    assert dict(report.errors) == {}
    assert dict(report.dead_letter) == {}
    assert report.warmup == 4  # two per target
    assert worker.buffered == 0
    assert report.max_buffered_seen <= 32
    counts = outcome_counts(harness.repo.load_outcomes(harness.run_id))
    assert set(counts.values()) == {1}
    assert {i for i, t in counts if t is ReplayTarget.CANDIDATE} == {
        e.exchange_id for e in exchanges
    }
    # The baseline replica got exactly the deterministic ~10% sample.
    assert {i for i, t in counts if t is ReplayTarget.BASELINE_REPEAT} == sampled
    coverage = harness.repo.coverage_counts(harness.run_id)
    assert (coverage.captured, coverage.replayed, coverage.warmup) == (60, 60, 2)
    assert await committed_offsets(harness.broker.bootstrap, harness.group) == ends
    assert report.committed == {f"{t}/{p}": o for (t, p), o in ends.items()}
    # Metrics saw the same thing.
    registry = metrics.registry
    sample = registry.get_sample_value
    labels = {"target": "candidate", "outcome": "ok"}
    assert sample("shadoweval_replay_replayed_total", labels) == 60
    assert sample("shadoweval_replay_buffered") == 0
    assert sample("shadoweval_replay_in_flight") == 0
    for (t, p), end in ends.items():
        assert sample("shadoweval_replay_committed_offset", {"partition": f"{t}/{p}"}) == end

    # A second worker of the same run finds nothing to do: the group is at the end.
    _, again = await harness.run([candidate(candidate_url), repeat(candidate_url, share)])
    assert again.lines_read == 0
    assert len(harness.repo.load_outcomes(harness.run_id)) == 60 + len(sampled)


async def test_redelivered_records_are_not_sent_again(
    sqlite_harness: Harness,
    rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    """At-least-once delivery: duplicates on the topic and a re-read topic cost nothing."""
    h = sqlite_harness
    exchanges = exchanges_for(rows[:10])
    values = [line(e) for e in exchanges]
    await produce(h.broker.bootstrap, values + values[:4])  # 4 duplicates
    app = mock_app(llama31_rows, model_name=CANDIDATE.name)
    with serve(app) as server:
        _, first = await h.run([candidate(server.url)])
        assert app.chat_requests == 10
        assert first.lines_read == 14
        # Another group (as if the offsets were lost) re-reads everything: nothing is sent.
        rereader = Harness(h.broker, h.repo, h.run_id, h.settings, "offsets-lost")
        _, second = await rereader.run([candidate(server.url)])
    assert app.chat_requests == 10
    assert second.lines_read == 14
    assert second.already_done == 14
    assert dict(second.sent) == {}
    counts = outcome_counts(h.repo.load_outcomes(h.run_id))
    assert len(counts) == 10
    assert set(counts.values()) == {1}


# --------------------------------------------------------------------- dead letter


async def test_undecodable_records_go_to_the_dead_letter_topic_and_offsets_advance(
    sqlite_harness: Harness, rows: list[RecordedRow], candidate_url: str
) -> None:
    h = sqlite_harness
    exchanges = exchanges_for(rows[:8])
    future = exchanges[0].model_dump(mode="json") | {"schema_version": 2, "exchange_id": "ex-v2"}
    bad = {
        "invalid_json": b"{garbage, Authorization: Bearer sk-live-abcdefghijklmnop123",
        # refused as the capture-log reader refuses it, not stored with U+FFFD (issue 30)
        "invalid_utf8": b'{"schema_version": 1, "note": "caf\xe9"}',
        "schema_version": orjson.dumps(future),
        "schema": orjson.dumps({"schema_version": 1, "request": "not an object"}),
        "empty": b"",
    }
    good = [line(e) for e in exchanges]
    values = good[:4] + list(bad.values()) + good[4:]
    keys = [f"key-{i}".encode() for i in range(len(values))]
    ends = await produce(h.broker.bootstrap, values, keys=keys)
    metrics = WorkerMetrics()

    _, report = await h.run([candidate(candidate_url)], metrics=metrics)

    assert report.lines_read == 13
    assert dict(report.dead_letter) == dict.fromkeys(bad, 1)
    assert dict(report.rejected) == dict.fromkeys(bad, 1)
    assert dict(report.ok) == {"candidate": 8}  # the good records around them
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends
    for reason in bad:
        assert (
            metrics.registry.get_sample_value(
                "shadoweval_replay_dead_letter_total", {"reason": reason}
            )
            == 1
        )
    # The dead-letter topic: the original value and key, the reason and where it came from.
    dead = await read_topic(h.broker.bootstrap, DLQ, 5)
    assert len(dead) == 5
    by_reason = {}
    for record in dead:
        headers = {k: bytes(v).decode() for k, v in record.headers}
        by_reason[headers["reason"]] = (record, headers)
        assert headers["source_topic"] == TOPIC
        assert headers["run_id"] == h.run_id
    assert set(by_reason) == set(bad)
    for reason, (record, _) in by_reason.items():
        assert (record.value or b"") == bad[reason]
        index = values.index(bad[reason])
        assert record.key == keys[index]
    # Rejected records: located by topic/partition@offset, secrets scrubbed, in coverage.
    stored = {r.reason: r for r in h.repo.list_rejected(h.run_id)}
    assert set(stored) == set(bad)
    for reason, (_, headers) in by_reason.items():
        where = f"{TOPIC}/{headers['source_partition']}@{headers['source_offset']}"
        assert stored[reason].location == where
        assert stored[reason].stage == "capture_log"
    garbage = stored["invalid_json"].raw or ""
    assert "sk-live-abcdefghijklmnop123" not in garbage
    assert "REDACTED" in garbage
    assert "byte 0xE9 at character" in (stored["invalid_utf8"].detail or "")
    assert "schema_version=2 is not supported" in (stored["schema_version"].detail or "")
    coverage = h.repo.coverage_counts(h.run_id)
    assert (coverage.captured, coverage.rejected, coverage.replayed) == (13, 5, 8)

    # Offsets lost (another group): the same records are not dead-lettered or stored twice.
    rereader = Harness(h.broker, h.repo, h.run_id, h.settings, "offsets-lost")
    _, again = await rereader.run([candidate(candidate_url)])
    assert again.lines_read == 13
    assert dict(again.dead_letter) == {}
    assert len(h.repo.list_rejected(h.run_id)) == 5
    # the five dead letters, then a second in which a sixth would show
    assert len(await read_topic(h.broker.bootstrap, DLQ, 5, then_s=1.0)) == 5


# ------------------------------------------------------------------------ offload


async def test_offloaded_stubs_are_replayed_from_their_file_or_skipped_with_a_reason(
    sqlite_harness: Harness, rows: list[RecordedRow], candidate_url: str, tmp_path: Path
) -> None:
    h = sqlite_harness
    full, lost, plain = exchanges_for(rows[:3])
    with CaptureLogWriter(tmp_path / "offload") as writer:
        writer.write(full)
        offloaded_file = writer.segments[-1]

    def stub(exchange: Exchange, ref: str) -> Exchange:
        note = OversizeNote(
            original_bytes=len(line(exchange)),
            limit_bytes=1024,
            action="offloaded",
            offload_ref=ref,
        )
        request = exchange.request.model_copy(update={"body": ""})
        return exchange.model_copy(update={"request": request, "response": None, "oversize": note})

    values = [
        line(stub(full, str(offloaded_file))),
        line(stub(lost, str(tmp_path / "offload" / "gone.jsonl"))),
        line(plain),
    ]
    ends = await produce(h.broker.bootstrap, values)

    _, report = await h.run([candidate(candidate_url)])

    assert dict(report.ok) == {"candidate": 2}
    assert dict(report.skipped) == {"candidate": 1}
    outcomes = {o.exchange_id: o for o in h.repo.load_outcomes(h.run_id)}
    assert outcomes[full.exchange_id].error_kind is None
    assert outcomes[full.exchange_id].response is not None
    skipped = outcomes[lost.exchange_id]
    assert skipped.error_kind is ReplayErrorKind.SKIPPED
    assert (skipped.error_detail or "").startswith("offload_unavailable: ")
    assert "gone.jsonl" in (skipped.error_detail or "")
    stored = h.repo.get_exchange(full.exchange_id)
    assert stored is not None
    assert stored.request.body == full.request.body  # the full record, not the stub
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends


def test_offload_refs_that_cannot_be_followed_say_why(
    rows: list[RecordedRow], tmp_path: Path
) -> None:
    full, other = exchanges_for(rows[:2])
    folder = tmp_path / "offload"
    with CaptureLogWriter(folder) as writer:
        writer.write(full)
        good = writer.segments[-1]
    (folder / "empty.jsonl").write_text("", encoding="utf-8")
    (folder / "broken.jsonl").write_text("{not json\n", encoding="utf-8")

    def stub(ref: str | None) -> Exchange:
        note = OversizeNote(original_bytes=1, limit_bytes=1, action="offloaded", offload_ref=ref)
        return full.model_copy(update={"oversize": note})

    assert resolve_offloaded(other) is other  # not offloaded: unchanged
    assert resolve_offloaded(stub(str(good))) == full
    assert resolve_offloaded(stub(good.as_uri())) == full
    assert resolve_offloaded(stub(good.name), base_dir=folder) == full
    with CaptureLogWriter(folder / "stub") as writer:
        writer.write(stub("elsewhere"))
        stub_file = writer.segments[-1]
    with CaptureLogWriter(folder / "other") as writer:
        writer.write(other)
        other_file = writer.segments[-1]
    cases = {
        None: "no offload_ref",
        "s3://bucket/key": "not supported",
        str(folder / "missing.jsonl"): "missing.jsonl",
        str(folder / "empty.jsonl"): "file is empty",
        str(folder / "broken.jsonl"): "not valid JSON",
        str(other_file): f"holds exchange {other.exchange_id}",
        str(stub_file): "holds a stub",
    }
    for ref, why in cases.items():
        result = resolve_offloaded(stub(ref))
        assert isinstance(result, OffloadUnavailable), ref
        assert result.reason.startswith("offload_unavailable: ")
        assert why in result.reason, (ref, result.reason)


# -------------------------------------------------------------------- hung shadow


async def test_a_shadow_that_never_answers_times_out_and_the_buffer_stays_bounded(
    sqlite_harness: Harness, rows: list[RecordedRow]
) -> None:
    """GoReplay #420: requests time out and are counted; fetched records stay bounded."""
    h = sqlite_harness
    connections = 0
    open_now = max_open = 0

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections, open_now, max_open
        connections += 1
        open_now += 1
        max_open = max(max_open, open_now)
        try:
            while await reader.read(65536):
                pass  # reads the request, never answers
        finally:
            open_now -= 1
            writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    exchanges = exchanges_for(rows[:24])
    ends = await produce(h.broker.bootstrap, [line(e) for e in exchanges])
    max_buffered = 6
    settings = WorkerSettings(max_buffered=max_buffered, fetch_max_records=4, commit_interval_s=0.2)
    metrics = WorkerMetrics()
    worker = h.worker(
        [candidate(f"http://127.0.0.1:{port}", timeout_s=0.4, connect_retries=0)],
        settings=settings,
        metrics=metrics,
        concurrency=4,
    )
    seen: list[tuple[int, float]] = []

    async def sample() -> None:
        while True:
            gauge = metrics.registry.get_sample_value("shadoweval_replay_buffered") or 0.0
            seen.append((worker.buffered, gauge))
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    client = worker.targets[0].client
    await client.start()
    try:
        report = await asyncio.wait_for(worker.run(until_idle_s=1.0), 60)  # bounds a hang
    finally:
        sampler.cancel()
        await client.stop()
        server.close()
        await server.wait_closed()

    assert dict(report.errors) == {"timeout": 24}
    assert dict(report.ok) == {}
    outcomes = h.repo.load_outcomes(h.run_id)
    assert len(outcomes) == 24
    assert all(o.error_kind is ReplayErrorKind.TIMEOUT for o in outcomes)
    assert max(b for b, _ in seen) == max_buffered  # it filled, and never went past
    assert max(g for _, g in seen) == max_buffered
    assert report.max_buffered_seen == max_buffered
    assert connections == 24
    # 24 hung requests, 4 at a time, 0.4 s each: the worker is not stuck behind them (seen
    # as requests hung side by side, not as a wall-clock bound)
    assert max_open >= 2
    assert worker.buffered == 0
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends


# ------------------------------------------------------------------ graceful stop


async def test_graceful_stop_commits_only_what_is_persisted_and_a_rerun_completes(
    sqlite_harness: Harness,
    rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    h = sqlite_harness
    exchanges = exchanges_for(rows[:30])
    ids = [e.exchange_id for e in exchanges]
    ends = await produce(h.broker.bootstrap, [line(e) for e in exchanges])
    # Which exchange sits at which offset.
    consumer = AIOKafkaConsumer(bootstrap_servers=h.broker.bootstrap, enable_auto_commit=False)
    at: dict[tuple[Partition, int], str] = {}
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while len(at) < 30:
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                for r in records:
                    at[((tp.topic, tp.partition), r.offset)] = orjson.loads(r.value)["exchange_id"]
    finally:
        await consumer.stop()
    slow = mock_app(llama31_rows, latency=FixedLatency(ttft_ms=150, itl_ms=0), model_name="m")
    settings = WorkerSettings(
        max_buffered=8, fetch_max_records=4, commit_interval_s=0.2, grace_period_s=0.0
    )
    with serve(slow) as server:
        worker = h.worker([candidate(server.url)], settings=settings, concurrency=2)
        client = worker.targets[0].client
        await client.start()
        try:
            running = asyncio.create_task(worker.run())
            await wait_for_outcomes(h.repo, h.run_id, 8)
            worker.request_stop()
            first = await asyncio.wait_for(running, 30)
        finally:
            await client.stop()
        # Grace 0: the two replays in flight and those waiting for a slot are cancelled.
        assert 2 <= first.cancelled <= settings.max_buffered
        stored = {o.exchange_id for o in h.repo.load_outcomes(h.run_id)}
        assert len(stored) < 30
        committed = await committed_offsets(h.broker.bootstrap, h.group)
        assert committed  # something was committed…
        for (tp, offset), exchange_id in at.items():
            if offset < committed.get(tp, 0):
                assert exchange_id in stored  # …and everything committed is persisted
        requests = slow.chat_requests

        _, second = await h.run([candidate(server.url)], settings=settings, concurrency=2)
    assert sum(second.sent.values()) == 30 - len(stored)
    assert slow.chat_requests - requests == 30 - len(stored)
    counts = outcome_counts(h.repo.load_outcomes(h.run_id))
    assert {i for i, _ in counts} == set(ids)
    assert set(counts.values()) == {1}
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends


# ---------------------------------------------------------------------- rebalance


async def test_two_workers_of_one_group_share_the_topic_through_a_rebalance(
    sqlite_harness: Harness,
    rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    """A second worker joins mid-run: the first persists, commits and hands over
    partitions; together they leave exactly one outcome per exchange."""
    h = sqlite_harness
    exchanges = exchanges_for(rows[:40])
    ends = await produce(h.broker.bootstrap, [line(e) for e in exchanges])
    slow = mock_app(llama31_rows, latency=FixedLatency(ttft_ms=100, itl_ms=0), model_name="m")
    # The first 6 answers flow; later ones wait until the newcomer holds partitions, so the
    # first worker cannot finish the topic alone however slow the rebalance is under load.
    held = HoldAfter(slow, answers=6)
    settings = WorkerSettings(max_buffered=6, fetch_max_records=3, commit_interval_s=0.2)
    with serve(held) as server:
        first = h.worker([candidate(server.url)], settings=settings, concurrency=2)
        second = h.worker([candidate(server.url)], settings=settings, concurrency=2)
        clients = [first.targets[0].client, second.targets[0].client]
        for client in clients:
            await client.start()
        try:
            running = asyncio.create_task(first.run(until_idle_s=1.5))
            await wait_for_outcomes(h.repo, h.run_id, 6)
            joined = asyncio.create_task(second.run(until_idle_s=1.5))
            await wait_for_assignment(second)
            held.released.set()
            one, two = await asyncio.wait_for(asyncio.gather(running, joined), 60)
        finally:
            held.released.set()  # never leave a held answer behind
            for client in clients:
                await client.stop()
    assert one.lines_read > 0
    assert two.lines_read > 0  # the newcomer got partitions
    counts = outcome_counts(h.repo.load_outcomes(h.run_id))
    assert {i for i, _ in counts} == {e.exchange_id for e in exchanges}
    assert set(counts.values()) == {1}
    # At-least-once: a record in flight during the hand-over may be sent twice, never lost.
    assert sum(one.sent.values()) + sum(two.sent.values()) >= 40
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends


# ------------------------------------------------------------------------ metrics


async def test_metrics_endpoint_health_and_readiness() -> None:
    metrics = WorkerMetrics()
    metrics.replayed.labels(target="candidate", outcome="timeout").inc(3)
    metrics.set_lag({(TOPIC, 0): 5, (TOPIC, 1): 0})
    metrics.set_lag({(TOPIC, 0): 2})  # partition 1 was revoked: its gauge goes
    ready = False
    app = metrics_app(metrics, lambda: ready)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code == 503
        ready = True
        assert (await client.get("/readyz")).status_code == 200
        scraped = await client.get("/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    text = scraped.text
    assert 'shadoweval_replay_replayed_total{outcome="timeout",target="candidate"} 3.0' in text
    assert f'shadoweval_replay_consumer_lag{{partition="{TOPIC}/0"}} 2.0' in text
    assert f'partition="{TOPIC}/1"' not in text
    for name in ("in_flight", "buffered", "dead_letter_total", "committed_offset"):
        assert f"shadoweval_replay_{name}" in text


# ------------------------------------------------------ issue 13: nothing stuck on Kafka


async def test_a_base64_record_that_does_not_decode_is_dead_lettered_and_the_partition_moves_on(
    sqlite_harness: Harness, rows: list[RecordedRow], candidate_url: str
) -> None:
    """Issue 13: the worker exited 3 on such a record every time, stored nothing and wrote
    no dead letter, so the partition never moved on."""
    h = sqlite_harness
    exchanges = exchanges_for(rows[:8])
    payload = exchanges[0].model_dump(mode="json") | {"exchange_id": "ex-b64"}
    payload["request"] = payload["request"] | {"body": "eyJtb2RlbCI", "body_encoding": "base64"}
    values = [line(e) for e in exchanges[:4]] + [orjson.dumps(payload)]
    values += [line(e) for e in exchanges[4:]]
    ends = await produce(h.broker.bootstrap, values, keys=[b"same-key"] * len(values))

    _, report = await h.run([candidate(candidate_url)])

    assert dict(report.dead_letter) == {"schema": 1}
    assert dict(report.ok) == {"candidate": 8}
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends
    (stored,) = h.repo.list_rejected(h.run_id)
    assert "request.body is not valid base64" in (stored.detail or "")
    (dead,) = await read_topic(h.broker.bootstrap, DLQ, 1)
    assert dict((k, bytes(v)) for k, v in dead.headers)["reason"] == b"schema"


async def test_a_replay_that_raises_is_dead_lettered_and_the_partition_moves_on(
    sqlite_harness: Harness, rows: list[RecordedRow]
) -> None:
    """Defence in depth: an exception while sending (here a transport bug) is a dead letter
    with its reason, stored at stage ``replay`` (the exchange counts once as captured)."""
    h = sqlite_harness
    exchanges = exchanges_for(rows[:6])
    doomed = exchanges[2].exchange_id
    # two records with one id and different content, fetched in one batch
    conflicting = exchanges[4].model_copy(update={"task_type": "edited"})

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["x-shadow-eval-exchange-id"] == doomed:
            raise RuntimeError("a bug in a transport")
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    values = [line(e) for e in exchanges] + [line(conflicting)]
    ends = await produce(h.broker.bootstrap, values, keys=[b"one-partition"] * len(values))
    client = CandidateClient("http://c", transport=httpx.MockTransport(handler))

    _, report = await h.run([TargetSpec(ReplayTarget.CANDIDATE, client, CANDIDATE)])

    assert dict(report.dead_letter) == {"send_failed": 1, "conflicting_duplicate": 1}
    assert dict(report.replay_failed) == {"send_failed": 1}
    assert dict(report.rejected) == {"conflicting_duplicate": 1}
    assert dict(report.ok) == {"candidate": 5}
    assert await committed_offsets(h.broker.bootstrap, h.group) == ends
    stored = {r.reason: r for r in h.repo.list_rejected(h.run_id)}
    assert stored["send_failed"].stage == "replay"
    assert "RuntimeError: a bug in a transport" in (stored["send_failed"].detail or "")
    assert stored["conflicting_duplicate"].stage == "capture_log"
    assert h.repo.get_exchange(exchanges[4].exchange_id) == exchanges[4]  # the first kept
    coverage = h.repo.coverage_counts(h.run_id)
    assert (coverage.captured, coverage.rejected, coverage.replayed) == (7, 1, 5)
    dead = await read_topic(h.broker.bootstrap, DLQ, 2)
    assert sorted(dict((k, bytes(v)) for k, v in d.headers)["reason"] for d in dead) == [
        b"conflicting_duplicate",
        b"send_failed",
    ]


# ------------------------------------------------------------------ warm-up first (issue 13)


async def test_warmup_answers_are_in_before_the_first_measured_record_is_sent(
    harness: Harness, rows: list[RecordedRow], llama31_rows: list[RecordedRow]
) -> None:
    """A cold replica holds its first two answers: the worker sends nothing else until
    they are in (records of all partitions, dispatch order)."""
    from tests.replay.test_replay_routes_and_load import ColdReplica

    exchanges = exchanges_for(rows[:20])
    await produce(harness.broker.bootstrap, [line(e) for e in exchanges])
    replica = ColdReplica(mock_app(llama31_rows, model_name=CANDIDATE.name), cold=2)
    target = candidate("http://candidate", transport=httpx.ASGITransport(app=replica))
    task = asyncio.ensure_future(harness.run([target], warmup_requests=2, concurrency=8))
    await asyncio.wait_for(replica.all_held.wait(), 60)
    for _ in range(50):  # room for measured requests to go out, were they not held back
        await asyncio.sleep(0)
    assert [kind for kind, _ in replica.events] == ["arrive", "arrive"]
    replica.warm.set()
    _, report = await task
    warm_ids = {exchange_id for _, exchange_id in replica.events[:2]}
    last_warm_answer = max(i for i, e in enumerate(replica.events) if e[1] in warm_ids)
    first_measured = min(
        i for i, e in enumerate(replica.events) if e[0] == "arrive" and e[1] not in warm_ids
    )
    assert first_measured > last_warm_answer
    flagged = {o.exchange_id for o in harness.repo.load_outcomes(harness.run_id) if o.warmup}
    assert flagged == warm_ids
    assert (report.warmup_starts, report.measured_starts) == (2, 18)
