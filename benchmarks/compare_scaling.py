"""Compare throughput on a stored run: processes, backends and the embedding cache, in one run.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compare_scaling.py \\
        --database sqlite-file.db --run RUN_ID [--workers 1,2] [--backends torch-fp32]
        [--repeats 1] [--encoder minilm]

Takes a stored, replayed run in a SQLite file (for instance the database of a
``shadow-eval evaluate`` of ``docs/real-data.md``), copies it once per configuration so no
configuration reads another's cache, and times ``shadow-eval compare run --rescore`` as a
user runs it (a fresh process: model load included, reported separately from the report's
own ``wall_s``):

* ``cold``: ``--no-embedding-cache`` with ``--workers N`` for each N and each backend,
  the configurations interleaved (round-robin) over ``--repeats`` rounds;
* ``warm``: a second ``--rescore`` on a copy whose cache the first pass filled — every text
  is read back from the database instead of embedded (what a policy change or a re-gate
  costs).

``--encoder hashing`` (not semantic) makes a smoke run that loads no model (``make test``
runs it on the 8-prompt run of ``benchmarks/evaluate_stages.py --limit 8
--keep-database``).

Prints pairs, wall seconds (the report's ``wall_s``: scoring only, and the process's whole
time) and pairs/s; the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CLI = [sys.executable, "-m", "shadoweval.cli"]
ROW = "{:>6} {:>12} {:>7} {:>6} {:>10} {:>10} {:>8}"


def compare(db: Path, run_id: str, *extra: str) -> tuple[dict[str, object], float]:
    """Run ``compare run --rescore`` on ``db``; return its JSON report and the process wall s."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            *CLI,
            "compare",
            "run",
            "--run",
            run_id,
            "--database-url",
            f"sqlite:///{db}",
            "--rescore",
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"compare run {' '.join(extra)} failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return report, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument(
        "--backends", default="", help="comma-separated --backend values; empty: default"
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--encoder", default="minilm", help="minilm, or hashing (smoke runs)")
    args = parser.parse_args()

    workers = [int(n) for n in args.workers.split(",")]
    backends = [b for b in args.backends.split(",") if b] or [""]
    configs = [(b, n) for b in backends for n in workers]
    rows: dict[tuple[str, int], list[tuple[float, float, int]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeats):
            for backend, n in configs:
                db = Path(tmp) / f"r{round_}-{backend or 'default'}-{n}.db"
                shutil.copyfile(args.database, db)
                extra = ["--workers", str(n), "--no-embedding-cache", "--encoder", args.encoder]
                extra += ["--backend", backend] if backend else []
                report, elapsed = compare(db, args.run, *extra)
                rows[(backend, n)].append((float(report["wall_s"]), elapsed, int(report["scored"])))  # type: ignore[arg-type]
        warm_db = Path(tmp) / "warm.db"
        shutil.copyfile(args.database, warm_db)
        first, first_s = compare(warm_db, args.run, "--encoder", args.encoder)
        warm, warm_s = compare(warm_db, args.run, "--encoder", args.encoder)
    print(f"run {args.run}: {args.database} ; cpus={os.cpu_count()} ; rounds={args.repeats}")
    print()
    print(ROW.format("pass", "backend", "workers", "pairs", "scoring s", "process s", "pairs/s"))
    for (backend, n), runs in rows.items():
        wall = statistics.median(r[0] for r in runs)
        whole = statistics.median(r[1] for r in runs)
        pairs = runs[0][2]
        cells = (f"{wall:.1f}", f"{whole:.1f}", f"{pairs / wall:.2f}")
        print(ROW.format("cold", backend or "default", n, pairs, *cells))
    for name, report, whole in (("fill", first, first_s), ("warm", warm, warm_s)):
        cache = report.get("embedding_cache", {})
        wall = float(report["wall_s"])  # type: ignore[arg-type]
        pairs = int(report["scored"])  # type: ignore[call-overload]
        cells = (f"{wall:.1f}", f"{whole:.1f}", f"{pairs / wall:.2f}")
        print(ROW.format(name, "default", 1, pairs, *cells), f"  cache {cache}")


if __name__ == "__main__":
    main()
