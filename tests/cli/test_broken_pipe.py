"""``shadow-eval … | head``: the reader closing stdout is no crash (no traceback, exit 3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import typer
    from shadoweval.cli import ShadowEvalGroup

    app = typer.Typer(cls=ShadowEvalGroup)

    @app.command()
    def lines() -> None:
        for n in range(1_000_000):
            typer.echo(f"line {n}")

    @app.command()
    def other() -> None:
        pass

    app()
    """
)


def test_a_closed_stdout_ends_the_command_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, "lines"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline() == b"line 0\n"
    proc.stdout.close()  # what `head -1` does once it has its line
    with proc.stderr:
        stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 3
    assert "Traceback" not in stderr
    assert "failed unexpectedly" not in stderr
