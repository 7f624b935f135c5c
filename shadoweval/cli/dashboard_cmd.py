"""``shadow-eval dashboard``: the operators' Streamlit dashboard over the results database.

The command checks the database (it must exist at the current schema, as for ``gate``)
and that the port is free, then replaces itself with ``python -m streamlit run
dashboard/app.py`` (``os.execve``: signals reach Streamlit directly, no process is left
behind). The database URL is handed over in the environment variable
``SHADOWEVAL_DATABASE__URL``, not on the command line, so a password in it is not shown
to other users by ``ps``. Usage statistics are off. Exit 3 when it cannot start.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import DatabaseUrlOpt
from shadoweval.cli.render import exit_on_error
from shadoweval.ports import DASHBOARD_PORT

DATABASE_URL_ENV = "SHADOWEVAL_DATABASE__URL"
"""The settings variable of the database URL (``dashboard.context`` reads it)."""

PortOpt = Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to serve on.")]
AddressOpt = Annotated[
    str,
    typer.Option(
        "--address",
        help="Address to bind (127.0.0.1: this machine only; 0.0.0.0: every interface — "
        "the dashboard has no login, put it behind your own access control).",
    ),
]
HeadlessOpt = Annotated[
    bool,
    typer.Option(
        "--headless/--no-headless", help="Do not open a browser (--no-headless opens one)."
    ),
]


def app_path() -> Path:
    """The Streamlit entrypoint ``dashboard/app.py`` of the installed package.

    Found with :func:`importlib.util.find_spec`, without importing the dashboard: the CLI
    starts Streamlit on that file and shares no code with it (faces never import each other).

    Raises:
        ShadowEvalError: the dashboard package is not installed.
    """
    import importlib.util

    from shadoweval.errors import ShadowEvalError

    spec = importlib.util.find_spec("shadoweval.dashboard")
    if spec is None or spec.origin is None:
        raise ShadowEvalError("the dashboard package shadoweval.dashboard is not installed")
    return Path(spec.origin).with_name("app.py")


def streamlit_argv(app: Path, *, port: int, address: str, headless: bool) -> list[str]:
    """The command that serves the dashboard: ``python -m streamlit run <app> …``.

    File watching is off (a served dashboard does not reload on edits) and so are
    Streamlit's usage statistics.
    """
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.port",
        str(port),
        "--server.address",
        address,
        "--server.headless",
        "true" if headless else "false",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def dashboard_env(database_url: str, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` (the current environment) with :data:`DATABASE_URL_ENV` set to the URL."""
    env = dict(base)
    env[DATABASE_URL_ENV] = database_url
    return env


def check_port(address: str, port: int) -> None:
    """Make sure ``address:port`` can be bound now.

    Raises:
        ConfigError: the port is in use or the address cannot be bound (names both).
    """
    from shadoweval.errors import ConfigError

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            raise ConfigError(
                f"--address {address!r} --port {port}: cannot serve there ({exc.strerror or exc})",
                field="--port",
                value=port,
            ) from None


def dashboard_command(
    database_url: DatabaseUrlOpt = None,
    port: PortOpt = DASHBOARD_PORT,
    address: AddressOpt = "127.0.0.1",
    headless: HeadlessOpt = True,
) -> None:
    """Serve the dashboard (overview, latency, divergence, samples, history) until stopped.

    The dashboard reads runs, pairs and verdicts and writes nothing but human labels; it
    never gates (run `shadow-eval gate` for a verdict). The database must exist at the
    current schema (`shadow-eval db upgrade`). Exit 3 when it cannot start.
    """
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    err = wide_console(stderr=True)
    with exit_on_error(err):
        url = resolve_url(database_url)
        with open_repository(url, upgrade=False) as repo:
            shown = repo.database.safe_url
        check_port(address, port)
    typer.echo(f"shadow-eval dashboard on http://{address}:{port} (database {shown})", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = streamlit_argv(app_path(), port=port, address=address, headless=headless)
    os.execve(argv[0], argv, dashboard_env(url, os.environ))


def register(app: typer.Typer) -> None:
    """Add ``dashboard`` to the CLI."""
    app.command("dashboard")(dashboard_command)
