"""The light commands' import closure holds none of the extras' packages (fast, full venv).

A fresh interpreter shows each light command's ``--help`` and imports the modules the
commands run, then checks ``sys.modules``: none of :data:`HEAVY_PACKAGES` may be there even
though this venv has them all, so a new top-level ``import pandas`` on the live path fails
here long before the light-venv test (tests/packaging/test_light_install.py) would.
"""

from __future__ import annotations

import subprocess
import sys

from tests.deploy.processes import REPO_ROOT, cli_env
from tests.packaging.light import CLOSURE_SCRIPT, HEAVY_PACKAGES, LIGHT_COMMANDS, LIGHT_MODULES


def test_light_commands_import_no_heavy_package() -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            CLOSURE_SCRIPT,
            ",".join(HEAVY_PACKAGES),
            ",".join(LIGHT_MODULES),
            ",".join(" ".join(c) for c in LIGHT_COMMANDS),
        ],
        env=cli_env({}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, f"the light path imports:\n{run.stdout}{run.stderr}"


def test_the_watch_sees_a_heavy_import() -> None:
    """The check itself: a module that imports pandas is reported with its importer."""
    run = subprocess.run(
        [sys.executable, "-c", CLOSURE_SCRIPT, "pandas", "shadoweval.stats.frame", ""],
        env=cli_env({}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert run.stdout.startswith("pandas imported by "), run.stdout
