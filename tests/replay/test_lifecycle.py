"""The replay stage's long-lived objects and the bus follow :mod:`shadoweval.lifecycle`: a
second start raises :class:`LifecycleError`, so does a start after stop, and stop is
idempotent. (The candidate client has its own tests in ``test_replay_client.py``.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from shadoweval.bus import BusConsumer, BusError, BusProducer
from shadoweval.config import KafkaSettings, WorkerSettings
from shadoweval.errors import LifecycleError
from shadoweval.lifecycle import AsyncLifecycle, LifecycleState
from shadoweval.records import ReplayTarget
from shadoweval.replay.metrics import MetricsServer, WorkerMetrics, metrics_app
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_kafka_worker import (
    CANDIDATE,
    TOPIC,
    Harness,
    candidate,
    line,
    new_run,
    produce,
)
from tests.replay.test_replay_runner import exchanges_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_metrics_server_starts_once() -> None:
    metrics = WorkerMetrics()
    server = MetricsServer(metrics_app(metrics, lambda: True), host="127.0.0.1", port=0)
    with server:
        assert httpx.get(f"http://127.0.0.1:{server.port}/readyz").text == "ready\n"
        with pytest.raises(LifecycleError, match=r"MetricsServer\.start\(\) called twice"):
            server.start()
    server.stop()
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        server.start()


async def _check_bus_object(obj: AsyncLifecycle) -> None:
    async with obj:
        with pytest.raises(LifecycleError, match="called twice"):
            await obj.start()
    await obj.stop()
    assert obj.lifecycle_state is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await obj.start()


@pytest.mark.kafka
async def test_producer_and_consumer_start_once(kafka_broker: TansuBroker) -> None:
    await produce(kafka_broker.bootstrap, [b"{}"])  # the topic exists for the consumer
    await _check_bus_object(BusProducer(KafkaSettings(bootstrap_servers=kafka_broker.bootstrap)))
    await _check_bus_object(
        BusConsumer(kafka_broker.bootstrap, TOPIC, "lifecycle", session_timeout_ms=1500)
    )


async def test_a_producer_whose_broker_is_away_may_be_started_again() -> None:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", send_timeout_s=0.5)
    producer = BusProducer(settings)
    for _ in range(2):
        with pytest.raises(BusError, match="broker"):
            await producer.start()
        assert producer.lifecycle_state is LifecycleState.NEW
    await producer.stop()
    await producer.stop()


@pytest.mark.kafka
async def test_a_worker_runs_once(
    kafka_broker: TansuBroker,
    sqlite_repo: Repository,
    llama3_rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    exchanges = exchanges_for(llama3_rows[:4])
    await produce(kafka_broker.bootstrap, [line(e) for e in exchanges])
    harness = Harness(
        kafka_broker,
        sqlite_repo,
        new_run(sqlite_repo),
        WorkerSettings(max_buffered=8, fetch_max_records=8, commit_interval_s=0.2),
    )
    with serve(mock_app(llama31_rows, model_name=CANDIDATE.name)) as server:
        worker, report = await harness.run([candidate(server.url)], until_idle_s=0.5)
    assert report.sent[ReplayTarget.CANDIDATE] == len(exchanges)
    assert worker.lifecycle_state is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await asyncio.wait_for(worker.run(until_idle_s=0.5), 10)
    assert worker.consumer.lifecycle_state is LifecycleState.STOPPED
