"""ExchangeBuilder: raw capture in, redacted serialized Exchange out — exact and leak-free."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import pickle
import random
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime

import brotli
import orjson
import pytest

from shadoweval.capture.builder import (
    BuildError,
    BuildResult,
    ExchangeBuilder,
    build_in_worker,
    default_source,
    init_worker,
    worker_args,
)
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.tagging import TagSource
from shadoweval.config import CaptureSettings, TaskTypeRule
from shadoweval.records import (
    Exchange,
    ExchangeOutcome,
    FinishReason,
    ModelIdentity,
    TimingSource,
    UsageSource,
)

CHAT = "/v1/chat/completions"
START_NS = 7_000_000_000
CAPTURED_AT = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
CANARY_KEY = "sk-canary-0123456789abcdefXYZ"
CANARY_EMAIL = "jane.doe@example.com"
LIVE = ModelIdentity(name="live-model", weights_hash="sha256:w")


def at(ms: float) -> int:
    return START_NS + round(ms * 1_000_000)


def event(payload: object) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    choice: dict[str, object] = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m-live", "choices": [choice]}


def usage_only(completion_tokens: int) -> dict[str, object]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m-live",
        "choices": [],
        "usage": {
            "prompt_tokens": 11,
            "completion_tokens": completion_tokens,
            "total_tokens": 11 + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
    }


DONE = b"data: [DONE]\n\n"


def chat_request(**extra: object) -> dict[str, object]:
    return {
        "model": "m-live",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hello"},
        ],
        "stream": True,
        **extra,
    }


def make_raw(
    *,
    body: object = None,
    chunks: Sequence[tuple[float, bytes]] = (),
    status: int | None = 200,
    content_type: str = "text/event-stream",
    content_encoding: str | None = None,
    request_headers: Sequence[tuple[str, str]] = (),
    response_headers: Sequence[tuple[str, str]] = (),
    outcome: ExchangeOutcome = ExchangeOutcome.DONE,
    truncated: bool = False,
    query: str = "",
    path: str = CHAT,
    error: str | None = None,
    session_key_hash: str | None = None,
) -> RawCapture:
    body = chat_request() if body is None else body
    raw_body = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp_headers = [(b"content-type", content_type.encode())]
    if content_encoding:
        resp_headers.append((b"content-encoding", content_encoding.encode()))
    resp_headers += [(k.encode(), v.encode()) for k, v in response_headers]
    return RawCapture(
        exchange_id="01JNQ3ZK8Y0000000000000000",
        captured_at=CAPTURED_AT,
        start_ns=START_NS,
        method="POST",
        path=path,
        query=query,
        request_headers=[(b"content-type", b"application/json")]
        + [(k.lower().encode(), v.encode()) for k, v in request_headers],
        request_body=raw_body,
        status_code=status,
        response_headers=resp_headers if status is not None else [],
        response_start_ns=at(5) if status is not None else None,
        chunks=[(at(t), data) for t, data in chunks],
        captured_bytes=sum(len(d) for _, d in chunks),
        truncated=truncated,
        end_ns=at(max((t for t, _ in chunks), default=6) + 1),
        outcome=outcome,
        error=error,
        session_key_hash=session_key_hash,
    )


def builder(**settings: object) -> ExchangeBuilder:
    return ExchangeBuilder(CaptureSettings.model_validate(settings), LIVE, "sidecar:test")


def exchange_of(result: BuildResult) -> Exchange:
    return Exchange.model_validate_json(result.built.payload)


def split_mid_char(data: bytes) -> int:
    """An offset inside the first multi-byte UTF-8 character, else the middle."""
    for i, b in enumerate(data):
        if b >= 0x80:
            return i + 1
    return len(data) // 2


# ------------------------------------------------------------------ streamed responses

TEXT_EVENTS = [
    (100.0, event(chunk({"role": "assistant", "content": ""}))),
    (150.0, event(chunk({"content": "Grüße "}))),
    (180.0, event(chunk({"content": "日本語 "}))),
    (230.0, event(chunk({"content": "🙂"}))),
    (240.0, event(chunk({}, finish="stop"))),
    (250.0, event(usage_only(5))),
    (251.0, DONE),
]


def split_events(events: Sequence[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """Each event in two pieces cut inside a multi-byte character, 1 ms apart."""
    out = []
    for t, data in events:
        cut = split_mid_char(data)
        out += [(t - 1, data[:cut]), (t, data[cut:])]
    return out


def test_stream_split_inside_characters_text_usage_and_timings_exact() -> None:
    result = builder().build(make_raw(chunks=split_events(TEXT_EVENTS)))
    ex = exchange_of(result)
    resp = ex.response
    assert resp is not None
    assert resp.streamed
    assert resp.text == "Grüße 日本語 🙂"
    assert resp.finish_reason_raw == "stop"
    assert resp.finish_reason is FinishReason.STOP
    assert resp.usage.completion_tokens == 5
    assert resp.usage.cached_tokens == 8
    assert resp.usage.usage_source is UsageSource.REPORTED
    assert resp.model == "m-live"
    t = ex.timings
    assert t.source is TimingSource.MEASURED
    assert t.ttfb_ms == pytest.approx(99.0)  # first (encoded) body byte
    assert t.ttft_ms == pytest.approx(150.0)  # role-only chunk does not count
    assert t.e2e_ms == pytest.approx(230.0)  # finish-only and usage-only chunks do not count
    assert t.tpot_ms == pytest.approx((230.0 - 150.0) / 4)
    assert t.itl is not None
    assert t.itl.count == 2
    assert t.itl.max_ms == pytest.approx(50.0)
    assert t.itl.mean_ms == pytest.approx(40.0)
    assert ex.outcome is ExchangeOutcome.DONE
    assert result.outcome is ExchangeOutcome.DONE
    assert ex.monotonic_start_ns == START_NS
    assert ex.captured_at == CAPTURED_AT
    assert ex.source == "sidecar:test"
    assert ex.baseline_model == LIVE
    assert resp.body is None  # keep_raw_body is off by default


@pytest.mark.parametrize("seed", range(5))
def test_stream_split_at_arbitrary_byte_boundaries(seed: int) -> None:
    data = b"".join(d for _, d in TEXT_EVENTS)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), 25))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    raw = make_raw(chunks=[(10.0 + i, p) for i, p in enumerate(pieces)])
    resp = exchange_of(builder().build(raw)).response
    assert resp is not None
    assert resp.text == "Grüße 日本語 🙂"
    assert resp.usage.completion_tokens == 5


def tool_fragment(index: int, call_id: str | None, name: str | None, args: str) -> bytes:
    function: dict[str, object] = {"arguments": args}
    if name is not None:
        function["name"] = name
    call: dict[str, object] = {"index": index, "id": call_id, "function": function}
    if call_id is not None:
        call["type"] = "function"
    return event(chunk({"tool_calls": [call]}))


TOOL_EVENTS = [
    (50.0, event(chunk({"role": "assistant", "content": None}))),
    (60.0, tool_fragment(0, "call_a", "get_weather", "")),
    (61.0, tool_fragment(1, "call_b", "get_time", "")),
    (70.0, tool_fragment(0, None, None, '{"city": ')),
    (71.0, tool_fragment(1, None, None, '{"tz": "UTC"}')),
    (80.0, tool_fragment(0, None, None, '"Zürich"}')),
    (81.0, event(chunk({}, finish="tool_calls"))),
    (90.0, event(usage_only(17))),
    (91.0, DONE),
]


def test_parallel_tool_call_deltas_are_assembled_per_index() -> None:
    ex = exchange_of(builder().build(make_raw(chunks=split_events(TOOL_EVENTS))))
    resp = ex.response
    assert resp is not None
    calls = [(c.index, c.id, c.type, c.name, c.arguments) for c in resp.tool_calls]
    assert calls == [
        (0, "call_a", "function", "get_weather", '{"city": "Zürich"}'),
        (1, "call_b", "function", "get_time", '{"tz": "UTC"}'),
    ]
    assert resp.finish_reason is FinishReason.TOOL_CALLS
    assert resp.usage.completion_tokens == 17
    assert ex.timings.ttft_ms == pytest.approx(60.0)
    assert ex.timings.e2e_ms == pytest.approx(80.0)


# ------------------------------------------------------------------ content encodings


def gzip_stream(events: Sequence[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    comp = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    out = [(t, comp.compress(d) + comp.flush(zlib.Z_SYNC_FLUSH)) for t, d in events]
    out.append((events[-1][0], comp.flush()))
    return out


def br_stream(events: Sequence[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    comp = brotli.Compressor()
    out = [(t, bytes(comp.process(d)) + bytes(comp.flush())) for t, d in events]
    out.append((events[-1][0], bytes(comp.finish())))
    return out


@pytest.mark.parametrize(("coding", "encode"), [("gzip", gzip_stream), ("br", br_stream)])
def test_encoded_stream_keeps_arrival_times(coding: str, encode: object) -> None:
    assert callable(encode)
    raw = make_raw(chunks=encode(TEXT_EVENTS), content_encoding=coding)
    ex = exchange_of(builder().build(raw))
    assert ex.response is not None
    assert ex.response.text == "Grüße 日本語 🙂"
    assert ex.timings.ttfb_ms == pytest.approx(100.0)
    assert ex.timings.ttft_ms == pytest.approx(150.0)
    assert ex.timings.e2e_ms == pytest.approx(230.0)
    assert ex.outcome is ExchangeOutcome.DONE


def completion_body(text: str = "The answer is 42.") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-9",
            "object": "chat.completion",
            "model": "m-live",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15},
        }
    ).encode()


@pytest.mark.parametrize(
    ("coding", "encoded"),
    [
        (None, completion_body()),
        ("gzip", gzip.compress(completion_body())),
        ("br", bytes(brotli.compress(completion_body()))),
    ],
)
def test_non_streamed_body_plain_gzip_and_br(coding: str | None, encoded: bytes) -> None:
    third = len(encoded) // 3
    pieces = [
        (40.0, encoded[:third]),
        (45.0, encoded[third : 2 * third]),
        (52.0, encoded[2 * third :]),
    ]
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=pieces,
        content_type="application/json",
        content_encoding=coding,
    )
    ex = exchange_of(builder().build(raw))
    resp = ex.response
    assert resp is not None
    assert not resp.streamed
    assert resp.text == "The answer is 42."
    assert resp.usage.completion_tokens == 6
    assert ex.timings.ttfb_ms == pytest.approx(40.0)
    assert ex.timings.ttft_ms is None  # a non-streamed body shows no first token
    assert ex.timings.e2e_ms == pytest.approx(52.0)
    assert ex.outcome is ExchangeOutcome.DONE


@pytest.mark.parametrize(
    ("coding", "data", "reason"),
    [
        ("gzip", b"\x1f\x8b\x08\x00garbage-garbage-garbage", "corrupt"),
        ("br", b"\xff\xff\xff\xffnot brotli at all", "corrupt"),
        ("compress", b"whatever", "unsupported_coding"),
    ],
)
def test_undecodable_body_is_an_error_outcome_with_the_reason(
    coding: str, data: bytes, reason: str
) -> None:
    raw = make_raw(chunks=[(10.0, data)], content_encoding=coding)
    result = builder().build(raw)
    ex = exchange_of(result)
    assert ex.outcome is ExchangeOutcome.ERROR
    assert result.fallback_reason is None
    assert ex.response is not None
    assert ex.response.error_message is not None
    assert reason in ex.response.error_message
    assert coding in ex.response.error_message


def test_encoded_body_that_ends_early_on_a_done_capture_is_an_error() -> None:
    encoded = gzip.compress(completion_body())
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=[(10.0, encoded[:-8])],  # the trailer (CRC, size) is missing
        content_type="application/json",
        content_encoding="gzip",
    )
    ex = exchange_of(builder().build(raw))
    assert ex.outcome is ExchangeOutcome.ERROR
    assert ex.response is not None
    assert ex.response.text == "The answer is 42."
    assert "ended before its end marker" in (ex.response.error_message or "")


# ------------------------------------------------------------------ legacy completions


def test_legacy_completions_streamed_and_not() -> None:
    def piece(text: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return event({"id": "x", "object": "text_completion", "model": "inst", "choices": [choice]})

    stream = [
        (20.0, piece("Once ")),
        (30.0, piece("upon")),
        (40.0, piece("", "length")),
        (41.0, DONE),
    ]
    body = {"model": "inst", "prompt": ["Tell a story", "x"], "stream": True, "max_tokens": 2}
    ex = exchange_of(
        builder().build(make_raw(body=body, chunks=split_events(stream), path="/v1/completions"))
    )
    assert ex.route == "/v1/completions"
    assert ex.request.path == "/v1/completions"
    assert ex.response is not None
    assert ex.response.text == "Once upon"
    assert ex.response.finish_reason is FinishReason.LENGTH
    assert ex.timings.ttft_ms == pytest.approx(20.0)
    assert ex.timings.e2e_ms == pytest.approx(30.0)

    whole = json.dumps(
        {
            "object": "text_completion",
            "model": "inst",
            "choices": [{"index": 0, "text": "Once upon", "finish_reason": "length"}],
        }
    ).encode()
    raw = make_raw(
        body={"model": "inst", "prompt": "Tell a story"},
        chunks=[(25.0, whole)],
        content_type="application/json",
        path="/v1/completions",
    )
    ex = exchange_of(builder().build(raw))
    assert ex.response is not None
    assert ex.response.text == "Once upon"
    assert ex.outcome is ExchangeOutcome.DONE


# ------------------------------------------------------------------ outcomes


def test_cancelled_stream_keeps_the_partial_answer() -> None:
    raw = make_raw(chunks=TEXT_EVENTS[:3], outcome=ExchangeOutcome.CANCELLED)
    ex = exchange_of(builder().build(raw))
    assert ex.outcome is ExchangeOutcome.CANCELLED
    assert ex.response is not None
    assert ex.response.text == "Grüße 日本語 "
    assert ex.response.finish_reason is FinishReason.UNKNOWN
    assert ex.response.usage.usage_source is UsageSource.MISSING


def test_cancelled_before_headers_has_no_response() -> None:
    raw = make_raw(status=None, outcome=ExchangeOutcome.CANCELLED)
    ex = exchange_of(builder().build(raw))
    assert ex.outcome is ExchangeOutcome.CANCELLED
    assert ex.response is None
    assert ex.timings.source is TimingSource.MISSING


def test_upstream_unreachable_is_an_error_without_response() -> None:
    raw = make_raw(
        status=None,
        outcome=ExchangeOutcome.ERROR,
        error="connect: refused by https://user:hunter2@10.0.0.7:8000",
    )
    ex = exchange_of(builder().build(raw))
    assert (ex.outcome, ex.response) == (ExchangeOutcome.ERROR, None)
    assert ex.error_detail is not None
    assert ex.error_detail.startswith("connect: refused")
    assert "hunter2" not in ex.error_detail


def test_truncated_copy_is_truncated_stream_and_body() -> None:
    raw = make_raw(chunks=TEXT_EVENTS[:4], truncated=True)
    ex = exchange_of(builder().build(raw))
    assert ex.outcome is ExchangeOutcome.TRUNCATED
    assert ex.response is not None
    assert ex.response.text == "Grüße 日本語 🙂"

    body = completion_body()
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=[(10.0, body[:40])],
        content_type="application/json",
        truncated=True,
    )
    ex = exchange_of(builder().build(raw))
    assert ex.outcome is ExchangeOutcome.TRUNCATED
    assert ex.response is not None
    assert "not a completion" in (ex.response.error_message or "")


def test_upstream_http_error_keeps_status_and_scrubbed_message() -> None:
    error = {"error": {"message": f"Rate limit for {CANARY_EMAIL} ({CANARY_KEY})", "code": 429}}
    raw = make_raw(
        chunks=[(12.0, json.dumps(error).encode())], status=429, content_type="application/json"
    )
    result = builder().build(raw)
    ex = exchange_of(result)
    assert ex.response is not None
    assert ex.response.status_code == 429
    assert ex.response.error_message == "Rate limit for [REDACTED:email] ([REDACTED:secret_key])"
    assert ex.outcome is ExchangeOutcome.DONE  # the upstream answered; status says how
    assert ex.timings.ttfb_ms == pytest.approx(12.0)
    assert ex.timings.e2e_ms == pytest.approx(12.0)
    assert CANARY_EMAIL.encode() not in result.built.payload

    html = make_raw(
        chunks=[(9.0, b"<html>502 Bad Gateway</html>")], status=502, content_type="text/html"
    )
    resp = exchange_of(builder().build(html)).response
    assert resp is not None
    assert resp.error_message == "<html>502 Bad Gateway</html>"


def test_capture_error_text_is_kept_scrubbed() -> None:
    raw = make_raw(
        chunks=TEXT_EVENTS[:3],
        outcome=ExchangeOutcome.ERROR,
        error=f"ReadError from http://svc:hunter2pw@upstream:8000/v1 for {CANARY_EMAIL}",
    )
    result = builder().build(raw)
    ex = exchange_of(result)
    assert ex.outcome is ExchangeOutcome.ERROR
    assert ex.response is not None
    assert ex.response.text == "Grüße 日本語 "
    assert ex.response.error_message == (
        "ReadError from http://[REDACTED:url_credentials]@upstream:8000/v1 for [REDACTED:email]"
    )
    assert b"hunter2pw" not in result.built.payload
    assert result.redaction_hits == {"url_credentials": 1, "email": 1}


def test_error_event_inside_a_200_stream_is_an_error_outcome() -> None:
    stream = [
        (10.0, event(chunk({"content": "par"}))),
        (20.0, event({"error": {"message": "backend overloaded"}})),
    ]
    ex = exchange_of(builder().build(make_raw(chunks=stream)))
    assert ex.outcome is ExchangeOutcome.ERROR
    assert ex.response is not None
    assert ex.response.text == "par"
    assert "backend overloaded" in (ex.response.error_message or "")


def test_a_200_body_that_is_not_a_completion_is_an_error_without_quoting_it() -> None:
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=[(10.0, f"<html>hello {CANARY_EMAIL}</html>".encode())],
        content_type="text/html",
    )
    result = builder().build(raw)
    ex = exchange_of(result)
    assert ex.outcome is ExchangeOutcome.ERROR
    assert ex.response is not None
    assert ex.response.error_message == "response body is not a completion (invalid_json)"
    assert b"jane" not in result.built.payload


def test_a_stream_with_no_event_is_an_error() -> None:
    ex = exchange_of(builder().build(make_raw(chunks=[(10.0, b": ping\n\n")])))
    assert ex.outcome is ExchangeOutcome.ERROR
    assert "without any completion chunk" in (ex.response.error_message or "")  # type: ignore[union-attr]


# ------------------------------------------------------------------ headers and query


def test_sensitive_headers_and_query_params_are_gone() -> None:
    raw = make_raw(
        chunks=TEXT_EVENTS,
        request_headers=[
            ("Authorization", "Bearer tok-123456789"),
            ("Cookie", "sid=abc"),
            ("X-Goog-Api-Key", "AIzaSyA-secret"),
            ("X-Session-Id", "user-42"),
            ("X-Forwarded-For", "203.0.113.9"),
            ("X-Internal-Route", "blue"),
            ("User-Agent", "OpenAI/Python 1.40"),
            ("X-Debug", f"note {CANARY_KEY}"),
        ],
        response_headers=[
            ("Set-Cookie", "sid=abc; HttpOnly"),
            ("X-Ratelimit-Remaining-Tokens", "9000"),
        ],
        query="api-version=2024-06-01&api_key=k-123&sig=abc%2Fdef&flag",
    )
    settings = CaptureSettings(extra_sensitive_headers=("x-internal-route",))
    result = ExchangeBuilder(settings, LIVE, "sidecar:test").build(raw)
    ex = exchange_of(result)
    req_names = [h.name for h in ex.request.headers]
    assert req_names == ["content-type", "user-agent", "x-debug"]
    assert dict((h.name, h.value) for h in ex.request.headers)["x-debug"] == (
        "note [REDACTED:secret_key]"
    )
    assert ex.response is not None
    assert [h.name for h in ex.response.headers] == ["content-type", "x-ratelimit-remaining-tokens"]
    assert ex.redaction.headers_removed == (
        "authorization",
        "cookie",
        "set-cookie",
        "x-forwarded-for",
        "x-goog-api-key",
        "x-internal-route",
        "x-session-id",
    )
    assert ex.route == CHAT
    assert ex.request.path == (
        f"{CHAT}?api-version=2024-06-01&api_key=[REDACTED:query_param]"
        "&sig=[REDACTED:query_param]&flag"
    )
    for secret in (b"tok-123", b"sid=abc", b"AIzaSy", b"user-42", b"203.0.113.9", b"k-123"):
        assert secret not in result.built.payload
    hits = {(h.rule, h.location) for h in ex.redaction.hits}
    assert ("query_param", "request.query.api_key") in hits
    assert ("query_param", "request.query.sig") in hits
    assert ("secret_key", "request.headers.x-debug") in hits
    assert result.redaction_hits["header_removed"] == 7


def test_compound_credential_headers_and_query_names_and_pii_in_header_values() -> None:
    # found by a fresh user: names that hold a sensitive word without a separator, camelCase
    # query names, a secret as a parameter name, a value-less item, PII in a kept header
    raw = make_raw(
        body=chat_request(),
        chunks=split_events(TEXT_EVENTS),
        request_headers=[
            ("Content-Type", "application/json"),
            ("X-MyToken", "canary-mytoken-1"),
            ("X-CSRFToken", "canary-csrf-1"),
            ("Authentication", "canary-authn-1"),
            ("X-Passphrase", "canary-pass-1"),
            ("X-User-Email", "hdr.canary@example-mail.com"),
            ("X-Phone", "+1 555 303 4444"),
        ],
        response_headers=[("X-Ratelimit-Remaining-Tokens", "9000")],
        query=(
            "accessToken=canary-q-1&pass=canary-q-2&passphrase=canary-q-3"
            f"&{CANARY_KEY}=1&q.noval.canary@example-mail.com&phone=%2B15554445555&page=2"
        ),
    )
    result = builder().build(raw)
    ex = exchange_of(result)
    for secret in (
        b"canary-mytoken-1",
        b"canary-csrf-1",
        b"canary-authn-1",
        b"canary-pass-1",
        b"hdr.canary",
        b"303 4444",
        b"canary-q-",
        CANARY_KEY.encode(),
        b"noval.canary",
        b"5554445555",
    ):
        assert secret not in result.built.payload, secret
    headers = dict((h.name, h.value) for h in ex.request.headers)
    assert headers == {
        "content-type": "application/json",
        "x-user-email": "[REDACTED:email]",
        "x-phone": "[REDACTED:phone]",
    }
    assert {"x-mytoken", "x-csrftoken", "authentication", "x-passphrase"} <= set(
        ex.redaction.headers_removed
    )
    assert ex.response is not None
    assert "x-ratelimit-remaining-tokens" in [h.name for h in ex.response.headers]
    assert ex.request.path.endswith("&page=2")
    assert "accessToken=[REDACTED:query_param]" in ex.request.path
    # locations never quote a secret parameter name
    assert all(CANARY_KEY not in h.location for h in ex.redaction.hits)


# ------------------------------------------------------------------ canaries


def canary_capture(keep_raw: bool) -> tuple[ExchangeBuilder, RawCapture]:
    body = chat_request(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"Email {CANARY_EMAIL} the report"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {
                            "name": "send_mail",
                            "arguments": json.dumps({"to": CANARY_EMAIL}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "sent"},
        ],
        user=CANARY_KEY,
        metadata={"api_key": CANARY_KEY},
    )
    stream = [
        (10.0, event(chunk({"role": "assistant", "content": ""}))),
        (20.0, event(chunk({"content": "I mailed jane.doe@exa"}))),
        (30.0, event(chunk({"content": "mple.com as asked."}))),
        (40.0, tool_fragment(0, "call_1", "send_mail", '{"to": "jane.d')),
        (50.0, tool_fragment(0, None, None, 'oe@example.com"}')),
        (60.0, event(chunk({}, finish="tool_calls"))),
        (61.0, DONE),
    ]
    raw = make_raw(
        body=body,
        chunks=split_events(stream),
        request_headers=[("Authorization", f"Bearer {CANARY_KEY}"), ("x-api-key", CANARY_KEY)],
        response_headers=[("Set-Cookie", f"s={CANARY_KEY}")],
        query=f"api_key={CANARY_KEY}",
    )
    return builder(keep_raw_body=keep_raw), raw


@pytest.mark.parametrize("keep_raw", [False, True])
def test_canaries_appear_nowhere_in_the_payload(keep_raw: bool) -> None:
    b, raw = canary_capture(keep_raw)
    result = b.build(raw)
    payload = result.built.payload
    for needle in (b"sk-canary", b"canary", b"jane.d", b"oe@example", b"example.com"):
        assert needle not in payload, needle
    ex = exchange_of(result)
    assert ex.response is not None
    assert ex.response.text == "I mailed [REDACTED:email] as asked."
    assert ex.response.tool_calls[0].arguments == '{"to": "[REDACTED:email]"}'
    hits = {(h.rule, h.location): h.count for h in ex.redaction.hits}
    expected = {
        ("email", "request.messages[1].content"): 1,
        ("email", "request.messages[2].tool_calls[0].function.arguments"): 1,
        ("secret_key", "request.user"): 1,
        ("secret_field", "request.metadata.api_key"): 1,
        ("query_param", "request.query.api_key"): 1,
        ("email", "response.text"): 1,
        ("email", "response.tool_calls[0].arguments"): 1,
    }
    if keep_raw:
        expected[("raw_body_dropped", "response.body")] = 1
    assert hits == expected
    assert ex.response.body is None  # split across deltas: the raw stream is never kept
    assert {"authorization", "x-api-key", "set-cookie"} <= set(ex.redaction.headers_removed)
    assert result.redaction_hits["email"] == 4
    assert result.redaction_hits["secret_key"] == 1
    assert result.redaction_hits["secret_field"] == 1  # metadata.api_key
    # the stored request is the redacted one, re-serialized compactly
    stored = orjson.loads(ex.request.body)
    assert stored["messages"][1]["content"] == "Email [REDACTED:email] the report"
    assert stored["user"] == "[REDACTED:secret_key]"


def test_raw_body_is_kept_scrubbed_when_nothing_was_split() -> None:
    stream_raw = make_raw(chunks=TEXT_EVENTS)
    ex = exchange_of(builder(keep_raw_body=True).build(stream_raw))
    assert ex.response is not None
    assert ex.response.body == b"".join(d for _, d in TEXT_EVENTS).decode()

    body = completion_body(f"Write to {CANARY_EMAIL}.")
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=[(10.0, gzip.compress(body))],
        content_type="application/json",
        content_encoding="gzip",
    )
    result = builder(keep_raw_body=True).build(raw)
    ex = exchange_of(result)
    assert ex.response is not None
    assert ex.response.body is not None
    assert "[REDACTED:email]" in ex.response.body
    assert b"jane" not in result.built.payload
    assert {h.location for h in ex.redaction.hits} == {"response.text", "response.body"}


# ------------------------------------------------------------------ tagging and identity


def test_task_type_header_rule_and_default() -> None:
    rules = (TaskTypeRule(task_type="agent", has_tools=True),)
    b = builder(task_type_rules=[r.model_dump() for r in rules])
    by_header = b.build(make_raw(chunks=TEXT_EVENTS, request_headers=[("X-Task-Type", "qa")]))
    assert by_header.task_type == "qa"
    assert exchange_of(by_header).task_type == "qa"
    assert by_header.tag is not None
    assert by_header.tag.source is TagSource.HEADER

    bad = b.build(
        make_raw(
            body=chat_request(tools=[{"type": "function", "function": {"name": "f"}}]),
            chunks=TEXT_EVENTS,
            request_headers=[("X-Task-Type", "not valid!")],
        )
    )
    assert bad.task_type == "agent"
    assert bad.tag is not None
    assert bad.tag.rejected_header

    plain = b.build(make_raw(chunks=TEXT_EVENTS))
    assert plain.task_type == "default"
    assert exchange_of(plain).task_type == "default"


def test_unknown_live_model_name_falls_back_to_the_response_model() -> None:
    b = ExchangeBuilder(CaptureSettings(), ModelIdentity(name="unknown", tokenizer_hash="t"), "s")
    ex = exchange_of(b.build(make_raw(chunks=TEXT_EVENTS)))
    assert ex.baseline_model == ModelIdentity(name="m-live", tokenizer_hash="t")
    no_response = exchange_of(b.build(make_raw(status=None, outcome=ExchangeOutcome.ERROR)))
    assert no_response.baseline_model.name == "unknown"


def test_key_is_the_session_hash_else_the_id() -> None:
    with_session = builder().build(make_raw(chunks=TEXT_EVENTS, session_key_hash="ab" * 16))
    assert with_session.built.key == b"ab" * 16
    assert exchange_of(with_session).session_key_hash == "ab" * 16
    without = builder().build(make_raw(chunks=TEXT_EVENTS))
    assert without.built.key == without.exchange_id.encode()
    assert without.built.exchange_id == without.exchange_id == "01JNQ3ZK8Y0000000000000000"


def test_request_body_with_content_encoding_is_decoded_then_redacted() -> None:
    body = json.dumps(chat_request(user=CANARY_EMAIL)).encode()
    raw = make_raw(chunks=TEXT_EVENTS, request_headers=[("Content-Encoding", "gzip")])
    raw.request_body = gzip.compress(body)
    result = builder().build(raw)
    stored = orjson.loads(exchange_of(result).request.body)
    assert stored["user"] == "[REDACTED:email]"

    raw.request_body = b"\x1f\x8bnot really gzip"
    result = builder().build(raw)
    ex = exchange_of(result)
    assert ex.request.body == ""
    assert [(h.rule, h.location) for h in ex.redaction.hits] == [
        ("request_body_dropped", "request.body")
    ]


# ------------------------------------------------------------------ failure policy


def test_unexpected_failure_yields_a_minimal_error_record_without_the_body() -> None:
    raw = make_raw(body=chat_request(user=CANARY_KEY), chunks=TEXT_EVENTS)
    raw.request_headers.append((b"x-broken", "not bytes"))  # type: ignore[arg-type]
    result = builder().build(raw)
    assert result.fallback_reason is not None
    assert "'headers'" in result.fallback_reason
    ex = exchange_of(result)
    assert ex.outcome is ExchangeOutcome.ERROR
    assert result.outcome is ExchangeOutcome.ERROR
    assert ex.request.body == ""
    assert ex.request.headers == ()
    assert ex.response is not None
    assert ex.response.error_message == result.fallback_reason
    assert CANARY_KEY.encode() not in result.built.payload
    assert result.redaction_hits == {"request_body_dropped": 1}


def test_build_error_when_not_even_the_minimal_record_can_be_built() -> None:
    raw = make_raw(chunks=TEXT_EVENTS)
    raw.captured_at = "yesterday"  # type: ignore[assignment]
    with pytest.raises(BuildError):
        builder().build(raw)


# ------------------------------------------------------------------ process pool


def test_build_in_a_real_process_pool_matches_inline() -> None:
    settings = CaptureSettings(keep_raw_body=True, extra_sensitive_headers=("x-internal",))
    b = ExchangeBuilder(settings, LIVE, "sidecar:test")
    _, canary = canary_capture(keep_raw=True)
    raws = [make_raw(chunks=split_events(TEXT_EVENTS)), canary]
    with ProcessPoolExecutor(
        max_workers=1, initializer=init_worker, initargs=worker_args(settings, LIVE, "sidecar:test")
    ) as pool:
        remote = list(pool.map(build_in_worker, raws))
    for raw, result in zip(raws, remote, strict=True):
        assert result == b.build(raw)
    assert pickle.loads(pickle.dumps(remote[1])) == remote[1]


def _niceness() -> int:
    return os.nice(0)


@pytest.mark.parametrize("nice", [0, 10])
def test_builder_process_runs_at_the_configured_niceness(nice: int) -> None:
    """The builder worker lowers its own priority by ``builder_nice`` (default 10), so the
    relay wins the CPU on a busy host; 0 leaves it at the parent's."""
    settings = CaptureSettings(builder_nice=nice)
    assert CaptureSettings().builder_nice == 10
    with ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=worker_args(settings, LIVE, "sidecar:test"),
    ) as pool:
        assert pool.submit(_niceness).result() == min(19, os.nice(0) + nice)


def test_build_in_worker_needs_init_worker() -> None:
    with pytest.raises(BuildError):
        build_in_worker(make_raw())


def test_default_source_names_the_host() -> None:
    assert default_source().startswith("sidecar:")
    assert len(default_source()) > len("sidecar:")
