"""``shadow-eval api serve``: refuses to start without a token; serves for real (uvicorn)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from shadoweval.api.app import build_app
from shadoweval.cli import app as cli_app
from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.process_death import die_with_parent_argv
from shadoweval.serving import BackgroundServer
from shadoweval.storage import Repository

from .conftest import TOKEN

LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ "
)
"""A log line as every shadow-eval service writes it: time, level, logger, message."""


def serve(*args: object, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli_app, ["api", "serve", *map(str, args)], env=env)
    return result.exit_code, " ".join(result.stderr.split())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_refuses_to_start_without_a_token(api_db_url: str) -> None:
    code, stderr = serve("--database-url", api_db_url, "--port", free_port())
    assert code == EXIT_ERROR
    assert "refusing to start without an API token" in stderr
    assert "SHADOWEVAL_API__TOKEN" in stderr


def test_no_environment_variable_turns_authentication_off(api_db_url: str) -> None:
    # Only the explicit --insecure-no-auth option serves without a token.
    for value in ("true", "1"):
        code, stderr = serve(
            "--database-url",
            api_db_url,
            "--port",
            free_port(),
            env={"SHADOWEVAL_API__INSECURE_NO_AUTH": value},
        )
        assert code == EXIT_ERROR, stderr
        assert "refusing to start without an API token" in stderr


def test_refuses_short_empty_or_missing_token_files(tmp_path: Path, api_db_url: str) -> None:
    short = tmp_path / "short"
    short.write_text("abc123\n", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.write_text(" \n", encoding="utf-8")
    for path, message in (
        (short, "has 6 characters; use at least 16"),
        (empty, "is empty"),
        (tmp_path / "missing", "cannot read it"),
    ):
        code, stderr = serve("--database-url", api_db_url, "--token-file", path)
        assert code == EXIT_ERROR, stderr
        assert message in stderr
        assert "abc123" not in stderr
    code, stderr = serve("--database-url", api_db_url, env={"SHADOWEVAL_API__TOKEN": "tiny"})
    assert code == EXIT_ERROR
    assert "SHADOWEVAL_API__TOKEN has 4 characters" in stderr


def test_insecure_flag_conflicts_with_a_token(api_db_url: str) -> None:
    code, stderr = serve(
        "--database-url", api_db_url, "--insecure-no-auth", env={"SHADOWEVAL_API__TOKEN": TOKEN}
    )
    assert code == EXIT_ERROR
    assert "use one or the other" in stderr
    assert TOKEN not in stderr


def test_database_behind_the_schema_or_missing_exits_3(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    code, stderr = serve(
        "--database-url", f"sqlite:///{missing}", env={"SHADOWEVAL_API__TOKEN": TOKEN}
    )
    assert code == EXIT_ERROR
    assert "does not exist" in stderr
    assert not missing.exists()


def test_a_port_in_use_exits_3_not_a_decision_code(api_db_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, stderr = serve(
            "--database-url", api_db_url, "--port", port, env={"SHADOWEVAL_API__TOKEN": TOKEN}
        )
    assert code == EXIT_ERROR
    assert f"could not start on 127.0.0.1:{port}" in stderr


def test_the_app_under_uvicorn(api_repo: Repository) -> None:
    with BackgroundServer(build_app(api_repo, SecretStr(TOKEN))) as server:
        runs = httpx.get(f"{server.url}/v1/runs", headers={"Authorization": f"Bearer {TOKEN}"})
        denied = httpx.get(f"{server.url}/v1/runs/rolled/verdict")
        health = httpx.get(f"{server.url}/healthz")
    assert runs.status_code == 200
    assert {r["run_id"] for r in runs.json()["runs"]} == {"rolled", "held", "fresh"}
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"].startswith("Bearer")
    assert health.json() == {"status": "ok"}


def _sigint(ignored: bool) -> None:
    # A background job of a non-interactive shell (how CI runners start commands) begins
    # with SIGINT ignored; Python then keeps it ignored instead of raising KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.SIG_DFL)


@pytest.mark.slow
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["sigint-default", "sigint-ignored"])
def test_api_serve_as_a_process(api_db_url: str, tmp_path: Path, sigint_ignored: bool) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWEVAL_API")}
    proc = subprocess.Popen(
        die_with_parent_argv(
            [sys.executable, "-m", "shadoweval.cli", "api", "serve", "--port", str(port),
             "--database-url", api_db_url, "--token-file", str(token_file)]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: _sigint(sigint_ignored),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the API did not start"
                time.sleep(0.1)
        assert health.status_code == 200
        verdict = httpx.get(
            f"{base}/v1/runs/rolled/verdict", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert verdict.status_code == 200
        assert verdict.json()["decision"] == "rollback"
        assert httpx.get(f"{base}/v1/runs").status_code == 401
        # A token in the URL (refused without the header) never reaches the access log.
        assert httpx.get(f"{base}/v1/runs?access_token={TOKEN}").status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert f"on http://127.0.0.1:{port}" in stderr
    assert f"bearer token from --token-file {token_file}" in stderr
    assert "shadow-eval API stopped" in stderr
    assert TOKEN not in stderr + stdout
    assert "GET /v1/runs/rolled/verdict" in stderr + stdout  # the access log, without headers
    assert "GET /v1/runs?access_token=[REDACTED] HTTP/1.1" in stderr + stdout
    # every log line of the server carries a time and a level, as the other services' do
    logged = [line for line in stderr.splitlines() if not line.startswith("shadow-eval API")]
    access = [line for line in logged if "GET /v1/runs/rolled/verdict" in line]
    assert access, stderr
    for line in logged:
        assert LOG_LINE.match(line), line
    assert " INFO uvicorn.access " in access[0]


def test_a_bad_auth_log_interval_exits_3_naming_the_variable(api_db_url: str) -> None:
    code, stderr = serve(
        "--database-url",
        api_db_url,
        env={"SHADOWEVAL_API__TOKEN": TOKEN, "SHADOWEVAL_API__AUTH_LOG_INTERVAL_S": "0"},
    )
    assert code == EXIT_ERROR
    assert "SHADOWEVAL_API__AUTH_LOG_INTERVAL_S" in stderr
    assert "greater than 0" in stderr
