"""The capture sidecar process: proxy + tee pipeline + sinks + admin endpoints.

Composition (DESIGN §2)::

    client ──► CaptureProxy ──► upstream (live model)      bytes pass through untouched
                   │ offer(RawCapture)  (O(1), never waits; full ⇒ drop + count)
                   ▼
              CapturePipeline ──► builder process ──► KafkaSink (+ disk spool), FileSink

Shutdown (SIGTERM or SIGINT): ``/readyz`` turns 503 at once; the proxy's listener closes
(idle keep-alive connections too) and in-flight responses may finish within
``grace_period_s`` seconds (fractions honoured; ``0`` cuts them at once; a second signal
cuts them too); past it they are cut and captured as ``cancelled``; then the queue is built
and handed to the sinks within ``flush_deadline_s`` (what Kafka does not acknowledge in
time goes to the spool, re-sent at the next start); then the admin port closes. Choose
``grace_period_s`` ≥ max_tokens × TPOT p99 + TTFT p99 of the live model (docs/capture.md).

**The sidecar sends nothing to the upstream on its own by default** (a single-request
server such as llama-cpp-python, ``interrupt_requests=True``, ends the running stream when
another request arrives: a probe every 5 s cut 17 of 42 live streams). The live model's
name comes from ``live_model.name``, else from the ``model`` field of each relayed
response (the builder, :func:`shadoweval.capture.identity.resolve_identity`); asking the upstream's
``/v1/models`` at start is opt-in (``live_model_from_upstream``), and so is the periodic
readiness probe (``upstream_probe``).

Admin endpoints (:func:`shadoweval.probes.probe_app`, JSON bodies) live on their own port,
because the proxied port forwards every path to the upstream (vLLM serves its own
``/metrics`` and ``/health``; a client must keep reaching them unchanged):

* ``/healthz`` — 200 while the process serves (liveness).
* ``/readyz`` — 200 while the proxy is accepting (not draining). With ``upstream_probe``
  on, also only while the upstream answered the last probe (``GET readiness_path``, every
  ``readiness_interval_s``). With it off (default) the ``upstream`` entry is informational:
  it reports the upstream outcome of the latest relayed request (responded, or the
  connect/protocol error) and its age, and never makes the sidecar unready — an unready
  sidecar gets no traffic, so traffic could never show the upstream is back. A broker
  outage does *not* make the sidecar unready either: it spools, and the live path is
  unaffected; the JSON body reports the sink state.
* ``/metrics`` — Prometheus text format of the sidecar's registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

import httpx
import uvicorn

from shadoweval.bus import ensure_topics
from shadoweval.bus.producer import BusProducer
from shadoweval.capture.builder import ExchangeBuilder
from shadoweval.capture.identity import UNKNOWN_MODEL, fetch_live_model, identity_from_settings
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.pipeline import BuilderMode, CapturePipeline
from shadoweval.capture.proxy import CaptureProxy
from shadoweval.capture.sampling import StickySampler
from shadoweval.capture.sinks.base import ExchangeSink
from shadoweval.capture.sinks.file import FileSink
from shadoweval.capture.sinks.kafka import KafkaSink, SinkMode
from shadoweval.config import CaptureSettings, KafkaSettings
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.lifecycle import AsyncLifecycle, cancel_tasks
from shadoweval.probes import Readiness, probe_app
from shadoweval.records import ModelIdentity

logger = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the sidecar runs two servers in one loop
    and owns SIGTERM/SIGINT itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bound_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (IPv6 when ``host`` is one).

    Bound here rather than by uvicorn, whose bind failure is a ``sys.exit`` inside a task.

    Raises:
        OSError: the address is in use or not permitted.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _bind_error(name: str, host: str, port: int, exc: OSError) -> ConfigError:
    """The error naming the port setting that could not be listened on, and why."""
    return ConfigError(
        f"{name} = {port}: cannot listen on {host}:{port} ({exc.strerror or exc})",
        field=name,
        value=port,
    )


def worker_settings(capture: CaptureSettings, index: int) -> CaptureSettings:
    """The settings worker ``index`` (0-based) of ``capture.workers`` runs with.

    One worker: ``capture`` unchanged. Several: the same ``port`` (shared with
    ``SO_REUSEPORT``), admin port ``admin_port + index`` (0 stays 0), the spool in
    ``<spool.directory>/worker-<index>`` (a spool belongs to one process), and
    ``ceil(max_client_connections / workers)`` connections.
    """
    if capture.workers <= 1:
        return capture
    spool = capture.spool.model_copy(
        update={"directory": str(Path(capture.spool.directory) / f"worker-{index}")}
    )
    return capture.model_copy(
        update={
            "admin_port": capture.admin_port + index if capture.admin_port else 0,
            "spool": spool,
            "max_client_connections": -(-capture.max_client_connections // capture.workers),
        }
    )


def make_sinks(
    capture: CaptureSettings,
    kafka: KafkaSettings,
    metrics: CaptureMetrics,
    producer_factory: Callable[[KafkaSettings], BusProducer] = BusProducer,
) -> list[ExchangeSink]:
    """The sinks named in ``capture.sinks`` (``kafka`` and/or ``file``)."""
    sinks: list[ExchangeSink] = []
    for name in dict.fromkeys(capture.sinks):
        if name == "kafka":
            sinks.append(
                KafkaSink(kafka, capture.spool, metrics, producer_factory=producer_factory)
            )
        elif name == "file":
            sinks.append(
                FileSink(
                    capture.file_sink_directory,
                    metrics,
                    compress=capture.file_sink_compress,
                )
            )
    return sinks


async def ensure_exchange_topic(kafka: KafkaSettings, log: logging.Logger) -> None:
    """Create the exchanges topic when missing, with room for the largest message plus
    64 KiB (best effort, within twice ``kafka.send_timeout_s``: a broker that is down or
    forbids creation is logged on ``log``, the front end's logger; the Kafka sink spools
    meanwhile)."""
    k = kafka
    try:
        created = await asyncio.wait_for(
            ensure_topics(
                k.bootstrap_servers,
                [k.topic],
                partitions=k.partitions,
                replication_factor=k.replication_factor,
                max_message_bytes=k.max_message_bytes + 64 * 1024,
            ),
            k.send_timeout_s * 2,
        )
        if created:
            log.info("created topic %s (%d partitions)", k.topic, k.partitions)
    except (TimeoutError, ShadowEvalError) as exc:
        log.warning("could not check or create topic %s: %s", k.topic, exc)


def admin_config(
    metrics: CaptureMetrics, readiness: Readiness, host: str, port: int
) -> uvicorn.Config:
    """uvicorn's configuration of a capture front end's admin port on ``host:port``:
    ``/healthz``, ``/readyz`` (``readiness``) and ``/metrics`` (``metrics``' registry),
    JSON bodies (:func:`shadoweval.probes.probe_app`); no lifespan, no access log."""
    return uvicorn.Config(
        probe_app(metrics.registry, readiness.check),
        host=host,
        port=port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws="none",
    )


def capture_pipeline(
    capture: CaptureSettings,
    kafka: KafkaSettings,
    metrics: CaptureMetrics,
    builder: ExchangeBuilder,
    builder_mode: BuilderMode,
    sinks: Sequence[ExchangeSink] | None,
) -> CapturePipeline:
    """The capture pipeline (not started) of ``builder``, writing to ``sinks``, else to
    the sinks ``capture.sinks`` names (:func:`make_sinks`)."""
    chosen = sinks if sinks is not None else make_sinks(capture, kafka, metrics)
    return CapturePipeline.from_settings(capture, builder, chosen, metrics, builder_mode)


class Sidecar(AsyncLifecycle):
    """One capture sidecar.

    Args:
        capture: sidecar settings (upstream, routes, sampling, redaction, queue, sinks).
        kafka: broker settings (used when ``"kafka"`` is among ``capture.sinks``).
        builder_mode: overrides ``capture.builder`` (``"inline"`` for tests).
        upstream_transport: httpx transport seam for the opt-in upstream probe and model
            lookup (tests); the proxy itself always uses real sockets.
        sinks: overrides the sinks built from settings (tests).
        model: live-model identity; default: from ``capture.live_model`` (name empty:
            taken from each response's ``model`` field, or asked from the upstream's
            ``/v1/models`` when ``capture.live_model_from_upstream``).

    Two ways to run it (:mod:`shadoweval.lifecycle`: started once, not restartable):
    :meth:`serve` binds the proxy and admin ports and runs the whole life (start, serve
    until a shutdown is requested, stop); ``async with`` (or :meth:`start`/:meth:`stop`)
    starts the pipeline and the proxy as an ASGI app without binding a port.
    """

    def __init__(
        self,
        capture: CaptureSettings,
        kafka: KafkaSettings | None = None,
        *,
        builder_mode: BuilderMode | None = None,
        upstream_transport: httpx.AsyncBaseTransport | None = None,
        sinks: Sequence[ExchangeSink] | None = None,
        model: ModelIdentity | None = None,
    ) -> None:
        self.capture = capture
        self.kafka = kafka or KafkaSettings()
        self.metrics = CaptureMetrics()
        self.builder_mode: BuilderMode = builder_mode or capture.builder
        self._upstream_transport = upstream_transport
        self._sinks_override = list(sinks) if sinks is not None else None
        self._model = model
        self.draining = False
        self.pipeline: CapturePipeline | None = None
        self.proxy: CaptureProxy | None = None
        self.readiness = Readiness()
        self._upstream_ok: tuple[bool, str] = (False, "not probed yet")
        self._probe_task: asyncio.Task[None] | None = None
        self._topic_task: asyncio.Task[None] | None = None
        self._shutdown: asyncio.Event | None = None
        self._forced = False
        self._admin: _Server | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Resolve the live model, start sinks, pipeline and proxy (never fails because a
        broker is down).

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            await self._start()

    async def _start(self) -> None:
        cap = self.capture
        if self._model is not None:
            model = self._model
        elif cap.live_model_from_upstream and not cap.live_model.name:
            model = await fetch_live_model(
                cap.upstream_url, cap.live_model, transport=self._upstream_transport
            )
        else:  # nothing asked of the upstream: the name, or each response's ``model``
            name = cap.live_model.name or UNKNOWN_MODEL
            model = identity_from_settings(cap.live_model, name, cap.upstream_url)
        self.model = model
        builder = ExchangeBuilder(cap, model, source=f"sidecar:{socket.gethostname()}")
        self.pipeline = capture_pipeline(
            cap, self.kafka, self.metrics, builder, self.builder_mode, self._sinks_override
        )
        await self.pipeline.start()
        sampler = StickySampler.from_settings(cap)
        self.proxy = CaptureProxy(cap, sampler, self.pipeline.offer, self.metrics)
        await self.proxy.start()
        proxy = self.proxy
        pipeline = self.pipeline
        self.readiness.required["draining"] = lambda: (
            not self.draining,
            "draining after a stop signal" if self.draining else "accepting",
        )
        if cap.upstream_probe:
            self.readiness.required["upstream"] = lambda: self._upstream_ok
        else:
            self.readiness.informational["upstream"] = lambda: _traffic_outcome(proxy)
        self.readiness.informational["capture_pipeline"] = lambda: (
            pipeline.running(),
            f"queue depth {pipeline.depth}",
        )
        for sink in pipeline.sinks:
            self.readiness.informational[f"sink_{sink.name}"] = _sink_probe(sink)
        if cap.upstream_probe:
            self._probe_task = asyncio.create_task(self._probe_upstream(), name="upstream-probe")
        if "kafka" in cap.sinks and self._sinks_override is None:
            self._topic_task = asyncio.create_task(
                ensure_exchange_topic(self.kafka, logger), name="ensure-topic"
            )

    async def _probe_upstream(self) -> None:
        url = self.capture.upstream_url.rstrip("/") + self.capture.readiness_path
        async with httpx.AsyncClient(transport=self._upstream_transport, timeout=2.0) as client:
            while True:
                try:
                    resp = await client.get(url)
                    ok = resp.status_code < 500
                    detail = f"GET {self.capture.readiness_path} → {resp.status_code}"
                    self._upstream_ok = (ok, detail)
                except httpx.HTTPError as exc:
                    self._upstream_ok = (False, f"upstream unreachable: {type(exc).__name__}")
                await asyncio.sleep(self.capture.readiness_interval_s)

    async def stop(self) -> None:
        """Stop the proxy's client, flush the pipeline within ``flush_deadline_s``.

        Idempotent; a never-started sidecar has nothing to stop.
        """
        if not self._stopping():
            return
        self.draining = True
        await cancel_tasks(self._probe_task, self._topic_task)
        if self.proxy is not None:
            await self.proxy.stop()
        if self.pipeline is not None:
            await self.pipeline.stop(self.capture.flush_deadline_s)

    # -- serving ---------------------------------------------------------------------

    def request_shutdown(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does); a second call cuts in-flight
        exchanges at once."""
        if self.draining:
            self._forced = True
            if self.proxy is not None and self._shutdown is not None:
                self.proxy.cut_all()
            return
        logger.info("shutdown requested: draining")
        self.draining = True
        if self._shutdown is not None:
            self._shutdown.set()

    async def serve(self, *, install_signal_handlers: bool = True) -> None:
        """Start, serve the proxy and admin ports until a shutdown is requested, stop.

        Raises:
            LifecycleError: the sidecar was already started (``async with``) or stopped.
            OSError: a port could not be bound.
        """
        self._shutdown = asyncio.Event()
        await self.start()
        assert self.proxy is not None
        cap = self.capture
        try:
            try:
                await self.proxy.listen(cap.host, cap.port, reuse_port=cap.workers > 1)
            except OSError as exc:
                raise _bind_error("capture.port", cap.host, cap.port, exc) from None
            try:
                admin_socket = _bound_socket(cap.host, cap.admin_port)
            except OSError as exc:
                raise _bind_error("capture.admin_port", cap.host, cap.admin_port, exc) from None
        except BaseException:
            await self.stop()
            raise
        self._admin = _Server(admin_config(self.metrics, self.readiness, cap.host, cap.admin_port))
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.request_shutdown)
        admin_task = asyncio.create_task(
            self._admin.serve(sockets=[admin_socket]), name="admin-server"
        )
        if self.draining:  # asked before serving began
            self._shutdown.set()
        try:
            await self._shutdown.wait()
            started = time.monotonic()
            grace_s = 0.0 if self._forced else cap.grace_period_s
            cut = await self.proxy.drain(grace_s)
            logger.info(
                "proxy closed after %.2f s (%d in-flight exchange(s) cut); flushing captures",
                time.monotonic() - started,
                cut,
            )
        finally:
            await self.stop()
            self._admin.should_exit = True
            await admin_task
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)

    @property
    def bound_port(self) -> int | None:
        """The proxy's listening port once serving (useful with ``port=0``)."""
        return None if self.proxy is None else self.proxy.bound_port

    @property
    def bound_admin_port(self) -> int | None:
        """The admin port once serving (useful with ``admin_port=0``)."""
        return _bound_port(self._admin)


def _traffic_outcome(proxy: CaptureProxy) -> tuple[bool, str]:
    """The informational ``upstream`` readiness entry when no probe runs."""
    last = proxy.last_upstream_outcome
    if last is None:
        return True, "no request relayed yet (capture.upstream_probe is off: nothing is sent)"
    ok, detail, at = last
    return ok, f"latest relayed request {time.monotonic() - at:.1f} s ago: {detail}"


def _sink_probe(sink: ExchangeSink) -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        status = getattr(sink, "status", None)
        detail = status() if callable(status) else ("ok" if sink.ready() else "not ready")
        spooling = getattr(sink, "mode", None) is SinkMode.SPOOLING
        return sink.ready() and not spooling, str(detail)

    return probe


def _bound_port(server: uvicorn.Server | None) -> int | None:
    if server is None or not server.started or not server.servers:
        return None
    return int(server.servers[0].sockets[0].getsockname()[1])
