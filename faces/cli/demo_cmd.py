"""``shadow-eval demo``: the whole loop on one machine with simulated models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from faces.cli.options import EncoderOpt, ProgressOpt


def demo_command(
    workdir: Annotated[
        Path,
        typer.Option(
            "--workdir",
            help="Where the demo writes; a directory the demo made is replaced on each run, "
            "any other non-empty directory is refused.",
        ),
    ] = Path(".demo"),
    per_task_type: Annotated[
        int, typer.Option("--per-task-type", min=10, help="Requests per task type.")
    ] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Workload and latency seed.")] = 7,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 32,
    encoder: EncoderOpt = "minilm",
    progress: ProgressOpt = True,
) -> None:
    """Run the whole loop on simulated models and check the verdict catches the regressions.

    Generates a workload, simulates a baseline and a candidate with planted regressions,
    and runs capture log → replay → scores → verdict.

    The candidate breaks the JSON of some ``extraction`` answers and streams long
    ``summarization`` answers more slowly. Both models are mock-llm test doubles. Exit
    status 0 when the verdict caught both regressions (and is not PROMOTE), else 1.
    """
    from rich.console import Console

    from faces.cli.evaluation import EvaluationRequest, evaluate
    from faces.cli.exit_codes import EXIT_ERROR
    from faces.cli.render import print_error, print_result, wide_console
    from faces.demo.run import (
        DEMO_MAPPING,
        PLANTED,
        DemoPaths,
        caught_regressions,
        demo_succeeded,
        prepare,
    )
    from shadoweval.config import DatabaseSettings, ReplaySettings, Settings
    from shadoweval.errors import ShadowEvalError
    from shadoweval.tables import TableMapping, load_recorded_rows
    from simulation.mock_llm import FaultConfig, create_app
    from simulation.mock_llm.latency import TableLatency
    from simulation.mock_llm.server import BackgroundServer
    from simulation.workload import WorkloadSpec

    console = wide_console()
    err = Console(stderr=True)
    paths = DemoPaths(workdir)
    spec = WorkloadSpec(per_task_type=per_task_type, seed=seed)
    console.rule("shadow-eval demo")
    try:
        baseline_table, candidate_table = prepare(paths, spec)
    except ShadowEvalError as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    console.print(
        f"workload: {per_task_type} requests × 4 task types; capture log {paths.capture_log}"
    )
    mapping = TableMapping(**DEMO_MAPPING)
    servers = []
    models = ((candidate_table, "demo-candidate-v2"), (baseline_table, "demo-baseline-v1"))
    for table, name in models:
        rows = load_recorded_rows(table, mapping).rows
        app = create_app(
            rows, latency=TableLatency(), faults=FaultConfig(), seed=seed, model_name=name
        )
        servers.append(BackgroundServer(app).start())
    candidate_server, baseline_server = servers
    console.print(
        f"mock-llm candidate at {candidate_server.url}, baseline replica at "
        f"{baseline_server.url} (test doubles)"
    )
    settings = Settings(
        database=DatabaseSettings(url=f"sqlite:///{paths.database}"),
        replay=ReplaySettings(concurrency=concurrency, warmup_requests=8, timeout_s=60),
    )
    try:
        result = evaluate(
            EvaluationRequest(
                capture_log=paths.capture_log,
                candidate_url=candidate_server.url,
                baseline_repeat_url=baseline_server.url,
                baseline_repeat_share=1.0,
                run_name="demo: demo-baseline-v1 → demo-candidate-v2",
                encoder=encoder,
                progress=progress,
                command="shadow-eval demo",
            ),
            settings,
            console=err,
        )
    finally:
        for server in servers:
            server.stop()
    print_result(console, result.gate.summary, result.gate.verdict)
    result.write_report(paths.report)
    console.print(f"stages (s): {result.stages_s}; report: {paths.report}")
    caught = caught_regressions(result.gate.verdict)
    planted = ", ".join(f"{t}/{m}" for t, m in PLANTED)
    if demo_succeeded(result.gate.verdict):
        console.print(
            f"[bold green]demo OK[/]: verdict {result.gate.verdict.decision.value.upper()} "
            f"caught the planted regressions ({planted})"
        )
        return
    console.print(
        f"[bold red]demo FAILED[/]: verdict {result.gate.verdict.decision.value.upper()}, "
        f"planted {planted}, caught {caught}"
    )
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the CLI."""
    app.command("demo")(demo_command)
