"""Every long-lived object of the capture stage follows :mod:`shadoweval.lifecycle`: a second
start raises :class:`LifecycleError`, a start after stop raises it too, stop is idempotent
(also on a never-started object), and ``async with`` starts and stops it."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.envoy_config import EnvoyConfigSpec, find_envoy_binary, render_envoy_config
from shadoweval.capture.envoy_front import EnvoyFrontEnd
from shadoweval.capture.envoy_process import EnvoyError, EnvoyProcess
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.pipeline import CapturePipeline
from shadoweval.capture.proxy import CaptureProxy
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.sidecar import Sidecar
from shadoweval.capture.sinks.file import FileSink
from shadoweval.capture.sinks.kafka import KafkaSink
from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.errors import LifecycleError
from shadoweval.lifecycle import AsyncLifecycle, Lifecycle, LifecycleState
from shadoweval.records import ModelIdentity
from tests.capture.test_kafka_sink import memory_sink

pytestmark = pytest.mark.anyio

LIVE = ModelIdentity(name="live-model", weights_hash="sha256:w")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _upstream() -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, json={"data": []}))


def _proxy(tmp_path: Path) -> CaptureProxy:
    return CaptureProxy(
        CaptureSettings(),
        StickySampler(100, (), "s"),
        lambda raw: True,
        CaptureMetrics(),
    )


def _file_sink(tmp_path: Path) -> FileSink:
    return FileSink(tmp_path / "log", CaptureMetrics())


def _kafka_sink(tmp_path: Path) -> KafkaSink:
    sink, _ = memory_sink(tmp_path, CaptureMetrics())
    return sink


def _pipeline(tmp_path: Path) -> CapturePipeline:
    builder = ExchangeBuilder(CaptureSettings(), LIVE, source="test")
    return CapturePipeline(builder, [_file_sink(tmp_path)], CaptureMetrics(), mode="inline")


def _sidecar(tmp_path: Path) -> Sidecar:
    return Sidecar(
        CaptureSettings(),
        builder_mode="inline",
        upstream_transport=_upstream(),
        sinks=[_file_sink(tmp_path)],
        model=LIVE,
    )


def _envoy_front(tmp_path: Path) -> EnvoyFrontEnd:
    return EnvoyFrontEnd(
        CaptureSettings(port=0, admin_port=0),
        EnvoySettings(ext_proc_port=0, admin_port=0, concurrency=1, capture_nice=0),
        work_dir=tmp_path / "envoy-front",
        envoy_log_path=tmp_path / "envoy-front.log",
        builder_mode="inline",
        sinks=[_file_sink(tmp_path)],
    )


def _envoy_process(tmp_path: Path) -> EnvoyProcess:
    spec = EnvoyConfigSpec(
        upstream_url="http://127.0.0.1:9", listen_port=0, ext_proc_port=9, admin_port=0
    )
    return EnvoyProcess(
        find_envoy_binary(),
        render_envoy_config(spec),
        tmp_path / "envoy",
        concurrency=1,
        log_path=tmp_path / "envoy.log",
    )


OBJECTS: dict[str, Callable[[Path], AsyncLifecycle]] = {
    "EnvoyFrontEnd": _envoy_front,
    "EnvoyProcess": _envoy_process,
    "CaptureProxy": _proxy,
    "FileSink": _file_sink,
    "KafkaSink": _kafka_sink,
    "CapturePipeline": _pipeline,
    "Sidecar": _sidecar,
}


def state(obj: Lifecycle) -> LifecycleState:
    """The object's state, read afresh (no narrowing across the awaits in between)."""
    return obj.lifecycle_state


@pytest.fixture(params=sorted(OBJECTS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], AsyncLifecycle]:
    factory = OBJECTS[request.param]
    return lambda: factory(tmp_path)


async def test_a_second_start_raises_and_stop_is_idempotent(
    make: Callable[[], AsyncLifecycle],
) -> None:
    obj = make()
    assert state(obj) is LifecycleState.NEW
    await obj.start()
    assert state(obj) is LifecycleState.STARTED
    try:
        with pytest.raises(LifecycleError, match=r"start\(\) called twice"):
            await obj.start()
        assert state(obj) is LifecycleState.STARTED  # the refused start changed nothing
    finally:
        await obj.stop()
    await obj.stop()
    assert state(obj) is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await obj.start()


async def test_async_with_starts_and_stops_once(make: Callable[[], AsyncLifecycle]) -> None:
    obj = make()
    async with obj as entered:
        assert entered is obj
        assert state(obj) is LifecycleState.STARTED
    assert state(obj) is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        async with obj:
            pass


async def test_stop_before_start_is_a_no_op_that_ends_the_life(
    make: Callable[[], AsyncLifecycle],
) -> None:
    obj = make()
    await obj.stop()
    await obj.stop()
    assert state(obj) is LifecycleState.STOPPED
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await obj.start()


async def test_sidecar_serve_runs_the_whole_life_once(tmp_path: Path) -> None:
    sidecar = _sidecar(tmp_path)
    async with sidecar:
        with pytest.raises(LifecycleError, match="called twice"):
            await sidecar.serve(install_signal_handlers=False)
    with pytest.raises(LifecycleError, match="cannot be restarted"):
        await sidecar.serve(install_signal_handlers=False)


async def test_leaving_the_pipeline_stops_its_sinks(tmp_path: Path) -> None:
    pipeline = _pipeline(tmp_path)
    async with pipeline:
        assert pipeline.running()
    assert not pipeline.running()
    (sink,) = pipeline.sinks
    assert isinstance(sink, FileSink)
    assert sink.lifecycle_state is LifecycleState.STOPPED


async def test_envoy_front_serve_refused_when_started_leaves_it_running(tmp_path: Path) -> None:
    front = _envoy_front(tmp_path)
    async with front:
        with pytest.raises(LifecycleError, match="called twice"):
            await front.serve(install_signal_handlers=False)
        assert state(front) is LifecycleState.STARTED
    assert state(front) is LifecycleState.STOPPED


async def test_envoy_front_serve_fails_when_envoy_exits_on_its_own(tmp_path: Path) -> None:
    front = _envoy_front(tmp_path)

    def kill_envoy(f: EnvoyFrontEnd) -> None:
        assert f.envoy_process is not None
        assert f.envoy_process.pid is not None
        os.kill(f.envoy_process.pid, signal.SIGKILL)

    with pytest.raises(EnvoyError, match="exited on its own"):
        await asyncio.wait_for(front.serve(install_signal_handlers=False, on_ready=kill_envoy), 120)
    assert state(front) is LifecycleState.STOPPED
