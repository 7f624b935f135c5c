"""ExchangeBuilder timings and cache hits: TTFC beside TTFT, cached answers marked.

Real SSE bytes of a reasoning model (vLLM's ``delta.reasoning``, DeepSeek/SGLang's
``delta.reasoning_content``) go through the builder with recorded arrival times: TTFT is
the first reasoning token, TTFC the first visible content or tool call. Cache-hit rules
are applied by the builder to the received response headers.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from shadoweval.capture.builder import ExchangeBuilder, build_in_worker, init_worker, worker_args
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.pipeline import CapturePipeline
from shadoweval.capture.sinks.file import FileSink
from shadoweval.capture_log import read_capture_log
from shadoweval.config import DEFAULT_CACHE_HIT_RULES, CacheHitRule, CaptureSettings
from shadoweval.records import HeaderPair

from .test_builder import (
    DONE,
    LIVE,
    builder,
    chat_request,
    chunk,
    completion_body,
    event,
    exchange_of,
    make_raw,
    split_events,
    tool_fragment,
    usage_only,
)


def reasoning_events(field: str) -> list[tuple[float, bytes]]:
    """A reasoning model's stream: role chunk, 3 reasoning deltas, then the answer."""
    return [
        (90.0, event(chunk({"role": "assistant", "content": ""}))),
        (120.0, event(chunk({field: "Let me think"}))),
        (300.0, event(chunk({field: " about 6×7…"}))),
        (700.0, event(chunk({field: " it is 42.", "content": ""}))),
        (950.0, event(chunk({"content": "Die Antwort: "}))),
        (990.0, event(chunk({"content": "42 🙂"}))),
        (1000.0, event(chunk({}, finish="stop"))),
        (1001.0, event(usage_only(9))),
        (1002.0, DONE),
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_then_content_ttft_is_first_reasoning_ttfc_first_content(field: str) -> None:
    ex = exchange_of(builder().build(make_raw(chunks=split_events(reasoning_events(field)))))
    assert ex.response is not None
    assert ex.response.text == "Die Antwort: 42 🙂"
    assert ex.response.reasoning_text == "Let me think about 6×7… it is 42."
    t = ex.timings
    assert t.ttft_ms == pytest.approx(120.0)  # the first reasoning token
    assert t.ttfc_ms == pytest.approx(950.0)  # the first visible content
    assert t.e2e_ms == pytest.approx(990.0)
    # TPOT and ITL are still over every token-bearing event, reasoning included.
    assert t.tpot_ms == pytest.approx((990.0 - 120.0) / 8)
    assert t.itl is not None
    assert t.itl.count == 4


def test_plain_stream_ttfc_equals_ttft() -> None:
    events = [
        (100.0, event(chunk({"role": "assistant", "content": ""}))),
        (150.0, event(chunk({"content": "Hi"}))),
        (180.0, event(chunk({"content": "!"}, finish="stop"))),
        (181.0, DONE),
    ]
    t = exchange_of(builder().build(make_raw(chunks=events))).timings
    assert t.ttft_ms == t.ttfc_ms == pytest.approx(150.0)


def test_a_tool_call_is_visible_output() -> None:
    events = [
        (100.0, event(chunk({"role": "assistant", "content": ""}))),
        (130.0, event(chunk({"reasoning_content": "I should look it up."}))),
        (400.0, tool_fragment(0, "call_a", "get_weather", '{"city": ')),
        (420.0, tool_fragment(0, None, None, '"Zürich"}')),
        (430.0, event(chunk({}, finish="tool_calls"))),
        (431.0, DONE),
    ]
    ex = exchange_of(builder().build(make_raw(chunks=events)))
    assert ex.response is not None
    assert [c.name for c in ex.response.tool_calls] == ["get_weather"]
    assert ex.timings.ttft_ms == pytest.approx(130.0)
    assert ex.timings.ttfc_ms == pytest.approx(400.0)


def test_a_stream_of_reasoning_only_has_no_ttfc() -> None:
    events = [
        (100.0, event(chunk({"reasoning": "hmm"}))),
        (200.0, event(chunk({"reasoning": " hmm"}, finish="length"))),
        (201.0, DONE),
    ]
    t = exchange_of(builder().build(make_raw(chunks=events))).timings
    assert t.ttft_ms == pytest.approx(100.0)
    assert t.ttfc_ms is None


def test_non_streamed_ttfc_is_e2e() -> None:
    body = completion_body()
    raw = make_raw(
        body=chat_request(stream=False),
        chunks=[(40.0, body[:30]), (52.0, body[30:])],
        content_type="application/json",
    )
    t = exchange_of(builder().build(raw)).timings
    assert t.ttft_ms is None
    assert t.ttfc_ms == t.e2e_ms == pytest.approx(52.0)


# ------------------------------------------------------------------ cache hits

STREAM = [
    (100.0, event(chunk({"content": "Hi"}, finish="stop"))),
    (101.0, DONE),
]


@pytest.mark.parametrize(
    ("headers", "matched"),
    [
        ([("X-Cache", "Hit from cloudfront")], [("x-cache", "Hit from cloudfront")]),
        ([("X-Cache", "MISS, HIT")], [("x-cache", "MISS, HIT")]),
        ([("CF-Cache-Status", "hit")], [("cf-cache-status", "hit")]),
        ([("cf-cache-status", "STALE")], [("cf-cache-status", "STALE")]),
        ([("Age", "17")], [("age", "17")]),
        (
            [("x-portkey-cache-status", "SEMANTIC HIT")],
            [("x-portkey-cache-status", "SEMANTIC HIT")],
        ),
        (
            [("X-Cache", "HIT"), ("Age", "3"), ("Server", "varnish")],
            [("x-cache", "HIT"), ("age", "3")],
        ),
    ],
)
def test_default_rules_mark_cache_hits_with_the_matched_headers(
    headers: list[tuple[str, str]], matched: list[tuple[str, str]]
) -> None:
    result = builder().build(make_raw(chunks=STREAM, response_headers=headers))
    resp = exchange_of(result).response
    assert resp is not None
    assert resp.cache_hit
    assert resp.cache_hit_headers == tuple(HeaderPair(name=n, value=v) for n, v in matched)
    assert resp.text == "Hi"  # the answer is kept: quality checks still use it


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [("X-Cache", "MISS from cloudfront")],
        [("CF-Cache-Status", "DYNAMIC")],
        [("cf-cache-status", "MISS"), ("Age", "0")],
        [("Age", "not-a-number")],
        [("X-Cache-Lookup", "HIT from squid")],  # another header name: no rule
    ],
)
def test_misses_are_not_cache_hits(headers: list[tuple[str, str]]) -> None:
    resp = exchange_of(builder().build(make_raw(chunks=STREAM, response_headers=headers))).response
    assert resp is not None
    assert not resp.cache_hit
    assert resp.cache_hit_headers == ()


def test_configured_rules_replace_the_defaults() -> None:
    rules = [{"header": "X-Gateway-Cache", "equals": ["served"]}]
    b = builder(cache_hit_rules=rules)
    hit = exchange_of(
        b.build(make_raw(chunks=STREAM, response_headers=[("x-gateway-cache", "Served ")]))
    )
    assert hit.response is not None
    assert hit.response.cache_hit_headers == (HeaderPair(name="x-gateway-cache", value="Served "),)
    default_only = exchange_of(b.build(make_raw(chunks=STREAM, response_headers=[("Age", "5")])))
    assert default_only.response is not None
    assert not default_only.response.cache_hit
    off = exchange_of(
        builder(cache_hit_rules=[]).build(
            make_raw(chunks=STREAM, response_headers=[("X-Cache", "HIT")])
        )
    )
    assert off.response is not None
    assert not off.response.cache_hit


def test_a_matched_header_that_redaction_removes_keeps_only_its_name() -> None:
    rules = [{"header": "x-cache-key", "contains": "hit"}]
    raw = make_raw(chunks=STREAM, response_headers=[("X-Cache-Key", "hit:tenant-42:abc")])
    result = builder(cache_hit_rules=rules).build(raw)
    ex = exchange_of(result)
    assert ex.response is not None
    assert ex.response.cache_hit_headers == (
        HeaderPair(name="x-cache-key", value="[REDACTED:header]"),
    )
    assert "x-cache-key" in ex.redaction.headers_removed
    assert b"tenant-42" not in result.built.payload


def test_an_error_response_from_a_cache_is_marked_too() -> None:
    raw = make_raw(
        status=503,
        content_type="application/json",
        chunks=[(20.0, b'{"error": {"message": "overloaded"}}')],
        response_headers=[("Age", "30")],
    )
    resp = exchange_of(builder().build(raw)).response
    assert resp is not None
    assert resp.status_code == 503
    assert resp.cache_hit


def test_rules_reach_the_builder_process() -> None:
    """The sidecar's builder runs in a spawned process: the rules travel in its settings."""
    settings = CaptureSettings(cache_hit_rules=(CacheHitRule(header="x-edge", greater_than=1.5),))
    raw = make_raw(
        chunks=split_events(reasoning_events("reasoning")), response_headers=[("X-Edge", "2")]
    )
    with ProcessPoolExecutor(
        max_workers=1, initializer=init_worker, initargs=worker_args(settings, LIVE, "s")
    ) as pool:
        result = pool.submit(build_in_worker, raw).result(timeout=120)
    ex = exchange_of(result)
    assert ex.response is not None
    assert ex.response.cache_hit_headers == (HeaderPair(name="x-edge", value="2"),)
    assert ex.timings.ttfc_ms == pytest.approx(950.0)
    assert CaptureSettings().cache_hit_rules == DEFAULT_CACHE_HIT_RULES


@pytest.mark.anyio
async def test_the_pipeline_counts_cache_hits_and_writes_them(tmp_path: Path) -> None:
    metrics = CaptureMetrics()
    sink = FileSink(tmp_path / "log", metrics)
    b = ExchangeBuilder(CaptureSettings(), LIVE, source="test")
    async with CapturePipeline(b, [sink], metrics, mode="inline") as pipeline:
        assert pipeline.offer(make_raw(chunks=STREAM, response_headers=[("Age", "8")]))
        assert pipeline.offer(make_raw(chunks=STREAM, response_headers=[("X-Cache", "MISS")]))
    entries = list(read_capture_log(tmp_path / "log"))
    flags = [e.exchange.response.cache_hit for e in entries if e.exchange and e.exchange.response]
    assert flags == [True, False]
    counted = metrics.registry.get_sample_value(
        "shadoweval_capture_cache_hits_total", {"header": "age"}
    )
    assert counted == 1.0
