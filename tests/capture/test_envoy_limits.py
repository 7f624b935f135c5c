"""The Envoy front end's live-port limits and shutdown, with the real Envoy binary.

The same ``capture.*`` limits as the built-in sidecar's (docs/reliability.md): a client that
trickles its headers is cut after ``header_read_timeout_s`` (slowloris), a body over
``max_request_body_bytes`` gets 413 without reaching the upstream, an HTTP/1.0 client is
answered. Shutdown: after the stop signal Envoy accepts no new connection; a grace period
of 0 cuts the streams in flight at once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.records import ExchangeOutcome
from tests.capture.envoy_harness import FrontEndThread
from tests.capture.test_envoy_front import CHAT, REQUEST, CollectingSink
from tests.capture.upstreams import ScriptedUpstream, ServerThread, running_proxy
from tests.waiting import wait_until


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def _front(
    up_url: str, sink: CollectingSink, deferred_close_s: float = 1.0, **capture: object
) -> FrontEndThread:
    return FrontEndThread(
        CaptureSettings(upstream_url=up_url, **capture),
        EnvoySettings(deferred_close_timeout_s=deferred_close_s),
        builder_mode="inline",
        sinks=[sink],
    )


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _closed(sock: socket.socket) -> bytes | None:
    """What the server sent before closing, or ``None`` while the connection is open."""
    sock.settimeout(0.05)
    data = b""
    try:
        while True:
            piece = sock.recv(65536)
            if not piece:
                return data
            data += piece
    except TimeoutError:
        return None


def test_slow_headers_are_cut_after_the_header_read_timeout(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    with _front(up_url, CollectingSink(), header_read_timeout_s=1.0) as front:
        slow = [socket.create_connection(("127.0.0.1", _port(front.url))) for _ in range(20)]
        for sock in slow:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never ends
        # a normal request is served meanwhile
        assert httpx.get(f"{front.url}/v1/models?mode=echo", timeout=30).status_code == 200
        answers: dict[int, bytes] = {}

        def all_closed() -> bool:
            for i, sock in enumerate(slow):
                if i not in answers and (got := _closed(sock)) is not None:
                    answers[i] = got
            return len(answers) == len(slow)

        wait_until(all_closed, "every slow connection closed", timeout_s=60)
        for sock in slow:
            sock.close()
        assert all(b"408" in a.split(b"\r\n", 1)[0] or a == b"" for a in answers.values())
        assert all(r["path"] != CHAT for r in app.log.requests)  # nothing forwarded


def test_a_body_over_the_limit_gets_413_and_is_not_forwarded(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    with (
        _front(up_url, CollectingSink(), max_request_body_bytes=64 * 1024) as front,
        httpx.Client(timeout=60) as client,
    ):
        big = b'{"model": "m", "x": "' + b"a" * 200_000 + b'"}'
        resp = client.post(f"{front.url}{CHAT}?mode=echo", content=big)
        assert resp.status_code == 413
        # Envoy's own reply is an OpenAI-style JSON error, as the sidecar's is.
        assert resp.headers["content-type"] == "application/json"
        error = resp.json()["error"]
        assert error["type"] == "envoy_local_reply"
        assert error["message"] == "shadow-eval envoy front end: Payload Too Large"
        assert error["code"] == "request_payload_too_large"
        chunked = client.post(f"{front.url}{CHAT}?mode=echo", content=iter([big]))
        assert chunked.status_code == 413
        small = client.post(f"{front.url}{CHAT}?mode=echo", content=REQUEST)
        assert small.status_code == 200
    assert [r["body"].encode("latin-1") for r in app.log.requests] == [REQUEST]


def test_an_http_10_client_is_answered(upstream: tuple[ScriptedUpstream, str]) -> None:
    """Without ``Host`` too. (A client that half-closes after sending is not answered by
    Envoy's HTTP connection manager — a documented difference from the built-in sidecar.)"""
    _app, up_url = upstream
    with (
        _front(up_url, CollectingSink()) as front,
        socket.create_connection(("127.0.0.1", _port(front.url)), timeout=30) as sock,
    ):
        sock.sendall(b"GET /v1/models?mode=echo HTTP/1.0\r\n\r\n")
        data = b""
        while piece := sock.recv(65536):
            data += piece
    assert data.startswith(b"HTTP/1.0 200"), data[:80]


def _stream_in_background(url: str, received: list[bytes]) -> threading.Thread:
    def run() -> None:
        try:
            with (
                httpx.Client(timeout=120) as client,
                client.stream("POST", url, content=REQUEST) as resp,
            ):
                for piece in resp.iter_raw():
                    received.append(piece)
        except httpx.HTTPError:
            received.append(b"<cut>")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_grace_zero_cuts_streams_at_once_and_no_new_connection_is_accepted(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    """The processor streams' delivery window (``deferred_close_timeout_s``, here 120 s)
    must not become a grace period: the 30 s stream is cut, not finished."""
    _app, up_url = upstream
    sink = CollectingSink()
    front = _front(up_url, sink, deferred_close_s=120.0, grace_period_s=0.0).__enter__()
    port = _port(front.url)
    received: list[bytes] = []
    thread = _stream_in_background(f"{front.url}{CHAT}?mode=sse&n=300&gap_ms=100", received)
    wait_until(lambda: len(received) >= 2, "the stream started")
    stopper = threading.Thread(target=front.stop)
    stopper.start()
    thread.join(120)
    stopper.join(120)
    assert not stopper.is_alive()
    assert b"data: [DONE]" not in b"".join(received)  # cut, not finished
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert [e.outcome for e in sink.exchanges] == [ExchangeOutcome.CANCELLED]


def test_after_the_stop_signal_no_new_connection_is_accepted_while_a_stream_finishes(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    sink = CollectingSink()
    front = _front(up_url, sink, grace_period_s=60.0).__enter__()
    port = _port(front.url)
    received: list[bytes] = []
    thread = _stream_in_background(f"{front.url}{CHAT}?mode=sse&n=200&gap_ms=100", received)
    wait_until(lambda: len(received) >= 2, "the stream started")
    stopper = threading.Thread(target=front.stop)
    stopper.start()

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            return True
        return False

    wait_until(refused, "the live port refuses new connections after the stop")
    assert thread.is_alive(), "refused only once the 20 s stream had ended"
    thread.join(120)
    stopper.join(120)
    assert b"<cut>" not in received
    assert b"data: [DONE]" in b"".join(received)
    assert [e.outcome for e in sink.exchanges] == [ExchangeOutcome.DONE]


# -- limits set from the sidecar's settings (issue 30 item 4) ---------------------------------

MANY_HEADERS = 150
"""More request headers than Envoy's default limit (100), far fewer bytes than the sidecar's."""


def _many_headers_status(url: str) -> int:
    headers = {f"x-extra-{i}": "v" for i in range(MANY_HEADERS)}
    return httpx.get(f"{url}/v1/models?mode=echo", headers=headers, timeout=30).status_code


def test_more_than_100_headers_get_the_sidecars_answer(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    with running_proxy(up_url) as sidecar:
        sidecar_status = _many_headers_status(sidecar.url)
    with _front(up_url, CollectingSink()) as front:
        envoy_status = _many_headers_status(front.url)
    assert sidecar_status == 200
    assert envoy_status == sidecar_status


def test_a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    # keep-alive idle timeout far beyond the wait: only the header timeout can close it
    _app, up_url = upstream
    with (
        _front(
            up_url, CollectingSink(), header_read_timeout_s=1.0, client_keepalive_timeout_s=3600.0
        ) as front,
        socket.create_connection(("127.0.0.1", _port(front.url))) as silent,
    ):
        answers: list[bytes] = []

        def closed() -> bool:
            got = _closed(silent)
            if got is not None:
                answers.append(got)
            return got is not None

        wait_until(closed, "the silent connection closed", timeout_s=60)
        assert httpx.get(f"{front.url}/v1/models?mode=echo", timeout=30).status_code == 200
    assert answers == [b""]
