"""``shadow-eval canary``: a candidate's rollout on live traffic through the Envoy front's split.

* ``canary start --run ID [--policy FILE] [--name N] --why TEXT``: writes the split for the
  canary policy's first step into the front end's split directory (a new revision; the
  front end's settings, ``SHADOWEVAL_ENVOY__CANARY__*``, say where) and records the canary
  with its ``canary_started`` audit row (who: the OS user, or ``--actor``).
* ``canary ingest ID --capture-log DIR``: reads what the front end's capture log gained
  since the last call into the canary's observations (the arm that served each request).
* ``canary rollback ID --why TEXT``: share 0 at once (a new split revision), then the
  canary ends ``rolled_back`` with who and why audited.
* ``canary status ID [--json]``: the canary, its steps, what was observed per arm and its
  audit trail. Exit 0 when completed, 1 while running, 2 when rolled back (the gate's
  PROMOTE/HOLD/ROLLBACK codes), so a CI step can wait on it.

Every error exits 3 with a message naming the field and value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from faces.cli.options import DatabaseUrlOpt, ExistingRunOpt, JsonOpt
from faces.cli.render import print_error

canary_app = typer.Typer(
    name="canary",
    help="Roll a candidate out on live traffic in steps through the Envoy front's split: "
    "start, ingest, rollback, status.",
    no_args_is_help=True,
)

CanaryArg = Annotated[str, typer.Argument(help="The canary id.")]
WhyOpt = Annotated[str, typer.Option("--why", help="Why (stored in the audit table).")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who asked (default: the OS user).")]
CanaryPolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="Canary policy YAML (default: the shipped one, 1 day a step)."),
]


def _fail(exc: Exception) -> typer.Exit:
    from faces.cli.exit_codes import EXIT_ERROR
    from faces.cli.render import wide_console

    print_error(wide_console(stderr=True), exc)
    return typer.Exit(EXIT_ERROR)


@canary_app.command("start")
def start_command(
    run_id: ExistingRunOpt,
    why: WhyOpt,
    policy: CanaryPolicyOpt = None,
    name: Annotated[str, typer.Option("--name", help="Canary name.")] = "",
    actor: ActorOpt = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Start a canary of the run's candidate at the policy's first step."""
    from application.canary import load_canary_policy, split_spec_from_settings, start_canary
    from application.database import open_repository
    from faces.cli.options import database_url as resolve_url
    from faces.cli.render import wide_console
    from shadoweval.errors import ShadowEvalError

    try:
        spec = split_spec_from_settings()
        loaded = load_canary_policy(policy)
        with open_repository(resolve_url(database_url)) as repo:
            canary = start_canary(
                repo, run_id=run_id, policy=loaded, spec=spec, name=name, actor=actor, why=why
            )
    except ShadowEvalError as exc:
        raise _fail(exc) from None
    wide_console().print(
        f"canary {canary.canary_id} started: step 0, candidate share {canary.candidate_share:g} "
        f"(split revision {canary.split_revision})",
        highlight=False,
    )


@canary_app.command("ingest")
def ingest_command(
    canary_id: CanaryArg,
    capture_log: Annotated[
        Path, typer.Option("--capture-log", help="The front end's capture-log directory.")
    ],
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Read the capture log's new lines into the canary's observations."""
    from application.canary import ingest_capture_log
    from application.database import open_repository
    from faces.cli.options import database_url as resolve_url
    from faces.cli.render import wide_console
    from shadoweval.errors import ShadowEvalError

    try:
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            report = ingest_capture_log(repo, canary_id, capture_log)
    except ShadowEvalError as exc:
        raise _fail(exc) from None
    arms = ", ".join(f"{arm} {n}" for arm, n in sorted(report.by_arm.items())) or "none"
    wide_console().print(
        f"{report.lines} lines read: {report.stored} observations stored ({arms}), "
        f"{report.duplicates} already stored, {report.unassigned} outside the split, "
        f"{report.outside_steps} outside the canary's steps, {report.rejected} rejected",
        highlight=False,
    )


@canary_app.command("rollback")
def rollback_command(
    canary_id: CanaryArg,
    why: WhyOpt,
    actor: ActorOpt = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Send every session back to the baseline at once and end the canary."""
    from application.canary import rollback_canary, split_spec_from_settings
    from application.database import open_repository
    from faces.cli.options import database_url as resolve_url
    from faces.cli.render import wide_console
    from shadoweval.errors import ShadowEvalError

    try:
        spec = split_spec_from_settings()
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            canary = rollback_canary(repo, canary_id, spec=spec, why=why, actor=actor)
    except ShadowEvalError as exc:
        raise _fail(exc) from None
    wide_console().print(
        f"canary {canary.canary_id} rolled back: candidate share 0 "
        f"(split revision {canary.split_revision})",
        highlight=False,
    )


@canary_app.command("status")
def status_command(
    canary_id: CanaryArg,
    as_json: JsonOpt = False,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Show the canary; exit 0 completed, 1 running, 2 rolled back."""
    from application.canary import canary_view, view_json
    from application.database import open_repository
    from faces.cli.options import database_url as resolve_url
    from faces.cli.render import wide_console
    from shadoweval.errors import ShadowEvalError

    try:
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            view = canary_view(repo, canary_id)
    except ShadowEvalError as exc:
        raise _fail(exc) from None
    body = view_json(view)
    console = wide_console()
    if as_json:
        typer.echo(json.dumps(body, indent=2))
    else:
        c = view.canary
        console.print(
            f"canary {c.canary_id} ({c.name}): {c.state.value}, step {c.step_index}, "
            f"candidate share {c.candidate_share:g}, split revision {c.split_revision}",
            highlight=False,
        )
        for step in view.steps:
            console.print(
                f"  step {step.step_index}: share {step.share:g} from "
                f"{step.started_at.isoformat()} — {step.outcome or 'running'}"
                f"{f', last verdict {step.last_decision}' if step.last_decision else ''}",
                highlight=False,
            )
        for entry in view.audit:
            console.print(
                f"  {entry.recorded_at.isoformat()} {entry.action.value} by {entry.actor}: "
                f"{entry.detail.get('why', '')}",
                highlight=False,
                markup=False,
            )
    codes = {"completed": 0, "running": 1, "rolled_back": 2}
    raise typer.Exit(codes[view.canary.state.value])


def register(app: typer.Typer) -> None:
    """Add the ``canary`` group to the CLI."""
    app.add_typer(canary_app, name="canary")
