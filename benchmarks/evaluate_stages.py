"""Wall time of the 805-prompt AlpacaEval evaluation, broken down by stage.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/evaluate_stages.py [--time-scale 1.0]
        [--concurrency 64] [--encoder minilm] [--data ../shared/data]
        [--limit N] [--keep-database PATH]

The same pipeline as ``shadow-eval evaluate``: Llama-3-8B outputs imported as the capture
log; Llama-3.1-8B-Instruct-Turbo served by mock-llm as the candidate and Llama-3-8B as a
baseline-repeat replica (share 1.0), both paced by the per-request latencies of the
llmperf Llama-2-7B runs (``--time-scale`` multiplies those delays: 1.0 = as measured,
0 = no waiting, which isolates our own overhead). Both mock servers run in this process.
Prints one row per stage with seconds and share of the total. ``--limit N`` imports the
first N prompts only (a smoke run: ``--limit 8 --time-scale 0 --encoder hashing``);
``--keep-database PATH`` copies the run's SQLite database there and prints its run id
(``benchmarks/compare_scaling.py`` rescores such a run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--encoder", default="minilm")
    parser.add_argument("--limit", type=int, default=None, help="the first N prompts only")
    parser.add_argument("--keep-database", type=Path, default=None)
    args = parser.parse_args()

    from shadoweval.application.evaluation import EvaluationRequest, evaluate
    from shadoweval.application.runs import RunRequest
    from shadoweval.capture.table_import import import_table
    from shadoweval.config import DatabaseSettings, ReplaySettings, Settings
    from shadoweval.serving import BackgroundServer
    from shadoweval.simulation.mock_llm import FaultConfig, create_app
    from shadoweval.simulation.mock_llm.latency import parse_latency_profile
    from shadoweval.tables import load_recorded_rows

    alpaca = args.data / "alpaca_eval"
    profile = parse_latency_profile(f"llmperf:{args.data}/llmperf_leaderboard/individual/*_7b.json")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stages: dict[str, float] = {}
        captured = alpaca / "Meta-Llama-3-8B-Instruct" / "model_outputs.json"
        if args.limit is not None:
            first = json.loads(captured.read_text(encoding="utf-8"))[: args.limit]
            captured = work / "model_outputs.json"
            captured.write_text(json.dumps(first), encoding="utf-8")
        t0 = time.perf_counter()
        import_table(captured, out=work / "capture", preset="alpaca_eval")
        stages["import"] = time.perf_counter() - t0
        servers = []
        for name in ("Meta-Llama-3.1-8B-Instruct-Turbo", "Meta-Llama-3-8B-Instruct"):
            rows = load_recorded_rows(
                alpaca / name / "model_outputs.json", preset="alpaca_eval"
            ).rows
            app = create_app(
                rows,
                latency=profile,
                faults=FaultConfig(),
                seed=1,
                model_name=name,
                time_scale=args.time_scale,
            )
            servers.append(BackgroundServer(app).start())
        settings = Settings(
            database=DatabaseSettings(url=f"sqlite:///{work / 'bench.db'}"),
            replay=ReplaySettings(concurrency=args.concurrency, warmup_requests=8),
        )
        try:
            result = evaluate(
                EvaluationRequest(
                    capture_log=work / "capture",
                    run=RunRequest(
                        candidate_url=servers[0].url,
                        baseline_repeat_url=servers[1].url,
                        baseline_repeat_share=1.0,
                        encoder=args.encoder,
                    ),
                    progress=False,
                ),
                settings,
            )
        finally:
            for server in servers:
                server.stop()
        stages.update(result.stages_s)
        if args.keep_database is not None:
            shutil.copyfile(work / "bench.db", args.keep_database)
            print(f"run {result.run.run_id} kept in {args.keep_database}")
    total = sum(stages.values())
    print(
        f"{args.limit or 805} prompts, 2 targets, concurrency {args.concurrency}, time scale "
        f"{args.time_scale:g}, encoder {args.encoder}; verdict "
        f"{result.gate.verdict.decision.value}"
    )
    print(f"{'stage':<14} {'seconds':>9} {'share':>7}")
    for name, seconds in stages.items():
        print(f"{name:<14} {seconds:>9.2f} {seconds / total:>7.1%}")
    print(f"{'total':<14} {total:>9.2f}")
    replay = result.replay
    rate = replay.achieved_rate_per_s
    print(
        f"replay: {sum(replay.sent.values())} requests, measured ones started at "
        f"{'–' if rate is None else f'{rate:.1f}'}/s; "
        f"compare: {result.compare.scored} pairs"
    )


if __name__ == "__main__":
    main()
