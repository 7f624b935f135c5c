"""Fixtures of the replay tests: exchanges, AlpacaEval/BFCL rows, mock-llm servers, storage.

Fakes enter through seams only: ``httpx.MockTransport`` / ``httpx.ASGITransport`` passed to
:class:`~shadoweval.replay.client.CandidateClient`, or a real uvicorn :class:`BackgroundServer`
serving mock-llm. Storage tests run on SQLite (a tmp file) and on PostgreSQL (a fresh
schema per test from the session ``pg_url``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.records import Exchange, HeaderPair, ModelIdentity, RequestRecord
from shadoweval.serving import BackgroundServer
from shadoweval.simulation.mock_llm import FaultConfig, LatencyProfile, NoLatency, create_app
from shadoweval.storage import Database, Repository
from shadoweval.tables import RecordedRow, load_recorded_rows

LLAMA3 = "alpaca_eval/Meta-Llama-3-8B-Instruct/model_outputs.json"
LLAMA31 = "alpaca_eval/Meta-Llama-3.1-8B-Instruct-Turbo/model_outputs.json"
BFCL_GPT4O = "bfcl/result/gpt-4o-2024-05-13-FC"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ----------------------------------------------------------------------- exchanges


def chat_body(content: str = "Say hi.", **fields: Any) -> dict[str, Any]:
    """A chat-completions request body with one user message plus ``fields``."""
    return {"model": "baseline-v1", "messages": [{"role": "user", "content": content}], **fields}


def make_exchange(
    body: dict[str, Any] | str | None = None,
    *,
    path: str = "/v1/chat/completions",
    headers: Sequence[tuple[str, str]] = (),
    task_type: str = "default",
) -> Exchange:
    """An Exchange as the sidecar would store it (``body`` dict → JSON text)."""
    raw = body if isinstance(body, str) else orjson.dumps(body or chat_body()).decode()
    return Exchange(
        route=path,
        task_type=task_type,
        request=RequestRecord(
            path=path,
            headers=tuple(HeaderPair(name=k, value=v) for k, v in headers),
            body=raw,
        ),
        baseline_model=ModelIdentity(name="baseline-v1"),
    )


# ----------------------------------------------------------------------- real data


@pytest.fixture(scope="session")
def llama3_path(shared_data: Path) -> Path:
    return shared_data / LLAMA3


@pytest.fixture(scope="session")
def llama3_rows(llama3_path: Path) -> list[RecordedRow]:
    return load_recorded_rows(llama3_path, preset="alpaca_eval").rows


@pytest.fixture(scope="session")
def llama31_rows(shared_data: Path) -> list[RecordedRow]:
    return load_recorded_rows(shared_data / LLAMA31, preset="alpaca_eval").rows


@pytest.fixture(scope="session")
def bfcl_rows(shared_data: Path) -> list[RecordedRow]:
    return load_recorded_rows(shared_data / BFCL_GPT4O, preset="bfcl").rows


# ---------------------------------------------------------------------- mock-llm


@dataclass
class CountingApp:
    """An ASGI wrapper that counts chat requests and the most ever in flight at once."""

    app: Any
    chat_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    paths: list[str] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        self.chat_requests += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


def mock_app(
    rows: Sequence[RecordedRow],
    *,
    faults: FaultConfig | None = None,
    latency: LatencyProfile | None = None,
    seed: int = 0,
    model_name: str = "candidate-v2",
    time_scale: float = 1.0,
) -> CountingApp:
    """mock-llm (a test double of an OpenAI server) wrapped in a request counter."""
    return CountingApp(
        create_app(
            rows,
            latency=latency or NoLatency(),
            faults=faults or FaultConfig(),
            seed=seed,
            model_name=model_name,
            time_scale=time_scale,
        )
    )


class _CountedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, owner: CountingTransport) -> None:
        self._inner = inner
        self._owner = owner
        self._open = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            yield piece

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._owner.in_flight -= 1
        await self._inner.aclose()


class CountingTransport(httpx.AsyncBaseTransport):
    """Wraps a real transport; counts requests in flight on the client side.

    A request is in flight from when it is handed to the transport until its response
    is closed (or the send fails or is cancelled).
    """

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._inner = inner or httpx.AsyncHTTPTransport()
        self.in_flight = 0
        self.max_in_flight = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self.in_flight -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedStream(response.stream, self),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


ServeFn = Callable[[Any], AbstractContextManager[BackgroundServer]]


@pytest.fixture
def serve() -> ServeFn:
    """``with serve(app) as server:`` — the app under real uvicorn on a loopback port."""

    @contextmanager
    def _serve(app: Any) -> Iterator[BackgroundServer]:
        server = BackgroundServer(app).start()
        try:
            yield server
        finally:
            server.stop()

    return _serve


# ---------------------------------------------------------------------- storage


@pytest.fixture
def repo(empty_url: str) -> Iterator[Repository]:
    """A repository over a database upgraded to head."""
    db = Database(empty_url)
    db.upgrade()
    try:
        yield Repository(db)
    finally:
        db.dispose()


@pytest.fixture
def sqlite_repo(tmp_path: Path) -> Iterator[Repository]:
    """A SQLite-only repository (for the large-data test)."""
    db = Database(f"sqlite:///{tmp_path / 'replay-big.db'}")
    db.upgrade()
    try:
        yield Repository(db)
    finally:
        db.dispose()
