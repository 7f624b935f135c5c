"""Children that die with their parent (:mod:`shadoweval.process_death`), SIGKILL included.

A real intermediate process starts a ``sleep`` through :func:`die_with_parent_argv` and a
``multiprocessing`` child that calls :func:`die_with_parent`; the intermediate gets
SIGKILL; both children must end. A child whose parent is already gone when it sets the
signal (the fork/prctl race) kills itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shadoweval.process_death import SUPPORTED, die_with_parent_argv
from tests.leftovers import running
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="parent-death signal is Linux-only")

REPO = Path(__file__).resolve().parents[2]

PARENT = """
import multiprocessing, subprocess, sys, time
from shadoweval.process_death import die_with_parent, die_with_parent_argv

def child():
    die_with_parent()
    time.sleep(600)

if __name__ == "__main__":
    exe = subprocess.Popen(die_with_parent_argv(["sleep", "600"]), start_new_session=True)
    mp = multiprocessing.get_context("spawn").Process(target=child)
    mp.start()
    print(exe.pid, mp.pid, flush=True)
    time.sleep(600)
"""


def test_children_end_when_their_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"  # a file: a spawned child imports its target from it
    script.write_text(PARENT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        die_with_parent_argv([sys.executable, str(script)]), stdout=subprocess.PIPE, env=env
    )
    try:
        assert parent.stdout is not None
        pids = [int(word) for word in parent.stdout.readline().split()]
        assert len(pids) == 2
        assert all(running(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        assert parent.wait(timeout=60) == -signal.SIGKILL
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    wait_until(lambda: not any(running(pid) for pid in pids), f"children {pids} to end")


def test_a_child_whose_parent_is_already_gone_kills_itself() -> None:
    code = "from shadoweval.process_death import die_with_parent; die_with_parent(1); print(1)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == b""
