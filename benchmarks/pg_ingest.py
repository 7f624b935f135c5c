"""Pair-score ingest rate on PostgreSQL: batched idempotent upserts against one row at a time.

Usage::

    .venv/bin/python benchmarks/pg_ingest.py [--url postgresql+psycopg://postgres@127.0.0.1:5432/test]
        [--pairs 20000] [--per-row-pairs 2000] [--rounds 3] [--batches 100,500,1000,5000]

Seeds, in a fresh PostgreSQL schema (dropped at the end), one run of ``--pairs`` scored
pairs (:func:`shadoweval.simulation.pair_seeding.seed_run`: exchanges, replays, scores), then writes
those pair scores again through :meth:`Repository.save_pair_scores` — what the compare
worker calls after each scored batch — into a new run per measurement, so every write is
an insert of new rows (record JSON, flags, packed facts: the whole write cost):

* ``per-row``: one ``save_pair_scores([score])`` per pair, one transaction each (a writer
  that stores each pair as it is scored; ``--per-row-pairs`` of them);
* ``batch B``: ``save_pair_scores`` of ``B`` pairs at a time (chunked multi-row
  ``INSERT ... ON CONFLICT DO UPDATE``, 500 rows a statement);
* ``rewrite B``: the same pairs written again into the same run (a re-run or a second
  writer: every row hits the conflict and is replaced; the row count must not move).

The modes are interleaved within each of ``--rounds`` rounds (the machine's load falls on
all of them alike); the table shows the median and the lowest rate of the rounds, and the
rows each run ended with (always the number of pairs: idempotent).

Target (issue 15): batched writes ≥ 10,000 pair scores/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from shadoweval.application.gating import load_gate_policy
from shadoweval.records import PairScore
from shadoweval.storage import Database, Repository
from shadoweval.testing.pair_seeding import seed_run

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TARGET_PER_S = 10_000.0


def _libpq(url: str) -> str:
    """The psycopg connection string of a SQLAlchemy ``postgresql+psycopg`` URL."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _rows(url: str, schema: str, run_id: str) -> int:
    with psycopg.connect(_libpq(url)) as conn:
        found = conn.execute(
            f'SELECT count(*) FROM "{schema}".pair_score WHERE run_id = %s', (run_id,)
        ).fetchone()
    return int(found[0]) if found else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL)
    parser.add_argument("--pairs", type=int, default=20_000)
    parser.add_argument("--per-row-pairs", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="100,500,1000,5000")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    console = Console()

    schema = f"se_bench_ingest_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_libpq(args.url), autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in args.url else "?"
    url = f"{args.url}{sep}options=-csearch_path%3D{schema}"
    db = Database(url)
    try:
        db.upgrade()
        repo = Repository(db)
        _, policy_yaml, policy_hash = load_gate_policy(None)
        console.print(f"seeding {args.pairs:,} pairs into schema {schema}")
        started = time.perf_counter()
        seeded = seed_run(
            repo,
            policy_yaml=policy_yaml,
            policy_hash=policy_hash,
            mix={"chat": args.pairs // 2, "extraction": args.pairs - args.pairs // 2},
            batch_size=5_000,
        )
        console.print(f"  seeded in {time.perf_counter() - started:.0f} s")
        scores = repo.load_pair_scores(seeded.run_id)

        def new_run(label: str) -> str:
            return repo.create_run(
                name=f"ingest {label}",
                baseline=seeded.baseline,
                candidate=seeded.candidate,
                policy_hash=policy_hash,
                policy_yaml=policy_yaml,
            ).run_id

        def retarget(run_id: str, items: list[PairScore]) -> list[PairScore]:
            return [s.model_copy(update={"run_id": run_id}) for s in items]

        def timed(write: Callable[[], Any], n: int) -> float:
            start = time.perf_counter()
            write()
            return n / (time.perf_counter() - start)

        rates: dict[str, list[float]] = {}
        rows: dict[str, set[int]] = {}

        def record(mode: str, rate: float, run_id: str) -> None:
            rates.setdefault(mode, []).append(rate)
            rows.setdefault(mode, set()).add(_rows(args.url, schema, run_id))

        for round_no in range(1, args.rounds + 1):
            console.print(f"round {round_no} of {args.rounds}")
            run_id = new_run("per-row")
            few = retarget(run_id, scores[: args.per_row_pairs])
            rate = timed(lambda few=few: [repo.save_pair_scores([s]) for s in few], len(few))
            record("per-row (one transaction per pair)", rate, run_id)
            for size in batches:
                run_id = new_run(f"batch {size}")
                mine = retarget(run_id, scores)

                def batched(mine: list[PairScore] = mine, size: int = size) -> None:
                    for at in range(0, len(mine), size):
                        repo.save_pair_scores(mine[at : at + size])

                record(f"batch {size:,}", timed(batched, len(mine)), run_id)
                if size == max(batches):
                    rate = timed(batched, len(mine))  # the same pairs again: all conflicts
                    record(f"rewrite {size:,} (every row a conflict)", rate, run_id)

        table = Table(title=f"pair-score ingest, PostgreSQL, {args.pairs:,} pairs per run")
        table.add_column("path")
        table.add_column("pairs", justify="right")
        table.add_column("median pairs/s", justify="right")
        table.add_column("lowest pairs/s", justify="right")
        table.add_column("rows after", justify="right")
        table.add_column("≥ 10,000/s")
        for mode, values in rates.items():
            n = args.per_row_pairs if mode.startswith("per-row") else args.pairs
            table.add_row(
                mode,
                f"{n:,}",
                f"{statistics.median(values):,.0f}",
                f"{min(values):,.0f}",
                ", ".join(f"{r:,}" for r in sorted(rows[mode])),
                "yes" if min(values) >= TARGET_PER_S else "no",
            )
        console.print(table)
        console.print(
            f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}",
            highlight=False,
        )
    finally:
        db.dispose()
        with psycopg.connect(_libpq(args.url), autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
