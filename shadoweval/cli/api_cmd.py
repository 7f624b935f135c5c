"""``shadow-eval api serve``: the HTTP API (runs, verdicts, policy audit) under uvicorn.

The token comes from ``--token-file``, else ``SHADOWEVAL_API__TOKEN``, else
``SHADOWEVAL_API__TOKEN_FILE``; without one the server refuses to start unless
``--insecure-no-auth`` is given explicitly. The token is never printed or logged.
Exit 3 when the server cannot start (no token, unreadable token file, database not at
the current schema, port in use).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import DatabaseUrlOpt
from shadoweval.cli.render import exit_on_error
from shadoweval.ports import API_PORT

API_FACTORY = "shadoweval.api.app:app_from_environment"
"""The API's application factory (a token required), handed to uvicorn by import string:
the CLI starts the API face without importing it (faces never import each other)."""

INSECURE_API_FACTORY = "shadoweval.api.app:insecure_app_from_environment"
"""The factory of ``--insecure-no-auth`` (no authentication), chosen by that option only."""

api_app = typer.Typer(
    name="api",
    help="The HTTP API: runs, verdicts and policy audit logs for CI (bearer token).",
    no_args_is_help=True,
)


@api_app.command("serve")
def serve_command(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to bind (default SHADOWEVAL_API__HOST, 127.0.0.1)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port", min=0, max=65535, help=f"Port (default SHADOWEVAL_API__PORT, {API_PORT})."
        ),
    ] = None,
    database_url: DatabaseUrlOpt = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="File holding the bearer token (default: SHADOWEVAL_API__TOKEN, then "
            "SHADOWEVAL_API__TOKEN_FILE).",
        ),
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="Serve WITHOUT authentication (anyone who reaches the port reads verdicts "
            "and can trigger a gate). Only for a trusted loopback.",
        ),
    ] = False,
    log_level: Annotated[
        str, typer.Option("--log-level", help="uvicorn log level (access log at info).")
    ] = "info",
) -> None:
    """Serve the API until SIGINT (exit 0) or SIGTERM (uvicorn stops gracefully, then the
    signal ends the process). The database must be at the current schema
    (``shadow-eval db upgrade``). Exit 3 when it cannot start."""
    from pydantic import ValidationError
    from rich.console import Console

    from shadoweval.api_settings import ApiSettings, required_token
    from shadoweval.application.database import open_repository
    from shadoweval.application.redaction import body_redaction
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.errors import ConfigError

    err = Console(stderr=True, soft_wrap=True)
    with exit_on_error(err):
        try:
            settings = ApiSettings()
        except ValidationError as exc:
            first = exc.errors()[0]
            name = "SHADOWEVAL_API__" + "__".join(str(p) for p in first["loc"]).upper()
            raise ConfigError(f"{name}: {first['msg']}", field=name) from None
        token, source = required_token(settings, token_file, insecure_no_auth=insecure_no_auth)
        bind_host = host or settings.host
        bind_port = settings.port if port is None else port
        url = resolve_url(database_url)
        body_redaction()  # the exports' redaction settings: refuse bad ones before binding
        with open_repository(url, upgrade=False) as repo:  # likewise the database
            safe_url = repo.database.safe_url
        # The factory reads what this command resolved from the environment it inherits.
        os.environ["SHADOWEVAL_DATABASE__URL"] = url
        os.environ.pop("SHADOWEVAL_API__TOKEN_FILE", None)
        if token is None:
            os.environ.pop("SHADOWEVAL_API__TOKEN", None)
        else:
            os.environ["SHADOWEVAL_API__TOKEN"] = token.get_secret_value()
        auth = f"bearer token from {source}" if token else "NO AUTHENTICATION"
        typer.echo(
            f"shadow-eval API on http://{bind_host}:{bind_port} ({auth}; database {safe_url})",
            err=True,
        )
        if token is None:
            typer.echo("warning: serving WITHOUT authentication", err=True)
        _run_server(
            API_FACTORY if token is not None else INSECURE_API_FACTORY,
            host=bind_host,
            port=bind_port,
            log_level=log_level,
        )


def _run_server(factory: str, *, host: str, port: int, log_level: str) -> None:
    """Run uvicorn on the application ``factory`` (an import string) until it stops, then
    say so on stderr.

    Raises:
        ShadowEvalError: the server could not start (e.g. the port is in use).
    """
    import uvicorn

    from shadoweval.errors import ShadowEvalError
    from shadoweval.serving import uvicorn_log_config

    server = uvicorn.Server(
        uvicorn.Config(
            factory,
            factory=True,
            host=host,
            port=port,
            log_level=log_level,
            log_config=uvicorn_log_config(log_level),
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=10,
        )
    )
    try:
        server.run()
    except SystemExit:  # uvicorn exits 1 when it cannot bind: that is not HOLD
        raise ShadowEvalError(f"the API could not start on {host}:{port} (see above)") from None
    except KeyboardInterrupt:  # uvicorn re-raises SIGINT after a graceful stop
        typer.echo("shadow-eval API stopped", err=True)
        return
    if not server.started:
        raise ShadowEvalError(f"the API could not start on {host}:{port}")
    # A graceful stop without the re-raise: the process started with SIGINT ignored
    # (a background job of a non-interactive shell, as CI runners start them), so
    # uvicorn's re-raised signal is ignored too and run() simply returns.
    typer.echo("shadow-eval API stopped", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``api`` group to the CLI."""
    app.add_typer(api_app, name="api")
