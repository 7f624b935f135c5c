"""The sidecar's Kafka sink on a fresh broker: the topic is created, exchanges arrive keyed
by the session-key hash, and the admin endpoints report the sink."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import orjson
import pytest

from shadoweval.bus import BusConsumer
from shadoweval.config import CaptureSettings, KafkaSettings, SpoolSettings
from shadoweval.records import Exchange
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.live.harness import SidecarThread


async def _read(bootstrap: str, topic: str, want: int) -> list[tuple[bytes | None, bytes]]:
    consumer = BusConsumer(bootstrap, topic, "reader")
    await consumer.start()
    out: list[tuple[bytes | None, bytes]] = []
    try:
        deadline = time.monotonic() + 30
        while len(out) < want and time.monotonic() < deadline:
            for record in await consumer.getmany(timeout_ms=500):
                assert record.value is not None
                out.append((record.key, record.value))
    finally:
        await consumer.stop()
    return out


@pytest.mark.kafka
def test_sidecar_creates_topic_and_keys_by_session(
    tmp_path: Path,
    kafka_broker: TansuBroker,
    live_model: str,
    alpaca_rows: list[RecordedRow],
) -> None:
    kafka = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap, partitions=3)
    capture = CaptureSettings(
        upstream_url=live_model,
        sinks=("kafka",),
        builder="thread",
        spool=SpoolSettings(directory=str(tmp_path / "spool")),
        task_type_header="x-task-type",
    )
    with SidecarThread(capture, kafka) as sidecar:
        with httpx.Client(base_url=sidecar.url, timeout=30) as client:
            for i, row in enumerate(alpaca_rows[:6]):
                resp = client.post(
                    "/v1/chat/completions",
                    json={"model": "mock-live", "messages": row.messages},
                    headers={"x-session-id": f"conversation-{i % 2}", "x-task-type": "chat"},
                )
                assert resp.status_code == 200
        deadline = time.monotonic() + 60
        while (
            sidecar.metric("shadoweval_capture_produced_total", sink="kafka") < 6
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        ready = httpx.get(sidecar.admin_url + "/readyz").json()
    assert ready["status"] == "ready"
    assert ready["checks"]["sink_kafka"]["ok"] is True
    records = asyncio.run(_read(kafka_broker.bootstrap, kafka.topic, 6))
    assert len(records) == 6
    exchanges = [Exchange.model_validate(orjson.loads(value)) for _, value in records]
    assert {e.task_type for e in exchanges} == {"chat"}
    # The key is the salted session-key hash: two conversations, two keys, never the value.
    keys = {key for key, _ in records}
    assert len(keys) == 2
    assert all(key is not None and b"conversation" not in key for key in keys)
    assert {e.session_key_hash.encode() for e in exchanges if e.session_key_hash} == keys
    for exchange in exchanges:
        assert all(h.name != "x-session-id" for h in exchange.request.headers)
