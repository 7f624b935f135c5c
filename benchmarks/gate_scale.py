"""Wall time of one gate verdict over 1,000,000 pairs in 20 task types.

Usage::

    .venv/bin/python benchmarks/gate_scale.py [--pairs 1000000] [--task-types 20]
        [--repeats 3] [--no-repeat-share]

Builds a synthetic A/A run in memory (:func:`gate_simulation.synthetic_pairs`: 20 task
types with unequal shares, a quarter of them with a format requested, baseline-repeat
similarities and latencies, output tokens), then times :func:`shadoweval.stats.gate.evaluate_gate`
end to end — column conversion, the per-task-type split, every check of the pooled
analysis and of each task type (about 200 checks), Holm, validity, the verdict — and,
separately, the polling entry point :func:`shadoweval.stats.checkpoints.evaluate_poll` (which also
orders the frame by capture time and cuts the checkpoint's prefix) and the descriptive
summary :func:`shadoweval.stats.summary.task_type_summary` (report-only statistics included). Prints
one row per step with the median and the minimum of ``--repeats`` runs. Target: the
verdict in ≤ 3 s on the development machine (2 vCPU).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from gate_simulation import RunSim, TaskSim, coverage_of, synthetic_pairs

from shadoweval.stats.checkpoints import evaluate_poll
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy
from shadoweval.stats.summary import task_type_summary


def _run(task_types: int, repeat_share: float) -> RunSim:
    weights = np.linspace(1.0, 3.0, task_types)
    shares = weights / weights.sum()
    tasks = {
        f"task{i:02d}": TaskSim(float(shares[i]), format_expected=i % 4 == 0)
        for i in range(task_types)
    }
    return RunSim(tasks=tasks, repeat_share=repeat_share)


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    times = []
    result: object = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--task-types", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-repeat-share",
        action="store_true",
        help="no baseline-repeat outcomes (absolute similarity limit, live latencies)",
    )
    args = parser.parse_args()
    policy = GatePolicy()
    start = time.perf_counter()
    pairs = synthetic_pairs(
        _run(args.task_types, 0.0 if args.no_repeat_share else 1.0),
        args.pairs,
        np.random.default_rng(args.seed),
    )
    built = time.perf_counter() - start
    coverage = coverage_of(pairs)
    print(
        f"{len(pairs):,} pairs, {pairs['task_type'].nunique()} task types "
        f"(synthetic frame built in {built:.1f} s); {args.repeats} repeats\n"
    )
    rows: list[tuple[str, float, float, str]] = []
    med, low, verdict = _time(
        lambda: evaluate_gate(pairs, policy, run_id="scale", coverage=coverage, look=13),
        args.repeats,
    )
    checks = len(verdict.checks)  # type: ignore[attr-defined]
    decision = verdict.decision.value  # type: ignore[attr-defined]
    rows.append(("evaluate_gate (all pairs, look 13)", med, low, f"{decision}, {checks} checks"))
    med, low, polled = _time(
        lambda: evaluate_poll(pairs, policy, run_id="scale", coverage=coverage), args.repeats
    )
    look = polled.look  # type: ignore[attr-defined]
    rows.append(
        (
            "evaluate_poll (checkpoint prefix)",
            med,
            low,
            f"{polled.decision.value}, look {look}",  # type: ignore[attr-defined]
        )
    )
    med, low, _ = _time(lambda: task_type_summary(pairs, verdict), args.repeats)  # type: ignore[arg-type]
    rows.append(("task_type_summary (report only)", med, low, ""))
    print("| step | median s | min s | result |")
    print("|---|---:|---:|---|")
    for name, med_s, min_s, note in rows:
        print(f"| {name} | {med_s:.2f} | {min_s:.2f} | {note} |")


if __name__ == "__main__":
    main()
