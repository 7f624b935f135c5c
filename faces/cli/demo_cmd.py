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

    from application.demo import DemoPaths, DemoRequest, run_demo
    from faces.cli.exit_codes import EXIT_ERROR
    from faces.cli.render import print_error, print_result, wide_console
    from shadoweval.errors import ShadowEvalError

    console = wide_console()
    err = Console(stderr=True)

    def workload_ready(paths: DemoPaths, task_types: int) -> None:
        console.print(
            f"workload: {per_task_type} requests × {task_types} task types; "
            f"capture log {paths.capture_log}"
        )

    def servers_started(candidate_url: str, baseline_url: str) -> None:
        console.print(
            f"mock-llm candidate at {candidate_url}, baseline replica at "
            f"{baseline_url} (test doubles)"
        )

    console.rule("shadow-eval demo")
    try:
        demo = run_demo(
            DemoRequest(
                workdir=workdir,
                per_task_type=per_task_type,
                seed=seed,
                concurrency=concurrency,
                encoder=encoder,
                progress=progress,
            ),
            console=err,
            on_workload=workload_ready,
            on_servers=servers_started,
        )
    except ShadowEvalError as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    result = demo.evaluation
    print_result(console, result.gate.summary, result.gate.verdict)
    console.print(f"stages (s): {result.stages_s}; report: {demo.paths.report}")
    decision = result.gate.verdict.decision.value.upper()
    planted = ", ".join(f"{t}/{m}" for t, m in demo.planted)
    if demo.succeeded:
        console.print(
            f"[bold green]demo OK[/]: verdict {decision} caught the planted regressions ({planted})"
        )
        return
    console.print(
        f"[bold red]demo FAILED[/]: verdict {decision}, planted {planted}, caught {demo.caught}"
    )
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the CLI."""
    app.command("demo")(demo_command)
