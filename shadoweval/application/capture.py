"""Capturing live traffic: the sidecar proxy in front of the live model, built from settings.

:func:`capture_settings` resolves the settings a sidecar runs with (the environment's
``SHADOWEVAL_CAPTURE__*`` and ``SHADOWEVAL_KAFKA__*`` with the face's overrides) and checks
them as the sidecar would at start-up, so a bad value is reported before anything listens;
:func:`serve_capture` then runs the sidecar (:class:`shadoweval.capture.sidecar.Sidecar`) until
SIGTERM/SIGINT, on uvloop when it is installed.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from shadoweval.body_redaction import BodyRedactor
from shadoweval.capture.sidecar import Sidecar, worker_settings
from shadoweval.config import Settings, load_settings
from shadoweval.lifecycle import freeze_startup_heap
from shadoweval.log_limits import LOG_FORMAT
from shadoweval.process_death import die_with_parent

__all__ = ["CaptureOverrides", "capture_settings", "check_capture_directories", "serve_capture"]


@dataclass(frozen=True, slots=True)
class CaptureOverrides:
    """Settings given on the command line; ``None`` keeps the environment's (or default).

    Attributes:
        upstream: base URL of the live model server (``None``: the environment's or the
            default; only ``capture envoy-config --fragment``, which routes nothing, gives
            none).
        host: the address the proxy and admin ports listen on.
        port: the proxy port (clients connect here).
        admin_port: the port of ``/healthz``, ``/readyz`` and ``/metrics``.
        sinks: ``kafka`` and/or ``file``.
        kafka_bootstrap: Kafka bootstrap servers ``HOST:PORT[,HOST:PORT]``.
        topic: the Kafka topic of exchanges.
        capture_dir: the file sink's capture-log directory.
        spool_dir: the disk spool's directory.
        sample_percent: share of sessions captured, 0-100 (sticky per session).
        grace_period_s: seconds in-flight responses may run after SIGTERM.
        workers: relay processes sharing the port (``capture.workers``).
        live_model: the live model's name (default: each response's ``model`` field).
    """

    upstream: str | None
    host: str | None = None
    port: int | None = None
    admin_port: int | None = None
    sinks: tuple[str, ...] | None = None
    kafka_bootstrap: str | None = None
    topic: str | None = None
    capture_dir: str | None = None
    spool_dir: str | None = None
    sample_percent: float | None = None
    grace_period_s: float | None = None
    workers: int | None = None
    live_model: str | None = None


def capture_settings(overrides: CaptureOverrides) -> Settings:
    """The settings the sidecar runs with: the environment, then ``overrides``.

    The body-redaction rules are compiled here (:class:`BodyRedactor`), so a bad rule or
    pattern fails now, with the field named, rather than when the sidecar starts.

    Raises:
        ConfigError: an invalid setting (the message names the field).
    """
    settings = load_settings(
        {
            "capture": {
                "upstream_url": overrides.upstream,
                "host": overrides.host,
                "port": overrides.port,
                "admin_port": overrides.admin_port,
                "sinks": overrides.sinks,
                "file_sink_directory": overrides.capture_dir,
                "sample_percent": overrides.sample_percent,
                "grace_period_s": overrides.grace_period_s,
                "workers": overrides.workers,
            },
            "kafka": {"bootstrap_servers": overrides.kafka_bootstrap, "topic": overrides.topic},
        }
    )
    if overrides.spool_dir is not None or overrides.live_model is not None:
        cap = settings.capture
        if overrides.spool_dir is not None:
            cap = cap.model_copy(
                update={"spool": cap.spool.model_copy(update={"directory": overrides.spool_dir})}
            )
        if overrides.live_model is not None:
            cap = cap.model_copy(
                update={
                    "live_model": cap.live_model.model_copy(update={"name": overrides.live_model})
                }
            )
        settings = settings.model_copy(update={"capture": cap})
    BodyRedactor(settings.capture.body_redaction)
    return settings


def check_capture_directories(settings: Settings) -> None:
    """Create the file sink's and the spool's directories and prove each is writable.

    Checked before the sidecar listens, so a capture directory that cannot be written (a
    path through a file, a read-only mount, no permission) stops the start-up with the
    setting named instead of a sidecar that reports ready and then drops every capture.
    Only the directories of the sinks in use are checked: the file sink's when ``file``
    is a sink, the spool's when ``kafka`` is (the spool holds what the broker did not take).

    Raises:
        ConfigError: names the setting (``capture.file_sink_directory``,
            ``capture.spool.directory``), the path and the operating system's reason.
    """
    import os
    import tempfile
    from pathlib import Path

    from shadoweval.errors import ConfigError

    cap = settings.capture
    wanted: list[tuple[str, str]] = []
    if "file" in cap.sinks:
        wanted.append(("capture.file_sink_directory", cap.file_sink_directory))
    if "kafka" in cap.sinks:
        wanted.append(("capture.spool.directory", cap.spool.directory))
    for name, directory in wanted:
        try:
            Path(directory).mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=directory)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(
                f"{name} = {directory!r}: not a writable directory "
                f"({exc.strerror or type(exc).__name__})",
                field=name,
                value=directory,
            ) from None


def serve_capture(settings: Settings) -> None:
    """Run the capture sidecar with ``settings`` until SIGTERM/SIGINT (graceful drain).

    With ``capture.workers`` > 1, workers 1… run in spawned processes (each a whole
    sidecar, :func:`shadoweval.capture.sidecar.worker_settings`) and this process is worker 0; a
    SIGTERM/SIGINT here is passed on to every worker, and this returns once they have all
    drained and exited. A worker that dies is logged, not restarted.

    On uvloop when installed: a faster event loop for the live path (CPU per request,
    docs/benchmarks.md); else asyncio's.

    Raises:
        ConfigError: the proxy port could not be bound (in use, or not permitted); the
            message names ``capture.port``, the address and the reason.
    """
    try:
        _serve_capture(settings)
    except OSError as exc:
        from shadoweval.errors import ConfigError

        cap = settings.capture
        raise ConfigError(
            f"capture.port = {cap.port}: cannot listen on {cap.host}:{cap.port} "
            f"({exc.strerror or exc})",
            field="capture.port",
            value=cap.port,
        ) from None


def _serve_capture(settings: Settings) -> None:
    cap = settings.capture
    if cap.workers <= 1:
        _run(Sidecar(cap, settings.kafka).serve())
        return
    context = multiprocessing.get_context("spawn")
    children = [
        context.Process(target=_serve_worker, args=(settings, i), name=f"capture-worker-{i}")
        for i in range(1, cap.workers)
    ]
    for child in children:
        child.start()  # on the main thread: the children's parent-death signal follows it
    sidecar = Sidecar(worker_settings(cap, 0), settings.kafka)

    async def serve_all() -> None:
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            sidecar.request_shutdown()
            for child in children:
                if child.is_alive() and child.pid is not None:
                    child.terminate()  # SIGTERM: the worker drains like this one

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await sidecar.serve(install_signal_handlers=False)
        finally:
            for child in children:
                await asyncio.to_thread(child.join, cap.grace_period_s + cap.flush_deadline_s + 30)
                if child.is_alive():
                    logger.error("capture worker %s did not stop; killing it", child.name)
                    child.kill()
                elif child.exitcode:
                    logger.error("capture worker %s exited %s", child.name, child.exitcode)

    _run(serve_all())


def _serve_worker(settings: Settings, index: int) -> None:
    """Entry point of worker ``index`` (a spawned process): one whole sidecar, killed with
    its parent (:func:`~shadoweval.process_death.die_with_parent`)."""
    die_with_parent()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    _run(Sidecar(worker_settings(settings.capture, index), settings.kafka).serve())


def _run(main: Coroutine[Any, Any, None]) -> None:
    freeze_startup_heap()  # modules, settings and the sidecar's objects: out of full GC passes
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


logger = logging.getLogger(__name__)
