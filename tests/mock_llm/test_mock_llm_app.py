"""mock-llm through httpx.ASGITransport: answers, errors, faults, reproducibility."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import orjson
import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from shadoweval.cli import mock_llm_cmd
from shadoweval.errors import ConfigError, RecordDecodeError
from shadoweval.llm_protocol import (
    AssembledResponse,
    ChatStreamAssembler,
    SSEDecoder,
    parse_completion_body,
)
from shadoweval.simulation.mock_llm import (
    FaultConfig,
    FixedLatency,
    LatencyProfile,
    NoLatency,
    TableLatency,
    create_app,
    parse_latency_profile,
    split_pieces,
)
from shadoweval.tables import RecordedRow

pytestmark = pytest.mark.anyio


def _app(
    rows: Sequence[RecordedRow],
    *,
    faults: FaultConfig | None = None,
    latency: LatencyProfile | None = None,
    seed: int = 0,
    time_scale: float = 1.0,
) -> Any:
    return create_app(
        rows,
        latency=latency or NoLatency(),
        faults=faults or FaultConfig(),
        seed=seed,
        model_name="mock-model",
        time_scale=time_scale,
    )


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mock")


def _body(row: RecordedRow, *, stream: bool, include_usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "whatever", "messages": row.messages}
    if row.tools:
        body["tools"] = row.tools
    if stream:
        body["stream"] = True
        if include_usage:
            body["stream_options"] = {"include_usage": True}
    return body


async def _stream(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> tuple[AssembledResponse, list[str]]:
    """POST a streaming request; return the reassembled response and the raw event data."""
    assembler = ChatStreamAssembler()
    decoder = SSEDecoder()
    events: list[str] = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for piece in response.aiter_raw():
            assembler.feed(piece)
            events.extend(e.data for e in decoder.feed(piece))
    events.extend(e.data for e in decoder.close())
    return assembler.finish(), events


def _without_ids(calls: Any) -> list[tuple[int, str, str]]:
    return [(c.index, c.name, c.arguments) for c in calls]


# ---------------------------------------------------------------------- answers


@pytest.mark.parametrize("index", [0, 196, 199, 262, 537, 800])
async def test_streamed_text_reassembles_to_the_recorded_output(
    alpaca_rows: list[RecordedRow], index: int
) -> None:
    row = alpaca_rows[index]
    async with _client(_app(alpaca_rows)) as client:
        result, events = await _stream(client, _body(row, stream=True))
    assert result.text == row.output_text
    assert result.tool_calls == ()
    assert result.finish_reason_raw == "stop"
    assert result.done_seen
    assert result.decode_errors == 0
    assert result.model == "mock-model"
    assert events[-1] == "[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == []
    assert set(chunks[-1]["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
    }
    assert chunks[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert contents == split_pieces(row.output_text or "")
    for piece in contents[1:]:
        assert re.fullmatch(r"\S+\s*", piece)
    # No token columns in AlpacaEval: usage counts the mock's own pieces.
    assert result.usage.completion_tokens == len(contents)
    assert result.usage.prompt_tokens == len(split_pieces(row.messages[0]["content"]))


async def test_streamed_tool_calls_reassemble(bfcl_rows: list[RecordedRow]) -> None:
    rows = [r for r in bfcl_rows if len(r.tool_calls) >= 3][:5]
    assert rows
    async with _client(_app(bfcl_rows)) as client:
        for row in rows:
            result, events = await _stream(client, _body(row, stream=True))
            assert _without_ids(result.tool_calls) == _without_ids(row.tool_calls)
            assert all(c.id and c.id.startswith("call_") for c in result.tool_calls)
            assert result.finish_reason_raw == "tool_calls"
            assert result.usage.prompt_tokens == row.prompt_tokens
            assert result.usage.completion_tokens == row.completion_tokens
            fragments = [
                tc
                for e in events[:-1]
                for choice in orjson.loads(e)["choices"]
                for tc in choice["delta"].get("tool_calls", [])
            ]
            firsts = [f for f in fragments if f["id"] is not None]
            assert len(firsts) == len(row.tool_calls)
            assert all(f["type"] == "function" and f["function"]["name"] for f in firsts)
            later = [f for f in fragments if f["id"] is None]
            assert later
            assert all("name" not in f["function"] for f in later)


async def test_non_streamed_answers(
    alpaca_rows: list[RecordedRow], bfcl_rows: list[RecordedRow]
) -> None:
    async with _client(_app([*alpaca_rows[:20], *bfcl_rows])) as client:
        for row in [alpaca_rows[3], *[r for r in bfcl_rows if r.key.startswith("parallel_")][:3]]:
            response = await client.post("/v1/chat/completions", json=_body(row, stream=False))
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            parsed = parse_completion_body(response.content)
            assert _without_ids(parsed.tool_calls) == _without_ids(row.tool_calls)
            if row.tool_calls:
                assert response.json()["choices"][0]["message"]["content"] is None
                assert parsed.finish_reason_raw == "tool_calls"
            else:
                assert parsed.text == row.output_text
                assert parsed.finish_reason_raw == "stop"
            assert parsed.usage.total_tokens is not None


async def test_no_usage_chunk_unless_asked(alpaca_rows: list[RecordedRow]) -> None:
    async with _client(_app(alpaca_rows)) as client:
        result, events = await _stream(
            client, _body(alpaca_rows[5], stream=True, include_usage=False)
        )
    assert result.text == alpaca_rows[5].output_text
    assert all(orjson.loads(e)["choices"] for e in events[:-1])
    assert result.usage.completion_tokens is None


async def test_same_prompt_with_other_tools_answers_the_matching_row(
    bfcl_rows: list[RecordedRow],
) -> None:
    by_prompt: dict[str, list[RecordedRow]] = {}
    for row in bfcl_rows:
        by_prompt.setdefault(row.prompt_key, []).append(row)
    pairs = [g for g in by_prompt.values() if len(g) == 2 and g[0].tools != g[1].tools]
    assert len(pairs) > 10
    async with _client(_app(bfcl_rows)) as client:
        for group in pairs[:10]:
            for row in group:
                response = await client.post("/v1/chat/completions", json=_body(row, stream=False))
                parsed = parse_completion_body(response.content)
                assert _without_ids(parsed.tool_calls) == _without_ids(row.tool_calls)
                if row.output_text is not None:
                    assert parsed.text == row.output_text


# ------------------------------------------------------------------------ errors


async def test_unknown_prompt_is_a_404_openai_error(alpaca_rows: list[RecordedRow]) -> None:
    prompt = "Please tell me something that was never recorded in any table. " * 3
    async with _client(_app(alpaca_rows)) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "x", "messages": [{"role": "user", "content": prompt}], "stream": True},
        )
    assert response.status_code == 404
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages"
    assert error["code"] == "prompt_not_recorded"
    assert "not in the recorded table" in error["message"]
    assert prompt[:80] in error["message"]
    assert prompt[:81] not in error["message"]


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"model": "x", "messages": [', "invalid_json"),
        (b"[1, 2]", "invalid_request"),
        (b'{"model": "x"}', "invalid_request"),
        (b'{"messages": "hi"}', "invalid_request"),
    ],
)
async def test_malformed_requests_are_400(
    alpaca_rows: list[RecordedRow], content: bytes, code: str
) -> None:
    async with _client(_app(alpaca_rows)) as client:
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_models_health_and_unknown_paths(alpaca_rows: list[RecordedRow]) -> None:
    async with _client(_app(alpaca_rows)) as client:
        models = (await client.get("/v1/models")).json()
        health = (await client.get("/health")).json()
        missing = await client.get("/v1/embeddings")
        wrong_method = await client.get("/v1/chat/completions")
    assert models["data"] == [
        {"id": "mock-model", "object": "model", "created": 0, "owned_by": "shadow-eval-mock"}
    ]
    assert health == {"status": "ok", "rows": 805}
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert wrong_method.status_code == 405
    assert wrong_method.headers["x-mock-llm"] == "shadow-eval test double"


# ------------------------------------------------------------------------ faults


async def test_fault_error(alpaca_rows: list[RecordedRow]) -> None:
    async with _client(_app(alpaca_rows, faults=FaultConfig(error_rate=1.0))) as client:
        response = await client.post(
            "/v1/chat/completions", json=_body(alpaca_rows[0], stream=True)
        )
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"


async def test_fault_html(alpaca_rows: list[RecordedRow]) -> None:
    async with _client(_app(alpaca_rows, faults=FaultConfig(html_rate=1.0))) as client:
        response = await client.post(
            "/v1/chat/completions", json=_body(alpaca_rows[0], stream=False)
        )
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("text/html")
    assert "<h1>502 Bad Gateway</h1>" in response.text
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(response.content)


async def test_fault_malformed(alpaca_rows: list[RecordedRow]) -> None:
    row = alpaca_rows[10]
    app = _app(alpaca_rows, faults=FaultConfig(malformed_rate=1.0))
    async with _client(app) as client:
        response = await client.post("/v1/chat/completions", json=_body(row, stream=False))
        assert response.status_code == 200
        with pytest.raises(RecordDecodeError):
            parse_completion_body(response.content)
        result, _ = await _stream(client, _body(row, stream=True))
    assert result.decode_errors == 1
    assert result.done_seen
    assert result.text is not None
    assert result.text != row.output_text
    assert (row.output_text or "").endswith(result.text)


async def test_fault_hang_never_answers(alpaca_rows: list[RecordedRow]) -> None:
    app = _app(alpaca_rows, faults=FaultConfig(hang_rate=1.0))
    answered = False
    async with _client(app) as client:
        with anyio.move_on_after(0.3):
            await client.post("/v1/chat/completions", json=_body(alpaca_rows[0], stream=True))
            answered = True
    assert not answered


async def test_fault_hang_is_released_after_its_limit(alpaca_rows: list[RecordedRow]) -> None:
    app = _app(alpaca_rows, faults=FaultConfig(hang_rate=1.0, hang_limit_s=0.05))
    async with _client(app) as client:
        response = await client.post(
            "/v1/chat/completions", json=_body(alpaca_rows[0], stream=False)
        )
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "injected_hang"


def test_fault_config_validation() -> None:
    with pytest.raises(ValidationError, match="more than 1"):
        FaultConfig(error_rate=0.6, html_rate=0.5)
    with pytest.raises(ValidationError):
        FaultConfig(error_rate=-0.1)


# -------------------------------------------------------------- reproducibility

MIXED = FaultConfig(error_rate=0.25, malformed_rate=0.2, html_rate=0.2)


async def _outcomes(
    rows: Sequence[RecordedRow], order: Sequence[int], *, seed: int, concurrent: bool
) -> dict[int, list[tuple[int, bytes]]]:
    app = _app(rows, faults=MIXED, seed=seed)
    out: dict[int, list[tuple[int, bytes]]] = {i: [] for i in order}

    async with _client(app) as client:

        async def one(i: int) -> None:
            response = await client.post("/v1/chat/completions", json=_body(rows[i], stream=False))
            out[i].append((response.status_code, response.content[:60]))

        if concurrent:
            async with anyio.create_task_group() as tg:
                for i in order:
                    tg.start_soon(one, i)
        else:
            for i in order:
                await one(i)
        for i in order:  # a retry of every prompt: the attempt counter moves on
            await one(i)
    return out


async def test_faults_are_reproducible_whatever_the_order(alpaca_rows: list[RecordedRow]) -> None:
    order = list(range(60))
    forward = await _outcomes(alpaca_rows, order, seed=7, concurrent=False)
    backward = await _outcomes(alpaca_rows, order[::-1], seed=7, concurrent=True)
    assert forward == backward
    statuses = [s for pair in forward.values() for s, _ in pair]
    assert {200, 500, 502} <= set(statuses)
    assert any(a[0] != b[0] for a, b in forward.values())  # retries draw again
    other_seed = await _outcomes(alpaca_rows, order, seed=8, concurrent=False)
    assert other_seed != forward


def test_latency_draws_depend_on_seed_and_prompt_not_order(
    alpaca_rows: list[RecordedRow], shared_data: Any
) -> None:
    profile = parse_latency_profile(f"llmperf:{shared_data / 'llmperf_leaderboard'}")
    first = _app(alpaca_rows, latency=profile, seed=3).state.mock
    second = _app(alpaca_rows, latency=profile, seed=3).state.mock
    rows = alpaca_rows[:30]
    a = [first.delays(r.prompt_key, r, 10) for r in rows]
    b = [second.delays(r.prompt_key, r, 10) for r in reversed(rows)][::-1]
    assert a == b
    assert len(set(a)) > 20
    third = _app(alpaca_rows, latency=profile, seed=4).state.mock
    assert [third.delays(r.prompt_key, r, 10) for r in rows] != a
    scaled = _app(alpaca_rows, latency=profile, seed=3, time_scale=0.01).state.mock
    d = scaled.delays(rows[0].prompt_key, rows[0], 10)
    assert d.ttft_s == pytest.approx(a[0].ttft_s * 0.01)


# ---------------------------------------------------------------------- latency


async def test_non_streamed_wait_follows_the_profile(alpaca_rows: list[RecordedRow]) -> None:
    row = next(r for r in alpaca_rows if 15 <= len(split_pieces(r.output_text or "")) <= 40)
    pieces = len(split_pieces(row.output_text or ""))
    app = _app(alpaca_rows, latency=FixedLatency(ttft_ms=200, itl_ms=10), time_scale=0.5)
    expected = 0.5 * (0.200 + (pieces - 1) * 0.010)
    async with _client(app) as client:
        start = time.perf_counter()
        response = await client.post("/v1/chat/completions", json=_body(row, stream=False))
        elapsed = time.perf_counter() - start
    assert response.status_code == 200
    # it waited the profile's time; the upper end only bounds a hang (the planned delays
    # themselves are checked without a clock by the latency-draw tests around this one)
    assert expected * 0.95 <= elapsed < expected + 30.0


def test_table_latency_profile(alpaca_rows: list[RecordedRow]) -> None:
    import dataclasses
    import random

    base = alpaca_rows[0]
    rng = random.Random(0)
    total_only = dataclasses.replace(base, latency_ms=1000.0)
    d = TableLatency().delays(total_only, 4, rng)
    assert (d.ttft_s, d.itl_s) == (0.25, 0.25)
    assert d.total_s(4) == pytest.approx(1.0)
    with_ttft = dataclasses.replace(base, latency_ms=1000.0, ttft_ms=100.0)
    d = TableLatency().delays(with_ttft, 10, rng)
    assert d.ttft_s == pytest.approx(0.1)
    assert d.total_s(10) == pytest.approx(1.0)
    both = dataclasses.replace(base, ttft_ms=50.0, itl_ms=5.0)
    assert TableLatency().delays(both, 3, rng) == type(d)(0.05, 0.005)
    fallback = TableLatency(fallback=FixedLatency(10, 1)).delays(base, 3, rng)
    assert fallback == type(d)(0.01, 0.001)


def test_llmperf_profile_uses_successful_requests_and_decode_gap(shared_data: Any) -> None:
    profile = parse_latency_profile(f"llmperf:{shared_data / 'llmperf_leaderboard/individual'}")
    assert len(profile.samples) == 2306  # type: ignore[attr-defined]
    single = parse_latency_profile(
        f"llmperf:{shared_data / 'llmperf_leaderboard/individual/groq_70b.json'}"
    )
    raw = orjson.loads((shared_data / "llmperf_leaderboard/individual/groq_70b.json").read_bytes())
    ok = [r for r in raw if r["error_code"] is None and not r["error_msg"]]
    first = ok[0]
    gap = (first["end_to_end_latency_s"] - first["ttft_s"]) / (first["number_output_tokens"] - 1)
    assert single.samples[0] == (first["ttft_s"], pytest.approx(gap))  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", ["fixed:abc", "fixed:1", "bogus", "llmperf:/nonexistent/x.json"])
def test_bad_latency_specs(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_latency_profile(spec)


def test_pieces_round_trip(alpaca_rows: list[RecordedRow]) -> None:
    for row in alpaca_rows:
        text = row.output_text or ""
        assert "".join(split_pieces(text)) == text
    assert split_pieces("  Hello,  world!\n") == ["  Hello,  ", "world!\n"]
    assert split_pieces("") == []
    assert split_pieces(" \n") == [" \n"]


# -------------------------------------------------------------------------- CLI


def _cli() -> typer.Typer:
    app = typer.Typer()
    mock_llm_cmd.register(app)

    @app.callback()
    def _root() -> None:
        """Test root."""

    return app


def test_cli_help_says_test_double() -> None:
    result = CliRunner().invoke(_cli(), ["mock-llm", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "TEST DOUBLE" in result.output
    for option in (
        "--preset",
        "--prompt-col",
        "--latency-profile",
        "--hang-rate",
        "--port",
        "--interrupt-running",
        "--context-tokens",
    ):
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--latency-profile", "warp"], "unknown latency profile"),
        (["--error-rate", "0.7", "--html-rate", "0.7"], "more than 1"),
        (["--prompt-col", "prompt", "--output-col", "nope"], "'nope'"),
        (["--context-tokens", "0"], "context_tokens"),
    ],
)
def test_cli_errors_exit_2_before_serving(tmp_path: Any, args: list[str], message: str) -> None:
    table = tmp_path / "t.csv"
    table.write_text("prompt,answer\nhi,hello\n")
    base = ["mock-llm", "--input", str(table)]
    if "--prompt-col" not in args:
        base += ["--prompt-col", "prompt", "--output-col", "answer"]
    result = CliRunner().invoke(_cli(), [*base, *args], terminal_width=200)
    assert result.exit_code == 3, result.output
    assert message in result.output
