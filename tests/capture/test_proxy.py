"""CaptureProxy on real sockets: headers, capture decisions, upstream failures, truncation.

Every test runs a real uvicorn upstream (:class:`tests.capture.upstreams.ScriptedUpstream`)
and the proxy under its own uvicorn, and talks to them with a real httpx client.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from shadoweval.capture.headers import HOP_BY_HOP
from shadoweval.records import ExchangeOutcome
from tests.capture.upstreams import (
    CaptureCollector,
    ScriptedUpstream,
    ServerThread,
    piece_bytes,
    running_proxy,
)

CHAT = "/v1/chat/completions"
REQUEST = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app) as server:
        yield app, server.url


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def _names(headers: list[list[str]]) -> list[str]:
    return [k for k, _ in headers]


def _header(headers: list[list[str]], name: str) -> list[str]:
    return [v for k, v in headers if k == name]


def _send_bare(client: httpx.Client, method: str, url: str, **kw: Any) -> httpx.Response:
    """Send exactly the given headers (no httpx client defaults)."""
    return client.send(httpx.Request(method, url, **kw))


# -- request headers --------------------------------------------------------------------


def test_request_headers_forwarded_minus_hop_by_hop(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _app, up_url = upstream
    headers = {
        "Authorization": "Bearer sk-test",
        "Content-Type": "application/json",
        "X-Custom": "kept",
        "Connection": "keep-alive, X-Hop-Req",
        "X-Hop-Req": "dropped",
        "Keep-Alive": "timeout=5",
        "Proxy-Connection": "keep-alive",
        "TE": "trailers",
        "Trailer": "X-Checksum",
        "Host": "api.example.test",
        "X-Forwarded-For": "203.0.113.7",
    }
    with running_proxy(up_url) as h:
        resp = _send_bare(
            client, "POST", f"{h.url}{CHAT}?a=1&b=%2F", headers=headers, content=REQUEST
        )
    assert resp.status_code == 200
    seen = resp.json()
    names = _names(seen["headers"])
    for hop in (*[n.decode() for n in HOP_BY_HOP], "x-hop-req"):
        assert hop not in names, hop
    assert _header(seen["headers"], "host") == [up_url.removeprefix("http://")]
    assert _header(seen["headers"], "x-forwarded-host") == ["api.example.test"]
    assert _header(seen["headers"], "x-forwarded-for") == ["203.0.113.7, 127.0.0.1"]
    assert _header(seen["headers"], "x-forwarded-proto") == ["http"]
    assert _header(seen["headers"], "authorization") == ["Bearer sk-test"]
    assert _header(seen["headers"], "x-custom") == ["kept"]
    # nothing of the proxy's own: no user-agent, accept, accept-encoding
    assert sorted(names) == sorted(
        [
            "host",
            "authorization",
            "content-type",
            "x-custom",
            "content-length",
            "x-forwarded-for",
            "x-forwarded-host",
            "x-forwarded-proto",
        ]
    )
    assert seen["body"] == REQUEST.decode()
    assert seen["raw_path"] == CHAT
    assert seen["query"] == "a=1&b=%2F"


def test_no_accept_encoding_from_client_means_none_upstream(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        resp = _send_bare(client, "GET", f"{h.url}/v1/models")
        seen = resp.json()
        assert "accept-encoding" not in _names(seen["headers"])
        assert "user-agent" not in _names(seen["headers"])
        resp = _send_bare(
            client, "GET", f"{h.url}/v1/models", headers={"Accept-Encoding": "br;q=1, gzip"}
        )
        assert _header(resp.json()["headers"], "accept-encoding") == ["br;q=1, gzip"]


def test_chunked_request_body_is_sent_with_content_length(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream

    def parts() -> Iterator[bytes]:
        yield REQUEST[:10]
        yield REQUEST[10:]

    with running_proxy(up_url) as h:
        resp = client.post(f"{h.url}{CHAT}", content=parts())
        seen = resp.json()
        assert "transfer-encoding" not in _names(seen["headers"])
        assert _header(seen["headers"], "content-length") == [str(len(REQUEST))]
        assert seen["body"] == REQUEST.decode()
        raw = h.collector.wait(1)[0]
        assert raw.request_body == REQUEST


# -- response headers and bodies ------------------------------------------------------------


def test_response_status_headers_and_body_unchanged(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    direct = client.post(f"{up_url}/v1/files?mode=echo&status=201", content=b"file")
    with running_proxy(up_url) as h:
        proxied = client.post(f"{h.url}/v1/files?mode=echo&status=201", content=b"file")
    assert proxied.status_code == direct.status_code == 201

    def comparable(r: httpx.Response) -> list[tuple[str, str]]:
        # the echoed body lists the request headers, so its length differs
        skip = ("date", "content-length")
        return sorted((k, v) for k, v in r.headers.multi_items() if k not in skip)

    assert comparable(proxied) == comparable(direct)  # incl. server, set-cookie
    assert proxied.headers["content-length"] == str(len(proxied.content))
    assert proxied.headers.get_list("server") == ["uvicorn"]  # the upstream's, only once
    assert len(proxied.headers.get_list("date")) == 1
    body_direct, body_proxied = direct.json(), proxied.json()
    # the upstream saw the same request except for the proxy's forwarding headers
    assert body_proxied["body"] == body_direct["body"] == "file"


def test_response_hop_by_hop_headers_removed(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    direct = client.get(f"{up_url}/x?mode=hop")
    assert direct.headers["x-hop-resp"] == "1"  # the upstream really sends them
    with running_proxy(up_url) as h:
        proxied = client.get(f"{h.url}/x?mode=hop")
    assert proxied.content == b"hop"
    assert proxied.headers["x-end-to-end"] == "kept"
    assert proxied.headers["content-length"] == "3"
    for name in ("x-hop-resp", "keep-alive", "proxy-connection", "trailer"):
        assert name not in proxied.headers, name
    assert proxied.headers.get("connection") in (None, "keep-alive")


@pytest.mark.parametrize("mode", ["gzip", "br"])
def test_compressed_response_passes_byte_identical(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client, mode: str
) -> None:
    _, up_url = upstream
    url_path = f"{CHAT}?mode={mode}"
    headers = {"Accept-Encoding": "gzip, br"}
    with client.stream("POST", up_url + url_path, headers=headers, content=REQUEST) as r:
        direct_raw, direct_headers = b"".join(r.iter_raw()), r.headers
    with (
        running_proxy(up_url) as h,
        client.stream("POST", h.url + url_path, headers=headers, content=REQUEST) as r,
    ):
        proxied_raw, proxied_headers = b"".join(r.iter_raw()), r.headers
        raw = h.collector.wait(1)[0]
    assert proxied_raw == direct_raw
    assert proxied_headers["content-encoding"] == mode
    assert proxied_headers["content-length"] == direct_headers["content-length"]
    assert "transfer-encoding" not in proxied_headers
    assert b"".join(p for _, p in raw.chunks) == proxied_raw
    assert raw.response_header("content-encoding") == mode


def test_chunked_gzip_stream_passes_byte_identical(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    headers = {"Accept-Encoding": "gzip"}
    with client.stream("POST", f"{up_url}{CHAT}?mode=gzip_stream", headers=headers) as r:
        direct = b"".join(r.iter_raw())
    with running_proxy(up_url) as h:
        with client.stream("POST", f"{h.url}{CHAT}?mode=gzip_stream", headers=headers) as r:
            proxied = b"".join(r.iter_raw())
            assert r.headers["content-encoding"] == "gzip"
        raw = h.collector.wait(1)[0]
    assert proxied == direct
    assert len(raw.chunks) >= 2  # pieces as they arrived, not one buffered blob
    assert b"".join(p for _, p in raw.chunks) == proxied


# -- what is captured ---------------------------------------------------------------------


def test_captured_exchange_fields(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        resp = client.post(f"{h.url}{CHAT}?q=1", content=REQUEST, headers={"x-session-id": "s-1"})
        raw = h.collector.wait(1)[0]
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="2xx") == 1.0
    assert raw.method == "POST"
    assert raw.path == CHAT
    assert raw.query == "q=1"
    assert raw.request_body == REQUEST
    assert raw.header("x-session-id") == "s-1"
    assert raw.session_key_hash is not None
    assert "s-1" not in raw.session_key_hash
    assert raw.status_code == 200
    assert raw.outcome is ExchangeOutcome.DONE
    assert raw.response_header("x-upstream") == "scripted"
    assert b"".join(p for _, p in raw.chunks) == resp.content
    assert raw.captured_bytes == len(resp.content)
    assert not raw.truncated
    assert raw.response_start_ns is not None
    assert raw.end_ns is not None
    assert raw.start_ns <= raw.response_start_ns <= raw.chunks[0][0] <= raw.end_ns
    assert raw.error is None


def test_non_captured_requests_pass_through(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        assert client.get(f"{h.url}/v1/models").status_code == 200
        assert client.post(f"{h.url}/v1/files", content=b"data").json()["body"] == "data"
        assert client.get(f"{h.url}{CHAT}").status_code == 200  # GET on a captured path
        marked = client.post(f"{h.url}{CHAT}", content=REQUEST, headers={"x-shadow-eval": "replay"})
        assert marked.json()["body"] == REQUEST.decode()
        assert _header(marked.json()["headers"], "x-shadow-eval") == ["replay"]
        client.post(f"{h.url}/v1/completions", content=REQUEST)  # captured: the last one
        captures = h.collector.wait(1)
        assert [c.path for c in captures] == ["/v1/completions"]
        assert h.metric("shadoweval_proxy_requests_total", route="other", status_class="2xx") == 2
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="2xx") == 2
        assert h.metric("shadoweval_capture_unsampled_total") == 0


def test_sampling_zero_percent_captures_nothing(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    direct = client.post(f"{up_url}{CHAT}", content=REQUEST)
    with running_proxy(up_url, sample_percent=0) as h:
        for _ in range(3):
            resp = client.post(f"{h.url}{CHAT}", content=REQUEST)
            assert resp.status_code == 200
            assert resp.json()["body"] == direct.json()["body"]
        assert h.metric("shadoweval_capture_unsampled_total") == 3
        assert h.collector.captures == []


@pytest.mark.parametrize("tee", ["raises", "drops"])
def test_on_capture_failure_leaves_response_unchanged(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client, tee: str
) -> None:
    _, up_url = upstream
    collector = CaptureCollector(result=tee != "drops", fail=tee == "raises")
    with running_proxy(up_url, collector=collector) as h:
        for _ in range(2):  # and the proxy keeps working afterwards
            with client.stream("POST", f"{h.url}{CHAT}?mode=pieces&n=5&size=100") as r:
                body = b"".join(r.iter_raw())
            assert r.status_code == 200
            assert body == b"".join(piece_bytes(i, 100) for i in range(5))
        assert len(h.collector.wait(2)) == 2


def test_truncation_at_max_capture_bytes(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    expected = b"".join(piece_bytes(i, 500) for i in range(10))
    with running_proxy(up_url, max_capture_bytes=1024) as h:
        with client.stream("POST", f"{h.url}{CHAT}?mode=pieces&n=10&size=500") as r:
            body = b"".join(r.iter_raw())
        raw = h.collector.wait(1)[0]
    assert body == expected  # the client gets every byte
    assert raw.truncated
    assert raw.outcome is ExchangeOutcome.TRUNCATED
    kept = b"".join(p for _, p in raw.chunks)
    assert 0 < len(kept) == raw.captured_bytes <= 1024
    assert expected.startswith(kept)


# -- upstream failures ------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_upstream_down_gives_502_json_and_error_capture(client: httpx.Client) -> None:
    with running_proxy(f"http://127.0.0.1:{_closed_port()}") as h:
        resp = client.post(f"{h.url}{CHAT}", content=REQUEST)
        raw = h.collector.wait(1)[0]
        assert h.metric("shadoweval_proxy_upstream_errors_total", kind="connect") == 1
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="5xx") == 1
        other = client.get(f"{h.url}/v1/models")  # non-captured requests get the same answer
        assert other.status_code == 502
    assert resp.status_code == 502
    assert resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["type"] == "upstream_error"
    assert error["code"] == "upstream_connect_error"
    assert "127.0.0.1" not in error["message"]  # no internal address leaks to clients
    assert raw.outcome is ExchangeOutcome.ERROR
    assert raw.status_code is None
    assert raw.error is not None
    assert "ConnectionRefused" in raw.error
    assert raw.chunks == []
    assert raw.end_ns is not None


@pytest.fixture
def unaccepting_port() -> Iterator[int]:
    """A loopback port whose listen queue is full: a connection attempt hangs (SYN dropped)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):  # fill the accept queue (never accepted)
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        try:
            yield port
        finally:
            for filler in fillers:
                filler.close()


def test_connect_timeout_gives_504(client: httpx.Client, unaccepting_port: int) -> None:
    url = f"http://127.0.0.1:{unaccepting_port}"
    with running_proxy(url, upstream_connect_timeout_s=0.5) as h:
        resp = client.post(f"{h.url}{CHAT}", content=REQUEST)
        raw = h.collector.wait(1)[0]
        assert h.metric("shadoweval_proxy_upstream_errors_total", kind="connect_timeout") == 1
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "upstream_connect_timeout"
    assert raw.outcome is ExchangeOutcome.ERROR
    assert raw.status_code is None


def test_all_upstream_connections_busy_gives_504_pool_timeout(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    with running_proxy(up_url, upstream_max_connections=1, upstream_connect_timeout_s=0.5) as h:
        held = threading.Thread(
            target=lambda: httpx.post(f"{h.url}/v1/x?mode=sleep&ms=5000", timeout=30),
            daemon=True,
        )
        held.start()
        deadline = time.monotonic() + 30
        while len(app.log.requests) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until the upstream holds the held request
        resp = httpx.post(f"{h.url}{CHAT}", content=REQUEST, timeout=30)
        assert h.metric("shadoweval_proxy_upstream_errors_total", kind="pool_timeout") == 1
        held.join(30)
    assert resp.status_code == 504
    assert resp.json()["error"]["code"] == "upstream_pool_timeout"


def test_upstream_break_mid_stream_closes_client_response(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", f"{up_url}{CHAT}?mode=break") as r,
    ):
        b"".join(r.iter_raw())  # what a direct client sees
    received: list[bytes] = []
    with running_proxy(up_url) as h:
        with client.stream("POST", f"{h.url}{CHAT}?mode=break") as r:
            assert r.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                received.extend(r.iter_raw())
        raw = h.collector.wait(1)[0]
        assert h.metric("shadoweval_proxy_upstream_errors_total", kind="mid_stream") == 1
        assert client.post(f"{h.url}{CHAT}", content=REQUEST).status_code == 200  # still fine
    assert b"".join(received) == b'data: {"i": 0}\n\n'
    assert raw.outcome is ExchangeOutcome.ERROR
    assert raw.status_code == 200
    assert raw.error is not None
    assert "mid-response" in raw.error
    assert b"".join(p for _, p in raw.chunks) == b'data: {"i": 0}\n\n'


def test_upstream_4xx_5xx_are_passed_not_errors(
    upstream: tuple[ScriptedUpstream, str], client: httpx.Client
) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        r429 = client.post(f"{h.url}{CHAT}?status=429", content=REQUEST)
        r500 = client.post(f"{h.url}{CHAT}?status=500", content=REQUEST)
        captures = h.collector.wait(2)
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="4xx") == 1
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="5xx") == 1
        assert h.metric("shadoweval_proxy_upstream_errors_total", kind="connect") == 0
    assert (r429.status_code, r500.status_code) == (429, 500)
    assert [c.status_code for c in captures] == [429, 500]
    assert {c.outcome for c in captures} == {ExchangeOutcome.DONE}


# -- lifecycle ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_context_manager_starts_and_stops(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    from shadoweval.capture.metrics import CaptureMetrics
    from shadoweval.capture.proxy import CaptureProxy
    from shadoweval.capture.sampling import StickySampler
    from shadoweval.config import CaptureSettings

    _, up_url = upstream
    collector = CaptureCollector()
    proxy = CaptureProxy(
        CaptureSettings(upstream_url=up_url),
        StickySampler(100, (), "s"),
        collector,
        CaptureMetrics(),
    )
    assert not proxy.started
    async with proxy:
        assert proxy.started
        port = await proxy.listen("127.0.0.1", 0)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            resp = await c.post(CHAT, content=REQUEST)
            assert resp.status_code == 200
            assert resp.headers["x-upstream"] == "scripted"
    assert not proxy.started
    assert proxy.bound_port is None or proxy.in_flight == 0
    assert [c.status_code for c in collector.captures] == [200]


def test_bad_upstream_url_is_a_config_error() -> None:
    from shadoweval.capture.metrics import CaptureMetrics
    from shadoweval.capture.proxy import CaptureProxy
    from shadoweval.capture.sampling import StickySampler
    from shadoweval.config import CaptureSettings
    from shadoweval.errors import ConfigError

    with pytest.raises(ConfigError, match="upstream_url"):
        CaptureProxy(
            # Settings validation refuses this URL too; the proxy checks again on its own.
            CaptureSettings.model_construct(upstream_url="upstream:8000"),
            StickySampler(100, (), "s"),
            lambda raw: True,
            CaptureMetrics(),
        )


def test_error_body_is_openai_shaped() -> None:
    from shadoweval.capture.proxy import upstream_error_body

    payload = json.loads(upstream_error_body("connect", "upstream_connect_error"))
    assert set(payload["error"]) == {"message", "type", "param", "code"}


def test_client_gone_during_request_body_is_not_forwarded(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    with running_proxy(up_url) as h:
        host, port = h.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
            sock.sendall(head + b'{"model": ')
            time.sleep(0.1)
        raw = h.collector.wait(1)[0]
        assert h.metric("shadoweval_proxy_requests_total", route=CHAT, status_class="none") == 0
    assert app.log.requests == []
    assert raw.outcome is ExchangeOutcome.CANCELLED
    assert raw.status_code is None
    assert raw.error is not None
    assert "request body" in raw.error


# -- header rules (RFC 9110 §7.6.1) -----------------------------------------------------------


def test_connection_tokens_and_dropped_names() -> None:
    from shadoweval.capture.headers import connection_tokens, response_headers_for_client

    assert connection_tokens([b"keep-alive, X-Trace ,", b"Upgrade"]) == {
        b"keep-alive",
        b"x-trace",
        b"upgrade",
    }
    out = response_headers_for_client(
        [
            (b"Content-Type", b"text/event-stream"),
            (b"Connection", b"X-Trace"),
            (b"X-Trace", b"1"),
            (b"Transfer-Encoding", b"chunked"),
            (b"Set-Cookie", b"a=1"),
            (b"Set-Cookie", b"b=2"),
        ]
    )
    assert out == [
        (b"content-type", b"text/event-stream"),
        (b"set-cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
    ]


def test_forwarded_headers_kept_from_an_earlier_proxy() -> None:
    from shadoweval.capture.headers import request_headers_for_upstream

    out = request_headers_for_upstream(
        [
            (b"host", b"sidecar:8080"),
            (b"x-forwarded-host", b"api.example.com"),
            (b"x-forwarded-proto", b"https"),
            (b"x-forwarded-for", b"198.51.100.1"),
            (b"x-forwarded-for", b"10.0.0.2"),
        ],
        ("10.0.0.3", 40000),
        "http",
    )
    assert out == [
        (b"x-forwarded-host", b"api.example.com"),
        (b"x-forwarded-proto", b"https"),
        (b"x-forwarded-for", b"198.51.100.1, 10.0.0.2, 10.0.0.3"),
    ]


def test_https_upstream_is_verified_and_relayed(tmp_path: Any, client: httpx.Client) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key_file, cert_file, ca_file = (tmp_path / n for n in ("key.pem", "cert.pem", "ca.pem"))
    cert.private_key_pem.write_to_path(str(key_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    ca.cert_pem.write_to_path(str(ca_file))
    app = ScriptedUpstream()
    with ServerThread(app, ssl_keyfile=str(key_file), ssl_certfile=str(cert_file)) as server:
        https_url = server.url.replace("http://", "https://")
        with running_proxy(https_url, upstream_ca_file=str(ca_file)) as h:
            resp = client.post(f"{h.url}{CHAT}?mode=sse&n=3&gap_ms=10", content=REQUEST)
            raw = h.collector.wait(1)[0]
        with running_proxy(https_url) as h:  # not signed by a CA it trusts: refused
            refused = client.post(f"{h.url}{CHAT}", content=REQUEST)
    assert resp.status_code == 200
    assert resp.content.endswith(b"data: [DONE]\n\n")
    assert raw.outcome is ExchangeOutcome.DONE
    assert refused.status_code == 502
    assert refused.json()["error"]["code"] == "upstream_connect_error"
