"""The official ``openai`` client through the capture sidecar: it works unchanged, and what
is captured equals what the client received (text, tool calls, usage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings
from shadoweval.records import Exchange, ExchangeOutcome
from shadoweval.tables import RecordedRow
from tests.live.harness import SidecarThread


def _by_test_id(directory: Path) -> dict[str, Exchange]:
    found: dict[str, Exchange] = {}
    for entry in read_capture_log(directory):
        assert entry.exchange is not None, entry.error
        for header in entry.exchange.request.headers:
            if header.name == "x-test-id":
                found[header.value] = entry.exchange
    return found


def _stream(client: openai.OpenAI, test_id: str, **kw: Any) -> dict[str, Any]:
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage = None
    finish = None
    stream = client.chat.completions.create(
        model="mock-live",
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-test-id": test_id},
        **kw,
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.finish_reason:
                finish = choice.finish_reason
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
            for tc in delta.tool_calls or ():
                slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
    return {
        "text": "".join(text),
        "calls": [calls[i] for i in sorted(calls)],
        "usage": usage,
        "finish": finish,
    }


def _plain(client: openai.OpenAI, test_id: str, **kw: Any) -> dict[str, Any]:
    resp = client.chat.completions.create(
        model="mock-live", extra_headers={"x-test-id": test_id}, **kw
    )
    msg = resp.choices[0].message
    return {
        "text": msg.content or "",
        "calls": [
            {"name": tc.function.name, "arguments": tc.function.arguments}
            for tc in msg.tool_calls or ()
            if tc.type == "function"
        ],
        "usage": resp.usage,
        "finish": resp.choices[0].finish_reason,
    }


def _assert_captured_equals(exchange: Exchange, got: dict[str, Any], streamed: bool) -> None:
    assert exchange.outcome is ExchangeOutcome.DONE
    response = exchange.response
    assert response is not None
    assert response.streamed is streamed
    assert (response.text or "") == got["text"]
    assert [{"name": c.name, "arguments": c.arguments} for c in response.tool_calls] == got["calls"]
    assert response.finish_reason_raw == got["finish"]
    assert got["usage"] is not None
    assert response.usage.prompt_tokens == got["usage"].prompt_tokens
    assert response.usage.completion_tokens == got["usage"].completion_tokens
    assert response.usage.usage_source.value == "reported"
    if streamed:
        assert exchange.timings.ttft_ms is not None
        assert exchange.timings.e2e_ms is not None
        assert exchange.timings.e2e_ms >= exchange.timings.ttft_ms


@pytest.mark.parametrize("builder", ["process", "thread"])
def test_openai_client_through_sidecar_is_captured_exactly(
    tmp_path: Path,
    live_model: str,
    alpaca_rows: list[RecordedRow],
    bfcl_rows: list[RecordedRow],
    builder: str,
) -> None:
    capture_dir = tmp_path / "capture"
    settings = CaptureSettings(
        upstream_url=live_model,
        sinks=("file",),
        file_sink_directory=str(capture_dir),
        builder=builder,
    )
    text_row = alpaca_rows[0]
    tool_row = next(r for r in bfcl_rows if r.tool_calls and r.tools)
    results: dict[str, tuple[dict[str, Any], bool]] = {}
    key = "sk-test-client-key-123456"
    with (
        SidecarThread(settings) as sidecar,
        openai.OpenAI(base_url=sidecar.url + "/v1", api_key=key) as client,
        openai.OpenAI(base_url=live_model + "/v1", api_key=key) as direct,
    ):
        results["text-stream"] = (_stream(client, "text-stream", messages=text_row.messages), True)
        results["text-plain"] = (_plain(client, "text-plain", messages=text_row.messages), False)
        tool_kw = {"messages": tool_row.messages, "tools": tool_row.tools}
        results["tool-stream"] = (_stream(client, "tool-stream", **tool_kw), True)
        results["tool-plain"] = (_plain(client, "tool-plain", **tool_kw), False)
        # The client sees exactly what it would see without the sidecar.
        assert (
            _stream(direct, "d1", messages=text_row.messages)["text"]
            == (results["text-stream"][0]["text"])
        )
        assert _plain(direct, "d2", **tool_kw)["calls"] == results["tool-plain"][0]["calls"]
    assert results["text-stream"][0]["text"] == text_row.output_text
    assert results["tool-stream"][0]["calls"], "the tool row must answer with tool calls"
    captured = _by_test_id(capture_dir)
    assert set(captured) == set(results)
    for test_id, (got, streamed) in results.items():
        _assert_captured_equals(captured[test_id], got, streamed)
        assert captured[test_id].baseline_model.name == "mock-live"
    assert sidecar.metric("shadoweval_capture_produced_total", sink="file") == 4
    assert sidecar.metric("shadoweval_capture_dropped_total", reason="build_failed") == 0
