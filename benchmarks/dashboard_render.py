"""Dashboard render times over a 200,000-pair run: overview cold and warm, sample paging.

Usage::

    .venv/bin/python benchmarks/dashboard_render.py [--pairs 200000] [--db PATH] [--reuse]
        [--repeats 5]
    .venv/bin/python benchmarks/dashboard_render.py --url postgresql+psycopg://postgres@127.0.0.1:5432/DB
        [--reuse] [--before-repeats 2]

``--url`` runs on that PostgreSQL database instead of a SQLite file (it must be empty, or
hold a run seeded by an earlier call with ``--reuse``).

Seeds a SQLite database with one run of ``--pairs`` pairs over four task types (the
dashboard tests' generator, :mod:`shadoweval.simulation.pair_seeding`: exchanges, candidate
replays and pair scores written through the Repository in batches; half of the pairs
with a baseline repeat, errors, formats, latencies) under the default gate policy, gates
it with :func:`shadoweval.application.gating.gate_run` (a real stored verdict, as ``shadow-eval
gate`` stores it) and labels a few pairs.
``--reuse`` keeps an existing database at ``--db``.

Then measures with Streamlit's AppTest (the real entrypoint, the real pages):

* overview, cold: first run with empty caches, after a throwaway app has paid Streamlit's
  once-per-process start (reads the run's packed pair facts, builds the pairs frame, the
  summary and the direction of the change);
* overview, warm: the same session again, and a new session (a second operator), with
  the caches filled; median and max of ``--repeats``;
* overview of a live run: 1,000 more pairs scored after the warm renders; the next render
  reads only those (:class:`shadoweval.application.run_views.PairsCache`);
* samples page: the first page, then "Next →" ``--repeats`` times (keyset paging, each a
  rerun of the app and the page), and with a task-type + flag filter;
* the cold overview's data work before and after issue 15, interleaved
  (``--before-repeats`` times each, outside AppTest): *before*, every pair score read and
  validated (``load_pair_scores`` → ``pairs_frame``) and the full summary; *after*, the
  packed facts (``load_pair_facts_after`` → ``pairs_frame_from_facts``) and the summary
  without the latency columns the overview does not show; both then weigh the direction
  of the change. The table says whether the two overviews are identical.

Targets (issue 5): overview warm ≤ 3 s, paging ≤ 1 s; (issue 15) overview cold ≤ 2 s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
from rich.console import Console
from rich.table import Table

from shadoweval.application.gating import gate_run, load_gate_policy
from shadoweval.application.run_views import PairsCache, direction_summary, task_summary
from shadoweval.dashboard.overview_table import direction_view, overview_table
from shadoweval.records import PairScore
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage import Database, Repository
from shadoweval.testing.pair_seeding import add_labels, seed_run

os.environ.setdefault("HF_HUB_OFFLINE", "1")

GATE_COMMAND = "shadow-eval gate"
"""The command recorded with the seeded run's verdict."""
OVERVIEW_TARGET_S = 3.0
COLD_TARGET_S = 2.0
PAGING_TARGET_S = 1.0
SHARES = {"chat": 0.4, "summarize": 0.25, "extraction": 0.2, "code": 0.15}


def _mix(pairs: int) -> dict[str, int]:
    mix = {task: int(pairs * share) for task, share in SHARES.items()}
    mix["chat"] += pairs - sum(mix.values())
    return mix


def _seed(url: str, pairs: int, console: Console) -> tuple[float, float]:
    db = Database(url)
    db.upgrade()
    repo = Repository(db)
    start = time.perf_counter()
    last = [start]

    def progress(stored: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 10 or stored == pairs:
            console.print(f"  seeded {stored:,} / {pairs:,} pairs ({now - start:.0f} s)")
            last[0] = now

    _, policy_yaml, policy_hash = load_gate_policy(None)
    run = seed_run(
        repo,
        policy_yaml=policy_yaml,
        policy_hash=policy_hash,
        mix=_mix(pairs),
        batch_size=5_000,
        progress=progress,
    )
    seeded = time.perf_counter() - start
    start = time.perf_counter()
    result = gate_run(repo, run, command=GATE_COMMAND)
    gated = time.perf_counter() - start
    add_labels(repo, run, stride=max(1, pairs // 40))
    console.print(
        f"  gated: {result.verdict.decision.value.upper()} look {result.verdict.look} "
        f"({len(result.verdict.checks)} checks)"
    )
    db.dispose()
    return seeded, gated


def _timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    app = action()
    elapsed = time.perf_counter() - start
    if app.exception:
        raise SystemExit(f"the app raised: {app.exception[0].message}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--db", type=Path, default=None, help="SQLite file (default: temp)")
    parser.add_argument("--reuse", action="store_true", help="keep an existing --db")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--url", default=None, help="a PostgreSQL URL instead of SQLite")
    parser.add_argument("--before-repeats", type=int, default=2)
    args = parser.parse_args()
    console = Console()

    tmp = tempfile.TemporaryDirectory(prefix="dashboard-bench-")
    path = args.db or Path(tmp.name) / "bench.db"
    url = args.url or f"sqlite:///{path}"
    seed_s = gate_s = float("nan")
    if args.url is not None:
        if not args.reuse:
            console.print(f"seeding {args.pairs:,} pairs into {args.url}")
            seed_s, gate_s = _seed(url, args.pairs, console)
    elif not (args.reuse and path.exists()):
        if path.exists():
            path.unlink()
        console.print(f"seeding {args.pairs:,} pairs into {path}")
        seed_s, gate_s = _seed(url, args.pairs, console)
    before, after, identical = _cold_data(url, args.before_repeats, console)

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from shadoweval.cli.dashboard_cmd import DATABASE_URL_ENV, app_path
    from shadoweval.dashboard import loaders

    held = _hold_back_latest(url, LIVE_PAIRS)

    os.environ[DATABASE_URL_ENV] = url
    st.cache_data.clear()
    st.cache_resource.clear()

    def new_app() -> AppTest:
        return AppTest.from_file(str(app_path()), default_timeout=900)

    # Streamlit's once-per-process start (it scans the installed packages for components,
    # ~0.7 s here) is not the overview's: a throwaway app pays it first.
    AppTest.from_string("import streamlit as st\nst.write('warm-up')").run()
    st.cache_data.clear()
    st.cache_resource.clear()
    app = new_app()
    cold = _timed(app.run)
    warm_same = [_timed(app.run) for _ in range(args.repeats)]
    warm_new = [_timed(new_app().run) for _ in range(args.repeats)]

    # A live run: LIVE_PAIRS more pairs are scored; the next render reads only those.
    _store(url, held)
    loaders.data_version.clear()  # as if VERSION_TTL_S had passed
    live = [_timed(app.run)]

    app.switch_page("app_pages/samples.py")
    first_page = _timed(app.run)
    paging = []
    for _ in range(args.repeats):
        app.button(key="samples_next_top").click()
        paging.append(_timed(app.run))
    page_shown = next(m.value for m in app.markdown if "pairs match" in m.value)
    app.multiselect(key="samples_task_types").set_value(["extraction"])
    app.multiselect(key="samples_flags").set_value(["format_regression"])
    filtered_first = _timed(app.run)
    filtered_paging = []
    for _ in range(args.repeats):
        app.button(key="samples_next_top").click()
        filtered_paging.append(_timed(app.run))

    dialect = "PostgreSQL" if args.url else "SQLite"
    table = Table(title=f"dashboard render, {args.pairs:,} pairs ({dialect}, AppTest)")
    table.add_column("step")
    table.add_column("median s", justify="right")
    table.add_column("max s", justify="right")
    table.add_column("target", justify="right")
    table.add_column("ok")

    def row(name: str, values: list[float], target: float | None) -> None:
        worst = max(values)
        ok = "" if target is None else ("yes" if worst <= target else "NO")
        table.add_row(
            name,
            f"{statistics.median(values):.3f}",
            f"{worst:.3f}",
            "" if target is None else f"≤ {target:g} s",
            ok,
        )

    if seed_s == seed_s:
        row("seed (write through Repository)", [seed_s], None)
        row("gate (gate_run, stored verdict)", [gate_s], None)
    row("overview cold (empty caches)", [cold], COLD_TARGET_S)
    row("overview warm, same session", warm_same, OVERVIEW_TARGET_S)
    row("overview warm, new session", warm_new, OVERVIEW_TARGET_S)
    row(f"overview after {LIVE_PAIRS:,} new pairs (live run)", live, OVERVIEW_TARGET_S)
    row("samples first page", [first_page], PAGING_TARGET_S)
    row("samples Next → (no filter)", paging, PAGING_TARGET_S)
    row("samples first page (task type + flag)", [filtered_first], PAGING_TARGET_S)
    row("samples Next → (task type + flag)", filtered_paging, PAGING_TARGET_S)
    row("cold overview data, before (records → pairs_frame)", before, None)
    row("cold overview data, after (packed facts)", after, COLD_TARGET_S)
    console.print(table)
    console.print(
        "overview tables before and after: " + ("identical" if identical else "DIFFERENT"),
        highlight=False,
    )
    console.print(f"last unfiltered page: {page_shown}", highlight=False)
    console.print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs", highlight=False)
    tmp.cleanup()


LIVE_PAIRS = 1_000
"""Pairs held back before the first render and stored after the warm ones (a live run)."""


def _hold_back_latest(url: str, n: int) -> list[PairScore]:
    """Remove the run's ``n`` most recently stored pair scores; return them for later.

    No product path deletes a pair score, so the benchmark deletes the rows of its own
    database with the driver itself (the standard library's ``sqlite3``, or ``psycopg``;
    only the storage layer uses SQLAlchemy); :func:`_store` puts them back through the
    repository.
    """
    repo = Repository(Database(url))
    run_id = repo.list_runs()[0].run_id
    scores = repo.load_pair_scores(run_id)[-n:]
    repo.database.dispose()
    keys = [(run_id, s.exchange_id) for s in scores]
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.executemany("DELETE FROM pair_score WHERE run_id = ? AND exchange_id = ?", keys)
        conn.close()
    else:
        libpq = url.replace("postgresql+psycopg://", "postgresql://", 1)
        with psycopg.connect(libpq) as pg, pg.cursor() as cursor:
            cursor.executemany(
                "DELETE FROM pair_score WHERE run_id = %s AND exchange_id = %s", keys
            )
    return scores


def _cold_data(url: str, repeats: int, console: Console) -> tuple[list[float], list[float], bool]:
    """Seconds of the cold overview's data work before and after (interleaved), and
    whether the two overview and direction tables are identical."""
    repo = Repository(Database(url))
    run = repo.list_runs()[0]
    policy = parse_policy_yaml(run.policy_yaml)
    verdict = repo.latest_verdict(run.run_id)

    def before() -> tuple[pd.DataFrame, pd.DataFrame]:
        frame = pairs_frame(repo.load_pair_scores(run.run_id), policy)
        shown = overview_table(task_type_summary(frame, verdict), verdict).values
        direction = direction_summary(repo, run, pairs=frame).table
        return shown, direction_view(direction, verdict).values

    def after() -> tuple[pd.DataFrame, pd.DataFrame]:
        frame = PairsCache.for_run(run).table(repo)
        shown = overview_table(task_summary(frame, verdict, latency=False), verdict).values
        direction = direction_summary(repo, run, pairs=frame).table
        return shown, direction_view(direction, verdict).values

    times: dict[str, list[float]] = {"before": [], "after": []}
    results: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
    for i in range(repeats):
        for name, work in (("before", before), ("after", after)):
            start = time.perf_counter()
            results[name] = work()
            times[name].append(time.perf_counter() - start)
            console.print(f"  cold data {name} #{i + 1}: {times[name][-1]:.2f} s")
    repo.database.dispose()
    identical = all(
        old.equals(new) for old, new in zip(results["before"], results["after"], strict=True)
    )
    return times["before"], times["after"], identical


def _store(url: str, scores: list[PairScore]) -> None:
    repo = Repository(Database(url))
    repo.save_pair_scores(scores)
    repo.database.dispose()


if __name__ == "__main__":
    main()
