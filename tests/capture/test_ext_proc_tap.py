"""StreamTap: ext_proc messages (Envoy's own protobuf types) → one RawCapture, and the
renderer's input checks. Pure: no Envoy, no sockets (those are in test_envoy_front.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2
from prometheus_client import CollectorRegistry

from shadoweval.capture.envoy_config import EXT_PROC_FILTER, EnvoyConfigSpec, render_envoy_config
from shadoweval.capture.ext_proc import ExtProcMetrics, StreamTap
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sampling import StickySampler
from shadoweval.config import CaptureSettings
from shadoweval.errors import ConfigError
from shadoweval.records import ExchangeOutcome

CHAT = "/v1/chat/completions"


def _headers(pairs: list[tuple[str, str]], eos: bool = False) -> Any:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs]
    )
    return pb.HttpHeaders(headers=hm, end_of_stream=eos)


def _attrs(values: dict[str, str]) -> dict[str, struct_pb2.Struct]:
    """The ``attributes`` map as Envoy fills it: keyed by the filter's name."""
    s = struct_pb2.Struct()
    for name, value in values.items():
        s.fields[name].string_value = value
    return {EXT_PROC_FILTER: s}


def request_headers(
    method: str = "POST", path: str = CHAT, extra: tuple[tuple[str, str], ...] = (), **kw: Any
) -> Any:
    pairs = [(":authority", "live:8080"), (":path", path), (":method", method), *extra]
    return pb.ProcessingRequest(
        request_headers=_headers(pairs, kw.pop("eos", False)), observability_mode=True, **kw
    )


def body(data: bytes, eos: bool = False, response: bool = True) -> Any:
    field = "response_body" if response else "request_body"
    return pb.ProcessingRequest(**{field: pb.HttpBody(body=data, end_of_stream=eos)})


def response_headers(status: str = "200", details: str = "via_upstream", eos: bool = False) -> Any:
    pairs = [(":status", status), ("content-type", "text/event-stream")]
    return pb.ProcessingRequest(
        response_headers=_headers(pairs, eos),
        attributes=_attrs({"response.code_details": details}),
    )


def _tap(**settings: Any) -> tuple[StreamTap, CaptureMetrics, ExtProcMetrics]:
    cap = CaptureSettings(**settings)
    metrics = CaptureMetrics(CollectorRegistry())
    ext = ExtProcMetrics(metrics.registry)
    sampler = StickySampler(cap.sample_percent, cap.session_headers, "salt")
    return StreamTap(cap, sampler, metrics, ext), metrics, ext


def _sample(metrics: CaptureMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_streamed_exchange_becomes_one_raw_capture() -> None:
    tap, metrics, _ = _tap()
    envoy_at = datetime.now(UTC) - timedelta(milliseconds=4)
    first = request_headers(
        extra=(("authorization", "Bearer sk-x"), ("x-session-id", "s1")),
        attributes=_attrs({"request.time": envoy_at.isoformat()}),
    )
    steps = [
        (first, 1_000_000_000),
        (body(b'{"model":', response=False), 1_000_100_000),
        (body(b' "m"}', eos=True, response=False), 1_000_200_000),
        (response_headers(), 1_010_000_000),
        (body(b"data: {}\n\n"), 1_020_000_000),
        (body(b"data: [DONE]\n\n"), 1_030_000_000),
        (body(b"", eos=True), 1_031_000_000),
    ]
    done = [tap.feed(msg, t) for msg, t in steps]
    assert done == [False] * 6 + [True]
    raw = tap.take()
    assert raw is not None
    assert tap.take() is None  # handed over once
    assert (raw.method, raw.path, raw.query) == ("POST", CHAT, "")
    assert raw.request_headers[0] == (b"host", b"live:8080")
    assert (b"authorization", b"Bearer sk-x") in raw.request_headers  # redacted later
    assert raw.request_body == b'{"model": "m"}'
    assert raw.status_code == 200
    assert raw.response_headers == [(b"content-type", b"text/event-stream")]
    assert raw.chunks == [(1_020_000_000, b"data: {}\n\n"), (1_030_000_000, b"data: [DONE]\n\n")]
    assert raw.outcome is ExchangeOutcome.DONE
    assert raw.end_ns == 1_031_000_000
    assert raw.response_start_ns == 1_010_000_000
    # the start is Envoy's request.time carried onto the perf clock: ~4 ms before the read
    read_ns = 1_000_000_000
    assert read_ns - 10_000_000_000 < raw.start_ns <= read_ns - 4_000_000
    assert raw.session_key_hash is not None
    assert _sample(metrics, "shadoweval_ext_proc_streams_total", result="captured") == 1


def test_without_request_time_the_start_is_the_end_of_the_request() -> None:
    tap, metrics, _ = _tap()
    tap.feed(request_headers(), 10)
    tap.feed(body(b"{}", eos=True, response=False), 20)
    tap.feed(response_headers(), 30)
    raw = tap.raw
    assert raw is not None
    assert raw.start_ns == 20
    assert _sample(metrics, "shadoweval_ext_proc_timing_fallbacks_total") == 1


@pytest.mark.parametrize(
    ("msg", "result"),
    [
        (request_headers(method="GET"), "not_captured_route"),
        (request_headers(path="/v1/embeddings"), "not_captured_route"),
        (request_headers(extra=(("x-shadow-eval", "replay"),)), "not_captured_marker"),
    ],
)
def test_requests_not_captured_end_the_stream(msg: Any, result: str) -> None:
    tap, metrics, _ = _tap()
    assert tap.feed(msg, 1) is True
    assert tap.take() is None
    assert _sample(metrics, "shadoweval_ext_proc_streams_total", result=result) == 1


def test_unsampled_is_counted() -> None:
    tap, metrics, _ = _tap(sample_percent=0.0)
    assert tap.feed(request_headers(), 1) is True
    assert tap.take() is None
    assert _sample(metrics, "shadoweval_capture_unsampled_total") == 1


def test_query_string_is_split_from_the_route() -> None:
    tap, _, _ = _tap()
    tap.feed(request_headers(path=f"{CHAT}?api-version=2024"), 1)
    assert tap.raw is not None
    assert (tap.raw.path, tap.raw.query) == (CHAT, "api-version=2024")


def test_copy_over_max_capture_bytes_is_truncated() -> None:
    tap, _, _ = _tap(max_capture_bytes=1024)
    tap.feed(request_headers(eos=True), 1)
    tap.feed(response_headers(), 2)
    tap.feed(body(b"a" * 1000), 3)
    tap.feed(body(b"b" * 1000), 4)
    assert tap.feed(body(b"", eos=True), 5)
    raw = tap.take()
    assert raw is not None
    assert raw.truncated
    assert raw.outcome is ExchangeOutcome.TRUNCATED
    assert raw.captured_bytes == 1000


def test_envoy_local_reply_is_an_error_with_its_details() -> None:
    tap, metrics, _ = _tap()
    tap.feed(request_headers(eos=True), 1)
    details = "upstream_reset_before_response_started{remote_connection_failure}"
    tap.feed(response_headers("503", details), 2)
    assert tap.feed(body(b"upstream connect error", eos=True), 3)
    raw = tap.take()
    assert raw is not None
    assert raw.outcome is ExchangeOutcome.ERROR
    assert raw.status_code == 503
    assert raw.error is not None
    assert details in raw.error
    assert _sample(metrics, "shadoweval_ext_proc_local_replies_total") == 1


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        ("stream_closed", ExchangeOutcome.CANCELLED),
        ("stream_reset", ExchangeOutcome.CANCELLED),
        ("shutdown", ExchangeOutcome.CANCELLED),
        ("stream_failed", ExchangeOutcome.ERROR),
    ],
)
def test_a_stream_ending_early_is_kept_with_its_reason(
    reason: str, outcome: ExchangeOutcome
) -> None:
    tap, metrics, _ = _tap()
    tap.feed(request_headers(eos=True), 1)
    tap.feed(response_headers(), 2)
    tap.feed(body(b"data: {}\n\n"), 3)
    tap.incomplete(reason, 9, "RpcError: boom")
    raw = tap.take()
    assert raw is not None
    assert raw.outcome is outcome
    assert raw.end_ns == 9
    assert raw.error
    assert len(raw.chunks) == 1
    assert _sample(metrics, "shadoweval_ext_proc_incomplete_total", reason=reason) == 1


def test_incomplete_after_done_changes_nothing() -> None:
    tap, metrics, _ = _tap()
    tap.feed(request_headers(eos=True), 1)
    tap.feed(response_headers(eos=True), 2)
    tap.incomplete("stream_reset", 3)
    raw = tap.take()
    assert raw is not None
    assert raw.outcome is ExchangeOutcome.DONE
    assert _sample(metrics, "shadoweval_ext_proc_incomplete_total", reason="stream_reset") == 0


def test_stream_without_headers_is_counted() -> None:
    tap, metrics, _ = _tap()
    tap.incomplete("stream_closed", 1)
    assert tap.take() is None
    assert _sample(metrics, "shadoweval_ext_proc_streams_total", result="no_headers") == 1


# -- the renderer's checks --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (EnvoyConfigSpec(upstream_url="ftp://h"), "capture.upstream_url"),
        (EnvoyConfigSpec(upstream_url="http://h:8000/v1"), "capture.upstream_url"),
        (EnvoyConfigSpec(upstream_url="http://h", ext_proc_port=0), "envoy.ext_proc_port"),
        (EnvoyConfigSpec(upstream_url="http://h", listen_port=70000), "capture.port"),
        (EnvoyConfigSpec(upstream_url="http://h", routes=()), "capture.routes"),
    ],
)
def test_renderer_names_the_bad_field(spec: EnvoyConfigSpec, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        render_envoy_config(spec)
    assert info.value.field == field


def test_renderer_is_deterministic_and_keeps_the_live_path_rules() -> None:
    import yaml

    spec = EnvoyConfigSpec(upstream_url="https://models.example:8443")
    text = render_envoy_config(spec)
    assert text == render_envoy_config(spec)
    doc = yaml.safe_load(text)
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters = hcm["typed_config"]["http_filters"]
    ext = next(f for f in filters if f["name"] == "envoy.filters.http.ext_proc")["typed_config"]
    assert ext["observability_mode"] is True
    assert ext["failure_mode_allow"] is True
    assert ext["processing_mode"]["response_body_mode"] == "STREAMED"
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    assert all(r["route"]["timeout"] == "0s" for r in routes)
    assert {r["route"]["host_rewrite_literal"] for r in routes} == {"models.example:8443"}
    upstream = doc["static_resources"]["clusters"][0]
    assert upstream["type"] == "LOGICAL_DNS"
    assert upstream["transport_socket"]["typed_config"]["sni"] == "models.example"
    assert doc["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"


def test_stream_starting_without_request_headers_is_counted_and_ended() -> None:
    tap, metrics, _ = _tap()
    assert tap.feed(response_headers(), 1) is True
    assert tap.take() is None
    assert _sample(metrics, "shadoweval_ext_proc_streams_total", result="no_headers") == 1
