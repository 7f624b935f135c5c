"""A/A latency under load: two identical mock-llm servers beside CPU burners (issue 29 item 2).

Each run replays the same seeded capture log (the demo workload's requests) to two
identical mock-llm servers (``python -m shadoweval.cli mock-llm``, each its own process on
its own free port, the same fixed latency and seed; ready once its ``/v1/models`` answers),
one as the candidate and one as the baseline replica (``--baseline-repeat-share 1.0``),
through :class:`~shadoweval.replay.runner.ReplayRunner` into SQLite — so every exchange is
sent to both together (co-timed, the order drawn per exchange from the run id) — while
``--burners`` processes spin on the CPUs. The replay runs in this process; the servers and
the burners are separate processes (stopped at the end, also on errors), so no server
shares the replaying interpreter's GIL. The latency the gate reads is the co-timed pairs'
e2e: the p50 ratio candidate / replica with the gate's resampling-free paired interval
(:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf`, 95%: α 0.025 per side), the
pairs in replay order (the candidate's ``sent_at``) and the variance widened for their serial
dependence (Newey–West; ``nw_var_factor`` is the factor), as the gate's latency check does. The
candidate and the replica are the same server, so the interval should cover 1 in at least
95% of the runs.

Prints the command, the CPU model and the load, one row per run (seed, pairs, ratio,
interval, whether it covers 1, the Newey–West variance factor) and the summary line. Usage::

    PYTHONPATH=. python -m benchmarks.latency_aa [--runs 40] [--requests 200] \\
        [--latency-ms 20] [--burners 2] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.sidecar_overhead import Processes, free_port, managed, wait_http
from shadoweval.capture.table_import import import_table
from shadoweval.capture_log import LogEntry, read_capture_log
from shadoweval.pair_facts import epoch_s
from shadoweval.records import ModelIdentity, ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.co_timed import candidate_first
from shadoweval.replay.runner import ReplayRunner, TargetSpec
from shadoweval.simulation.workload import DEMO_MAPPING, WorkloadSpec, write_workload
from shadoweval.stats.quantiles import paired_quantile_ratios_rf
from shadoweval.storage import Database, Repository
from shadoweval.tables import TableMapping

ALPHA_PER_SIDE = 0.025
MODEL_NAME = "aa"
SERVER_START_S = 60.0


def _burn() -> None:  # pragma: no cover - runs in a child process until terminated
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2**31


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def _workload(root: Path, requests: int) -> tuple[list[LogEntry], Path]:
    """The demo workload's requests (``requests`` rounded up to 4 task types), read back,
    and the baseline table the servers answer from."""
    mapping = TableMapping(**DEMO_MAPPING)
    per_task_type = max(1, -(-requests // 4))
    baseline, _ = write_workload(root / "tables", WorkloadSpec(per_task_type=per_task_type, seed=3))
    import_table(baseline, out=root / "capture", mapping=mapping, stream=False)
    return list(read_capture_log(root / "capture"))[:requests], baseline


def _start_servers(
    procs: Processes, table: Path, log_dir: Path, seed: int, latency_ms: float
) -> list[str]:
    """Start two identical ``mock-llm`` processes (fixed ``latency_ms`` TTFT, no inter-token
    gap, ``seed``), each on a free port; return their base URLs once both answer
    ``GET /v1/models`` (polled). Raises SystemExit when one exits or is not ready in time."""
    mapping_args = [
        arg for key, value in DEMO_MAPPING.items() for arg in (f"--{key.replace('_', '-')}", value)
    ]
    urls: list[str] = []
    for index in range(2):
        port = free_port()
        log = log_dir / f"mock-llm-{seed}-{index}.log"
        proc = procs.start(
            [
                sys.executable, "-m", "shadoweval.cli", "mock-llm", "--input", str(table),
                *mapping_args, "--latency-profile", f"fixed:{latency_ms:g},0", "--seed", str(seed),
                "--model-name", MODEL_NAME, "--port", str(port),
            ],
            log,
        )  # fmt: skip
        urls.append(f"http://127.0.0.1:{port}")
        wait_http(f"{urls[-1]}/v1/models", SERVER_START_S, proc, log)
    return urls


async def _one_run(
    entries: Sequence[LogEntry], urls: list[str], db: Path, seed: int, args: argparse.Namespace
) -> tuple[int, float, float, float, float]:
    """Replay once; return (pairs, p50 ratio, CI low, CI high, Newey–West variance factor)
    of the co-timed e2e pairs in replay order."""
    database = Database(f"sqlite:///{db}")
    database.upgrade()
    repo = Repository(database)
    model = ModelIdentity(name="aa-model")
    run_id = repo.create_run(
        name=f"aa-{seed}",
        baseline=model,
        candidate=model,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id
    clients = [CandidateClient(url, timeout_s=60) for url in urls]
    try:
        for client in clients:
            await client.start()
        targets = [
            TargetSpec(ReplayTarget.CANDIDATE, clients[0], model, model_name=MODEL_NAME),
            TargetSpec(ReplayTarget.BASELINE_REPEAT, clients[1], model, share=1.0),
        ]
        runner = ReplayRunner(
            repo, run_id, targets, concurrency=args.concurrency, warmup_requests=5, progress=False
        )
        await runner.run(entries)
    finally:
        for client in clients:
            await client.stop()
    replica = {o.exchange_id: o for o in repo.load_outcomes(run_id, ReplayTarget.BASELINE_REPEAT)}
    pairs: list[tuple[float, float, float, str]] = []
    for o in repo.load_outcomes(run_id, ReplayTarget.CANDIDATE):
        r = replica.get(o.exchange_id)
        if r is None or o.warmup or r.warmup or not (o.co_timed and r.co_timed):
            continue
        if o.error_kind is None and r.error_kind is None and o.timings.e2e_ms and r.timings.e2e_ms:
            first, sent_s = candidate_first(run_id, o.exchange_id), epoch_s(o.sent_at)
            row = (f"{o.exchange_id},{sent_s:.6f},{o.replayed_at.isoformat()},{int(first)},"
                   f"{o.timings.e2e_ms:.3f},{r.timings.e2e_ms:.3f}")  # fmt: skip
            pairs.append((sent_s, o.timings.e2e_ms, r.timings.e2e_ms, row))
    database.dispose()
    pairs.sort(key=lambda pair: pair[0])  # replay order: the candidate's send time
    if args.pairs_out is not None:
        args.pairs_out.mkdir(parents=True, exist_ok=True)
        header = (
            "exchange_id,candidate_sent_at_s,replayed_at,candidate_first,candidate_e2e_ms,"
            "replica_e2e_ms\n"
        )
        rows = [pair[3] for pair in pairs]
        (args.pairs_out / f"run-{seed}.csv").write_text(header + "\n".join(rows) + "\n")
    [result] = paired_quantile_ratios_rf(
        np.asarray([pair[1] for pair in pairs]),
        np.asarray([pair[2] for pair in pairs]),
        [0.5],
        alpha=ALPHA_PER_SIDE,
        ordered=True,
    )
    return len(pairs), result.estimate, result.ci_low, result.ci_high, result.serial_factor


def main(argv: list[str] | None = None) -> int:
    """Run the A/A benchmark and print its table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--pairs-out", type=Path, default=None, help="write each run's co-timed pairs here (CSV)"
    )
    args = parser.parse_args(argv)
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.burners)]
    for p in burners:
        p.start()
    print(f"# command: python -m benchmarks.latency_aa {' '.join(argv or sys.argv[1:])}".rstrip())
    print(f"# cpu: {_cpu_model()} ({os.cpu_count()} cores); burners: {args.burners}")
    print(f"# load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("run\tseed\tpairs\tp50_ratio\tci_low\tci_high\tcovers_1\tnw_var_factor")
    covered = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            entries, table = _workload(Path(tmp), args.requests)
            for run in range(args.runs):
                seed = 1000 + run
                with managed() as procs:
                    urls = _start_servers(procs, table, Path(tmp), seed, args.latency_ms)
                    n, ratio, low, high, factor = asyncio.run(
                        _one_run(entries, urls, Path(tmp) / f"run{run}.db", seed, args)
                    )
                covers = low <= 1.0 <= high
                covered += covers
                print(
                    f"{run}\t{seed}\t{n}\t{ratio:.3f}\t{low:.3f}\t{high:.3f}\t{covers}"
                    f"\t{factor:.2f}"
                )
    finally:
        for p in burners:
            p.terminate()
            p.join()
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    share = covered / args.runs if args.runs else 0.0
    print(
        f"summary: runs {args.runs}, interval covers 1 in {covered} ({100 * share:.1f}%), "
        f"target >= 95%"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
