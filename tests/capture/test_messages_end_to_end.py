"""The Anthropic Messages API end to end (issue 32 item 2): the real ``anthropic`` SDK
through the capture sidecar and through the Envoy front end to a mock-llm live model,
captured, then replayed (as Messages, and translated to chat completions) to a mock-llm
candidate, compared and gated by ``evaluate``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from typer.testing import CliRunner

from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.config import CaptureSettings
from shadoweval.records import Exchange, ExchangeOutcome, FinishReason
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency, create_app
from shadoweval.tables import RecordedRow
from tests.capture.envoy_harness import FrontEndThread
from tests.fixtures.messages_api.mock_recording import anthropic_tools, messages_rows
from tests.live.harness import SidecarThread

LIVE = "claude-live"
KEY = "sk-ant-api03-CANARYmessages0123456789"


def mock(rows: tuple[RecordedRow, RecordedRow], model: str) -> Any:
    return create_app(
        list(rows), latency=FixedLatency(ttft_ms=20, itl_ms=2), faults=FaultConfig(),
        seed=0, model_name=model, time_scale=0.5,
    )  # fmt: skip


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> tuple[RecordedRow, RecordedRow]:
    return messages_rows(shared_data)


def raw_answer(url: str, body: dict[str, Any]) -> bytes:
    """A plain request with Anthropic's own credential headers."""
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{url}/v1/messages", json=body, headers=headers, timeout=30).content


def direct_bytes(rows: tuple[RecordedRow, RecordedRow], body: dict[str, Any]) -> bytes:
    """What a fresh live mock answers a first request with, without any proxy."""
    transport = httpx.ASGITransport(app=mock(rows, LIVE))

    async def ask() -> bytes:
        async with httpx.AsyncClient(transport=transport, base_url="http://mock") as client:
            return (await client.post("/v1/messages", json=body)).content

    return asyncio.run(ask())


def traffic(url: str, rows: tuple[RecordedRow, RecordedRow]) -> None:
    """A streamed text answer, a non-streamed and a streamed tool-use answer (the SDK)."""
    text_row, tool_row = rows
    client = anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)
    try:
        messages: Any = text_row.messages
        with client.messages.stream(model=LIVE, max_tokens=512, messages=messages) as stream:
            final = stream.get_final_message()
        assert final.content[0].type == "text"
        assert final.content[0].text == text_row.output_text
        assert final.stop_reason == "end_turn"
        tools: Any = anthropic_tools(tool_row)
        tool_messages: Any = tool_row.messages
        message = client.messages.create(
            model=LIVE, max_tokens=512, messages=tool_messages, tools=tools
        )
        assert [b.name for b in message.content if b.type == "tool_use"] == [
            c.name for c in tool_row.tool_calls
        ]
        with client.messages.stream(
            model=LIVE, max_tokens=512, messages=tool_messages, tools=tools
        ) as stream:
            streamed = stream.get_final_message()
        assert streamed.content == message.content
        assert streamed.stop_reason == "tool_use"
    finally:
        client.close()


def exchanges(directory: Path) -> list[Exchange]:
    out = [e.exchange for e in read_capture_log(directory) if e.exchange is not None]
    return sorted(out, key=lambda e: e.captured_at)


def check_captured(captured: list[Exchange], rows: tuple[RecordedRow, RecordedRow]) -> None:
    assert len(captured) == 3
    text, plain_tools, streamed_tools = captured
    for ex in captured:
        assert ex.route == "/v1/messages"
        assert ex.outcome is ExchangeOutcome.DONE
        assert ex.response is not None
        assert ex.response.usage.prompt_tokens
        assert ex.response.usage.completion_tokens
        assert ex.response.model == LIVE
        # this SDK sends its api_key as a Bearer token; Anthropic's own header is checked
        # on the raw request below
        assert "authorization" in ex.redaction.headers_removed
        assert KEY not in ex.model_dump_json()
    assert text.response is not None
    assert text.response.text == rows[0].output_text
    assert text.response.finish_reason is FinishReason.STOP
    assert text.timings.ttft_ms is not None
    for ex in (plain_tools, streamed_tools):
        assert ex.response is not None
        assert ex.response.finish_reason is FinishReason.TOOL_CALLS
        assert [(c.name, json.loads(c.arguments)) for c in ex.response.tool_calls] == [
            (c.name, json.loads(c.arguments)) for c in rows[1].tool_calls
        ]


@pytest.fixture(scope="module")
def captured(
    rows: tuple[RecordedRow, RecordedRow], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Capture logs of the same SDK traffic through the sidecar and through Envoy."""
    root = tmp_path_factory.mktemp("messages")
    body = {"model": LIVE, "max_tokens": 512, "messages": rows[0].messages, "stream": True}
    direct = direct_bytes(rows, body)
    out = {}
    for name, harness in (("sidecar", SidecarThread), ("envoy", FrontEndThread)):
        with BackgroundServer(mock(rows, LIVE)) as live:
            settings = CaptureSettings(
                upstream_url=live.url, sinks=("file",), live_model={"name": LIVE},
                file_sink_directory=str(root / name),
            )  # fmt: skip
            with harness(settings, builder_mode="inline") as proxy:
                # the first request: byte for byte what the live model sends directly
                assert raw_answer(proxy.url, body) == direct
                traffic(proxy.url, rows)
        out[name] = root / name
    return out


def test_the_sdk_through_sidecar_and_envoy_is_captured(
    captured: dict[str, Path], rows: tuple[RecordedRow, RecordedRow]
) -> None:
    for directory in captured.values():
        all_exchanges = exchanges(directory)
        assert len(all_exchanges) == 4  # the raw request, then the SDK's three
        assert "x-api-key" in all_exchanges[0].redaction.headers_removed
        assert KEY not in all_exchanges[0].model_dump_json()
        check_captured(all_exchanges[1:], rows)


class PathRecorder:
    """ASGI wrapper that keeps the path of every request the candidate receives."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


@pytest.mark.parametrize("translate", [False, True])
def test_replayed_compared_and_gated(
    captured: dict[str, Path], rows: tuple[RecordedRow, RecordedRow], tmp_path: Path,
    translate: bool,
) -> None:  # fmt: skip
    report = tmp_path / "report.json"
    extra = ["--candidate-translate", "/v1/messages=/v1/chat/completions"] if translate else []
    recorder = PathRecorder(mock(rows, "candidate-v2"))
    with BackgroundServer(recorder) as candidate:
        result = CliRunner().invoke(
            app,
            [
                "evaluate", "--capture-log", str(captured["envoy"]),
                "--candidate-url", candidate.url, *extra,
                "--database-url", f"sqlite:///{tmp_path / 'r.db'}", "--encoder", "hashing",
                "--no-progress", "--report", str(report), "--json",
            ],
        )  # fmt: skip
    assert result.exit_code in (0, 1, 2), result.output
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["verdict"]["decision"] in ("promote", "hold", "rollback")
    by_route = data["coverage"]["by_route"]
    assert by_route["/v1/messages"]["captured"] == 4
    assert by_route["/v1/messages"]["paired"] == 4
    assert by_route["/v1/messages"]["evaluated"] is True
    assert data["replay"]["errors"] == {}
    assert KEY not in result.output
    # the replay client read the candidate's answers by the route it sent them to
    sent_to = {p for p in recorder.paths if p != "/v1/models"}
    assert sent_to == {"/v1/chat/completions" if translate else "/v1/messages"}
    # the verdict names the translation as a party to any difference, never silently
    notes = [r for r in data["verdict"]["reasons"] if "API translation" in r]
    if translate:
        assert data["replay"]["translated"] == {"/v1/chat/completions": 4}
        assert len(notes) == 1, data["verdict"]["reasons"]
        assert "4 as /v1/chat/completions" in notes[0]
    else:
        assert data["replay"]["translated"] == {}
        assert notes == []
