"""The live port's limits and edge cases on real sockets: slow clients (slowloris), large
bodies, too many connections, request targets (dot segments under a base path, ``*``,
absolute form), HTTP/1.0 clients (also half-closing ones) and stale upstream keep-alives.

Each limit is a ``CaptureSettings`` field; a refusal is an OpenAI-style JSON error naming
the setting and counted in ``shadoweval_proxy_rejected_total{reason}``.
"""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.capture.upstreams import ScriptedUpstream, ServerThread, running_proxy

CHAT = "/v1/chat/completions"
REQUEST = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
REJECTED = "shadoweval_proxy_rejected_total"


@pytest.fixture
def upstream() -> Iterator[tuple[ScriptedUpstream, str]]:
    app = ScriptedUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def _addr(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _read_until_closed(sock: socket.socket, deadline_s: float = 60.0) -> bytes:
    """Everything the server sends until it closes the connection (or a reset)."""
    sock.settimeout(deadline_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def _split(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def _wait(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# -- slow clients -------------------------------------------------------------------------


def test_500_slow_header_connections_are_closed(upstream: tuple[ScriptedUpstream, str]) -> None:
    app, up_url = upstream
    with running_proxy(up_url, header_read_timeout_s=1.0) as h:
        addr = _addr(h.url)
        socks = []
        for i in range(500):
            sock = socket.create_connection(addr, timeout=30)
            if i % 2:  # half send a partial request line, half nothing at all
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(sock)
        answers = [_read_until_closed(s) for s in socks]  # the server closes every one
        for s in socks:
            s.close()
        # a regular client is still served while and after the slow ones were cut
        assert httpx.post(f"{h.url}{CHAT}", content=REQUEST, timeout=30).status_code == 200
        assert h.metric(REJECTED, reason="header_timeout") == 500
    partial = [a for i, a in enumerate(answers) if i % 2]
    silent = [a for i, a in enumerate(answers) if not i % 2]
    assert all(a == b"" for a in silent)
    for answer in partial:
        status, _headers, body = _split(answer)
        assert status == 408
        error = json.loads(body)["error"]
        assert error["param"] == "capture.header_read_timeout_s"
        assert "header_read_timeout_s = 1" in error["message"]
    assert len(app.log.requests) == 1


def test_slow_body_gets_408_and_is_not_forwarded(upstream: tuple[ScriptedUpstream, str]) -> None:
    app, up_url = upstream
    with running_proxy(up_url, body_read_timeout_s=0.5) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
            )
            status, _, body = _split(_read_until_closed(sock))
        raw = h.collector.wait(1)[0]
        assert h.metric(REJECTED, reason="body_timeout") == 1
    assert status == 408
    assert json.loads(body)["error"]["param"] == "capture.body_read_timeout_s"
    assert app.log.requests == []
    assert raw.status_code is None
    assert raw.error is not None
    assert "body_read_timeout_s" in raw.error


# -- sizes ------------------------------------------------------------------------------------


def test_declared_body_over_the_limit_gets_413_before_reading_it(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    with running_proxy(up_url, max_request_body_bytes=4096) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 52428800\r\n\r\n" + b"x" * 1000
            )
            status, headers, body = _split(_read_until_closed(sock))
        assert h.metric(REJECTED, reason="body_too_large") == 1
        ok = httpx.post(f"{h.url}{CHAT}", content=b"y" * 4096, timeout=30)
    assert status == 413
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "body_too_large"
    assert error["param"] == "capture.max_request_body_bytes"
    assert "max_request_body_bytes = 4096 bytes" in error["message"]
    assert ok.status_code == 200  # exactly the limit is fine
    assert [r["body"] for r in app.log.requests] == ["y" * 4096]


def test_chunked_body_over_the_limit_gets_413(upstream: tuple[ScriptedUpstream, str]) -> None:
    app, up_url = upstream

    def pieces() -> Iterator[bytes]:
        for _ in range(20):
            yield b"z" * 1024

    with running_proxy(up_url, max_request_body_bytes=8192) as h:
        resp = httpx.post(f"{h.url}{CHAT}", content=pieces(), timeout=30)
    assert resp.status_code == 413
    assert resp.json()["error"]["param"] == "capture.max_request_body_bytes"
    assert app.log.requests == []


def test_huge_headers_get_431(upstream: tuple[ScriptedUpstream, str]) -> None:
    _, up_url = upstream
    with running_proxy(up_url, max_request_header_bytes=2048) as h:
        resp = httpx.get(f"{h.url}/v1/models", headers={"x-big": "b" * 4000}, timeout=30)
        assert h.metric(REJECTED, reason="headers_too_large") == 1
    assert resp.status_code == 431
    assert resp.json()["error"]["param"] == "capture.max_request_header_bytes"


def test_connections_over_the_limit_get_503(upstream: tuple[ScriptedUpstream, str]) -> None:
    _, up_url = upstream
    with running_proxy(up_url, max_client_connections=3, header_read_timeout_s=60) as h:
        held = [socket.create_connection(_addr(h.url), timeout=30) for _ in range(3)]
        _wait(lambda: h.metric("shadoweval_proxy_client_connections") == 3)
        with socket.create_connection(_addr(h.url), timeout=30) as extra:
            status, _, body = _split(_read_until_closed(extra))
        assert h.metric(REJECTED, reason="connection_limit") == 1
        for sock in held:
            sock.close()
        _wait(lambda: h.metric("shadoweval_proxy_client_connections") == 0)
        after = httpx.get(f"{h.url}/v1/models", timeout=30)
    assert status == 503
    error = json.loads(body)["error"]
    assert error["param"] == "capture.max_client_connections"
    assert "max_client_connections = 3" in error["message"]
    assert after.status_code == 200


# -- request targets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        b"/../secret.txt",
        b"/v1/../../secret.txt",
        b"/%2e%2e/secret.txt",
        b"/v1/..%2fsecret.txt",
        b"/./v1/models",
        b"/v1\\..\\secret.txt",
    ],
)
def test_dot_segments_cannot_leave_the_base_path(
    upstream: tuple[ScriptedUpstream, str], target: bytes
) -> None:
    app, up_url = upstream
    with running_proxy(f"{up_url}/base") as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status, _, body = _split(_read_until_closed(sock))
        assert h.metric(REJECTED, reason="dot_segment") == 1
    assert status == 400
    assert json.loads(body)["error"]["code"] == "dot_segment"
    assert app.log.requests == []


def test_path_and_query_forwarded_as_received(upstream: tuple[ScriptedUpstream, str]) -> None:
    app, up_url = upstream
    request = b"GET /v1//models;x=1?b=%2F&a=..%2f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with (
        running_proxy(f"{up_url}/base") as h,
        socket.create_connection(_addr(h.url), timeout=30) as sock,
    ):
        sock.sendall(request)
        status, _, body = _split(_read_until_closed(sock))
    assert status == 200
    seen = json.loads(body)
    assert seen["raw_path"] == "/base/v1//models;x=1"
    assert seen["query"] == "b=%2F&a=..%2f"
    assert len(app.log.requests) == 1


def test_without_a_base_path_dot_segments_are_forwarded_unresolved(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    _app, up_url = upstream
    with running_proxy(up_url) as h, socket.create_connection(_addr(h.url), timeout=30) as sock:
        sock.sendall(b"GET /a/./b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status, _, body = _split(_read_until_closed(sock))
    assert status == 200
    assert json.loads(body)["raw_path"] == "/a/./b"


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"OPTIONS * HTTP/1.1", 204),
        (b"GET * HTTP/1.1", 400),
        (b"GET http://elsewhere.test/v1/models HTTP/1.1", 400),
        (b"CONNECT elsewhere.test:443 HTTP/1.1", 400),
    ],
)
def test_non_origin_form_targets_are_answered_by_the_sidecar(
    upstream: tuple[ScriptedUpstream, str], request_line: bytes, status: int
) -> None:
    app, up_url = upstream
    with running_proxy(up_url) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(request_line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
            got, headers, body = _split(_read_until_closed(sock))
        assert httpx.get(f"{h.url}/v1/models", timeout=30).status_code == 200  # still serving
    assert got == status
    if status == 400:
        assert json.loads(body)["error"]["code"] == "bad_target"
    else:
        assert headers["content-length"] == "0"
    assert [r["path"] for r in app.log.requests] == ["/v1/models"]


def test_malformed_request_gets_400(upstream: tuple[ScriptedUpstream, str]) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(b"GET /v1/models HTTP/1.1\r\nBad Header Without Colon\r\n\r\n")
            status, _, body = _split(_read_until_closed(sock))
        assert h.metric(REJECTED, reason="bad_request") == 1
    assert status == 400
    assert json.loads(body)["error"]["code"] == "bad_request"


# -- HTTP/1.0 ------------------------------------------------------------------------------


@pytest.mark.parametrize("half_close", [False, True])
def test_http_10_client_is_answered(
    upstream: tuple[ScriptedUpstream, str], half_close: bool
) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/chat/completions?mode=sse&n=3&gap_ms=20 HTTP/1.0\r\n"
                b"Content-Length: %d\r\n\r\n" % len(REQUEST) + REQUEST
            )
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            status, headers, body = _split(_read_until_closed(sock))
        raw = h.collector.wait(1)[0]
    assert status == 200
    assert "transfer-encoding" not in headers  # HTTP/1.0: the body ends with the connection
    assert headers["connection"] == "close"
    assert body == b'data: {"i": 0}\n\ndata: {"i": 1}\n\ndata: {"i": 2}\n\ndata: [DONE]\n\n'
    assert raw.outcome.value == "done"


# -- stale upstream keep-alive ---------------------------------------------------------------


@pytest.mark.parametrize("sidecar_expiry_s", [0.1, 30.0])
def test_no_request_fails_on_an_upstream_that_closes_idle_connections(
    sidecar_expiry_s: float,
) -> None:
    """The upstream closes idle keep-alive connections after 0.3 s; requests come at random
    gaps around that. With the sidecar's expiry below the upstream's (0.1 s, the advice) or
    above it (30 s: every closed connection must be detected before use), none fails."""
    app = ScriptedUpstream()
    rng = random.Random(7)
    with (
        ServerThread(app, timeout_keep_alive=0.3) as server,
        running_proxy(server.url, upstream_keepalive_expiry_s=sidecar_expiry_s) as h,
        httpx.Client(timeout=30) as client,
    ):
        statuses = []
        for _ in range(40):
            statuses.append(client.get(f"{h.url}/v1/models").status_code)
            time.sleep(rng.uniform(0.0, 0.6))
        errors = h.metric("shadoweval_proxy_upstream_errors_total", kind="protocol") + h.metric(
            "shadoweval_proxy_upstream_errors_total", kind="network"
        )
    assert statuses == [200] * 40
    assert errors == 0


# -- framing edge cases --------------------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(upstream: tuple[ScriptedUpstream, str]) -> None:
    app, up_url = upstream
    with (
        running_proxy(up_url) as h,
        socket.create_connection(_addr(h.url), timeout=30) as sock,
    ):
        sock.sendall(
            b"GET /first?mode=sleep&ms=200 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        data = _read_until_closed(sock)
    first, second = data.split(b"HTTP/1.1 ", 2)[1:]
    assert first.startswith(b"200")
    assert first.endswith(b"ok")
    assert second.startswith(b"200")
    assert b'"path": "/second"' in second
    assert [r["path"] for r in app.log.requests] == ["/first", "/second"]


def test_head_response_ends_without_a_body(upstream: tuple[ScriptedUpstream, str]) -> None:
    _, up_url = upstream
    with running_proxy(up_url) as h, httpx.Client(timeout=30) as client:
        head = client.head(f"{h.url}/v1/models")
        after = client.get(f"{h.url}/v1/models")  # the same client connection still works
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["content-length"]) > 0
    assert after.status_code == 200


def test_expect_100_continue_is_answered_by_the_sidecar(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    """The sidecar reads the whole body before forwarding, so it sends ``100 Continue``
    itself (as nginx does) and drops ``Expect`` towards the upstream."""
    _app, up_url = upstream
    with (
        running_proxy(up_url) as h,
        socket.create_connection(_addr(h.url), timeout=30) as sock,
    ):
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(REQUEST)
        )
        interim = sock.recv(65536)
        sock.sendall(REQUEST)
        status, _, body = _split(_read_until_closed(sock))
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert status == 200
    seen = json.loads(body)
    assert seen["body"] == REQUEST.decode()
    assert "expect" not in [k for k, _ in seen["headers"]]


def test_trailer_fields_of_a_chunked_request_are_not_forwarded_as_headers(
    upstream: tuple[ScriptedUpstream, str],
) -> None:
    app, up_url = upstream
    body = b'{"model": "m"}'
    request = (
        b"POST /v1/other?mode=echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Transfer-Encoding: chunked\r\nTrailer: Authorization, X-Shadow-Eval\r\n\r\n"
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n0\r\nAuthorization: Bearer injected\r\nX-Shadow-Eval: 1\r\n"
        b"X-Forwarded-For: 10.9.9.9\r\n\r\n"
    )
    with (
        running_proxy(up_url) as h,
        socket.create_connection(_addr(h.url), timeout=30) as sock,
    ):
        sock.sendall(request)
        status, _, answer = _split(_read_until_closed(sock))
    assert status == 200
    seen = json.loads(answer)
    assert seen["body"] == body.decode()
    names = {name for name, _ in seen["headers"]}
    assert "authorization" not in names
    assert "x-shadow-eval" not in names
    assert all("10.9.9.9" not in value for _, value in seen["headers"])
    assert len(app.log.requests) == 1


@pytest.mark.parametrize(
    "hosts",
    [b"Host: a.test\r\nHost: b.test\r\n", b"Host: a.test\r\nhost: a.test\r\n"],
    ids=["different", "same-value"],
)
def test_two_host_fields_get_400_and_are_not_forwarded(
    upstream: tuple[ScriptedUpstream, str], hosts: bytes
) -> None:
    # RFC 9112 §3.2: a server MUST respond 400 to a request with more than one Host field.
    app, up_url = upstream
    with running_proxy(up_url) as h:
        with socket.create_connection(_addr(h.url), timeout=30) as sock:
            sock.sendall(
                b"POST " + CHAT.encode() + b" HTTP/1.1\r\n" + hosts
                + b"Content-Type: application/json\r\nContent-Length: "
                + str(len(REQUEST)).encode() + b"\r\nConnection: close\r\n\r\n" + REQUEST
            )  # fmt: skip
            status, headers, body = _split(_read_until_closed(sock))
        assert h.metric(REJECTED, reason="duplicate_host") == 1
        assert httpx.get(f"{h.url}/v1/models", timeout=30).status_code == 200  # still serving
        assert h.collector.captures == []  # not captured either
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == "duplicate_host"
    assert "Host" in error["message"]
    assert [r["path"] for r in app.log.requests] == ["/v1/models"]
