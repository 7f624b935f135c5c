"""``shadow-eval compare run``: score a run's replayed pairs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from faces.cli.options import (
    DatabaseUrlOpt,
    DeviceOpt,
    EncoderOpt,
    ExistingRunOpt,
    StructuredOpt,
)
from faces.cli.render import print_error

compare_app = typer.Typer(help="Score replayed pairs.", no_args_is_help=True)


@compare_app.command("run")
def compare_run_command(
    run_id: ExistingRunOpt,
    database_url: DatabaseUrlOpt = None,
    encoder: EncoderOpt = "minilm",
    device: DeviceOpt = "cpu",
    structured_task_type: StructuredOpt = None,
    rescore: Annotated[
        bool, typer.Option("--rescore", help="Score every pair again, not only new ones.")
    ] = False,
) -> None:
    """Score every replayed pair of a run not scored yet (similarity, formats, harms, latency).

    The refusal detector's patterns come from ``SHADOWEVAL_COMPARE__REFUSAL_PATTERNS``
    (default: the built-in set); another local sentence-transformers model from
    ``SHADOWEVAL_COMPARE__MODEL_PATH``, with the scripts it covers in
    ``SHADOWEVAL_COMPARE__MODEL_SCRIPTS`` (default ``["Latin"]``). Prints the counts as JSON.
    Exit 3 on error.
    """
    from rich.console import Console

    from application.database import open_repository
    from application.scoring import score_stored_run
    from faces.cli.exit_codes import EXIT_ERROR
    from faces.cli.options import database_url as resolve_url
    from shadoweval.config import load_settings
    from shadoweval.errors import ShadowEvalError

    err = Console(stderr=True, soft_wrap=True)
    try:
        compare_settings = load_settings().compare
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            report = score_stored_run(
                repo,
                run_id,
                encoder=encoder,
                device=device,
                structured_task_types=frozenset(structured_task_type or ()),
                rescore=rescore,
                refusal_patterns=compare_settings.refusal_patterns,
                model_path=compare_settings.model_path,
                covered_scripts=compare_settings.covered_scripts(),
            )
    except ShadowEvalError as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    typer.echo(json.dumps(report.as_dict(), indent=2))


def register(app: typer.Typer) -> None:
    """Add the ``compare`` group to the CLI."""
    app.add_typer(compare_app, name="compare")
