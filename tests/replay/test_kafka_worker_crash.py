"""``shadow-eval replay run --source kafka://…`` killed mid-run and restarted (DESIGN §6).

The worker runs as a real subprocess against a slow mock-llm candidate (and a sampled
baseline replica); it is SIGKILLed after some outcomes are stored and before the end,
then started again with the same ``--run-id``. At-least-once delivery plus idempotent
writes must leave exactly one outcome per exchange and sampled target: nothing missing,
nothing twice, and nothing already stored sent again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from shadoweval.cli import app
from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.process_death import die_with_parent_argv
from shadoweval.records import ReplayTarget
from shadoweval.replay.runner import in_sample
from shadoweval.simulation.mock_llm import FixedLatency
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker, free_port
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_kafka_worker import (
    CANDIDATE,
    TOPIC,
    committed_offsets,
    line,
    produce,
)
from tests.replay.test_replay_runner import exchanges_for

pytestmark = pytest.mark.kafka

SHADOW_EVAL = str(Path(sys.executable).parent / "shadow-eval")
REPEAT_SHARE = 0.3
EXCHANGES = 40


def count_outcomes(db_url: str, run_id: str) -> Counter[tuple[str, ReplayTarget]]:
    db = Database(db_url)
    try:
        return Counter((o.exchange_id, o.target) for o in Repository(db).load_outcomes(run_id))
    finally:
        db.dispose()


def run_rows(db_url: str, run_id: str) -> int:
    """Outcome rows of the run, counted in SQL (not deduplicated by anything)."""
    import sqlalchemy as sa

    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text("select count(*) from replay_outcome where run_id = :r"),
                    {"r": run_id},
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.slow
def test_killed_worker_restarts_without_losing_or_duplicating_outcomes(
    kafka_broker: TansuBroker,
    llama3_rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
    serve: ServeFn,
    tmp_path: Path,
) -> None:
    exchanges = exchanges_for(llama3_rows[:EXCHANGES])
    ends = asyncio.run(produce(kafka_broker.bootstrap, [line(e) for e in exchanges]))
    sampled = {e.exchange_id for e in exchanges if in_sample(e.exchange_id, REPEAT_SHARE)}
    expected = EXCHANGES + len(sampled)
    db_url = f"sqlite:///{tmp_path / 'results.db'}"
    run_id = "crash-run"
    slow = mock_app(llama31_rows, latency=FixedLatency(ttft_ms=120, itl_ms=0), model_name="m")
    with serve(slow) as server:
        args = [
            SHADOW_EVAL, "replay", "run",
            "--source", f"kafka://{kafka_broker.bootstrap}/{TOPIC}",
            "--candidate-url", server.url, "--candidate-model", CANDIDATE.name,
            "--baseline-repeat-url", server.url,
            "--baseline-repeat-share", str(REPEAT_SHARE),
            "--run-id", run_id, "--database-url", db_url,
            "--concurrency", "2", "--warmup", "0", "--timeout", "10",
            "--until-idle", "1.5", "--session-timeout", "1.5", "--no-progress",
        ]  # fmt: skip
        metrics_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_")}
        env["SHADOWEVAL_WORKER__COMMIT_INTERVAL_S"] = "0.3"
        log = (tmp_path / "first.log").open("wb")
        first = subprocess.Popen(
            die_with_parent_argv([*args, "--metrics-port", str(metrics_port)]),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            deadline = time.monotonic() + 60
            stored = 0
            while time.monotonic() < deadline and first.poll() is None:
                if (tmp_path / "results.db").exists():
                    try:
                        stored = run_rows(db_url, run_id)
                    except Exception:  # the schema is being created
                        stored = 0
                if stored >= 10:
                    break
                time.sleep(0.05)
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert 10 <= stored < expected
            # The running worker serves its metrics and says it is ready.
            base = f"http://127.0.0.1:{metrics_port}"
            assert httpx.get(f"{base}/readyz").status_code == 200
            scraped = httpx.get(f"{base}/metrics").text
            assert 'shadoweval_replay_replayed_total{outcome="ok",target="candidate"}' in scraped
            assert "shadoweval_replay_consumer_lag{" in scraped
            first.send_signal(signal.SIGKILL)
            assert first.wait(10) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
            log.close()

        persisted_at_kill = run_rows(db_url, run_id)
        assert persisted_at_kill < expected
        requests_before_restart = slow.chat_requests
        second = subprocess.run(args, capture_output=True, env=env, timeout=120)
        assert second.returncode == 0, second.stderr.decode()
        report = json.loads(second.stdout)

    # Exactly one outcome per exchange and sampled target: none missing, none twice.
    assert run_rows(db_url, run_id) == expected
    counts = count_outcomes(db_url, run_id)
    assert set(counts.values()) == {1}
    assert {i for i, t in counts if t is ReplayTarget.CANDIDATE} == {
        e.exchange_id for e in exchanges
    }
    assert {i for i, t in counts if t is ReplayTarget.BASELINE_REPEAT} == sampled
    # What was stored before the kill was not sent again; everything else was.
    assert sum(report["sent"].values()) == expected - persisted_at_kill
    assert slow.chat_requests - requests_before_restart == expected - persisted_at_kill
    assert report["errors"] == {}
    assert (
        asyncio.run(committed_offsets(kafka_broker.bootstrap, f"shadoweval-replay.{run_id}"))
        == ends
    )


def test_bad_kafka_url_exits_3_naming_field_and_value(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "replay", "run", "--source", "kafka://broker-without-port/topic",
            "--candidate-url", "http://127.0.0.1:9", "--candidate-model", "m",
            "--database-url", f"sqlite:///{tmp_path / 'r.db'}",
        ],
    )  # fmt: skip
    assert result.exit_code == EXIT_ERROR
    message = " ".join(result.stderr.split())
    assert "source=" in message
    assert "kafka://broker-without-port/topic" in message
    assert "HOST:PORT" in message
    assert not (tmp_path / "r.db").exists()  # failed before touching the database
