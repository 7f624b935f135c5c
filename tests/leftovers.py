"""Processes a test session left running: found at the session's end, killed, and named.

A process counts when it is still running (not a zombie) at the end of the session and
either descends from the pytest process, or carries this session's marker in its
environment (:data:`MARKER` = a fresh id set in pytest's environment when the session
starts, so every child started with ``os.environ`` inherits it) — the second catches a
grandchild re-parented to init after its parent exited (an Envoy left by a killed
launcher), which is no descendant any more. The burners of ``make test-under-load`` are
neither: make's shell starts them beside pytest, before the marker exists.

Not counted: ``multiprocessing``'s resource tracker (a helper of this process that exits
by itself when its last user is gone). Linux only (``/proc``); elsewhere nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

MARKER = "SHADOW_EVAL_PYTEST_SESSION"
"""The environment variable naming this test session (not ``SHADOWEVAL_*``: the
``_clean_env`` fixture removes those)."""

_IGNORED = ("multiprocessing.resource_tracker",)


@dataclass(frozen=True, slots=True)
class Leftover:
    """One process left running: its ``pid`` and ``cmdline`` (arguments joined by spaces)."""

    pid: int
    cmdline: str


def mark_session() -> str:
    """Set :data:`MARKER` in this process's environment (a fresh id); the id."""
    value = uuid.uuid4().hex
    os.environ[MARKER] = value
    return value


def _stat(pid_dir: Path) -> tuple[str, int] | None:
    """``(state, ppid)`` of a ``/proc/PID`` entry, ``None`` when it is gone."""
    try:
        stat = (pid_dir / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def process_table() -> dict[int, tuple[str, int]]:
    """Every process visible in ``/proc``: pid → ``(state, ppid)`` (empty off Linux)."""
    table: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit() and (got := _stat(entry)) is not None:
            table[int(entry.name)] = got
    return table


def descendants(root: int, table: dict[int, tuple[str, int]] | None = None) -> set[int]:
    """The pids descending from ``root`` (children, their children, …), ``root`` excluded."""
    table = process_table() if table is None else table
    found = {root}
    while True:
        more = {pid for pid, (_, ppid) in table.items() if ppid in found} - found
        if not more:
            return found - {root}
        found |= more


def running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    got = _stat(Path(f"/proc/{pid}"))
    return got is not None and got[0] != "Z"


def cmdline(pid: int) -> str:
    """``pid``'s command line, arguments joined by spaces ("" when it is gone)."""
    raw = _read(Path(f"/proc/{pid}/cmdline"))
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def find_leftovers(marker: str, root_pid: int | None = None) -> list[Leftover]:
    """Running processes descending from ``root_pid`` (default: this one) or whose
    environment has ``MARKER=marker``, excluding ``root_pid`` itself and :data:`_IGNORED`."""
    root = os.getpid() if root_pid is None else root_pid
    table = process_table()
    below = descendants(root, table)
    needle = f"{MARKER}={marker}".encode()
    out = []
    for pid, (state, _) in sorted(table.items()):
        if pid == root or state == "Z":
            continue
        if pid not in below and needle not in _read(Path(f"/proc/{pid}/environ")).split(b"\0"):
            continue
        line = cmdline(pid)
        if not any(ignored in line for ignored in _IGNORED):
            out.append(Leftover(pid, line))
    return out


def kill_all(leftovers: list[Leftover]) -> None:
    """SIGKILL each leftover (one already gone is skipped)."""
    for leftover in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leftover.pid, signal.SIGKILL)
