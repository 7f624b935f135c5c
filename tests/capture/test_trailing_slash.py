"""A trailing slash on an inference route: captured under the route, forwarded as sent.

The real sidecar (:class:`tests.live.harness.SidecarThread`, file sink, inline builder) in
front of a small upstream that answers chat completions and records the raw path it was
sent. ``/v1/chat/completions/`` used to be proxied but not captured.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from shadoweval.capture.envoy_config import EnvoyConfigSpec, render_envoy_config
from shadoweval.capture_log import read_capture_log
from shadoweval.config import CaptureSettings
from shadoweval.records import ExchangeOutcome
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request
from shadoweval.routes import normalize_route
from tests.capture.upstreams import ServerThread
from tests.live.harness import SidecarThread

BODY = {"model": "live", "messages": [{"role": "user", "content": "hi"}]}


class ChatUpstream:
    """Answers every POST with one chat completion; records each raw request path."""

    def __init__(self) -> None:
        self.raw_paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body", False):
            pass
        self.raw_paths.append((scope.get("raw_path") or b"").decode("latin-1"))
        body = {
            "id": "c1",
            "object": "chat.completion",
            "model": "live",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})


@pytest.fixture
def upstream() -> Iterator[tuple[ChatUpstream, str]]:
    app = ChatUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def test_trailing_slash_is_captured_under_the_route_and_forwarded_with_it(
    upstream: tuple[ChatUpstream, str], tmp_path: Path
) -> None:
    app, url = upstream
    log_dir = tmp_path / "capture"
    settings = CaptureSettings(upstream_url=url, sinks=("file",), file_sink_directory=str(log_dir))
    sidecar = SidecarThread(settings, builder_mode="inline").start()
    try:
        with httpx.Client(timeout=30) as client:
            for path in ("/v1/chat/completions/", "/v1/chat/completions", "/v1/chat/completions/x"):
                resp = client.post(sidecar.url + path, json=BODY)
                assert resp.status_code == 200
                assert resp.json()["choices"][0]["message"]["content"] == "hello"
    finally:
        sidecar.shutdown()
    # Every byte went upstream as sent: the slash stays on the forwarded path.
    assert app.raw_paths == [
        "/v1/chat/completions/",
        "/v1/chat/completions",
        "/v1/chat/completions/x",
    ]
    exchanges = [e.exchange for e in read_capture_log(log_dir) if e.exchange is not None]
    # The first two are captured (under the route); a longer path is not the route.
    assert [e.route for e in exchanges] == ["/v1/chat/completions"] * 2
    assert [e.request.path for e in exchanges] == ["/v1/chat/completions/", "/v1/chat/completions"]
    assert all(e.outcome is ExchangeOutcome.DONE for e in exchanges)
    assert exchanges[0].response is not None
    assert exchanges[0].response.text == "hello"
    # The replay sends it to the route.
    replay = build_replay_request(exchanges[0])
    assert isinstance(replay, ReplayRequest)
    assert replay.path == "/v1/chat/completions"


def test_envoy_config_captures_the_route_with_and_without_the_slash() -> None:
    text = render_envoy_config(
        EnvoyConfigSpec(upstream_url="http://127.0.0.1:8000", routes=("/v1/completions/",))
    )
    assert "path: /v1/completions\n" in text
    assert "path: /v1/completions/\n" in text
    assert "path: /v1/completions//" not in text


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/chat/completions/", "/v1/chat/completions"),
        ("/v1/chat/completions//?a=1", "/v1/chat/completions"),
        ("/v1/completions?x=/", "/v1/completions"),
        ("/", "/"),
        ("", "/"),
    ],
)
def test_normalize_route(path: str, route: str) -> None:
    assert normalize_route(path) == route
