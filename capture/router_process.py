"""The canary session router in its own process: normal CPU priority, its own GIL, its own
event loop and gRPC server.

Envoy waits for the session router on every request when a canary is configured
(:mod:`shadoweval.capture.session_router`, bounded by ``envoy.canary.router_timeout_ms``). Inside
the
capture service's process it shared the capture work's event loop and GIL and, once the
front end lowered its own priority (``envoy.capture_nice``), that priority too: at 200
streams on two cores it added +23 ms p50 / +55 ms p99 to every request and 19 % of the
router calls waited out the timeout (docs/benchmarks.md). :class:`RouterProcess` runs it in
a child started with multiprocessing's ``"spawn"`` context, by the front end *before* it
lowers its priority, so the child keeps the priority the service started with.

Parent ⇄ child: one duplex :func:`multiprocessing.Pipe`. The child builds
:class:`~shadoweval.capture.session_router.SessionRouter` (its metrics in the child's own registry)
and
a ``grpc.aio`` server on ``host:port`` (``0``: any free port), then sends
``("ready", "", bound_port)`` — or ``("error", field, message)`` when the split file
cannot be read or the port cannot be bound, which :meth:`RouterProcess.start` raises as a
:class:`~shadoweval.errors.ConfigError` naming the field and the port. After that the pipe
carries requests ``(seq, command)`` answered ``(seq, payload)``: ``"metrics"`` (the child
registry's metric families, pickled), ``"status"`` (:class:`RouterStatus`), ``"stop"``
(acknowledged, then the child stops its server within 0.5 s and exits). A request
answered late is discarded by its ``seq``. The child ends too when the pipe closes, on
SIGTERM, and is killed when its parent dies however it died (SIGKILL included; Linux's
parent-death signal, :mod:`shadoweval.process_death`); it ignores SIGINT (a terminal's
Ctrl-C reaches the whole process group; the parent decides when the router stops).

Metrics: :class:`RouterCollector`, registered on the front end's registry, fetches the
child's samples on each collect (each scrape of the admin ``/metrics``) with a short timeout
(``fetch_timeout_s``) under a lock (scrapes can be concurrent), so the metric names of
:class:`~shadoweval.capture.session_router.RouterMetrics` stay where they were. A child that does
not
answer in time contributes no samples to that scrape. The parent's own:
``shadoweval_canary_router_exits_total`` (the child exited without being asked) and
``shadoweval_canary_router_restarts_total``.

A child that dies (killed, crashed) is logged and counted; while it is down Envoy's
``failure_mode_allow`` fallback (the split file's weighted, session-hashed clusters)
serves every request. It is restarted on the same port after ``restart_delay_s``
(doubling to ``max_restart_delay_s`` while restarts fail). A restart is spawned by a
parent that may have lowered its priority by then; the child asks for the priority
recorded at :meth:`RouterProcess.start` back and logs a warning when the platform refuses
(raising priority needs ``CAP_SYS_NICE`` / ``RLIMIT_NICE``). A restarted router has no pins:
its sessions land by the monotone bucket rule at the current share (as forgotten sessions
do, docs/capture.md "Canary split").

Source: Python ``multiprocessing`` (spawn start method, ``Connection``, ``Process.sentinel``);
prometheus_client custom collectors (``Collector.collect`` / ``describe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from shadoweval.errors import ConfigError
from shadoweval.lifecycle import AsyncLifecycle, cancel_tasks
from shadoweval.process_death import die_with_parent

logger = logging.getLogger(__name__)

STOP_GRACE_S = 0.5
"""The child's gRPC server stop grace, seconds (a router answer takes well under 1 ms)."""


@dataclass(frozen=True, slots=True)
class RouterStatus:
    """What the router applies now: the split's ``revision`` and ``candidate_share``
    (0..1), the ``pinned_sessions`` it remembers, and the child's ``pid``."""

    revision: int
    candidate_share: float
    pinned_sessions: int
    pid: int


@dataclass(frozen=True, slots=True)
class RouterChildConfig:
    """The child's arguments (picklable primitives only: it is sent to a spawned process).

    ``split_dir`` holds ``split.yaml``; ``session_headers`` as ``capture.session_headers``;
    ``host``/``port`` the gRPC address (``port`` 0: any free port); ``max_pinned_sessions``,
    ``pin_idle_s`` the pin table's bounds; ``nice`` the priority the child asks for (the
    parent's when it first started); ``log_level`` the parent's root log level.
    """

    split_dir: str
    session_headers: tuple[str, ...]
    host: str
    port: int
    max_pinned_sessions: int
    pin_idle_s: float
    nice: int
    log_level: int


# -- the child ---------------------------------------------------------------------------


def _restore_priority(target: int) -> None:
    """Ask for nice value ``target`` when the child inherited a higher one (a restart by a
    parent that lowered its own priority); log when the platform refuses."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if current > target:
            os.setpriority(os.PRIO_PROCESS, 0, target)
            logger.info("session router: priority restored to nice %d", target)
    except (OSError, AttributeError) as exc:
        logger.warning(
            "session router runs at the capture service's lowered priority (cannot restore "
            "nice %d: %s); Envoy's fallback decides when it answers too late",
            target,
            exc,
        )


def router_child_main(conn: Connection, config: RouterChildConfig) -> None:
    """The child process's entry point (spawned by :class:`RouterProcess`): serve the
    session router until asked to stop, SIGTERM, or the pipe closes; killed with its
    parent (:func:`~shadoweval.process_death.die_with_parent`)."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s [session-router] %(name)s: %(message)s",
    )
    _restore_priority(config.nice)
    try:
        asyncio.run(_child_serve(conn, config))
    finally:
        with contextlib.suppress(OSError):
            conn.close()


async def _child_serve(conn: Connection, config: RouterChildConfig) -> None:
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

    from shadoweval.capture.session_router import SessionRouter

    registry = CollectorRegistry()
    router = SessionRouter(
        Path(config.split_dir),
        config.session_headers,
        registry,
        max_pinned_sessions=config.max_pinned_sessions,
        pin_idle_s=config.pin_idle_s,
    )
    try:
        await router.start()
    except ConfigError as exc:
        conn.send(("error", "envoy.canary.split_dir", f"the session router: {exc}"))
        return
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(router, server)
    address = f"{config.host}:{config.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:  # grpcio >= 1.56 raises; older versions return 0
        port, reason = 0, str(exc)
    else:
        reason = "nothing bound"
    if port == 0:
        await router.stop()
        conn.send(
            (
                "error",
                "envoy.canary.router_port",
                f"the session router could not bind {address}: {reason}",
            )
        )
        return
    await server.start()
    conn.send(("ready", "", port))
    logger.info("session router serving on %s:%d (pid %d)", config.host, port, os.getpid())

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def on_request() -> None:
        try:
            seq, command = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            loop.remove_reader(conn.fileno())
            stop.set()
            return
        payload: Any
        if command == "metrics":
            payload = list(registry.collect())
        elif command == "status":
            split = router.split
            payload = RouterStatus(
                split.revision, split.candidate_share, len(router.pins), os.getpid()
            )
        elif command == "stop":
            payload = "stopping"
            stop.set()
        else:
            payload = None
        with contextlib.suppress(OSError):
            conn.send((seq, payload))

    loop.add_reader(conn.fileno(), on_request)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(conn.fileno())
        await server.stop(grace=STOP_GRACE_S)
        await router.stop()
        logger.info("session router stopped")


# -- the parent --------------------------------------------------------------------------


class RouterProcess(AsyncLifecycle):
    """The session router as a child process (see the module docstring).

    Args:
        split_dir: the directory holding ``split.yaml`` (it must exist: the front end
            writes revision 0 first).
        session_headers: ``capture.session_headers``.
        host: ``envoy.ext_proc_host``.
        port: ``envoy.canary.router_port`` (``0``: any free port; a restart reuses the
            bound one).
        registry: where :class:`RouterCollector` and the parent's own metrics go.
        max_pinned_sessions, pin_idle_s: ``envoy.canary``'s pin bounds.
        ready_timeout_s: the most :meth:`start` waits for the child's bound port, seconds.
        stop_timeout_s: the most :meth:`stop` waits for a graceful exit before it
            terminates (then kills) the child, seconds.
        fetch_timeout_s: the most one metrics / status request waits for the child, seconds.
        restart: restart a child that died (see the module docstring).
        restart_delay_s, max_restart_delay_s: the first restart's delay and the cap of its
            doubling, seconds.

    Attributes:
        port: the bound port once started. ``process``: the current child.

    Raises:
        ConfigError: (from :meth:`start`) the split file is missing or malformed
            (``envoy.canary.split_dir``), the port cannot be bound, or the child did not
            report a port within ``ready_timeout_s`` (``envoy.canary.router_port``).
    """

    def __init__(
        self,
        split_dir: Path,
        session_headers: Sequence[str],
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        max_pinned_sessions: int = 1_000_000,
        pin_idle_s: float = 86400.0,
        ready_timeout_s: float = 60.0,
        stop_timeout_s: float = 5.0,
        fetch_timeout_s: float = 1.0,
        restart: bool = True,
        restart_delay_s: float = 1.0,
        max_restart_delay_s: float = 30.0,
    ) -> None:
        self.split_dir = Path(split_dir)
        self.session_headers = tuple(session_headers)
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.max_pinned_sessions = max_pinned_sessions
        self.pin_idle_s = pin_idle_s
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.fetch_timeout_s = fetch_timeout_s
        self.restart = restart
        self.restart_delay_s = restart_delay_s
        self.max_restart_delay_s = max_restart_delay_s
        self.process: multiprocessing.process.BaseProcess | None = None
        self.last_exit: str = ""
        self._ctx = multiprocessing.get_context("spawn")
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._seq = 0
        self._nice = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._stopping_now = False
        self.exits = Counter(
            "shadoweval_canary_router_exits_total",
            "Session router processes that exited without being asked to "
            "(Envoy's fallback serves until it is back).",
            registry=registry,
        )
        self.restarts = Counter(
            "shadoweval_canary_router_restarts_total",
            "Session router processes restarted after an exit.",
            registry=registry,
        )
        self.collector = RouterCollector(self)
        registry.register(self.collector)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the child and wait for its bound port (at most ``ready_timeout_s``).

        Raises:
            ConfigError: see the class docstring.
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            self._loop = asyncio.get_running_loop()
            try:
                self._nice = os.getpriority(os.PRIO_PROCESS, 0)
            except (OSError, AttributeError):
                self._nice = 0
            await self._spawn(self.requested_port)

    async def _spawn(self, port: int) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        config = RouterChildConfig(
            split_dir=str(self.split_dir),
            session_headers=self.session_headers,
            host=self.host,
            port=port,
            max_pinned_sessions=self.max_pinned_sessions,
            pin_idle_s=self.pin_idle_s,
            nice=self._nice,
            log_level=logging.getLogger().getEffectiveLevel(),
        )
        proc = self._ctx.Process(
            target=router_child_main,
            args=(child_conn, config),
            name="shadoweval-session-router",
            daemon=True,
        )
        # on the event loop's thread (start() and the restart task): the child's
        # parent-death signal fires when the forking thread exits, so never a to_thread here
        proc.start()
        child_conn.close()  # the child holds its end; EOF here means it is gone
        try:
            message = await asyncio.to_thread(self._wait_ready, parent_conn, proc)
        except BaseException:
            await asyncio.to_thread(self._end, proc, parent_conn, 0.0)
            raise
        kind, field, value = message
        if kind != "ready":
            await asyncio.to_thread(self._end, proc, parent_conn, self.stop_timeout_s)
            raise ConfigError(
                str(value),
                field=field,
                value=str(self.split_dir) if field == "envoy.canary.split_dir" else port,
            )
        with self._lock:
            self._conn = parent_conn
        self.process = proc
        self.port = int(value)
        assert self._loop is not None
        self._loop.add_reader(proc.sentinel, self._on_exit, proc)

    def _wait_ready(self, conn: Connection, proc: multiprocessing.process.BaseProcess) -> Any:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                if conn.poll(0.05):
                    return conn.recv()
            except (EOFError, OSError):
                pass
            if not proc.is_alive():
                proc.join(1.0)
                raise ConfigError(
                    f"the session router process exited with status {proc.exitcode} before "
                    f"it reported a port (wanted {self.host}:{self.requested_port})",
                    field="envoy.canary.router_port",
                    value=self.requested_port,
                )
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"the session router did not report a bound port on {self.host}:"
                    f"{self.requested_port} within {self.ready_timeout_s} s",
                    field="envoy.canary.router_port",
                    value=self.requested_port,
                )

    def _on_exit(self, proc: multiprocessing.process.BaseProcess) -> None:
        """The child's sentinel became readable: it exited."""
        assert self._loop is not None
        self._loop.remove_reader(proc.sentinel)
        proc.join(0)
        if self._stopping_now or proc is not self.process:
            return
        self.last_exit = f"exited with status {proc.exitcode}"
        self.exits.inc()
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        logger.error(
            "the session router process (pid %s) %s: Envoy's weighted fallback serves "
            "the canary split until it is back%s",
            proc.pid,
            self.last_exit,
            "" if self.restart else " (restart is off)",
        )
        if self.restart:
            self._restart_task = self._loop.create_task(
                self._restart_loop(), name="session-router-restart"
            )

    async def _restart_loop(self) -> None:
        delay = self.restart_delay_s
        while not self._stopping_now:
            await asyncio.sleep(delay)
            if self._stopping_now:
                return
            try:
                await self._spawn(self.port or self.requested_port)
            except ConfigError as exc:
                logger.error("session router restart failed (next in %.1f s): %s", delay, exc)
                delay = min(self.max_restart_delay_s, delay * 2)
                continue
            self.restarts.inc()
            self.last_exit += ", restarted"
            logger.warning("session router restarted on port %s", self.port)
            return

    async def stop(self) -> None:
        """Ask the child to stop, wait at most ``stop_timeout_s``, then terminate and kill
        it. Idempotent."""
        if not self._stopping():
            return
        await self.stop_child()

    async def stop_child(self) -> None:
        """Stop the child and do not restart it (also what :meth:`stop` does; the front
        end's ``stop_router`` for tests, where Envoy's fallback must serve)."""
        self._stopping_now = True
        task, self._restart_task = self._restart_task, None
        await cancel_tasks(task)
        proc = self.process
        with self._lock:
            conn, self._conn = self._conn, None
        if proc is None:
            return
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(proc.sentinel)
        if conn is not None:
            with contextlib.suppress(OSError, EOFError):
                conn.send((0, "stop"))
        await asyncio.to_thread(self._end, proc, conn, self.stop_timeout_s)

    @staticmethod
    def _end(
        proc: multiprocessing.process.BaseProcess, conn: Connection | None, timeout_s: float
    ) -> None:
        proc.join(timeout_s)
        if proc.exitcode is None:
            logger.warning("session router did not stop in %.1f s: terminating", timeout_s)
            proc.terminate()
            proc.join(2.0)
        if proc.exitcode is None:
            proc.kill()
            proc.join(2.0)
        if conn is not None:
            conn.close()

    # -- requests --------------------------------------------------------------------

    def alive(self) -> bool:
        """Whether a child is running now."""
        proc = self.process
        return proc is not None and proc.is_alive() and self._conn is not None

    def request(self, command: str, timeout_s: float | None = None) -> Any:
        """Send ``command`` (``"metrics"``, ``"status"``) to the child and wait at most
        ``timeout_s`` (default ``fetch_timeout_s``) for its answer; ``None`` when there is
        no child or it does not answer in time. Thread-safe (blocking)."""
        timeout = self.fetch_timeout_s if timeout_s is None else timeout_s
        with self._lock:
            conn = self._conn
            if conn is None:
                return None
            self._seq += 1
            seq = self._seq
            deadline = time.monotonic() + timeout
            try:
                conn.send((seq, command))
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not conn.poll(remaining):
                        return None
                    got, payload = conn.recv()
                    if got == seq:
                        return payload
                    # an answer to a request that timed out earlier: skip it
            except (EOFError, OSError):
                return None

    def status(self, timeout_s: float | None = None) -> RouterStatus | None:
        """The child's :class:`RouterStatus`, or ``None`` (no child, or no answer in time)."""
        answer = self.request("status", timeout_s)
        return answer if isinstance(answer, RouterStatus) else None

    def describe_state(self) -> tuple[bool, str]:
        """For ``/readyz`` (informational): ``(up, detail)``; waits at most 0.25 s for the
        child's status (the probe runs on the front end's event loop)."""
        if not self.alive():
            exited = self.last_exit or "not running"
            return False, f"session router {exited}; Envoy's weighted fallback serves"
        status = self.status(min(self.fetch_timeout_s, 0.25))
        proc = self.process
        assert proc is not None
        if status is None:
            return True, f"session router pid {proc.pid} on :{self.port} (no status in time)"
        return True, (
            f"session router pid {status.pid} on :{self.port}: revision {status.revision}, "
            f"candidate share {status.candidate_share}"
        )


_FAMILIES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("counter", "shadoweval_canary_decisions", "Arm decisions", ("arm", "reason")),
    ("gauge", "shadoweval_canary_pinned_sessions", "Pinned sessions", ()),
    ("gauge", "shadoweval_canary_split_share", "Candidate share", ()),
    ("gauge", "shadoweval_canary_split_revision", "Split revision", ()),
    ("counter", "shadoweval_canary_split_reload_errors", "Split reload errors", ()),
)


class RouterCollector(Collector):
    """A prometheus_client collector yielding the router child's metric families
    (:class:`~shadoweval.capture.session_router.RouterMetrics`, fetched over the pipe on each
    collect,
    at most ``fetch_timeout_s``); nothing when the child is down or late."""

    def __init__(self, owner: RouterProcess) -> None:
        self._owner = owner

    def collect(self) -> Iterator[Metric]:
        """The child's metric families as it reports them."""
        families = self._owner.request("metrics")
        if isinstance(families, list):
            yield from families

    def describe(self) -> Iterator[Metric]:
        """The families' names (for the registry's duplicate check), without samples."""
        for kind, name, doc, labels in _FAMILIES:
            if kind == "counter":
                yield CounterMetricFamily(name, doc, labels=labels)
            else:
                yield GaugeMetricFamily(name, doc, labels=labels)
