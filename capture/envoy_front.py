"""The Envoy front end: Envoy on the live port, the ext_proc capture service behind it.

Composition (docs/capture.md, "Envoy front end")::

    client ──► Envoy (live port) ──► upstream (live model)       Envoy's own proxying
                 │ ext_proc, observability mode (async copies, never waited for)
                 ▼
           CaptureProcessor (gRPC) ──► CapturePipeline ──► builder ──► sinks

:class:`EnvoyFrontEnd` runs the capture service — the gRPC server
(:class:`shadoweval.capture.ext_proc.CaptureProcessor` on ``envoy.ext_proc_host:ext_proc_port``),
the same :class:`~shadoweval.capture.pipeline.CapturePipeline`, builder and sinks as the sidecar,
and the admin port (``capture.admin_port``: ``/healthz``, ``/readyz``, ``/metrics``) —
and, unless ``launch_envoy=False`` (an Envoy run by someone else, e.g. a mesh sidecar,
configured from ``shadow-eval capture envoy-config``), Envoy itself as a child process
(:class:`shadoweval.capture.envoy_process.EnvoyProcess`) with the config rendered for the bound
ports.

With ``envoy.canary`` set, the front end also serves the canary split: it writes the
split file's revision 0 (share 0: all baseline) when ``split_dir`` has none, and runs the
session router (:class:`shadoweval.capture.session_router.SessionRouter`) in its own process
(:class:`shadoweval.capture.router_process.RouterProcess`: its own event loop, GIL and gRPC server
on
``envoy.ext_proc_host:canary.router_port``, started before the service lowers its priority;
its metrics collected into the same registry), stopped with the front end; Envoy takes its
routes from the split file (:mod:`shadoweval.capture.canary_split`).

The service sends nothing to the upstream on its own: the live model's name is
``capture.live_model.name`` when set, otherwise each exchange records the ``model`` field
of its response (:func:`shadoweval.capture.identity.resolve_identity`); ``/readyz`` follows Envoy's
own ``/ready`` instead of probing the upstream.

Priority: once Envoy is ``LIVE`` the service lowers its own CPU priority by
``envoy.capture_nice`` (every thread; builder processes started later inherit it), so on a
machine it shares with Envoy the live path wins the CPU and capture is what falls behind —
and what falls behind is counted (``shadoweval_ext_proc_incomplete_total``, Envoy's
counters).

Shutdown (SIGTERM/SIGINT, or :meth:`EnvoyFrontEnd.request_shutdown`): ``/readyz`` turns
503; Envoy stops accepting and its requests in flight may finish within
``capture.grace_period_s`` (0: none; a second signal ends the wait); when every request
ended, the processor streams may then deliver what Envoy still holds (at most
``envoy.deferred_close_timeout_s`` + 1 s); Envoy is terminated (cutting what is still in
flight) (a processor
stream still open ends then: captured as ``cancelled``; with an Envoy run elsewhere the
streams in flight may run within the grace period instead); the gRPC server stops; the
queue is built and handed to the sinks within ``capture.flush_deadline_s``; the admin
port closes. A second signal skips
the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import tempfile
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import grpc
import uvicorn
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.canary_split import SPLIT_FILE, Split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec, find_envoy_binary, render_envoy_config
from shadoweval.capture.envoy_process import EnvoyError, EnvoyProcess
from shadoweval.capture.ext_proc import CaptureProcessor, ExtProcMetrics
from shadoweval.capture.identity import UNKNOWN_MODEL, identity_from_settings
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.pipeline import BuilderMode, CapturePipeline
from shadoweval.capture.router_process import RouterProcess
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.sidecar import admin_config, capture_pipeline, ensure_exchange_topic
from shadoweval.capture.sinks.base import ExchangeSink
from shadoweval.config import CaptureSettings, EnvoySettings, KafkaSettings
from shadoweval.lifecycle import AsyncLifecycle, cancel_tasks
from shadoweval.probes import Readiness

logger = logging.getLogger(__name__)

GRPC_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest ProcessingRequest the gRPC server accepts (one body piece; Envoy's are far
smaller, its buffers are 1 MiB by default)."""

ServicerWrapper = Callable[[CaptureProcessor], Any]
"""Seam: wraps the real servicer (tests make it slow); returns an ExternalProcessorServicer."""


class _AdminServer(uvicorn.Server):
    """uvicorn without its own signal handling (the front end owns SIGTERM/SIGINT)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class EnvoyFrontEnd(AsyncLifecycle):
    """The capture service behind Envoy, and the Envoy child process.

    Args:
        capture: capture settings (upstream, live port ``host``/``port``, ``admin_port``,
            routes, sampling, limits, sinks, grace period).
        envoy: the front end's settings (gRPC port, Envoy admin port, binary, timeouts).
        kafka: broker settings (when ``"kafka"`` is among ``capture.sinks``).
        launch_envoy: run Envoy as a child process (default); ``False`` serves only the
            capture service for an Envoy configured elsewhere.
        work_dir: where Envoy's config and admin-address file go (default: a temporary
            directory removed on stop).
        envoy_log_path: Envoy's log file (default: inherit stderr).
        builder_mode: overrides ``capture.builder`` (``"inline"`` for tests).
        sinks: overrides the sinks built from settings (tests).
        servicer_wrapper: wraps the servicer (a seam for tests).

    Use :meth:`serve` for the whole life (signals included), or ``async with`` /
    :meth:`start`/:meth:`stop`. Started once, not restartable (:mod:`shadoweval.lifecycle`).

    Attributes:
        metrics: the capture metrics (``ext_metrics`` the service's own, same registry).
        envoy_process: the Envoy child once started (``None`` with ``launch_envoy=False``).
        router_process: the session router's process (``None`` without ``envoy.canary``).
        ext_proc_port, admin_port, listen_port, router_port: the bound ports once started.
    """

    def __init__(
        self,
        capture: CaptureSettings,
        envoy: EnvoySettings | None = None,
        kafka: KafkaSettings | None = None,
        *,
        launch_envoy: bool = True,
        work_dir: Path | None = None,
        envoy_log_path: Path | None = None,
        builder_mode: BuilderMode | None = None,
        sinks: Sequence[ExchangeSink] | None = None,
        servicer_wrapper: ServicerWrapper | None = None,
    ) -> None:
        self.capture = capture
        self.envoy = envoy or EnvoySettings()
        self.kafka = kafka or KafkaSettings()
        self.launch_envoy = launch_envoy
        self.metrics = CaptureMetrics()
        self.ext_metrics = ExtProcMetrics(self.metrics.registry)
        self.builder_mode: BuilderMode = builder_mode or capture.builder
        self._work_dir = work_dir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._envoy_log_path = envoy_log_path
        self._sinks_override = list(sinks) if sinks is not None else None
        self._servicer_wrapper = servicer_wrapper
        self.readiness = Readiness()
        self.draining = False
        self.pipeline: CapturePipeline | None = None
        self.processor: CaptureProcessor | None = None
        self.envoy_process: EnvoyProcess | None = None
        self.ext_proc_port: int | None = None
        self.admin_port: int | None = None
        self.listen_port: int | None = None
        self._grpc: grpc.aio.Server | None = None
        self.router_process: RouterProcess | None = None
        self.router_port: int | None = None
        self._admin: _AdminServer | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._envoy_ok: tuple[bool, str] = (False, "not started")
        self._watch_task: asyncio.Task[None] | None = None
        self._topic_task: asyncio.Task[None] | None = None
        self._shutdown = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the pipeline and sinks, the gRPC server, the admin port, then Envoy.

        Raises:
            ConfigError: no Envoy binary, or settings Envoy cannot run with.
            EnvoyError: Envoy exited or was not ``LIVE`` in time.
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            try:
                await self._start()
            except BaseException:
                await self._release(grace_s=0.0)
                raise

    async def _start(self) -> None:
        cap, env = self.capture, self.envoy
        binary = find_envoy_binary(env.binary) if self.launch_envoy else None
        model = identity_from_settings(
            cap.live_model, cap.live_model.name or UNKNOWN_MODEL, cap.upstream_url
        )
        builder = ExchangeBuilder(cap, model, source=f"envoy:{socket.gethostname()}")
        self.pipeline = capture_pipeline(
            cap, self.kafka, self.metrics, builder, self.builder_mode, self._sinks_override
        )
        await self.pipeline.start()
        sampler = StickySampler.from_settings(cap)
        self.processor = CaptureProcessor(
            cap, sampler, self.pipeline.offer, self.metrics, self.ext_metrics
        )
        servicer = (
            self._servicer_wrapper(self.processor) if self._servicer_wrapper else self.processor
        )
        self._grpc = grpc.aio.server(
            maximum_concurrent_rpcs=env.max_capture_streams,
            options=[
                ("grpc.so_reuseport", 0),  # a second service on the port must fail, not share
                ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
            ],
        )
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(servicer, self._grpc)
        self.ext_proc_port = self._grpc.add_insecure_port(
            f"{env.ext_proc_host}:{env.ext_proc_port}"
        )
        await self._grpc.start()
        spec = dataclasses.replace(
            EnvoyConfigSpec.from_settings(cap, env), ext_proc_port=self.ext_proc_port
        )
        if env.canary is not None:
            spec = await self._start_router(spec)
        await self._start_admin()
        pipeline = self.pipeline
        self.readiness.required["draining"] = lambda: (
            not self.draining,
            "draining after a stop signal" if self.draining else "accepting",
        )
        self.readiness.informational["capture_pipeline"] = lambda: (
            pipeline.running(),
            f"queue depth {pipeline.depth}",
        )
        for sink in pipeline.sinks:
            self.readiness.informational[f"sink_{sink.name}"] = _sink_probe(sink)
        if "kafka" in cap.sinks and self._sinks_override is None:
            self._topic_task = asyncio.create_task(
                ensure_exchange_topic(self.kafka, logger), name="ensure-topic"
            )
        if binary is None:
            self.readiness.required["ext_proc"] = lambda: (True, f"gRPC :{self.ext_proc_port}")
            return
        if self._work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="shadoweval-envoy-")
            work_dir = Path(self._tmp.name)
        else:
            work_dir = self._work_dir
        self.envoy_process = EnvoyProcess(
            binary,
            render_envoy_config(spec),
            work_dir,
            concurrency=env.concurrency,
            log_path=self._envoy_log_path,
            ready_timeout_s=env.ready_timeout_s,
        )
        await self.envoy_process.start()
        self.listen_port = self.envoy_process.listen_port
        self._envoy_ok = (True, "LIVE")
        self.readiness.required["envoy"] = lambda: self._envoy_ok
        self._watch_task = asyncio.create_task(self._watch_envoy(), name="envoy-watch")
        if env.capture_nice:
            lower_own_priority(env.capture_nice)

    async def _start_router(self, spec: EnvoyConfigSpec) -> EnvoyConfigSpec:
        """The canary split: write revision 0 (share 0: all baseline) when the split
        directory has no split file, start the session router's process (before the
        service lowers its priority: the router keeps the priority it started with); the
        spec with the router's bound port.

        Raises:
            ConfigError: the router could not read the split file or bind its port.
        """
        canary = self.envoy.canary
        assert canary is not None
        assert spec.canary is not None
        split_dir = Path(canary.split_dir)
        if not (split_dir / SPLIT_FILE).exists():
            write_split(split_dir, spec, Split(candidate_share=0.0, revision=0))
            logger.info("no split file in %s: wrote revision 0 (all baseline)", split_dir)
        self.router_process = RouterProcess(
            split_dir,
            self.capture.session_headers,
            self.envoy.ext_proc_host,
            canary.router_port,
            self.metrics.registry,
            max_pinned_sessions=canary.max_pinned_sessions,
            pin_idle_s=canary.pin_idle_s,
        )
        await self.router_process.start()
        self.router_port = self.router_process.port
        self.readiness.informational["canary_router"] = self.router_process.describe_state
        assert self.router_port is not None
        return dataclasses.replace(
            spec, canary=dataclasses.replace(spec.canary, router_port=self.router_port)
        )

    async def router_revision(self) -> int | None:
        """The split revision the session router applies now; ``None`` without a canary,
        or when the router process is down or does not answer in time."""
        proc = self.router_process
        if proc is None:
            return None
        status = await asyncio.to_thread(proc.status)
        return None if status is None else status.revision

    async def stop_router(self) -> None:
        """Stop the session router's process for good (not restarted): Envoy's weighted
        fallback serves the split from then on (tests of that fallback)."""
        if self.router_process is not None:
            await self.router_process.stop_child()

    async def _start_admin(self) -> None:
        cap = self.capture
        self._admin = _AdminServer(
            admin_config(self.metrics, self.readiness, cap.host, cap.admin_port)
        )
        self._admin_task = asyncio.create_task(self._admin.serve(), name="admin-server")
        while not self._admin.started:
            if self._admin_task.done():
                self._admin_task.result()  # raises what made it fail
                raise EnvoyError(f"admin port {cap.admin_port} could not be served")
            await asyncio.sleep(0.01)
        self.admin_port = int(self._admin.servers[0].sockets[0].getsockname()[1])

    async def _watch_envoy(self) -> None:
        """Keep ``/readyz`` current with Envoy's ``/ready``; end the serve loop if it exits."""
        proc = self.envoy_process
        assert proc is not None
        while True:
            if proc.returncode is not None:
                self._envoy_ok = (False, f"envoy exited with status {proc.returncode}")
                self._shutdown.set()
                return
            live = await proc.ready()
            self._envoy_ok = (live, "LIVE" if live else "envoy admin does not say LIVE")
            await asyncio.sleep(1.0)

    async def stop(self) -> None:
        """Drain Envoy within ``capture.grace_period_s``, stop it, the gRPC server, flush
        the pipeline within ``capture.flush_deadline_s``, close the admin port.

        Idempotent; a never-started front end has nothing to stop.
        """
        if not self._stopping():
            return
        await self._release(grace_s=self.capture.grace_period_s)

    async def _release(self, grace_s: float) -> None:
        self.draining = True
        await cancel_tasks(self._watch_task, self._topic_task)
        if self.envoy_process is not None:
            idle = await self.envoy_process.drain(grace_s)
            if idle:  # every request ended: let the processor streams deliver their last
                await self._wait_streams_closed(self.envoy.deferred_close_timeout_s + 1.0)
            await self.envoy_process.stop()  # cuts what is still in flight
        else:  # an Envoy run elsewhere: let the streams in flight end within the grace
            await self._wait_streams_closed(grace_s)
        if self.processor is not None:
            self.processor.stopping = True
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self.router_process is not None:
            await self.router_process.stop()
        if self.pipeline is not None:
            await self.pipeline.stop(self.capture.flush_deadline_s)
        if self._admin is not None and self._admin_task is not None:
            self._admin.should_exit = True
            with contextlib.suppress(Exception):
                await self._admin_task
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def _wait_streams_closed(self, timeout_s: float) -> None:
        """Let the processor streams deliver what Envoy still holds, at most ``timeout_s``
        (after the drain: ``deferred_close_timeout_s`` + 1 s, Envoy resets them by then
        anyway), so the last exchanges are complete rather than cut by Envoy's exit."""
        processor = self.processor
        if processor is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while processor.active and loop.time() < deadline:
            proc = self.envoy_process
            if proc is not None and (proc.returncode is not None or proc.grace_cut):
                return
            await asyncio.sleep(0.02)

    # -- serving ---------------------------------------------------------------------

    def request_shutdown(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does); a second call skips the grace."""
        if self._shutdown.is_set():
            if self.envoy_process is not None:
                self.envoy_process.cut_grace()
            return
        logger.info("shutdown requested: draining")
        self.draining = True
        self._shutdown.set()

    async def serve(
        self,
        *,
        install_signal_handlers: bool = True,
        on_ready: Callable[[EnvoyFrontEnd], None] | None = None,
    ) -> None:
        """Start, serve until a shutdown is requested (or Envoy exits), stop.

        Args:
            install_signal_handlers: SIGTERM/SIGINT call :meth:`request_shutdown`.
            on_ready: called once everything is serving (the CLI prints the ports).

        Raises:
            EnvoyError: Envoy could not start, or exited on its own (after the capture
                service flushed).
            LifecycleError: already started or stopped.
        """
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_shutdown)
        try:
            await self.start()
        except BaseException:
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            raise
        try:
            if on_ready is not None:
                on_ready(self)
            await self._shutdown.wait()
            code = self.envoy_process.returncode if self.envoy_process is not None else None
            await self.stop()
            if code is not None:
                raise EnvoyError(f"envoy exited on its own with status {code}")
        finally:
            await self.stop()
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)


def lower_own_priority(increment: int) -> None:
    """Add ``increment`` to the nice value of every thread of this process (Linux: nice is
    per thread; threads and processes started later inherit it). Never raises: a platform
    without ``/proc`` or ``setpriority`` is logged and left as it is."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            current = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, min(19, current + increment))
        except (OSError, AttributeError) as exc:
            logger.warning("could not lower the capture service's priority: %s", exc)
            return
    logger.info("capture service niced by %d (Envoy keeps its priority)", increment)


def _sink_probe(sink: ExchangeSink) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        status = getattr(sink, "status", None)
        detail = status() if callable(status) else ("ok" if sink.ready() else "not ready")
        return sink.ready(), str(detail)

    return probe
