"""The OpenAI Responses API end to end: the real ``openai`` SDK through the capture sidecar
and through the Envoy front end to mock-llm, then replayed, compared and gated.

mock-llm (recorded AlpacaEval text and BFCL tool-call rows, plus a second turn of the text
row) is the live model. The same SDK calls — ``responses.create(stream=True)``, a
non-streamed ``responses.create``, a tool call through ``responses.stream(...)`` and a
two-turn conversation chained by ``previous_response_id`` — go directly to mock-llm, through
the sidecar and through Envoy: the SDK's results must be equal (minus the ids and times
mock-llm derives from the attempt and the clock), the bytes the client received must be
the raw body the capture kept, and the capture must hold the text, tool calls, usage and
response id. ``evaluate`` then replays the sidecar's capture log to a mock-llm candidate
(the second turn with its conversation rebuilt from the first, ``store`` false) and gates
it, with ``/v1/responses`` evaluated, nothing skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from typer.testing import CliRunner

from shadoweval.capture_log import read_capture_log
from shadoweval.cli import app
from shadoweval.config import CaptureSettings
from shadoweval.records import (
    Decision,
    Exchange,
    ExchangeOutcome,
    FinishReason,
    UsageSource,
    Verdict,
)
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency, create_app
from shadoweval.tables import RecordedRow, load_recorded_rows
from tests.capture.envoy_harness import FrontEndThread
from tests.capture.test_proxy_openai_client import RecordingTransport
from tests.capture.upstreams import ServerThread
from tests.live.harness import SidecarThread

MODEL = "gpt-4o-mock"
AGAIN = "Say it again, in fewer words."
SHORTER = "Shorter: the same, in fewer words."
_VOLATILE = {"id", "created_at", "previous_response_id", "item_id"}


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> list[RecordedRow]:
    alpaca = load_recorded_rows(
        shared_data / "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json",
        preset="alpaca_eval",
    ).rows
    bfcl = load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl").rows
    text = next(r for r in alpaca if 20 <= len((r.output_text or "").split()) <= 60)
    tools = next(r for r in bfcl if len(r.tool_calls) >= 2)
    follow_up = [
        *text.messages,
        {"role": "assistant", "content": text.output_text},
        {"role": "user", "content": AGAIN},
    ]
    second = replace(
        text,
        key=text.key + "-again",
        messages=follow_up,
        output_text=SHORTER,
        completion_tokens=None,
    )
    return [text, tools, second]


def _mock(rows: list[RecordedRow], name: str) -> Any:
    return create_app(
        rows,
        latency=FixedLatency(ttft_ms=20, itl_ms=2),
        faults=FaultConfig(),
        seed=0,
        model_name=name,
        time_scale=0.5,
    )


@pytest.fixture(scope="module")
def mock_url(rows: list[RecordedRow]) -> Iterator[str]:
    with ServerThread(_mock(rows, MODEL)) as server:
        yield server.url


def _stable(value: Any) -> Any:
    """``value`` without the ids and times mock-llm derives from the attempt and clock."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _flat_tools(row: RecordedRow) -> Any:
    """A chat row's tools as flat Responses function tools."""
    return [{"type": "function", **tool["function"]} for tool in row.tools or []]


def _traffic(client: openai.OpenAI, rows: list[RecordedRow]) -> list[Any]:
    """The five calls; returns what the SDK gave for each (ids left out)."""
    text_row, tool_row, second_row = rows
    messages: Any = text_row.messages
    results: list[Any] = []
    events = list(client.responses.create(model=MODEL, input=messages, stream=True))
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output_text == text_row.output_text
    results.append([_stable(e.model_dump()) for e in events])
    plain = client.responses.create(model=MODEL, input=messages)
    assert plain.output_text == text_row.output_text
    assert plain.usage is not None
    results.append(_stable(plain.model_dump()))
    tool_input: Any = tool_row.messages
    with client.responses.stream(
        model=MODEL, input=tool_input, tools=_flat_tools(tool_row)
    ) as stream:
        for _ in stream:
            pass
        called = stream.get_final_response()
    calls = [item for item in called.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [
        (c.name, c.arguments) for c in tool_row.tool_calls
    ]
    results.append(_stable(called.model_dump()))
    first = client.responses.create(model=MODEL, input=messages)
    again = client.responses.create(model=MODEL, input=AGAIN, previous_response_id=first.id)
    assert again.output_text == second_row.output_text
    results.append(_stable(again.model_dump()))
    return results


def _exchanges(directory: Path) -> list[Exchange]:
    out = []
    for entry in read_capture_log(directory):
        assert entry.exchange is not None, entry.error
        out.append(entry.exchange)
    return sorted(out, key=lambda e: e.exchange_id)


def _check_captured(
    exchanges: list[Exchange], rows: list[RecordedRow], received: list[bytes]
) -> None:
    text_row, tool_row, second_row = rows
    assert [e.route for e in exchanges] == ["/v1/responses"] * 5
    for exchange, body in zip(exchanges, received, strict=True):
        response = exchange.response
        assert response is not None
        assert exchange.outcome is ExchangeOutcome.DONE, response.error_message
        assert response.body is not None
        assert response.body.encode() == body  # what the client got, byte for byte
        assert response.response_id is not None
        assert response.response_id.startswith("resp_")
        assert response.usage.usage_source is UsageSource.REPORTED
        assert response.usage.completion_tokens
    streamed, plain, tools, first, second = (e.response for e in exchanges)
    assert None not in (streamed, plain, tools, first, second)
    assert streamed is not None
    assert plain is not None
    assert tools is not None
    assert first is not None
    assert second is not None
    assert (streamed.streamed, plain.streamed, tools.streamed) == (True, False, True)
    assert streamed.text == plain.text == first.text == text_row.output_text
    assert streamed.finish_reason is FinishReason.STOP
    assert exchanges[0].timings.ttft_ms is not None
    assert tools.finish_reason is FinishReason.TOOL_CALLS
    assert [(c.name, c.arguments) for c in tools.tool_calls] == [
        (c.name, c.arguments) for c in tool_row.tool_calls
    ]
    assert second.text == second_row.output_text
    assert (exchanges[4].request.json_body() or {})["previous_response_id"] == first.response_id


def _run(base_url: str, rows: list[RecordedRow]) -> tuple[list[Any], list[bytes]]:
    recorder = RecordingTransport()
    client = openai.OpenAI(
        base_url=f"{base_url}/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx2.Client(transport=recorder, timeout=30),
    )
    try:
        results = _traffic(client, rows)
    finally:
        client.close()
    return results, [bytes(b) for b in recorder.bodies]


def test_responses_api_is_captured_by_sidecar_and_envoy_then_replayed_and_gated(
    mock_url: str, rows: list[RecordedRow], tmp_path: Path
) -> None:
    sidecar_dir, envoy_dir = tmp_path / "sidecar", tmp_path / "envoy"
    base = {
        "upstream_url": mock_url,
        "sinks": ("file",),
        "live_model": {"name": MODEL},
        "keep_raw_body": True,
    }
    direct, _ = _run(mock_url, rows)
    with SidecarThread(
        CaptureSettings(**base, file_sink_directory=str(sidecar_dir)), builder_mode="inline"
    ) as sidecar:
        via_sidecar, sidecar_bytes = _run(sidecar.url, rows)
    with FrontEndThread(
        CaptureSettings(**base, file_sink_directory=str(envoy_dir)), builder_mode="inline"
    ) as front:
        via_envoy, envoy_bytes = _run(front.url, rows)
    assert via_sidecar == direct
    assert via_envoy == direct
    by_sidecar, by_envoy = _exchanges(sidecar_dir), _exchanges(envoy_dir)
    _check_captured(by_sidecar, rows, sidecar_bytes)
    _check_captured(by_envoy, rows, envoy_bytes)
    for s, e in zip(by_sidecar, by_envoy, strict=True):
        assert s.response is not None
        assert e.response is not None
        assert (e.response.text, e.response.tool_calls, e.response.usage) == (
            s.response.text,
            s.response.tool_calls,
            s.response.usage,
        )

    report = tmp_path / "report.json"
    with ServerThread(_mock(rows, "candidate-v2")) as candidate:
        result = CliRunner().invoke(
            app,
            [
                "evaluate",
                "--capture-log",
                str(sidecar_dir),
                "--candidate-url",
                candidate.url,
                "--database-url",
                f"sqlite:///{tmp_path / 'r.db'}",
                "--encoder",
                "hashing",
                "--no-progress",
                "--report",
                str(report),
                "--json",
            ],
        )
    assert report.exists(), result.output
    data = json.loads(report.read_text(encoding="utf-8"))
    route = data["coverage"]["by_route"]["/v1/responses"]
    assert route | {"skip_reasons": {}} == {
        "captured": 5,
        "replayed": 5,
        "skipped": 0,
        "paired": 5,
        "skip_reasons": {},
        "evaluated": True,
    }, route
    assert data["replay"]["errors"] == {}, data["replay"]
    assert data["replay"]["sent"] == {"candidate": 5}
    verdict = Verdict.model_validate(data["verdict"])  # gated (5 pairs: too few to promote)
    assert verdict.decision in set(Decision)
    assert not any("not replayed" in reason for reason in verdict.reasons), verdict.reasons
