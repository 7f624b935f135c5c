"""Acceptance (issue 30 item 1): the candidate and the baseline replica answer with canary
secrets — an e-mail address and an ``sk-live-`` key, in the answer text, in streamed and
non-streamed answers and in tool-call arguments — and none of them reaches a sink: the
database (SQLite, written by the Kafka replay worker; PostgreSQL, written by the
capture-log replay runner), the dead-letter topic, the export, the workers' logs and the
replay worker's metrics. The count per sink is printed in the assertion message."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shadoweval.bus import ensure_topics
from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings, KafkaSettings, SpoolSettings
from shadoweval.records import ToolCall
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm.app import create_app
from shadoweval.simulation.mock_llm.faults import FaultConfig
from shadoweval.simulation.mock_llm.latency import NoLatency
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker, free_port
from tests.live.harness import SidecarThread, all_bytes_under, database_text, run_replay_scraped
from tests.live.test_secrets import _consume_all, _send_all

CANARIES = {
    "candidate e-mail": "canary.cand@example.com",
    "candidate key": "sk-live-CANARYcand0123456789abcdef",
    "replica e-mail": "canary.replica@example.com",
    "replica key": "sk-live-CANARYrepl0123456789abcdef",
}


def _answer_rows(capture_dir: Path, side: str) -> list[RecordedRow]:
    """Rows answering every captured (redacted) prompt with ``side``'s canaries: the text
    names the e-mail and the key; a request with tools gets a tool call carrying both."""
    email, key = CANARIES[f"{side} e-mail"], CANARIES[f"{side} key"]
    rows: list[RecordedRow] = []
    for i, entry in enumerate(read_capture_log(capture_dir)):
        assert entry.exchange is not None
        body: dict[str, Any] = entry.exchange.request.json_body() or {}
        tools = body.get("tools")
        calls: tuple[ToolCall, ...] = ()
        if tools:
            args = json.dumps({"to": email, "body": f"use {key}"})
            calls = (ToolCall(index=0, id="call_1", name="send_email", arguments=args),)
        rows.append(
            RecordedRow(
                key=f"{side}-{i}",
                messages=body["messages"],
                tools=tools,
                output_text=None if tools else f"Write to {email}; the key is {key} .",
                tool_calls=calls,
                task_type="default",
                model=f"mock-{side}",
                latency_ms=None,
                ttft_ms=None,
                itl_ms=None,
                prompt_tokens=None,
                completion_tokens=None,
                location=f"{side}#{i}",
            )
        )
    return rows


def _server(rows: list[RecordedRow], side: str) -> BackgroundServer:
    app = create_app(
        rows, latency=NoLatency(), faults=FaultConfig(), seed=0, model_name=f"mock-{side}"
    )
    return BackgroundServer(app)


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "shadoweval.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{args[:2]} exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _counts(sinks: dict[str, bytes | str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for sink, data in sinks.items():
        blob = data.encode() if isinstance(data, str) else data
        out[sink] = {name: blob.count(c.encode()) for name, c in CANARIES.items()}
    return out


@pytest.mark.kafka
@pytest.mark.postgres
def test_candidate_and_replica_canaries_reach_no_sink(
    tmp_path: Path, kafka_broker: TansuBroker, live_model: str, pg_schema_url: str
) -> None:
    kafka = KafkaSettings(
        bootstrap_servers=kafka_broker.bootstrap, send_timeout_s=1.0, request_timeout_ms=1000
    )
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [kafka.topic, kafka.dead_letter_topic]))
    capture_dir = tmp_path / "capture"
    capture = CaptureSettings(
        upstream_url=live_model,
        sinks=("kafka", "file"),
        file_sink_directory=str(capture_dir),
        keep_raw_body=True,
        builder="thread",
        spool=SpoolSettings(directory=str(tmp_path / "spool")),
    )
    with SidecarThread(capture, kafka) as sidecar:
        _send_all(sidecar.url, tag="live")
    sqlite_url = f"sqlite:///{tmp_path / 'results.db'}"
    replica = ("--baseline-repeat-share", "1.0")
    with (
        _server(_answer_rows(capture_dir, "candidate"), "candidate") as cand,
        _server(_answer_rows(capture_dir, "replica"), "replica") as repl,
    ):
        source = f"kafka://{kafka_broker.bootstrap}/{kafka.topic}"
        kafka_log, metrics = run_replay_scraped(
            source,
            cand.url,
            sqlite_url,
            "canary-kafka",
            extra=("--baseline-repeat-url", repl.url, *replica),
            metrics_port=free_port(),
        )
        file_log, _ = run_replay_scraped(
            str(capture_dir),
            cand.url,
            pg_schema_url,
            "canary-file",
            extra=("--baseline-repeat-url", repl.url, *replica),
        )
    assert "shadoweval_replay" in metrics, metrics[:500]
    logs = kafka_log + file_log
    exported = tmp_path / "export"
    for url, run in ((sqlite_url, "canary-kafka"), (pg_schema_url, "canary-file")):
        logs += _cli("compare", "run", "--run", run, "--database-url", url, "--encoder", "hashing")
        out = exported / run
        args = ("--run", run, "--out", str(out), "--format", "jsonl", "--database-url", url)
        logs += _cli("export", *args)
    sinks: dict[str, bytes | str] = {}
    answered: dict[str, tuple[int, int]] = {}
    for name, url in (("SQLite", sqlite_url), ("PostgreSQL", pg_schema_url)):
        counts, text = database_text(url)
        # 4 exchanges × (candidate + replica), every one answered (the canaries were sent)
        assert counts["replay_outcome"] == 8, counts
        sinks[f"database ({name})"] = text
        outcomes = _outcome_text(url)
        answered[name] = (
            outcomes.count("[REDACTED:email]"),
            outcomes.count("[REDACTED:secret_key]"),
        )
    sinks["dead-letter topic"] = asyncio.run(
        _consume_all(kafka_broker.bootstrap, kafka.dead_letter_topic)
    )
    sinks["export"] = all_bytes_under(exported)
    sinks["logs"] = logs
    sinks["metrics"] = metrics
    per_sink = _counts(sinks)
    found = {sink: n for sink, n in per_sink.items() if any(n.values())}
    assert not found, f"canaries per sink: {per_sink}"
    print(f"canaries per sink: {per_sink}")
    # the canaries did come back, and were redacted in the store (e-mail, key)
    assert all(e >= 8 and k >= 8 for e, k in answered.values()), answered


def _outcome_text(url: str) -> str:
    """Every stored ``replay_outcome.record`` as JSON text."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            records = conn.execute(sa.text("SELECT record FROM replay_outcome")).scalars()
            return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records)
    finally:
        engine.dispose()
