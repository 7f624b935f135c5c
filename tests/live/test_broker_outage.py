"""Acceptance: the broker stops for 30 s during steady traffic.

Zero live requests fail, live latency stays within the overhead budget, and once the
broker returns every exchange reaches the results exactly once (sidecar → spool → Kafka →
replay worker → database).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from shadoweval.bus import ensure_topics
from shadoweval.config import CaptureSettings, KafkaSettings, SpoolSettings
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.live.harness import SidecarThread, run_replay_worker

OUTAGE_S = float(os.environ.get("SHADOWEVAL_TEST_OUTAGE_S", "30"))
RATE_PER_S = 10.0


async def _traffic(
    url: str, rows: list[RecordedRow], phases: list[tuple[str, float]], broker: TansuBroker
) -> tuple[dict[str, list[float]], list[str], list[str]]:
    """Send requests at RATE_PER_S through ``url``; pause/resume the broker between phases.

    Returns latencies (ms) per phase, the test ids sent, and failures.
    """
    latencies: dict[str, list[float]] = {name: [] for name, _ in phases}
    sent: list[str] = []
    failures: list[str] = []
    tasks: list[asyncio.Task[None]] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one(test_id: str, row: RecordedRow, phase: str, stream: bool) -> None:
            start = time.perf_counter()
            try:
                body = {"model": "mock-live", "messages": row.messages, "stream": stream}
                headers = {"x-test-id": test_id, "x-session-id": f"s{len(sent) % 7}"}
                if stream:
                    async with client.stream(
                        "POST", "/v1/chat/completions", json=body, headers=headers
                    ) as resp:
                        async for _ in resp.aiter_bytes():
                            pass
                        status = resp.status_code
                else:
                    resp = await client.post("/v1/chat/completions", json=body, headers=headers)
                    status = resp.status_code
                if status != 200:
                    failures.append(f"{test_id}: HTTP {status}")
            except httpx.HTTPError as exc:
                failures.append(f"{test_id}: {exc!r}")
                return
            latencies[phase].append((time.perf_counter() - start) * 1000)

        n = 0
        for phase, duration_s in phases:
            if phase == "outage":
                broker.pause()
            elif phase == "after" and broker.paused:
                broker.resume()
            end = time.monotonic() + duration_s
            while time.monotonic() < end:
                row = rows[n % len(rows)]
                test_id = f"t{n:05d}"
                sent.append(test_id)
                tasks.append(asyncio.create_task(one(test_id, row, phase, stream=n % 2 == 0)))
                n += 1
                await asyncio.sleep(1 / RATE_PER_S)
        await asyncio.gather(*tasks)
    return latencies, sent, failures


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


@pytest.mark.kafka
@pytest.mark.slow
def test_broker_outage_loses_nothing_and_never_touches_the_live_path(
    tmp_path: Path,
    kafka_broker: TansuBroker,
    live_model: str,
    alpaca_rows: list[RecordedRow],
) -> None:
    kafka = KafkaSettings(
        bootstrap_servers=kafka_broker.bootstrap, send_timeout_s=2.0, request_timeout_ms=2000
    )
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [kafka.topic, kafka.dead_letter_topic]))
    capture = CaptureSettings(
        upstream_url=live_model,
        sinks=("kafka",),
        builder="thread",
        spool=SpoolSettings(directory=str(tmp_path / "spool"), retry_interval_s=0.5),
    )
    phases = [("before", 5.0), ("outage", OUTAGE_S), ("after", 5.0)]
    with SidecarThread(capture, kafka) as sidecar:
        latencies, sent, failures = asyncio.run(
            _traffic(sidecar.url, alpaca_rows, phases, kafka_broker)
        )
        spooled = sidecar.metric("shadoweval_capture_spooled_total")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            sidecar.metric("shadoweval_capture_kafka_spooling") > 0
            or sidecar.metric("shadoweval_capture_spool_records") > 0
        ):
            time.sleep(0.2)
        assert sidecar.metric("shadoweval_capture_spool_records") == 0, "spool did not drain"
    assert sidecar.metric("shadoweval_capture_dropped_total", reason="queue_full") == 0

    # 0 live requests fail; latency during the outage stays within the budget.
    assert failures == []
    before, outage = latencies["before"], latencies["outage"]
    p50_added = statistics.median(outage) - statistics.median(before)
    p99_added = _p(outage, 99) - _p(before, 99)
    print(
        f"\nlive latency ms: before p50 {statistics.median(before):.2f} p99 {_p(before, 99):.2f};"
        f" outage p50 {statistics.median(outage):.2f} p99 {_p(outage, 99):.2f};"
        f" spooled {spooled:.0f} of {len(sent)}"
    )
    assert spooled > 0, "the outage did not make the sidecar spool"
    # Live requests did not wait on the broker: bounds on a hang (its 2 s send timeout), not
    # a latency budget, which belongs to a benchmark (a loaded machine adds its own delays).
    assert p50_added < kafka.send_timeout_s * 1000, p50_added
    assert p99_added < kafka.send_timeout_s * 1000, p99_added

    # Every exchange reaches the results exactly once.
    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    source = f"kafka://{kafka_broker.bootstrap}/{kafka.topic}"
    run_replay_worker(source, live_model, db_url, "outage-run", until_idle_s=3.0)
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            records = conn.execute(
                sa.text(
                    "select e.record from exchange e join run_exchange r"
                    " on r.exchange_id = e.exchange_id where r.run_id = 'outage-run'"
                )
            ).all()
            outcomes = conn.execute(
                sa.text(
                    "select exchange_id, count(*) from replay_outcome"
                    " where run_id = 'outage-run' group by exchange_id"
                )
            ).all()
    finally:
        engine.dispose()
    import orjson

    ids: list[str] = []
    for (record,) in records:
        data = orjson.loads(record) if isinstance(record, (str, bytes)) else record
        ids.extend(h["value"] for h in data["request"]["headers"] if h["name"] == "x-test-id")
    assert sorted(ids) == sorted(sent)  # every exchange, none twice
    assert len(outcomes) == len(sent)
    assert all(count == 1 for _, count in outcomes)
