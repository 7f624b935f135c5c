"""The one lifecycle rule (:mod:`shadoweval.lifecycle`), the background server and the probe app."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from shadoweval.errors import LifecycleError, ShadowEvalError
from shadoweval.lifecycle import AsyncLifecycle, LifecycleState, cancel_tasks
from shadoweval.probes import Readiness, probe_app
from shadoweval.serving import BackgroundServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Resource(AsyncLifecycle):
    """A toy object: counts its starts and stops; ``fail_starts`` makes starts raise."""

    def __init__(self, fail_starts: int = 0) -> None:
        self.fail_starts = fail_starts
        self.starts = 0
        self.stops = 0

    async def start(self) -> None:
        with self._starting():
            if self.fail_starts:
                self.fail_starts -= 1
                raise OSError("cannot connect")
            self.starts += 1

    async def stop(self) -> None:
        if not self._stopping():
            return
        self.stops += 1


def test_the_error_is_a_shadoweval_error_and_a_runtime_error() -> None:
    assert issubclass(LifecycleError, ShadowEvalError)
    assert issubclass(LifecycleError, RuntimeError)


async def test_started_once_stopped_once_never_restarted() -> None:
    res = Resource()
    async with res as entered:
        assert entered is res
        with pytest.raises(LifecycleError, match=r"^Resource\.start\(\) called twice$"):
            await res.start()
    await res.stop()
    assert (res.starts, res.stops) == (1, 1)
    assert res.lifecycle_state is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match=r"^Resource cannot be restarted after stop\(\)$"):
        await res.start()


async def test_a_failed_start_may_be_retried() -> None:
    res = Resource(fail_starts=2)
    for _ in range(2):
        with pytest.raises(OSError, match="cannot connect"):
            await res.start()
        assert res.lifecycle_state is LifecycleState.NEW
    await res.start()
    assert res.lifecycle_state is LifecycleState.STARTED
    await res.stop()


async def test_stop_on_a_never_started_object_releases_nothing_and_ends_its_life() -> None:
    res = Resource()
    await res.stop()
    await res.stop()
    assert res.stops == 0
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await res.start()


# ------------------------------------------------------------------ background server


def _hello_app() -> Starlette:
    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


def test_background_server_serves_and_follows_the_lifecycle() -> None:
    server = BackgroundServer(_hello_app())
    assert server.url == ""
    with server as entered:
        assert entered is server
        assert server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert httpx.get(server.url + "/").text == "hello"
        with pytest.raises(LifecycleError, match="called twice"):
            server.start()
    server.stop()
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        server.start()


def test_background_server_stop_before_start_is_a_no_op() -> None:
    server = BackgroundServer(_hello_app())
    server.stop()
    server.stop()
    assert server.lifecycle_state is LifecycleState.STOPPED


# uvicorn ends its thread with SystemExit when it cannot bind; start() reports it.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_background_server_on_a_busy_port_raises_and_stays_unstarted() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = BackgroundServer(_hello_app(), port=port)
        with pytest.raises(RuntimeError, match="stopped before it started"):
            server.start()
        assert server.lifecycle_state is LifecycleState.NEW
    server.stop()


# ------------------------------------------------------------------ probe app


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("probe_test_total", "A test counter.", registry=registry).inc(2)
    return registry


async def _get(app: Starlette, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        return await client.get(path)


async def test_json_probes_report_the_named_checks() -> None:
    readiness = Readiness()
    readiness.required["upstream"] = lambda: (True, "GET /v1/models → 200")
    readiness.informational["sink"] = lambda: (False, "spooling")
    app = probe_app(_registry(), readiness.check)
    health = await _get(app, "/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    ready = await _get(app, "/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {
            "upstream": {"ok": True, "detail": "GET /v1/models → 200", "required": True},
            "sink": {"ok": False, "detail": "spooling", "required": False},
        },
    }

    def broken() -> tuple[bool, str]:
        raise ValueError("no socket")

    readiness.required["draining"] = broken
    not_ready = await _get(app, "/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["status"] == "not_ready"
    assert not_ready.json()["checks"]["draining"]["detail"].startswith("probe failed: ValueError")
    scraped = await _get(app, "/metrics")
    assert scraped.headers["content-type"].startswith("text/plain")
    assert "probe_test_total 2.0" in scraped.text


async def test_text_probes_answer_one_word() -> None:
    state: tuple[bool, str] = (False, "")
    app = probe_app(_registry(), lambda: state, style="text")
    health = await _get(app, "/healthz")
    assert (health.status_code, health.text) == (200, "ok\n")
    not_ready = await _get(app, "/readyz")
    assert (not_ready.status_code, not_ready.text) == (503, "not ready\n")
    state = (True, "")
    ready = await _get(app, "/readyz")
    assert (ready.status_code, ready.text) == (200, "ready\n")
    state = (False, "stopping")
    assert (await _get(app, "/readyz")).text == "not ready: stopping\n"


async def test_cancel_tasks_ends_running_tasks_and_passes_over_the_rest() -> None:
    never = asyncio.Event()
    running = asyncio.create_task(never.wait())
    finished = asyncio.create_task(asyncio.sleep(0, result="done"))
    await finished
    await asyncio.sleep(0)  # let ``running`` reach its wait
    await cancel_tasks(running, None, finished)
    assert running.cancelled()
    assert finished.result() == "done"


_FREEZE_PROBE = """
import gc, json
import shadoweval.capture.sidecar  # a serving process's start-up heap
from shadoweval.lifecycle import freeze_startup_heap

class Cycle:
    def __init__(self):
        self.me = self

before = gc.get_freeze_count()
frozen = freeze_startup_heap()
young = [Cycle() for _ in range(10)]
print(json.dumps({"before": before, "frozen": frozen, "count": gc.get_freeze_count(),
                  "young_tracked_apart": all(gc.is_tracked(c) for c in young),
                  "gen2": len(gc.get_objects(generation=2))}))
"""


def test_freeze_startup_heap_takes_the_start_up_objects_out_of_full_passes() -> None:
    """What ``capture serve``, ``capture envoy`` and the builder worker call once serving:
    every object alive is frozen (a full pass then scans only what came after); run in a
    child process so the test session's own heap is not frozen."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE], capture_output=True, text=True, check=True
    )
    probe = json.loads(out.stdout)
    assert probe["before"] == 0
    assert probe["frozen"] == probe["count"] > 10_000  # the imported modules' objects
    assert probe["gen2"] < probe["frozen"] / 10  # what is left for a full pass
    assert probe["young_tracked_apart"]
