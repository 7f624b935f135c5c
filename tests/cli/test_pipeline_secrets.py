"""A canary secret planted in a capture log reaches no sink: not the candidate, not the
database, not the report, not the rejected-record store, not the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from typer.testing import CliRunner

from shadoweval.capture.table_import import import_table
from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.records import HeaderPair
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, TableLatency, create_app
from shadoweval.simulation.workload import DEMO_MAPPING, WorkloadSpec, write_workload
from shadoweval.tables import TableMapping, load_recorded_rows

CANARY = "sk-live-CANARY0123456789abcdef"
COOKIE = "CANARYCOOKIE42"


class HeaderRecorder:
    """ASGI wrapper that keeps every request header the candidate receives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.seen.extend(scope["headers"])
        await self.app(scope, receive, send)


def plant_secrets(capture: Path, out: Path) -> None:
    """Copy the log, adding credentials to every exchange and a malformed secret line."""
    lines = []
    for entry in read_capture_log(capture):
        assert entry.exchange is not None
        ex = entry.exchange
        headers = (
            *ex.request.headers,
            HeaderPair(name="authorization", value=f"Bearer {CANARY}"),
            HeaderPair(name="cookie", value=f"session={COOKIE}"),
            # Anthropic's credential header (the Messages API)
            HeaderPair(name="x-api-key", value=CANARY),
        )
        planted = ex.model_copy(
            update={"request": ex.request.model_copy(update={"headers": headers})}
        )
        lines.append(orjson.dumps(planted.model_dump(mode="json")).decode())
    lines.append('{"broken": true, "headers": {"Authorization": "Bearer ' + CANARY + '"')
    out.mkdir()
    (out / "exchanges-0.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_canary_secret_reaches_no_sink(tmp_path: Path) -> None:
    mapping = TableMapping(**DEMO_MAPPING)
    baseline, _ = write_workload(tmp_path / "tables", WorkloadSpec(per_task_type=5, seed=2))
    import_table(baseline, out=tmp_path / "clean", mapping=mapping)
    plant_secrets(tmp_path / "clean", tmp_path / "capture")
    rows = load_recorded_rows(baseline, mapping).rows
    recorder = HeaderRecorder(
        create_app(rows, latency=TableLatency(), faults=FaultConfig(), seed=1,
                   model_name="cand", time_scale=0.0)
    )  # fmt: skip
    db_path = tmp_path / "results.db"
    report = tmp_path / "report.json"
    with BackgroundServer(recorder) as server:
        result = CliRunner().invoke(
            app,
            [
                "evaluate", "--capture-log", str(tmp_path / "capture"),
                "--candidate-url", server.url.replace("http://", f"http://user:{CANARY}@"),
                "--database-url", f"sqlite:///{db_path}", "--report", str(report),
                "--encoder", "hashing", "--no-progress", "--json",
            ],
        )  # fmt: skip
    assert result.exit_code in (0, 1, 2), result.output
    # the candidate received none of the captured credentials
    assert recorder.seen
    received = b"\n".join(name + b": " + value for name, value in recorder.seen)
    assert CANARY.encode() not in received
    assert COOKIE.encode() not in received
    assert b"x-shadow-eval" in received
    # no table of the database, the report, nor the output holds them
    engine = sa.create_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        tables = [
            r[0] for r in conn.execute(sa.text("select name from sqlite_master where type='table'"))
        ]
        dump = []
        for table in tables:
            dump += [
                json.dumps([str(c) for c in row])
                for row in conn.execute(sa.text(f'select * from "{table}"'))
            ]
    engine.dispose()
    everything = "\n".join(dump) + report.read_text(encoding="utf-8") + result.output
    assert CANARY not in everything
    assert COOKIE not in everything
    # and the redaction is visible: names removed, the malformed line kept (scrubbed)
    engine = sa.create_engine(f"sqlite:///{db_path}")
    with engine.connect() as conn:
        records = [json.loads(r[0]) for r in conn.execute(sa.text("select record from exchange"))]
        raws = [r[0] for r in conn.execute(sa.text("select raw from rejected_record"))]
    engine.dispose()
    assert len(records) == 20
    assert {tuple(r["redaction"]["headers_removed"]) for r in records} == {
        ("authorization", "cookie", "x-api-key")
    }
    assert len(raws) == 1
    assert "[REDACTED:sensitive_header]" in raws[0]
