"""Model-server dialects: every fixture under ``tests/fixtures/dialects`` through the
assembler, the capture's response assembly and the replay client (issue 15).

Each fixture (format: ``tests/fixtures/dialects/README.md``) is a descriptor plus the raw
body bytes a real server (vLLM, SGLang, TGI, llama-cpp-python, Ollama) sends. The bytes go

* to :class:`~shadoweval.llm_protocol.ChatStreamAssembler` /
  :func:`~shadoweval.llm_protocol.parse_completion_body`, whole and cut into 7-byte reads
  (the result must not depend on where reads fall);
* to :class:`shadoweval.capture.response_assembly.ResponseAssembler` as a recorded capture, and end
to
  end through the real capture proxy (a uvicorn upstream serving the bytes, the client
  must receive them unchanged, the builder must record the expected response);
* to :class:`shadoweval.replay.client.CandidateClient` twice: through an ``httpx.MockTransport`` (a
  broken stream raises httpx's own ``RemoteProtocolError``, as httpcore does on a cut
  chunked body) and through the default HTTP/1.1 pool against a local socket server that
  writes the status line, the headers and the body as chunked pieces (a broken stream
  closes the socket before the last chunk).

New fixtures (e.g. ``recorded-*`` from a real llama-cpp-python server) are picked up with
no change here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from starlette.types import Receive, Scope, Send

from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.response_assembly import ResponseAssembler, error_text
from shadoweval.config import BodyRedactionSettings, CaptureSettings
from shadoweval.llm_protocol import ChatStreamAssembler, parse_completion_body
from shadoweval.llm_protocol.assembler import AssembledResponse
from shadoweval.llm_protocol.finish_reason import normalize_finish_reason
from shadoweval.records import (
    ExchangeOutcome,
    HeaderPair,
    ModelIdentity,
    ResponseRecord,
    ToolCall,
    Usage,
    UsageSource,
    utc_now,
)
from shadoweval.replay.client import CandidateClient, ReplayResult
from shadoweval.replay.rewrite import ReplayRequest
from tests.capture.upstreams import ProxyHarness, ServerThread, running_proxy

LIVE = ModelIdentity(name="live-model", weights_hash="sha256:w")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dialects"
SERVERS = ("vllm", "sglang", "tgi", "llama_cpp", "ollama")
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "abort", "unknown")
ERROR_KINDS = (None, "http_status", "connect", "decode")
EXPECT_KEYS = frozenset(
    {
        "streamed",
        "text",
        "reasoning",
        "tool_calls",
        "finish_reason_raw",
        "finish_reason",
        "usage",
        "done_seen",
        "error_kind",
        "error_contains",
    }
)
READ_BYTES = 7
"""Size of the reads the assembler is fed in the split-read check."""
WIRE_PIECE_BYTES = 64
"""Size of the body pieces the fake servers send (one HTTP chunk each)."""


@dataclass(frozen=True)
class Dialect:
    """One loaded fixture: descriptor fields, raw body and where it came from."""

    path: Path
    server: str
    source: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    broken: bool
    request: dict[str, Any]
    expect: dict[str, Any]
    xfail: str | None

    @property
    def streamed_body(self) -> bool:
        """Whether the body is an SSE stream (what the readers look at: content type)."""
        return any(
            k.lower() == "content-type" and "text/event-stream" in v for k, v in self.headers
        )

    @property
    def name(self) -> str:
        return f"{self.server}/{self.path.stem}"


def load_dialect(path: Path) -> Dialect:
    """Read and check one descriptor (README format); raises ``ValueError`` naming the
    file and the field when it does not follow the format."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))

    def fail(field: str, value: object) -> ValueError:
        return ValueError(f"{path}: field {field!r} is invalid: {value!r}")

    if not isinstance(raw, dict):
        raise fail("<document>", raw)
    server = raw.get("server")
    if server not in SERVERS or server != path.parent.name:
        raise fail("server", server)
    source = raw.get("source")
    if source not in ("written", "recorded"):
        raise fail("source", source)
    if (source == "recorded") != path.stem.startswith("recorded-"):
        raise fail("source", f"{source} (recorded fixtures are named recorded-*)")
    for key in ("server_version", "origin", "description"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise fail(key, raw.get(key))
    response = raw.get("response")
    if not isinstance(response, dict):
        raise fail("response", response)
    status = response.get("status")
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise fail("response.status", status)
    headers = response.get("headers") or []
    if not all(isinstance(h, list) and len(h) == 2 for h in headers):
        raise fail("response.headers", headers)
    body_path = path.parent / str(response.get("body_file"))
    if not body_path.is_file():
        raise fail("response.body_file", response.get("body_file"))
    ends = response.get("ends", "clean")
    if ends not in ("clean", "broken"):
        raise fail("response.ends", ends)
    request = raw.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("body"), dict):
        raise fail("request", request)
    expect = raw.get("expect")
    if not isinstance(expect, dict) or set(expect) != EXPECT_KEYS:
        got = sorted(expect) if isinstance(expect, dict) else expect
        raise fail("expect", got)
    if expect["finish_reason"] not in FINISH_REASONS:
        raise fail("expect.finish_reason", expect["finish_reason"])
    if expect["error_kind"] not in ERROR_KINDS:
        raise fail("expect.error_kind", expect["error_kind"])
    if not (expect["usage"] == "absent" or isinstance(expect["usage"], dict)):
        raise fail("expect.usage", expect["usage"])
    return Dialect(
        path=path,
        server=server,
        source=source,
        status=status,
        headers=tuple((str(k), str(v)) for k, v in headers),
        body=body_path.read_bytes(),
        broken=ends == "broken",
        request=request,
        expect=expect,
        xfail=raw.get("xfail"),
    )


def all_dialects() -> list[Dialect]:
    """Every descriptor below :data:`FIXTURES`, sorted by path."""
    return [load_dialect(p) for p in sorted(FIXTURES.glob("*/*.yaml"))]


DIALECTS = all_dialects()


def dialect_params() -> list[Any]:
    """pytest params: one per fixture, an ``xfail`` mark where the descriptor has one."""
    params = []
    for d in DIALECTS:
        marks = [pytest.mark.xfail(reason=d.xfail, strict=True)] if d.xfail else []
        params.append(pytest.param(d, id=d.name, marks=marks))
    return params


def pieces(body: bytes, size: int) -> Iterator[bytes]:
    """``body`` cut into ``size``-byte pieces (the last may be shorter)."""
    for i in range(0, len(body), size):
        yield body[i : i + size]


# ------------------------------------------------------------------ expectations


def check_tool_calls(got: tuple[ToolCall, ...], want: list[dict[str, Any]]) -> None:
    """Names and arguments exactly; id and type when the descriptor gives them."""
    assert [(c.name, c.arguments) for c in got] == [(w["name"], w["arguments"]) for w in want]
    for call, spec in zip(got, want, strict=True):
        if "id" in spec:
            assert call.id == spec["id"]
        if "type" in spec:
            assert call.type == spec["type"]


def check_usage(got: Usage, want: str | dict[str, int]) -> None:
    """``absent`` = missing, every count ``None`` (never 0); else the listed counts."""
    if want == "absent":
        assert got.usage_source is UsageSource.MISSING
        assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (None,) * 3
        return
    assert isinstance(want, dict)
    assert got.usage_source is UsageSource.REPORTED
    for key, value in want.items():
        assert getattr(got, key) == value, key


def check_record(record: ResponseRecord, d: Dialect) -> None:
    """A reassembled record against the descriptor's ``expect`` block."""
    e = d.expect
    assert record.status_code == d.status
    if d.status < 400:
        assert record.streamed is e["streamed"]
    assert record.text == e["text"]
    assert record.reasoning_text == e["reasoning"]
    check_tool_calls(record.tool_calls, e["tool_calls"])
    assert record.finish_reason_raw == e["finish_reason_raw"]
    assert record.finish_reason.value == e["finish_reason"]
    check_usage(record.usage, e["usage"])


def check_assembled(result: AssembledResponse, d: Dialect) -> None:
    """An assembler result against ``expect`` (and the reasoning kept out of the text)."""
    e = d.expect
    assert result.streamed is e["streamed"]
    assert result.text == e["text"]
    assert result.reasoning_text == e["reasoning"]
    if e["reasoning"] and result.text is not None:
        assert e["reasoning"] not in result.text
    check_tool_calls(result.tool_calls, e["tool_calls"])
    assert result.finish_reason_raw == e["finish_reason_raw"]
    assert normalize_finish_reason(result.finish_reason_raw).value == e["finish_reason"]
    check_usage(result.usage, e["usage"])
    assert result.done_seen is e["done_seen"]
    assert result.decode_errors == 0


# ------------------------------------------------------------------ fixture format


def test_every_server_has_the_required_fixtures() -> None:
    """Per server: non-streamed and streamed answers, a tool call both ways, an error."""
    for server in SERVERS:
        mine = [d for d in DIALECTS if d.server == server]
        ok = [d for d in mine if d.status < 400 and d.expect["error_kind"] is None]
        assert any(not d.streamed_body for d in ok), server
        assert any(d.streamed_body for d in ok), server
        assert any(d.expect["tool_calls"] and d.streamed_body for d in ok), server
        assert any(d.expect["tool_calls"] and not d.streamed_body for d in ok), server
        assert any(d.expect["error_kind"] is not None for d in mine), server


def test_streamed_fixtures_are_raw_sse() -> None:
    """Stream bodies are SSE as sent: data lines and blank-line separators."""
    for d in DIALECTS:
        if d.streamed_body:
            # An empty body is a real answer too (llama-cpp-python's over-context stream).
            if d.body:
                assert d.body.startswith((b"data:", b":", b"error:")), d.name
                assert b"\n\n" in d.body, d.name
            assert d.expect["streamed"], d.name
        if d.status < 400:  # the replay client reads SSE only for a streamed request
            assert d.request.get("stream") is d.streamed_body, d.name


def test_a_descriptor_that_breaks_the_format_names_the_field(tmp_path: Path) -> None:
    folder = tmp_path / "vllm"
    folder.mkdir()
    (folder / "x.sse").write_bytes(b"data: [DONE]\n\n")
    good = yaml.safe_load((FIXTURES / "vllm" / "stream-tool-call.yaml").read_text())
    good["response"]["body_file"] = "x.sse"
    bad = dict(good, source="recorded")
    (folder / "x.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="'source'"):
        load_dialect(folder / "x.yaml")
    bad = dict(good, expect={**good["expect"], "finish_reason": "eos"})
    (folder / "x.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match=r"expect\.finish_reason"):
        load_dialect(folder / "x.yaml")


# ------------------------------------------------------------------ the assembler


@pytest.mark.parametrize("d", dialect_params())
def test_the_assembler_reads_the_dialect(d: Dialect) -> None:
    if d.status >= 400:
        assert d.expect["error_contains"] in error_text(d.body.decode())
        return
    if not d.streamed_body:
        check_assembled(parse_completion_body(d.body), d)
        return
    whole = ChatStreamAssembler(start_ns=0)
    whole.feed(d.body, now_ns=1)
    result = whole.finish(now_ns=2)
    split = ChatStreamAssembler(start_ns=0)
    for i, piece in enumerate(pieces(d.body, READ_BYTES)):
        split.feed(piece, now_ns=i + 1)
    cut = split.finish(now_ns=10**9)
    if d.expect["error_kind"] == "http_status":
        assert result.error_message is not None
        assert d.expect["error_contains"] in result.error_message
    else:
        assert result.error_message is None
    for r in (result, cut):
        check_assembled(r, d)
    assert (cut.text, cut.reasoning_text, cut.tool_calls, cut.usage) == (
        result.text,
        result.reasoning_text,
        result.tool_calls,
        result.usage,
    )


def test_an_unwrapped_error_response_event_is_an_error() -> None:
    """Older vLLM releases and SGLang model their ErrorResponse with the message at the top
    level (``object: error``); sent as a stream event it must not read as an empty chunk."""
    event = {"object": "error", "message": "boom", "type": "BadRequestError", "code": 400}
    asm = ChatStreamAssembler(start_ns=0)
    asm.feed(b"data: " + orjson.dumps(event) + b"\n\ndata: [DONE]\n\n", now_ns=1)
    result = asm.finish(now_ns=2)
    assert result.error_message == "boom"
    assert result.done_seen


# ------------------------------------------------------------------ capture side


@pytest.mark.parametrize("d", dialect_params())
def test_the_capture_records_the_dialect(d: Dialect) -> None:
    raw = RawCapture(
        exchange_id="ex-dialect",
        captured_at=utc_now(),
        start_ns=1_000_000_000,
        method="POST",
        path=d.request["path"],
        request_headers=[(b"content-type", b"application/json")],
        request_body=orjson.dumps(d.request["body"]),
        status_code=d.status,
        response_headers=[(k.encode(), v.encode()) for k, v in d.headers],
        response_start_ns=1_010_000_000,
        outcome=ExchangeOutcome.ERROR if d.broken else ExchangeOutcome.DONE,
        error="upstream connection lost mid-body" if d.broken else None,
    )
    for i, piece in enumerate(pieces(d.body, WIRE_PIECE_BYTES)):
        raw.chunks.append((1_020_000_000 + i * 1_000_000, piece))
        raw.captured_bytes += len(piece)
    raw.end_ns = 1_500_000_000
    headers = tuple(HeaderPair(name=k, value=v) for k, v in d.headers)
    assembler = ResponseAssembler(
        BodyRedactor(BodyRedactionSettings(rules=())), keep_raw_body=False
    )
    parts = assembler.assemble(raw, headers, raw.outcome, RedactionHits())
    check_record(parts.response, d)
    kind = d.expect["error_kind"]
    if kind is None:
        assert parts.outcome is ExchangeOutcome.DONE
        assert parts.response.error_message is None
    elif kind == "connect":
        assert parts.outcome is ExchangeOutcome.ERROR
        assert parts.response.error_message is not None
        assert "connection lost" in parts.response.error_message
    else:
        assert parts.response.error_message is not None
        assert d.expect["error_contains"] in parts.response.error_message


BY_NAME = {d.name: d for d in DIALECTS}
DIALECT_HEADER = "x-dialect-fixture"


async def dialect_upstream(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI upstream answering with the fixture named by :data:`DIALECT_HEADER`, in
    :data:`WIRE_PIECE_BYTES` pieces; a broken fixture returns before the end of its body
    (uvicorn then closes the connection mid-body)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body", False):
        pass
    name = dict(scope["headers"])[DIALECT_HEADER.encode()].decode()
    d = BY_NAME[name]
    headers = [(k.lower().encode(), v.encode()) for k, v in d.headers]
    await send({"type": "http.response.start", "status": d.status, "headers": headers})
    for piece in pieces(d.body, WIRE_PIECE_BYTES):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    if not d.broken:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyHarness]:
    with (
        ServerThread(dialect_upstream, log_level="critical") as upstream,
        running_proxy(upstream.url) as harness,
    ):
        yield harness


@pytest.mark.parametrize("d", dialect_params())
def test_the_capture_proxy_passes_and_records_the_dialect(d: Dialect, proxy: ProxyHarness) -> None:
    before = len(proxy.collector.captures)
    received: list[bytes] = []
    broke = False
    with httpx.Client(base_url=proxy.url, timeout=60.0) as client:
        headers = {"content-type": "application/json", DIALECT_HEADER: d.name}
        body = orjson.dumps(d.request["body"])
        with client.stream("POST", d.request["path"], content=body, headers=headers) as response:
            assert response.status_code == d.status
            try:
                for piece in response.iter_raw():
                    received.append(piece)
            except httpx.RemoteProtocolError:
                broke = True
    assert broke is d.broken
    assert b"".join(received) == d.body  # the live path passes every byte unchanged
    raw = proxy.collector.wait(before + 1)[before]
    built = ExchangeBuilder(CaptureSettings(), LIVE, "sidecar:dialects").build(raw)
    record = orjson.loads(built.built.payload)
    check_record(ResponseRecord.model_validate(record["response"]), d)
    if d.expect["error_kind"] is None:
        assert built.outcome is ExchangeOutcome.DONE
        assert record["response"]["error_message"] is None
    else:
        message = record["response"]["error_message"]
        if d.broken:
            assert built.outcome is ExchangeOutcome.ERROR
            assert "upstream failed mid-response" in message
        else:
            assert d.expect["error_contains"] in message


# ------------------------------------------------------------------ replay client


def replay_request(d: Dialect) -> ReplayRequest:
    """The request of the descriptor, as the runner would send it."""
    body = d.request["body"]
    return ReplayRequest(
        exchange_id=d.name,
        path=d.request["path"],
        body=orjson.dumps(body),
        headers={"content-type": "application/json"},
        stream=bool(d.request.get("stream", body.get("stream", False))),
    )


def check_replay(result: ReplayResult, d: Dialect) -> None:
    """A replay result against ``expect``: error kind, message, and the record."""
    kind = d.expect["error_kind"]
    assert (result.error_kind.value if result.error_kind else None) == kind, result.error_detail
    if kind == "connect":
        assert result.response is None
        assert result.error_detail is not None
        assert d.expect["error_contains"] in result.error_detail
        return
    assert result.response is not None
    check_record(result.response, d)
    if kind is not None:
        assert result.error_detail is not None
        assert d.expect["error_contains"] in result.error_detail
        assert result.response.error_message is not None
        if d.status >= 400:  # the server's message itself, not the JSON around it
            assert d.expect["error_contains"] in result.response.error_message
            assert not result.response.error_message.lstrip().startswith("{")


class BrokenBody(httpx.AsyncByteStream):
    """A body that ends like a cut chunked response: httpcore's own error after the
    bytes that arrived."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in pieces(self._body, WIRE_PIECE_BYTES):
            yield piece
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


class PiecedBody(httpx.AsyncByteStream):
    """The body in :data:`WIRE_PIECE_BYTES` pieces, as a server writes it."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in pieces(self._body, WIRE_PIECE_BYTES):
            yield piece


@pytest.mark.anyio
@pytest.mark.parametrize("d", dialect_params())
async def test_the_replay_client_reads_the_dialect_over_a_mock_transport(d: Dialect) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        stream = BrokenBody(d.body) if d.broken else PiecedBody(d.body)
        return httpx.Response(d.status, headers=list(d.headers), stream=stream)

    transport = httpx.MockTransport(handler)
    async with CandidateClient("http://model", transport=transport, connect_retries=0) as client:
        result = await client.send(replay_request(d))
    assert len(seen) == 1
    assert seen[0].url.path == d.request["path"]
    check_replay(result, d)


@asynccontextmanager
async def dialect_server(d: Dialect) -> AsyncIterator[str]:
    """A local HTTP/1.1 server answering every request with the fixture's bytes (chunked
    pieces; a broken fixture closes the socket before the terminating chunk)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            await reader.readexactly(length)
            lines = [f"HTTP/1.1 {d.status} Dialect".encode()]
            lines += [f"{k}: {v}".encode() for k, v in d.headers]
            lines += [b"transfer-encoding: chunked", b"connection: close", b"", b""]
            writer.write(b"\r\n".join(lines))
            for piece in pieces(d.body, WIRE_PIECE_BYTES):
                writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                await writer.drain()
            if not d.broken:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.anyio
@pytest.mark.parametrize("d", dialect_params())
async def test_the_replay_client_reads_the_dialect_over_http1(d: Dialect) -> None:
    async with (
        dialect_server(d) as base_url,
        CandidateClient(base_url, connect_retries=0, timeout_s=30.0) as client,
    ):
        result = await client.send(replay_request(d))
    check_replay(result, d)
