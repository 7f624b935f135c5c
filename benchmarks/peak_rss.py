"""Peak resident memory of a command and every process it starts (issue 33 item 3).

Usage::

    .venv/bin/python benchmarks/peak_rss.py [--interval-s 0.2] [--timeline-s 5] -- COMMAND...

e.g. ``benchmarks/peak_rss.py -- shadow-eval demo --no-progress``. ``/usr/bin/time -v``
reports the largest single process only; this samples ``VmRSS`` (``/proc``) of the command
and all its descendants every ``--interval-s`` seconds, and prints the peak of their sum,
the processes at that moment, and a timeline (one row per ``--timeline-s``). The command's
output goes to ``--log`` (default: discarded). A process living less than one interval may
be missed.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from pathlib import Path


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(stat[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def rss_mib(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MiB (0 when it is gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
    return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--interval-s", type=float, default=0.2)
    parser.add_argument("--timeline-s", type=float, default=5.0)
    parser.add_argument("--log", type=Path, default=None, help="the command's output")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    log = args.log.open("wb") if args.log else subprocess.DEVNULL
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    peak, peak_at, peak_parts = 0.0, 0.0, []
    timeline: list[tuple[float, float]] = []
    while proc.poll() is None:
        parts = [(rss_mib(pid), pid) for pid in process_tree(proc.pid)]
        total, now = sum(r for r, _ in parts), time.monotonic() - started
        if not timeline or now - timeline[-1][0] >= args.timeline_s:
            timeline.append((now, total))
        if total > peak:
            peak, peak_at, peak_parts = total, now, [(r, p, command_line(p)) for r, p in parts]
        time.sleep(args.interval_s)
    wall = time.monotonic() - started
    print(f"exit {proc.returncode}; wall {wall:.0f} s; peak {peak:.0f} MiB at {peak_at:.0f} s")
    print()
    print("| process at the peak | RSS (MiB) |")
    print("|---|---:|")
    for rss, pid, line in sorted(peak_parts, reverse=True):
        print(f"| {pid} `{line.strip()}` | {rss:.0f} |")
    print(f"| **process tree** | **{peak:.0f}** |")
    print()
    print("| t (s) | RSS, tree (MiB) |")
    print("|---:|---:|")
    for at, total in timeline:
        print(f"| {at:.0f} | {total:.0f} |")
    return int(proc.returncode != 0)


if __name__ == "__main__":
    sys.exit(main())
