"""The served dashboard in a real browser: ``shadow-eval dashboard`` + headless Chromium.

Starts the real command (a subprocess on a free port) against a seeded, gated SQLite
database, drives Debian's Chromium through Playwright, waits for the verdict banner,
checks its text against the stored verdict and saves a screenshot to
``test-artifacts/dashboard-overview.png`` (repository root; the path is printed). Under
``CI=true`` a missing Chromium or Playwright fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shadoweval.process_death import die_with_parent_argv
from tests.conftest import REPO_ROOT, need

from .conftest import Seeded

CHROMIUM = Path(os.environ.get("SHADOWEVAL_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOT = REPO_ROOT / "test-artifacts" / "dashboard-overview.png"
START_TIMEOUT_S = 90.0
RENDER_TIMEOUT_MS = 90_000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _command() -> list[str]:
    script = Path(sys.executable).with_name("shadow-eval")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "shadoweval.cli"]


@pytest.fixture
def served(seeded: Seeded, tmp_path: Path) -> Iterator[str]:
    """``shadow-eval dashboard`` on a free port; yields its base URL, stops it after."""
    port = _free_port()
    log = tmp_path / "dashboard.log"
    env = {**os.environ, "HOME": str(tmp_path)}  # Streamlit writes ~/.streamlit
    with log.open("wb") as out:
        process = subprocess.Popen(
            die_with_parent_argv(
                [*_command(), "dashboard", "--database-url", seeded.url, "--port", str(port)]
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"dashboard exited {process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{base}/_stcore/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"dashboard did not answer in {START_TIMEOUT_S} s:\n{log.read_text()}")
            time.sleep(0.25)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@pytest.mark.slow
def test_browser_shows_the_verdict_banner(seeded: Seeded, served: str) -> None:
    need(CHROMIUM.is_file(), f"Chromium not found at {CHROMIUM} (Debian package 'chromium')")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        need(False, f"playwright is not installed: {exc}")
        raise
    verdict = seeded.repo.latest_verdict(seeded.run_id)
    assert verdict is not None
    headline = f"{verdict.decision.value.upper()} — look {verdict.look}"
    reason = verdict.reasons[0][:60]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1400})
            page.goto(f"{served}/?run={seeded.run_id}", wait_until="domcontentloaded")
            banner = page.get_by_text(re.compile(re.escape(headline))).first
            banner.wait_for(state="visible", timeout=RENDER_TIMEOUT_MS)
            page.get_by_text(reason, exact=False).first.wait_for(
                state="visible", timeout=RENDER_TIMEOUT_MS
            )
            text = banner.inner_text()
            page.locator('[data-testid="stDataFrame"]').first.wait_for(
                state="visible", timeout=RENDER_TIMEOUT_MS
            )
            page.wait_for_timeout(1_000)  # let the data grids paint
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert text.startswith("HOLD — look")
    assert "coverage 100.0%" in text
    assert verdict.policy_hash[:12] in text
    assert SCREENSHOT.stat().st_size > 10_000
    print(f"dashboard screenshot: {SCREENSHOT}")
