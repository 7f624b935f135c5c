"""``shadow-eval dashboard``: the Streamlit command it runs, and its refusals (exit 3).

The served dashboard itself is exercised end to end by ``test_browser.py``; here the
command's checks run in-process: a refusal happens before the process is replaced.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shadoweval.cli import app
from shadoweval.cli.dashboard_cmd import (
    DATABASE_URL_ENV,
    app_path,
    check_port,
    dashboard_env,
    streamlit_argv,
)
from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.dashboard.context import DATABASE_URL_ENV as APP_ENV
from shadoweval.errors import ConfigError
from shadoweval.storage import Database


def test_streamlit_command_line() -> None:
    argv = streamlit_argv(Path("/x/app.py"), port=8600, address="0.0.0.0", headless=True)
    assert argv == [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "/x/app.py",
        "--server.port",
        "8600",
        "--server.address",
        "0.0.0.0",
        "--server.headless",
        "true",
        "--server.fileWatcherType",
        "none",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
    visible = streamlit_argv(Path("a"), port=1, address="::1", headless=False)
    assert visible[visible.index("--server.headless") + 1] == "false"


def test_database_url_goes_in_the_environment_the_app_reads() -> None:
    assert DATABASE_URL_ENV == APP_ENV == "SHADOWEVAL_DATABASE__URL"
    url = "postgresql+psycopg://u:secret@db/x"
    env = dashboard_env(url, {"PATH": "/bin"})
    assert env == {"PATH": "/bin", DATABASE_URL_ENV: url}
    assert all(
        "secret" not in part
        for part in streamlit_argv(app_path(), port=1, address="a", headless=True)
    )


def test_app_path_is_the_entrypoint() -> None:
    path = app_path()
    assert path.name == "app.py"
    assert (path.parent / "app_pages" / "overview.py").is_file()


def test_missing_database_file_exits_3(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.db"
    result = CliRunner().invoke(app, ["dashboard", "--database-url", f"sqlite:///{missing}"])
    assert result.exit_code == EXIT_ERROR
    assert "does not exist" in result.output
    assert not missing.exists()


def test_database_behind_the_schema_exits_3(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Database(url).upgrade("0001")
    result = CliRunner().invoke(app, ["dashboard", "--database-url", url])
    assert result.exit_code == EXIT_ERROR
    assert "shadow-eval db upgrade" in result.output


def test_port_in_use_exits_3(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    db = Database(url)
    db.upgrade()
    db.dispose()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            check_port("127.0.0.1", port)
        assert caught.value.field == "--port"
        result = CliRunner().invoke(app, ["dashboard", "--database-url", url, "--port", str(port)])
    assert result.exit_code == EXIT_ERROR
    assert f"--port {port}" in result.output
