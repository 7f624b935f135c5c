"""A sidecar that cannot start says why, with the setting named, and exits 3.

Before: a port in use gave a traceback after the start-up banner (the admin port's a
``SystemExit`` from inside uvicorn), and a capture directory through a file started a
sidecar that reported ready and dropped every capture.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shadoweval.application.capture import (
    CaptureOverrides,
    capture_settings,
    check_capture_directories,
)
from shadoweval.errors import ConfigError


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port some other socket is listening on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SHADOWEVAL_") and k not in ("COLUMNS", "TERMINAL_WIDTH")
    }
    return subprocess.run(
        [
            *(sys.executable, "-m", "shadoweval.cli", "capture", "serve"),
            *("--upstream", "http://127.0.0.1:9", "--host", "127.0.0.1", *args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        # COLUMNS unset and stderr a pipe, as in CI: the error must still be one line.
        env={**env, "PYTHONPATH": os.getcwd()},
    )


@pytest.mark.parametrize("which", ["port", "admin_port"])
def test_a_port_in_use_is_an_error_naming_the_setting(
    tmp_path: Path, busy_port: int, which: str
) -> None:
    other = _free_port()
    port, admin = (busy_port, other) if which == "port" else (other, busy_port)
    result = _serve(tmp_path, "--port", str(port), "--admin-port", str(admin))
    assert result.returncode == 3, result.stderr
    assert f"capture.{which} = {busy_port}: cannot listen on 127.0.0.1:{busy_port}" in result.stderr
    assert "in use" in result.stderr
    assert "Traceback" not in result.stderr
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert error.lower().endswith("address already in use)")  # one line, not wrapped at 80


def test_a_capture_directory_that_cannot_be_written_stops_the_start(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = _serve(
        tmp_path, "--port", str(_free_port()), "--admin-port", "0", "--capture-dir", f"{blocker}/x"
    )
    assert result.returncode == 3, result.stderr
    assert f"capture.file_sink_directory = '{blocker}/x': not a writable directory" in result.stderr
    assert "proxy http" not in result.stderr  # stopped before the banner: nothing listened


def test_only_the_directories_of_the_sinks_in_use_are_checked(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    file_only = capture_settings(
        CaptureOverrides(
            upstream="http://127.0.0.1:9",
            sinks=("file",),
            capture_dir=str(tmp_path / "made" / "here"),
            spool_dir=f"{blocker}/spool",
        )
    )
    check_capture_directories(file_only)  # the spool is unused without the kafka sink
    made = tmp_path / "made" / "here"
    assert made.is_dir()
    assert not any(p.name.startswith(".write-check-") for p in made.iterdir())
    with_kafka = capture_settings(
        CaptureOverrides(
            upstream="http://127.0.0.1:9", sinks=("kafka",), spool_dir=f"{blocker}/spool"
        )
    )
    with pytest.raises(ConfigError, match=r"capture\.spool\.directory") as info:
        check_capture_directories(with_kafka)
    assert info.value.value == f"{blocker}/spool"
