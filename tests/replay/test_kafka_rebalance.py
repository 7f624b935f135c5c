"""Replay scale-out on Kafka (issue 15): several workers of one group, rebalances, sessions.

Real parts: the Tansu broker (a six-partition topic), PostgreSQL (a fresh schema per test)
for the rebalance, the capture builder and Kafka sink for the partitioning. The candidate
is :class:`SessionCandidate`, a test double of an OpenAI chat server reached through the
client's transport seam (``httpx.ASGITransport``, one event loop with the workers): it
records every arrival and answer by exchange id, delays some turns and can hold one, and
reports a model name per exchange (to play a rolling deploy).

Exchanges are AlpacaEval Llama-3-8B prompts; exchange ``i`` is turn ``i // SESSIONS`` of
session ``i % SESSIONS`` (captured in that order), keyed on the topic the way the capture
sinks key them: by the session key hash.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.bus import BusConsumer, BusProducer, ensure_topics
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.sinks.kafka import KafkaSink
from shadoweval.config import CaptureSettings, KafkaSettings, WorkerSettings
from shadoweval.records import Exchange, ReplayOutcome, ReplayTarget, ResponseRecord
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.kafka_worker import KafkaReplayWorker, WorkerReport
from shadoweval.replay.metrics import WorkerMetrics
from shadoweval.replay.runner import TargetSpec
from shadoweval.replay.sessions import SessionVersionTracker, candidate_version, session_versions
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow
from tests.capture.test_builder import builder, make_raw
from tests.capture.test_kafka_sink import (
    consume,
    first_seen_order,
    kafka_settings,
    produced,
    spool_settings,
    written_order,
)
from tests.conftest import fresh_pg_schema_url
from tests.kafka_broker import TansuBroker
from tests.replay.conftest import make_exchange
from tests.replay.test_kafka_worker import CANDIDATE, DLQ, TOPIC, line, new_run
from tests.replay.test_kafka_worker import committed_offsets as committed_positions
from tests.replay.test_kafka_worker import produce as produce_values
from tests.replay.test_replay_runner import exchanges_for
from tests.waiting import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.kafka]

PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
"""Longer than the other Kafka tests' 1.5 s: three workers, the candidate double and the
database share one event loop on a loaded machine, and a member whose heartbeat is late
is evicted (a zombie that may send what its successor sends too)."""
SAMPLER = StickySampler(100.0, ["x-session-id"], "rebalance-test-salt")
Partition = tuple[str, int]


def session_hash(session: int) -> str:
    """The session key hash the capture path gives header ``x-session-id: conv-<n>``."""
    key = SAMPLER.session_key_hash([(b"x-session-id", f"conv-{session}".encode())])
    assert key is not None
    return key


def conversation(
    rows: Sequence[RecordedRow], sessions: int, *, loose: int = 0, start: int = 0
) -> list[Exchange]:
    """``len(rows)`` exchanges in capture order: exchange ``i`` is turn ``i // sessions``
    of session ``i % sessions``; the last ``loose`` ones have no session key."""
    out = []
    for i, exchange in enumerate(exchanges_for(list(rows), stream=False)):
        n = start + i
        keyed = i < len(rows) - loose
        out.append(
            exchange.model_copy(
                update={
                    "exchange_id": f"ex-{n:05d}",
                    "session_key_hash": session_hash(n % sessions) if keyed else None,
                }
            )
        )
    return out


def key_of(exchange: Exchange) -> bytes:
    """The Kafka key the capture builder gives a record (``capture/builder.py``)."""
    return (exchange.session_key_hash or exchange.exchange_id).encode()


async def produce(bootstrap: str, exchanges: Sequence[Exchange]) -> dict[Partition, int]:
    """Produce ``exchanges`` keyed like the capture sinks; the end offset per partition."""
    return await produce_values(
        bootstrap,
        [line(e) for e in exchanges],
        keys=[key_of(e) for e in exchanges],
        partitions=PARTITIONS,
    )


async def committed_offsets(bootstrap: str, group: str) -> dict[Partition, int]:
    """The group's committed positions on ``TOPIC`` (partitions with none are left out)."""
    return await committed_positions(bootstrap, group, partitions=PARTITIONS)


# ------------------------------------------------------------------ candidate double


@dataclass
class SessionCandidate:
    """A test double of an OpenAI chat-completions server (non-streamed answers).

    ``events``: ``("arrive" | "answer", exchange_id)`` in order; ``requests``: requests
    received per exchange id; ``hold``: exchange ids held until :attr:`release` is set;
    ``delay_s``: per exchange id, how long the answer takes (the rest answer at once);
    ``models``: per exchange id, the model the answer reports (else ``model``).
    """

    model: str = "candidate-v1"
    hold: set[str] = field(default_factory=set)
    delay_s: dict[str, float] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    in_flight: int = 0
    max_in_flight: int = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http", scope["type"]
        while (await receive()).get("more_body"):
            pass
        exchange_id = dict(scope["headers"])[b"x-shadow-eval-exchange-id"].decode()
        self.events.append(("arrive", exchange_id))
        self.requests[exchange_id] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if exchange_id in self.hold:
                await self.release.wait()
            delay = self.delay_s.get(exchange_id, 0.0)
            if delay:
                await asyncio.sleep(delay)  # the double's answer time, not a test wait
            body = orjson.dumps(
                {
                    "id": f"cmpl-{exchange_id}",
                    "object": "chat.completion",
                    "model": self.models.get(exchange_id, self.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": f"answer {exchange_id}"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                }
            )
            self.events.append(("answer", exchange_id))
        finally:
            self.in_flight -= 1
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def arrived(self, exchange_id: str) -> bool:
        return ("arrive", exchange_id) in self.events

    def answered(self) -> set[str]:
        return {i for kind, i in self.events if kind == "answer"}

    def out_of_order(self, exchanges: Sequence[Exchange]) -> list[tuple[str, str]]:
        """``(earlier, later)`` turn pairs of one session where the later turn arrived
        before the earlier one's answer (empty: every session was replayed in order)."""
        position = {event: i for i, event in enumerate(self.events)}
        last: dict[str, Exchange] = {}
        bad = []
        for exchange in sorted(exchanges, key=lambda e: (e.captured_at, e.exchange_id)):
            session = exchange.session_key_hash
            if session is None:
                continue
            before = last.get(session)
            if before is not None and position.get(
                ("arrive", exchange.exchange_id), -1
            ) < position.get(("answer", before.exchange_id), 1 << 30):
                bad.append((before.exchange_id, exchange.exchange_id))
            last[session] = exchange
        return bad


def candidate_spec(double: SessionCandidate) -> TargetSpec:
    client = CandidateClient("http://candidate", transport=httpx.ASGITransport(app=double))
    return TargetSpec(ReplayTarget.CANDIDATE, client, CANDIDATE, model_name=CANDIDATE.name)


# -------------------------------------------------------------------------- fixtures


@pytest.fixture
def pg_repo(pg_url: str) -> Iterator[Repository]:
    """A repository over a fresh PostgreSQL schema upgraded to head."""
    for url in fresh_pg_schema_url(pg_url):
        db = Database(url)
        db.upgrade()
        try:
            yield Repository(db)
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def prompts(llama3_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama3_rows[:180]


@dataclass
class Group:
    """Workers of one run's consumer group on one broker and one database."""

    broker: TansuBroker
    repo: Repository
    run_id: str
    settings: WorkerSettings

    @property
    def group(self) -> str:
        return f"shadoweval-replay.{self.run_id}"

    def worker(self, double: SessionCandidate, **kwargs: Any) -> KafkaReplayWorker:
        kafka = KafkaSettings(bootstrap_servers=self.broker.bootstrap, dead_letter_topic=DLQ)
        consumer = BusConsumer(
            self.broker.bootstrap,
            TOPIC,
            self.group,
            client_id=f"replay-{uuid.uuid4().hex[:6]}",
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=SESSION_TIMEOUT_MS // 3,
        )
        return KafkaReplayWorker(
            self.repo,
            self.run_id,
            [candidate_spec(double)],
            consumer,
            BusProducer(kafka),
            self.settings,
            kafka,
            **kwargs,
        )

    def stored(self) -> Counter[str]:
        return Counter(o.exchange_id for o in self.repo.load_outcomes(self.run_id))


class Running:
    """One worker running in a task, its client started before and stopped after."""

    def __init__(self, worker: KafkaReplayWorker, until_idle_s: float | None = None) -> None:
        self.worker = worker
        self.client = worker.targets[0].client
        self.until_idle_s = until_idle_s
        self.task: asyncio.Task[WorkerReport] | None = None

    async def start(self) -> Running:
        await self.client.start()
        self.task = asyncio.create_task(self.worker.run(until_idle_s=self.until_idle_s))
        return self

    async def stop(self) -> WorkerReport:
        """Graceful stop (what SIGTERM does); returns the report."""
        assert self.task is not None
        self.worker.request_stop()
        try:
            return await asyncio.wait_for(self.task, 60)  # bounds a hang
        finally:
            await self.client.stop()

    async def finished(self) -> WorkerReport:
        assert self.task is not None
        try:
            return await asyncio.wait_for(self.task, 60)
        finally:
            await self.client.stop()


def pairs(repo: Repository, run_id: str) -> list[tuple[Exchange, ReplayOutcome]]:
    return [(e, c) for batch in repo.iter_pair_inputs(run_id) for e, c, _ in batch]


# ---------------------------------------------------------- (a) a session, a partition


async def test_the_capture_path_puts_a_sessions_records_on_one_partition_in_order(
    kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    """Builder (session header → salted hash → record key) → Kafka sink → six partitions:
    every record of a session lands on one partition, in capture order."""
    sessions = 9
    capture = CaptureSettings(session_headers=("x-session-id",))
    sampler = StickySampler.from_settings(capture)
    build = builder(session_headers=["x-session-id"])
    built = []
    for i in range(72):
        headers = [("x-session-id", f"conv-{i % sessions}")]
        raw = make_raw(body=None, request_headers=headers)
        raw = replace(
            raw,
            exchange_id=f"01JNQ3ZK8Y{i:016d}",
            session_key_hash=sampler.session_key_hash(raw.request_headers),
        )
        built.append(build.build(raw).built)
    assert len({b.key for b in built}) == sessions
    settings = kafka_settings(kafka_broker.bootstrap)
    await ensure_topics(kafka_broker.bootstrap, [settings.topic], partitions=PARTITIONS)
    metrics = CaptureMetrics()
    async with KafkaSink(settings, spool_settings(tmp_path), metrics) as sink:
        for item in built:
            await sink.write(item)
        await eventually(lambda: produced(metrics) == len(built), "every record acknowledged")

    records = await consume(kafka_broker.bootstrap, settings.topic, {b.exchange_id for b in built})

    partitions: dict[bytes, set[int]] = {}
    for record in records:
        assert record.key is not None
        partitions.setdefault(record.key, set()).add(record.partition)
        payload = orjson.loads(record.value or b"{}")
        assert payload["session_key_hash"].encode() == record.key  # the key is the session
        assert "conv-" not in (record.value or b"").decode()  # never the header's value
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert len({next(iter(p)) for p in partitions.values()}) >= 3  # sessions spread out
    assert first_seen_order(records) == written_order(built)  # in capture order


# ----------------------------------------------------------- (b) turns in order


async def test_a_sessions_turns_are_replayed_in_order_and_other_sessions_go_on(
    kafka_broker: TansuBroker, repo: Repository, prompts: list[RecordedRow]
) -> None:
    """Turn 0 of session 0 is held by the candidate: its later turns wait for it while
    every other session's turns (and the exchanges without a session) are replayed."""
    sessions = 6
    exchanges = conversation(prompts[:40], sessions, loose=4)  # 6 sessions, 4 loose
    by_session: dict[str | None, list[Exchange]] = {}
    for e in exchanges:
        by_session.setdefault(e.session_key_hash, []).append(e)
    first, *later = by_session[session_hash(0)]
    double = SessionCandidate(
        hold={first.exchange_id},
        # every other turn is slow, so turns would overtake each other if sent at once
        delay_s={e.exchange_id: 0.02 for i, e in enumerate(exchanges) if i % 2 == 0},
    )
    await produce(kafka_broker.bootstrap, exchanges)
    group = Group(
        kafka_broker,
        repo,
        new_run(repo),
        WorkerSettings(max_buffered=64, fetch_max_records=64, commit_interval_s=0.2),
    )
    running = await Running(group.worker(double, concurrency=8), until_idle_s=1.0).start()
    others = (
        {e.exchange_id for e in exchanges} - {first.exchange_id} - {e.exchange_id for e in later}
    )
    try:
        await eventually(
            lambda: (
                others <= double.answered()
                and double.arrived(first.exchange_id)
                and running.worker.report.lines_read == len(exchanges)
            ),
            "every record fetched, every turn but session 0's answered, session 0's first arrived",
        )
        for _ in range(50):  # room for session 0's later turns to go out, were they not held
            await asyncio.sleep(0)
        sent_early = [e.exchange_id for e in later if double.arrived(e.exchange_id)]
    finally:
        double.release.set()
        report = await running.finished()
    assert sent_early == []  # session 0's later turns waited for its first

    assert double.out_of_order(exchanges) == []
    assert set(double.requests.values()) == {1}
    assert len(double.requests) == len(exchanges)
    assert double.max_in_flight >= 2  # sessions were replayed side by side
    assert report.ok == Counter({"candidate": len(exchanges)})
    assert Counter(o.exchange_id for o in repo.load_outcomes(group.run_id)) == Counter(
        {e.exchange_id: 1 for e in exchanges}
    )
    assert dict(report.session_model_changes) == {}


# -------------------------------------------------------- (c) one version per session


async def test_a_turn_that_meets_another_candidate_version_is_counted_and_found(
    kafka_broker: TansuBroker, repo: Repository, prompts: list[RecordedRow]
) -> None:
    """A rolling deploy behind the candidate URL: some turns are answered by v2."""
    sessions = 4
    exchanges = conversation(prompts[:16], sessions)  # 4 sessions x 4 turns
    turns = {s: [e for e in exchanges if e.session_key_hash == session_hash(s)] for s in range(4)}
    v2 = {
        turns[1][2].exchange_id,  # session 1: turns 2 and 3 meet v2 -> 2 changes
        turns[1][3].exchange_id,
        turns[2][0].exchange_id,  # session 2: its first turn met v2 -> turns 1-3 change
    }
    double = SessionCandidate(model="candidate-v1", models=dict.fromkeys(v2, "candidate-v2"))
    await produce(kafka_broker.bootstrap, exchanges)
    group = Group(
        kafka_broker,
        repo,
        new_run(repo),
        WorkerSettings(max_buffered=32, fetch_max_records=32, commit_interval_s=0.2),
    )
    metrics = WorkerMetrics()
    running = await Running(
        group.worker(double, concurrency=4, metrics=metrics), until_idle_s=1.0
    ).start()
    report = await running.finished()

    assert dict(report.session_model_changes) == {"candidate": 5}
    assert report.as_dict()["session_model_changes"] == {"candidate": 5}
    assert (
        metrics.registry.get_sample_value(
            "shadoweval_replay_session_model_changes_total", {"target": "candidate"}
        )
        == 5
    )
    # Every turn's version is recorded with its outcome; the run-wide check finds the same.
    stored = pairs(repo, group.run_id)
    assert {candidate_version(o) for _, o in stored} == {"candidate-v1", "candidate-v2"}
    found = session_versions(stored)
    assert (found.sessions, found.multi_turn) == (4, 4)
    assert not found.consistent
    assert sorted(c.exchange_id for c in found.changes) == sorted(
        [turns[1][2].exchange_id, turns[1][3].exchange_id] + [e.exchange_id for e in turns[2][1:]]
    )
    assert {(c.first_version, c.version) for c in found.changes} == {
        ("candidate-v1", "candidate-v2"),
        ("candidate-v2", "candidate-v1"),
    }


def test_session_versions_follow_capture_order_and_leave_out_exchanges_without_a_session() -> None:
    """Pure: the first turn in capture order (not in the order given) sets the version;
    a skipped turn (nothing sent) counts with the configured identity."""
    t0 = datetime(2026, 3, 1, tzinfo=UTC)

    def turn(i: int, session: str | None, at_ms: int) -> Exchange:
        return make_exchange().model_copy(
            update={
                "exchange_id": f"t{i}",
                "session_key_hash": session,
                "captured_at": t0 + timedelta(milliseconds=at_ms),
            }
        )

    def replayed(e: Exchange, model: str | None) -> ReplayOutcome:
        response = None if model is None else ResponseRecord(status_code=200, model=model)
        return ReplayOutcome(
            run_id="r", exchange_id=e.exchange_id, model=CANDIDATE, response=response
        )

    a1, a2, a3 = turn(1, "a", 10), turn(2, "a", 20), turn(3, "a", 30)
    b1, loose = turn(4, "b", 5), turn(5, None, 1)
    given = [
        (a3, replayed(a3, "v1")),
        (a2, replayed(a2, None)),  # no response: the configured name
        (a1, replayed(a1, "v1")),
        (b1, replayed(b1, "v9")),
        (loose, replayed(loose, "v7")),
    ]
    found = session_versions(given)
    assert (found.sessions, found.multi_turn) == (2, 1)
    (change,) = found.changes
    assert (change.exchange_id, change.first_version, change.version) == (
        "t2",
        "v1",
        CANDIDATE.name,
    )

    tracker = SessionVersionTracker(max_sessions=1)
    assert tracker.observe(a1, replayed(a1, "v1")) is None
    assert tracker.observe(loose, replayed(loose, "v2")) is None  # no session
    observed = tracker.observe(a3, replayed(a3, "v2"))
    assert observed is not None
    assert observed.first_version == "v1"
    assert tracker.observe(b1, replayed(b1, "v1")) is None  # forgets session a (bound 1)
    assert tracker.observe(a2, replayed(a2, "v2")) is None  # a starts afresh
    with pytest.raises(ValueError, match="max_sessions must be >= 1, got 0"):
        SessionVersionTracker(max_sessions=0)


# ----------------------------------------------------------- the rebalance (PostgreSQL)


@pytest.mark.postgres
@pytest.mark.slow
async def test_workers_joining_and_leaving_mid_run_replay_every_record_exactly_once(
    kafka_broker: TansuBroker, pg_repo: Repository, prompts: list[RecordedRow]
) -> None:
    """Two workers start; records keep arriving; a third joins, then the first stops
    gracefully (SIGTERM's path): each forces a rebalance. At the end every exchange has
    one outcome in PostgreSQL, the candidate received each exactly once, every session's
    turns arrived in order, and the group's committed offsets are at the end."""
    sessions = 30
    exchanges = conversation(prompts, sessions, loose=30)  # 150 in sessions + 30 loose
    waves = [exchanges[i : i + 36] for i in range(0, len(exchanges), 36)]
    # Answers take 0.1-0.3 s: two replays in flight per worker bound the pace to at most
    # 20 a second for two workers, so the backlog cannot drain before a rebalance ends and
    # each worker's buffer (16) is full of replays not sent yet when partitions move.
    double = SessionCandidate(
        delay_s={
            e.exchange_id: 0.1
            + 0.025 * (int(hashlib.sha256(e.exchange_id.encode()).hexdigest(), 16) % 9)
            for e in exchanges
        }
    )
    run_id = new_run(pg_repo, name="rebalance")
    group = Group(
        kafka_broker,
        pg_repo,
        run_id,
        WorkerSettings(max_buffered=16, fetch_max_records=8, commit_interval_s=0.2),
    )
    ends: dict[Partition, int] = {}

    async def produce_wave(n: int) -> None:
        for tp, end in (await produce(kafka_broker.bootstrap, waves[n])).items():
            ends[tp] = max(ends.get(tp, 0), end)

    def stored_at_least(n: int) -> bool:
        return len(group.stored()) >= n

    for n in range(3):
        await produce_wave(n)  # 108 records waiting
    a = await Running(group.worker(double, concurrency=2)).start()
    b = await Running(group.worker(double, concurrency=2)).start()
    c: Running | None = None
    try:
        await eventually(lambda: stored_at_least(10), "10 outcomes stored", interval_s=0.1)
        # A third worker joins while A and B are busy: they give up partitions.
        c = await Running(group.worker(double, concurrency=2)).start()
        await produce_wave(3)
        await eventually(lambda: c.worker.report.lines_read > 0, "C to read records")
        # A leaves gracefully (SIGTERM's path) with records in flight: B and C take its
        # partitions.
        first = await a.stop()
        await produce_wave(4)
        await eventually(
            lambda: stored_at_least(len(exchanges)),
            f"{len(exchanges)} outcomes",
            120,
            interval_s=0.1,  # each poll reads the outcomes on the event loop
        )
        second = await b.stop()
        third = await c.stop()
    finally:
        for worker in (a, b, c):
            if worker is not None and worker.task is not None and not worker.task.done():
                worker.worker.request_stop()
                await asyncio.gather(worker.task, return_exceptions=True)
                await worker.client.stop()

    reports = [first, second, third]
    assert all(r.lines_read > 0 for r in reports)  # all three took part
    # The rebalances found replays not sent yet (dropped, read again by the new owner).
    assert sum(r.abandoned for r in reports) > 0
    assert sum(r.lines_read for r in reports) >= len(exchanges) + sum(r.abandoned for r in reports)
    # Exactly once in storage: one outcome per exchange, none missing.
    assert group.stored() == Counter({e.exchange_id: 1 for e in exchanges})
    # Nothing was sent twice: replays of revoked partitions not sent yet were dropped
    # and read again by the new owner; those being sent finished before the hand-over.
    assert double.requests == Counter({e.exchange_id: 1 for e in exchanges})
    assert sum(sum(r.sent.values()) for r in reports) == len(exchanges)
    assert double.out_of_order(exchanges) == []
    assert all(dict(r.errors) == {} and dict(r.dead_letter) == {} for r in reports)
    assert session_versions(pairs(pg_repo, run_id)).consistent
    assert await committed_offsets(kafka_broker.bootstrap, group.group) == ends
