"""Import time of a module in fresh interpreters: median wall and CPU (user + sys) ms.

    python benchmarks/import_time.py VENV/bin/python shadoweval.capture.sidecar [--pythonpath DIR]

Each run is ``PYTHON -c 'import MODULE'`` from ``/tmp`` (so the checkout is not on the path
unless ``--pythonpath`` puts it there), with no other ``PYTHON*`` variable; the CPU time is
the child's own (``os.wait4``), which a loaded machine inflates less than the wall time
(docs/benchmarks.md, "The light install").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time


def measure(python: str, module: str, pythonpath: str | None, runs: int) -> tuple[float, float]:
    """Median (wall ms, CPU ms) of ``runs`` fresh imports of ``module`` by ``python``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    walls, cpus = [], []
    for _ in range(runs):
        start = time.perf_counter()
        child = subprocess.Popen([python, "-c", f"import {module}"], cwd="/tmp", env=env)
        _, status, usage = os.wait4(child.pid, 0)
        if status != 0:
            raise SystemExit(f"{python} -c 'import {module}' failed (status {status})")
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((usage.ru_utime + usage.ru_stime) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the interpreter (a venv's bin/python)")
    parser.add_argument("module", help="the module to import, e.g. shadoweval.capture.sidecar")
    parser.add_argument("--pythonpath", help="PYTHONPATH of the child (e.g. a checkout)")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    wall_ms, cpu_ms = measure(args.python, args.module, args.pythonpath, args.runs)
    print(f"{args.module}\t{args.python}\twall {wall_ms:.0f} ms\tcpu {cpu_ms:.0f} ms")


if __name__ == "__main__":
    main()
