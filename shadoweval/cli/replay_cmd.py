"""``shadow-eval replay run``: replay a capture log into a run (no scoring, no gate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import (
    BaselineRepeatModelOpt,
    BaselineRepeatShareOpt,
    BaselineRepeatUrlOpt,
    CandidateModelOpt,
    CandidateUrlOpt,
    ConcurrencyOpt,
    DatabaseUrlOpt,
    PolicyOpt,
    ProgressOpt,
    RateOpt,
    RunIdOpt,
    RunNameOpt,
    TimeoutOpt,
    WarmupOpt,
)
from shadoweval.cli.render import print_error

replay_app = typer.Typer(help="Replay captured requests to shadow targets.", no_args_is_help=True)


@replay_app.command("run")
def replay_run(
    source: Annotated[
        Path, typer.Option("--source", help="Capture log to replay (segment file or directory).")
    ],
    candidate_url: CandidateUrlOpt,
    candidate_model: CandidateModelOpt = None,
    baseline_repeat_url: BaselineRepeatUrlOpt = None,
    baseline_repeat_model: BaselineRepeatModelOpt = None,
    baseline_repeat_share: BaselineRepeatShareOpt = 0.1,
    run_id: RunIdOpt = None,
    name: RunNameOpt = None,
    policy: PolicyOpt = None,
    database_url: DatabaseUrlOpt = None,
    concurrency: ConcurrencyOpt = None,
    rate: RateOpt = None,
    timeout_s: TimeoutOpt = None,
    warmup: WarmupOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Replay every exchange of a capture log to the candidate (and a baseline replica).

    Outcomes are stored idempotently: running it again on the same run resumes, and sends
    only what has no outcome yet. Prints the replay counts as JSON. Exit 3 on error.
    """
    from rich.console import Console

    from shadoweval.cli.evaluate_cmd import build_settings
    from shadoweval.cli.evaluation import EvaluationRequest, prepare_run
    from shadoweval.cli.exit_codes import EXIT_ERROR
    from shadoweval.cli.pipeline import (
        open_repository,
        replay_capture_log,
        run_async,
    )
    from shadoweval.errors import ShadowEvalError

    err = Console(stderr=True)
    try:
        settings = build_settings(
            database_url=database_url,
            concurrency=concurrency,
            rate=rate,
            timeout_s=timeout_s,
            warmup=warmup,
        )
        request = EvaluationRequest(
            capture_log=source,
            candidate_url=candidate_url,
            candidate_model=candidate_model,
            baseline_repeat_url=baseline_repeat_url,
            baseline_repeat_model=baseline_repeat_model,
            baseline_repeat_share=baseline_repeat_share,
            policy_path=policy,
            run_name=name,
            run_id=run_id,
            progress=progress,
        )
        with open_repository(settings.database.url) as repo:
            run, targets = prepare_run(repo, request, settings)
            report = run_async(
                replay_capture_log(
                    repo,
                    run.run_id,
                    source,
                    targets,
                    settings.replay,
                    progress=progress,
                    console=err,
                )
            )
    except (ShadowEvalError, FileNotFoundError) as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    typer.echo(json.dumps(report.as_dict(), indent=2))


def register(app: typer.Typer) -> None:
    """Add the ``replay`` group to the CLI."""
    app.add_typer(replay_app, name="replay")
