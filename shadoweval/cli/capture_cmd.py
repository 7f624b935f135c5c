"""``shadow-eval capture serve``: the capture sidecar in front of the live model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import CaptureSinkOptions
from shadoweval.records import doubled_v1

capture_app = typer.Typer(
    help="Capture live traffic: a sidecar proxy in front of the live model.",
    no_args_is_help=True,
)


@capture_app.command("serve")
@takes_option_groups
def capture_serve(
    upstream: Annotated[str, typer.Option("--upstream", help="Base URL of the live model server.")],
    host: Annotated[str | None, typer.Option(help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Proxy port (clients connect here).")] = None,
    admin_port: Annotated[
        int | None, typer.Option(help="Port of /healthz, /readyz and /metrics.")
    ] = None,
    sinks: CaptureSinkOptions = CaptureSinkOptions(),
    workers: Annotated[
        int | None,
        typer.Option(help="Relay processes sharing the port (SO_REUSEPORT); default 1."),
    ] = None,
    live_model: Annotated[
        str | None,
        typer.Option(help="Name of the live model (default: the model field of each response)."),
    ] = None,
) -> None:
    """Serve the capture sidecar until SIGTERM/SIGINT.

    Every request is forwarded to --upstream unchanged and its response streamed back as it
    arrives. Requests on the captured routes (by default chat completions, completions, the
    Responses API and the Anthropic Messages API)
    are copied aside, redacted and written to the sinks; a broker outage spools to disk and
    never touches the live path. All settings can also come from SHADOWEVAL_CAPTURE__* and
    SHADOWEVAL_KAFKA__* environment variables. Exit 3 on a configuration error.
    """
    from rich.console import Console

    from shadoweval.application.capture import (
        CaptureOverrides,
        capture_settings,
        check_capture_directories,
        serve_capture,
    )
    from shadoweval.cli.render import exit_on_error

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err):
        settings = capture_settings(
            sinks.applied_to(
                CaptureOverrides(
                    upstream=upstream,
                    host=host,
                    port=port,
                    admin_port=admin_port,
                    workers=workers,
                    live_model=live_model,
                )
            )
        )
        check_capture_directories(settings)
    configure_capture_logging()
    cap = settings.capture
    err.print(
        f"shadow-eval capture: starting proxy http://{cap.host}:{cap.port} → "
        f"{cap.upstream_url}; admin http://{cap.host}:{cap.admin_port}; "
        f"sinks {', '.join(cap.sinks)}",
        soft_wrap=True,
    )
    warning = doubled_v1_warning(cap.upstream_url, cap.routes)
    if warning:
        err.print(f"shadow-eval capture: warning: {warning}", soft_wrap=True)
    with exit_on_error(err):
        serve_capture(settings)


def doubled_v1_warning(upstream_url: str, routes: Sequence[str]) -> str | None:
    """The warning for an upstream URL whose path ends in ``/v1`` while the captured routes
    start with it (every request would go to ``/v1/v1/…`` and get a 404), or ``None``.

    The URL is kept (a server may really live under such a path); the operator is told what
    will be forwarded and what to give instead.
    """
    base = upstream_url.rstrip("/")
    doubled = [route for route in routes if doubled_v1(base + route)]
    if not doubled:
        return None
    origin = base.rsplit("/v1", 1)[0]
    return (
        f"capture.upstream_url = {upstream_url!r} ends in /v1 and the captured routes start "
        f"with it: {doubled[0]} is forwarded as {base}{doubled[0]} (/v1 twice, most servers "
        f"answer 404); give the server's origin, --upstream {origin}"
    )


def configure_capture_logging() -> None:
    """Log at INFO on stderr, with times, for a capture front end (``capture serve``,
    ``capture envoy``)."""
    import logging

    from shadoweval.log_limits import LOG_FORMAT

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    # aiokafka logs every failed reconnect (~30 lines/s during an outage) and httpx every
    # readiness probe; the sink logs each mode change once and the metrics count the rest.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def register(app: typer.Typer) -> None:
    """Add the ``capture`` group to the CLI."""
    app.add_typer(capture_app, name="capture")
