"""``shadow-eval demo``: the whole loop on one machine with simulated models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import EncoderOpt, ProgressOpt


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
        int,
        typer.Option(
            "--per-task-type", min=10, help="Requests per task type (support_chat: twice as many)."
        ),
    ] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Workload and latency seed.")] = 7,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 32,
    encoder: EncoderOpt = "minilm",
    progress: ProgressOpt = True,
) -> None:
    """Run the whole loop on simulated models for two candidates; check both verdicts.

    Generates a workload and runs capture log → replay → scores → judge → verdict twice.
    The regressed candidate breaks the JSON of some ``extraction`` answers and streams
    long ``summarization`` answers more slowly: ROLLBACK expected. The better candidate's
    answers changed and got better (it answers the baseline's loops and refusals
    properly): PROMOTE expected. Models and judge are test doubles (mock-llm, mock-judge).
    Exit status 0 when both verdicts are as planted, else 1.
    """
    from rich.console import Console

    from shadoweval.application.demo import DemoPaths, DemoRequest, run_demo
    from shadoweval.application.evaluation import EvaluationResult
    from shadoweval.cli.render import exit_on_error, print_result, wide_console

    console = wide_console()
    err = Console(stderr=True, soft_wrap=True)

    def workload_ready(paths: DemoPaths, counts: dict[str, int]) -> None:
        mix = ", ".join(f"{task} {n}" for task, n in counts.items())
        console.print(
            f"workload: {sum(counts.values())} requests ({mix}); capture log {paths.capture_log}"
        )

    def servers_started(candidate_url: str, baseline_url: str) -> None:
        console.print(
            f"mock-llm regressed candidate at {candidate_url}, baseline replica at "
            f"{baseline_url}, a better candidate and a simulated judge (test doubles)"
        )

    def evaluated(name: str, result: EvaluationResult) -> None:
        console.rule(f"{name} candidate: {result.run.candidate.name}")
        print_result(console, result.gate.summary, result.gate.verdict)
        console.print(
            f"stages (s): {result.stages_s}; embedding backend: {result.compare.backend or '-'}"
        )

    console.rule("shadow-eval demo")
    with exit_on_error(err):
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
            on_evaluation=evaluated,
        )
    regressed = demo.evaluation.gate.verdict.decision.value.upper()
    better = demo.better.gate.verdict.decision.value.upper()
    planted = ", ".join(f"{t}/{m}" for t, m in demo.planted)
    console.print(f"reports: {demo.paths.report}, {demo.paths.better_report}")
    if demo.succeeded:
        console.print(
            f"[bold green]demo OK[/]: the regressed candidate is {regressed} (caught the "
            f"planted {planted}); the better candidate is {better}"
        )
        return
    console.print(
        f"[bold red]demo FAILED[/]: regressed candidate {regressed} (planted {planted}, "
        f"caught {demo.caught}; ROLLBACK expected), better candidate {better} (PROMOTE "
        "expected)"
    )
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``demo`` to the CLI."""
    app.command("demo")(demo_command)
