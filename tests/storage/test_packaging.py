"""The migrations ship inside the wheel and run from it, outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import shadoweval
import shadoweval.migrations
from shadoweval.storage import Database, head_revision
root = sys.argv[1]
assert shadoweval.migrations.__file__.startswith(root), shadoweval.migrations.__file__
assert shadoweval.__file__.startswith(root), shadoweval.__file__
db = Database(sys.argv[2])
db.upgrade()
db.check_schema()
assert db.schema_diff() == [], db.schema_diff()
print("OK", db.current_revision(), head_revision())
"""


@pytest.mark.slow
def test_upgrade_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", source)
    readme = REPO_ROOT / "README.md"
    if readme.is_file():
        shutil.copy2(readme, source)
    else:
        (source / "README.md").write_text("shadow-eval\n", encoding="utf-8")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # shadoweval/ holds the stage folders as links (shadoweval/stats -> ../stats): copy what
    # they point at, as a source distribution would.
    shutil.copytree(REPO_ROOT / "shadoweval", source / "shadoweval", ignore=ignore)

    dist = tmp_path / "dist"
    build = subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--no-index", "-q", "-w", str(dist), str(source),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("shadow_eval-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    top_level = {
        name.split("/")[0]
        for name in names
        if not name.split("/")[0].endswith((".dist-info", ".data"))
    }
    assert top_level == {"shadoweval"}, f"{wheel.name} installs {sorted(top_level)}"
    (dist_info,) = {name.split("/")[0] for name in names if ".dist-info/" in name}
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
        top_level_txt = archive.read(f"{dist_info}/top_level.txt").decode().split()
    assert top_level_txt == ["shadoweval"]
    assert "shadow-eval = shadoweval.cli:main" in entry_points
    for package in ("capture", "replay", "compare", "stats", "dashboard", "cli", "api"):
        assert f"shadoweval/{package}/__init__.py" in names, f"shadoweval.{package} missing"
    for expected in (
        "shadoweval/migrations/__init__.py",
        "shadoweval/migrations/env.py",
        "shadoweval/migrations/script.py.mako",
        "shadoweval/migrations/versions/__init__.py",
        "shadoweval/migrations/versions/0001_initial.py",
        "shadoweval/migrations/versions/0002_policy_audit.py",
        "shadoweval/migrations/versions/0003_samples_and_labels.py",
        "shadoweval/migrations/versions/0004_pair_judgements.py",
        "shadoweval/migrations/versions/0005_ttfc_and_cache_hits.py",
        "shadoweval/migrations/versions/0006_rejected_fingerprint.py",
        "shadoweval/migrations/versions/0007_embedding_cache.py",
        "shadoweval/storage/models.py",
    ):
        assert expected in names, f"{expected} missing from {wheel.name}"

    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(site)
    url = f"sqlite:///{workdir / 'from-wheel.db'}"
    run = subprocess.run(
        [sys.executable, "-P", "-c", SCRIPT, str(site), url],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["OK", "0011", "0011"]
