"""``shadow-eval gate``: the verdict of a run, as an exit status for CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import DatabaseUrlOpt, ExistingRunOpt, JsonOpt, PolicyOpt
from shadoweval.cli.render import print_error


def gate_command(
    run_id: ExistingRunOpt,
    database_url: DatabaseUrlOpt = None,
    policy: PolicyOpt = None,
    as_json: JsonOpt = False,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Also write the checks as JUnit XML (one case per check)."),
    ] = None,
) -> None:
    """Compute and store the verdict of a run under its frozen policy.

    Exit status: 0 PROMOTE, 1 HOLD, 2 ROLLBACK, 3 error. PROMOTE and ROLLBACK are terminal:
    once reached, later calls return the same verdict. ``--policy`` is only a check: a
    policy other than the run's is an error (a different policy means a new run).
    """
    from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.pipeline import (
        gate_run,
        load_gate_policy,
        open_repository,
    )
    from shadoweval.cli.render import print_result, wide_console
    from shadoweval.errors import ShadowEvalError

    err = wide_console(stderr=True)
    out = wide_console(stderr=as_json)
    try:
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            run = repo.get_run(run_id)
            if run is None:
                raise ShadowEvalError(f"run {run_id!r} not found")
            if policy is not None:
                _, _, digest = load_gate_policy(policy)
                if digest != run.policy_hash:
                    raise ShadowEvalError(
                        f"policy {policy} (hash {digest[:12]}) is not the policy run {run_id} "
                        f"was started under ({run.policy_hash[:12]}); a different policy "
                        "means a new run"
                    )
            result = gate_run(repo, run, command="shadow-eval gate")
    except ShadowEvalError as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    print_result(out, result.summary, result.verdict)
    if result.reused_terminal:
        out.print("(terminal verdict: returned as stored)")
    if junit is not None:
        from shadoweval.cli.junit import write_junit

        write_junit(result.verdict, junit)
    if as_json:
        typer.echo(result.verdict.model_dump_json(indent=2))
    raise typer.Exit(EXIT_CODES[result.verdict.decision])


def register(app: typer.Typer) -> None:
    """Add ``gate`` to the CLI."""
    app.command("gate")(gate_command)
