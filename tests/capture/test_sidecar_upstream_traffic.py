"""The sidecar sends nothing to the upstream on its own, and its shutdown grace is exact.

The upstream here behaves like llama-cpp-python's server with its default
``interrupt_requests=True``: it serves one request at a time and, when another request
arrives while a stream runs, ends that stream at once (``data: [DONE]`` without a
``finish_reason``). A probe of the sidecar's own (the old ``GET /v1/models`` every 5 s) cut
17 of 42 live streams against the real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from shadoweval.config import CaptureSettings
from tests.capture.upstreams import ScriptedUpstream, ServerThread
from tests.live.harness import SidecarThread

CHAT = "/v1/chat/completions"
EVENTS = 8


class InterruptingUpstream:
    """One request at a time; a new request ends the running stream (see the module doc)."""

    def __init__(self, gap_s: float = 0.03) -> None:
        self.gap_s = gap_s
        self.requests: list[tuple[str, str]] = []
        self.cut = 0
        self._running: asyncio.Event | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body", False):
            pass
        self.requests.append((scope["method"], scope["path"]))
        if self._running is not None:
            self._running.set()  # interrupt the stream being served
        if scope["path"] != CHAT:
            body = json.dumps({"object": "list", "data": [{"id": "llama"}]}).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        interrupted = asyncio.Event()
        self._running = interrupted
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            for _ in range(EVENTS):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(interrupted.wait(), self.gap_s)
                if interrupted.is_set():
                    self.cut += 1
                    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
                    return
                chunk = {"model": "llama", "choices": [{"delta": {"content": "t"}}]}
                data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
                await send({"type": "http.response.body", "body": data, "more_body": True})
            final = {"model": "llama", "choices": [{"delta": {}, "finish_reason": "stop"}]}
            data = b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n"
            await send({"type": "http.response.body", "body": data})
        finally:
            if self._running is interrupted:
                self._running = None


@pytest.fixture
def interrupting() -> Iterator[tuple[InterruptingUpstream, str]]:
    app = InterruptingUpstream()
    with ServerThread(app) as server:
        yield app, server.url


def _stream(url: str) -> str:
    body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", url + CHAT, json=body, timeout=60) as resp:
        assert resp.status_code == 200
        return resp.read().decode()


def _settings(url: str, **extra: Any) -> CaptureSettings:
    return CaptureSettings(upstream_url=url, **extra)


def test_sequential_streams_through_the_sidecar_are_never_cut(
    interrupting: tuple[InterruptingUpstream, str],
) -> None:
    app, url = interrupting
    settings = _settings(url, readiness_interval_s=0.05)  # probe off by default anyway
    with SidecarThread(settings, builder_mode="inline", sinks=[]) as sidecar:
        bodies = [_stream(sidecar.url) for _ in range(40)]
        ready = httpx.get(sidecar.admin_url + "/readyz", timeout=30)
    assert app.cut == 0
    assert all('"finish_reason": "stop"' in b for b in bodies)
    assert app.requests == [("POST", CHAT)] * 40  # nothing of the sidecar's own
    assert ready.status_code == 200
    upstream = ready.json()["checks"]["upstream"]
    assert upstream["required"] is False
    assert "responded" in upstream["detail"]


def test_the_opt_in_probe_is_what_cuts_streams(
    interrupting: tuple[InterruptingUpstream, str],
) -> None:
    """Why the probe is off by default: switched on, it interrupts this kind of server."""
    app, url = interrupting
    settings = _settings(url, upstream_probe=True, readiness_interval_s=0.02)
    with SidecarThread(settings, builder_mode="inline", sinks=[]) as sidecar:
        deadline = time.monotonic() + 60
        while app.cut == 0 and time.monotonic() < deadline:
            _stream(sidecar.url)
    assert ("GET", "/v1/models") in app.requests
    assert app.cut >= 1


def test_no_model_lookup_at_start_unless_asked(
    interrupting: tuple[InterruptingUpstream, str],
) -> None:
    app, url = interrupting
    with SidecarThread(_settings(url), builder_mode="inline", sinks=[]) as sidecar:
        assert sidecar.sidecar.model.name == "unknown"  # the builder takes each response's
    assert app.requests == []
    with SidecarThread(
        _settings(url, live_model_from_upstream=True), builder_mode="inline", sinks=[]
    ) as sidecar:
        assert sidecar.sidecar.model.name == "llama"
    assert app.requests == [("GET", "/v1/models")]


# -- shutdown grace ---------------------------------------------------------------------------


@pytest.mark.parametrize("grace_s", [0.0, 0.5])
def test_grace_zero_and_fractions_cut_in_flight_streams(grace_s: float) -> None:
    """A 2-minute stream is in flight at SIGTERM: with grace 0 or 0.5 s it is cut and
    captured ``cancelled`` (the old ``int(grace) or None`` waited for it to finish)."""
    app = ScriptedUpstream()
    received: list[bytes] = []
    errors: list[BaseException] = []
    with ServerThread(app) as server:
        sidecar = SidecarThread(
            _settings(server.url, grace_period_s=grace_s), builder_mode="inline", sinks=[]
        ).start()

        def client() -> None:
            try:
                with httpx.stream(
                    "POST",
                    f"{sidecar.url}{CHAT}?mode=sse&n=1200&gap_ms=100",
                    content=b"{}",
                    timeout=300,
                ) as resp:
                    for piece in resp.iter_raw():
                        received.append(piece)
            except httpx.HTTPError as exc:
                errors.append(exc)

        worker = threading.Thread(target=client, daemon=True)
        worker.start()
        deadline = time.monotonic() + 60
        while len(received) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(received) >= 2, "the stream did not start"
        sidecar.shutdown(timeout_s=60)  # far less than the stream's 120 s
        worker.join(60)
        cancelled = sidecar.metric(
            "shadoweval_capture_captured_total", route=CHAT, outcome="cancelled"
        )
        deadline = time.monotonic() + 60
        while not app.log.disconnects and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not worker.is_alive()
    assert errors, "the client's response must be left incomplete"
    assert b"[DONE]" not in b"".join(received)
    assert cancelled == 1
    assert app.log.disconnects, "the upstream must see the cut"
