"""The official ``openai`` client through CaptureProxy in front of mock-llm, unchanged.

mock-llm answers recorded AlpacaEval (text) and BFCL (tool-call) rows. Each call is made
twice — directly to mock-llm and through the proxy — and the parsed results must be equal
(minus ``id``/``created``, which mock-llm derives from the attempt and the clock). The
bytes the client received (recorded by a transport wrapper on the client's side) must
equal the RawCapture's concatenated chunks.

openai 3.x is built on ``httpx2`` (its fork of httpx), so the recording client is an
``httpx2.Client``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from pydantic import BaseModel

from shadoweval.records import ExchangeOutcome
from shadoweval.simulation.mock_llm import FaultConfig, FixedLatency, create_app
from shadoweval.tables import RecordedRow, load_recorded_rows
from tests.capture.upstreams import ProxyHarness, ServerThread, running_proxy

MODEL = "gpt-4o-mock"


@pytest.fixture(scope="module")
def alpaca_rows(shared_data: Path) -> list[RecordedRow]:
    path = shared_data / "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json"
    return load_recorded_rows(path, preset="alpaca_eval").rows


@pytest.fixture(scope="module")
def bfcl_rows(shared_data: Path) -> list[RecordedRow]:
    return load_recorded_rows(shared_data / "bfcl/result/gpt-4o-2024-05-13-FC", preset="bfcl").rows


@pytest.fixture(scope="module")
def mock_url(alpaca_rows: list[RecordedRow], bfcl_rows: list[RecordedRow]) -> Iterator[str]:
    app = create_app(
        [*alpaca_rows, *bfcl_rows],
        latency=FixedLatency(ttft_ms=20, itl_ms=2),
        faults=FaultConfig(),
        seed=0,
        model_name=MODEL,
        time_scale=0.5,
    )
    with ServerThread(app) as server:
        yield server.url


@pytest.fixture
def proxy(mock_url: str) -> Iterator[ProxyHarness]:
    with running_proxy(mock_url) as harness:
        yield harness


class _TeeStream(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, sink: bytearray) -> None:
        self._inner = inner
        self._sink = sink

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._inner:
            self._sink += piece
            yield piece

    def close(self) -> None:
        self._inner.close()


class RecordingTransport(httpx2.BaseTransport):
    """Client-side transport that keeps the raw bytes of each response body received."""

    def __init__(self) -> None:
        self._inner = httpx2.HTTPTransport()
        self.bodies: list[bytearray] = []
        self._lock = threading.Lock()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response = self._inner.handle_request(request)
        sink = bytearray()
        with self._lock:
            self.bodies.append(sink)
        assert isinstance(response.stream, httpx2.SyncByteStream)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_TeeStream(response.stream, sink),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class Clients:
    """An openai client to mock-llm directly and one through the proxy (recording bytes)."""

    def __init__(self, mock_url: str, proxy_url: str) -> None:
        self.recorder = RecordingTransport()
        self.direct = openai.OpenAI(base_url=f"{mock_url}/v1", api_key="sk-direct", max_retries=0)
        self.proxied = openai.OpenAI(
            base_url=f"{proxy_url}/v1",
            api_key="sk-proxied",
            max_retries=0,
            http_client=httpx2.Client(transport=self.recorder, timeout=30),
        )

    def close(self) -> None:
        self.direct.close()
        self.proxied.close()


@pytest.fixture
def clients(mock_url: str, proxy: ProxyHarness) -> Iterator[Clients]:
    c = Clients(mock_url, proxy.url)
    try:
        yield c
    finally:
        c.close()


def _comparable(obj: BaseModel) -> dict[str, Any]:
    return obj.model_dump(exclude={"id", "created"})


def _check_capture(proxy: ProxyHarness, clients: Clients, n: int, *, streamed: bool) -> None:
    raw = proxy.collector.wait(n)[n - 1]
    assert raw.outcome is ExchangeOutcome.DONE
    assert raw.status_code == 200
    assert raw.path == "/v1/chat/completions"
    assert raw.header("authorization") == "Bearer sk-proxied"  # redaction happens later
    received = bytes(clients.recorder.bodies[-1])
    assert b"".join(piece for _, piece in raw.chunks) == received
    assert len(raw.chunks) > 1 if streamed else len(raw.chunks) >= 1


def test_chat_completion_text(
    clients: Clients, proxy: ProxyHarness, alpaca_rows: list[RecordedRow]
) -> None:
    row = next(r for r in alpaca_rows if 20 <= len((r.output_text or "").split()) <= 60)
    messages: Any = row.messages
    direct = clients.direct.chat.completions.create(model=MODEL, messages=messages)
    proxied = clients.proxied.chat.completions.create(model=MODEL, messages=messages)
    assert _comparable(proxied) == _comparable(direct)
    assert proxied.choices[0].message.content == row.output_text
    _check_capture(proxy, clients, 1, streamed=False)


def test_chat_completion_text_streamed(
    clients: Clients, proxy: ProxyHarness, alpaca_rows: list[RecordedRow]
) -> None:
    row = next(r for r in alpaca_rows if 20 <= len((r.output_text or "").split()) <= 60)
    messages: Any = row.messages

    def run(client: openai.OpenAI) -> list[dict[str, Any]]:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        return [_comparable(chunk) for chunk in stream]

    direct, proxied = run(clients.direct), run(clients.proxied)
    assert proxied == direct
    text = "".join(c["choices"][0]["delta"]["content"] or "" for c in proxied if c["choices"])
    assert text == row.output_text
    assert proxied[-1]["usage"] is not None
    _check_capture(proxy, clients, 1, streamed=True)


def test_chat_completion_tools(
    clients: Clients, proxy: ProxyHarness, bfcl_rows: list[RecordedRow]
) -> None:
    row = next(r for r in bfcl_rows if len(r.tool_calls) >= 2)
    messages: Any = row.messages
    tools: Any = row.tools
    direct = clients.direct.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    proxied = clients.proxied.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    assert _comparable(proxied) == _comparable(direct)
    calls = proxied.choices[0].message.tool_calls
    assert calls is not None
    assert [(c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        (c.name, c.arguments) for c in row.tool_calls
    ]
    _check_capture(proxy, clients, 1, streamed=False)

    def run(client: openai.OpenAI) -> list[dict[str, Any]]:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, tools=tools, stream=True
        )
        return [_comparable(chunk) for chunk in stream]

    direct_chunks, proxied_chunks = run(clients.direct), run(clients.proxied)
    assert proxied_chunks == direct_chunks
    assert proxied_chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    _check_capture(proxy, clients, 2, streamed=True)


def test_models_and_errors_pass_through(clients: Clients, proxy: ProxyHarness) -> None:
    assert [m.id for m in clients.proxied.models.list()] == [
        m.id for m in clients.direct.models.list()
    ]
    errors = []
    for client in (clients.direct, clients.proxied):
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "never recorded"}]
            )
        errors.append((info.value.status_code, info.value.code, info.value.body))
    assert errors[0] == errors[1]
    raw = proxy.collector.wait(1)[0]  # the 404 is captured (models.list is not)
    assert len(proxy.collector.captures) == 1
    assert raw.status_code == 404
    assert raw.outcome is ExchangeOutcome.DONE
