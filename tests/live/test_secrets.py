"""Acceptance: a canary API key in headers, a canary e-mail in messages, a streamed
response and tool-call arguments, a canary secret under secret-named JSON keys (a top-level
``api_key`` field, ``metadata.db.password``, ``smtp_password`` in the answer's tool-call
arguments) and a canary e-mail in a tool's description reach none of the sinks — Kafka,
the spool, the capture log, the database (after a replay worker stored the run) — nor the
metrics."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from shadoweval.bus import BusConsumer, ensure_topics
from shadoweval.config import CaptureSettings, KafkaSettings, SpoolSettings
from tests.kafka_broker import TansuBroker
from tests.live.conftest import (
    CANARY_EMAIL,
    CANARY_FIELD,
    CANARY_KEY,
    CANARY_TOOL_EMAIL,
    WEATHER_TOOL,
    canary_rows,
)
from tests.live.harness import SidecarThread, all_bytes_under, database_text, run_replay_worker

SECRET_HEADERS = {
    "authorization": f"Bearer {CANARY_KEY}",
    "x-api-key": CANARY_KEY,
    "api-key": CANARY_KEY,
    "cookie": f"session={CANARY_KEY}",
}


CANARY_TOOL = {
    **WEATHER_TOOL,
    "function": {
        **WEATHER_TOOL["function"],  # type: ignore[dict-item]
        "description": f"Send an e-mail. Questions about this tool: {CANARY_TOOL_EMAIL}.",
    },
}
SECRET_FIELDS = {"api_key": CANARY_FIELD, "metadata": {"db": {"password": CANARY_FIELD}}}


def _requests() -> list[dict[str, object]]:
    text_row, tool_row = canary_rows()
    return [
        {"messages": text_row.messages, "stream": True, **SECRET_FIELDS},
        {"messages": text_row.messages, "stream": False},
        {"messages": tool_row.messages, "tools": [CANARY_TOOL], "stream": True},
        {"messages": tool_row.messages, "tools": [CANARY_TOOL], "stream": False, **SECRET_FIELDS},
    ]


def _send_all(url: str, *, tag: str) -> list[str]:
    bodies: list[str] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for i, body in enumerate(_requests()):
            resp = client.post(
                f"/v1/chat/completions?api_key={CANARY_KEY}",
                json={
                    "model": "mock-live",
                    **body,
                    **({"stream_options": {"include_usage": True}} if body["stream"] else {}),
                },
                headers={**SECRET_HEADERS, "x-test-id": f"{tag}-{i}"},
            )
            assert resp.status_code == 200, resp.text
            bodies.append(resp.text)
    return bodies


async def _consume_all(bootstrap: str, topic: str) -> bytes:
    consumer = BusConsumer(bootstrap, topic, "canary-reader")
    await consumer.start()
    out = bytearray()
    try:
        idle = 0
        while idle < 6:
            records = await consumer.getmany(timeout_ms=500, max_records=500)
            idle = 0 if records else idle + 1
            for record in records:
                out += (record.key or b"") + (record.value or b"")
                for name, value in record.headers:
                    out += name.encode() + value
    finally:
        await consumer.stop()
    return bytes(out)


def _assert_clean(where: str, data: bytes | str) -> None:
    blob = data.encode() if isinstance(data, str) else data
    for canary in (CANARY_KEY, CANARY_EMAIL, CANARY_FIELD, CANARY_TOOL_EMAIL):
        assert canary.encode() not in blob, f"canary {canary!r} found in {where}"
        assert canary.encode().hex().encode() not in blob, f"hex canary in {where}"


@pytest.mark.kafka
def test_canary_secrets_reach_no_sink(
    tmp_path: Path, kafka_broker: TansuBroker, live_model: str
) -> None:
    kafka = KafkaSettings(
        bootstrap_servers=kafka_broker.bootstrap, send_timeout_s=1.0, request_timeout_ms=1000
    )
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [kafka.topic, kafka.dead_letter_topic]))
    capture_dir, spool_dir = tmp_path / "capture", tmp_path / "spool"
    capture = CaptureSettings(
        upstream_url=live_model,
        sinks=("kafka", "file"),
        file_sink_directory=str(capture_dir),
        keep_raw_body=True,  # the strictest case: raw bodies are kept where safe
        builder="thread",
        spool=SpoolSettings(directory=str(spool_dir), retry_interval_s=0.5),
    )
    with SidecarThread(capture, kafka) as sidecar:
        bodies = _send_all(sidecar.url, tag="live")
        # The client received the canary unchanged: redaction is for copies only (in a
        # stream the address is split across events, so look at the plain answers).
        assert CANARY_EMAIL in bodies[1]
        assert CANARY_EMAIL in bodies[3]
        assert CANARY_FIELD in bodies[3]
        # Broker down: the next exchanges go to the disk spool; search it while they sit there.
        kafka_broker.pause()
        _send_all(sidecar.url, tag="spooled")
        deadline = time.monotonic() + 30
        while (
            sidecar.metric("shadoweval_capture_spool_records") < 4 and time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert sidecar.metric("shadoweval_capture_spool_records") >= 4
        _assert_clean("the disk spool", all_bytes_under(spool_dir))
        kafka_broker.resume()
        deadline = time.monotonic() + 60
        while (
            sidecar.metric("shadoweval_capture_spool_records") > 0 and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        metrics_text = httpx.get(sidecar.admin_url + "/metrics").text
    _assert_clean("the metrics", metrics_text)
    assert sidecar.metric("shadoweval_capture_redactions_total", rule="email") >= 8
    _assert_clean("the capture log", all_bytes_under(capture_dir))
    kafka_bytes = asyncio.run(_consume_all(kafka_broker.bootstrap, kafka.topic))
    assert b"x-test-id" in kafka_bytes
    _assert_clean("Kafka", kafka_bytes)
    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    source = f"kafka://{kafka_broker.bootstrap}/{kafka.topic}"
    run_replay_worker(source, live_model, db_url, "canary-run", until_idle_s=2.0)
    counts, text = database_text(db_url)
    assert counts["exchange"] == 8
    assert counts["replay_outcome"] == 8
    _assert_clean("the database", text)
