"""Capturing live traffic: the sidecar proxy in front of the live model, built from settings.

:func:`capture_settings` resolves the settings a sidecar runs with (the environment's
``SHADOWEVAL_CAPTURE__*`` and ``SHADOWEVAL_KAFKA__*`` with the face's overrides) and checks
them as the sidecar would at start-up, so a bad value is reported before anything listens;
:func:`serve_capture` then runs the sidecar (:class:`capture.sidecar.Sidecar`) until
SIGTERM/SIGINT, on uvloop when it is installed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from capture.sidecar import Sidecar
from shadoweval.body_redaction import BodyRedactor
from shadoweval.config import Settings, load_settings

__all__ = ["CaptureOverrides", "capture_settings", "serve_capture"]


@dataclass(frozen=True, slots=True)
class CaptureOverrides:
    """Settings given on the command line; ``None`` keeps the environment's (or default).

    Attributes:
        upstream: base URL of the live model server (required).
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
        live_model: the live model's name (default: each response's ``model`` field).
    """

    upstream: str
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


def serve_capture(settings: Settings) -> None:
    """Run the capture sidecar with ``settings`` until SIGTERM/SIGINT (graceful drain).

    On uvloop when installed: a faster event loop for the live path (CPU per request,
    docs/benchmarks.md); else asyncio's.
    """
    sidecar = Sidecar(settings.capture, settings.kafka)
    try:
        import uvloop
    except ImportError:
        asyncio.run(sidecar.serve())
    else:
        uvloop.run(sidecar.serve())
