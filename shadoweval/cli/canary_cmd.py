"""``shadow-eval canary``: a candidate's rollout on live traffic through the Envoy front's split.

* ``canary start --run ID [--policy FILE] [--name N] --why TEXT``: writes the split for the
  canary policy's first step into the front end's split directory (a new revision; the
  front end's settings, ``SHADOWEVAL_ENVOY__CANARY__*``, say where) and records the canary
  with its ``canary_started`` audit row (who: the OS user, or ``--actor``).
* ``canary ingest ID --capture-log DIR|kafka://HOST:PORT/TOPIC``: reads what the front
  end's capture log (or the capture topic) gained since the last call into the canary's
  observations (the arm that served each request).
* ``canary run ID --capture-log DIR [--interval S] [--once]``: the controller. Every
  ``--interval`` seconds it ingests the capture log, judges the current step under the
  policy frozen with the canary and acts: advance on PROMOTE (the next share, a new split
  revision), hold on HOLD, roll back at once on ROLLBACK. It stops when the canary is
  completed or rolled back (or on Ctrl-C / SIGTERM) and exits like ``status``.
* ``canary sample ID --capture-log DIR --out sheet.csv [--per-arm N]``: a blind
  spot-check sheet (answers of both arms, shuffled, redacted, no arm column) to rate.
* ``canary rate ID --file F --rater NAME``: import spot-check ratings (``exchange_id``,
  ``rating`` 1–10, optional ``rater`` / ``note``) of answers the canary observed.
* ``canary rollback ID --why TEXT``: share 0 at once (a new split revision), then the
  canary ends ``rolled_back`` with who and why audited.
* ``canary status ID [--json]``: the canary, its steps, what was observed per arm and its
  audit trail. Exit 0 when completed, 1 while running, 2 when rolled back (the gate's
  PROMOTE/HOLD/ROLLBACK codes), so a CI step can wait on it.

Every error exits 3 with a message naming the field and value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from shadoweval.cli.options import DatabaseUrlOpt, ExistingRunOpt, JsonOpt
from shadoweval.cli.render import exit_on_error, print_error

canary_app = typer.Typer(
    name="canary",
    help="Roll a candidate out on live traffic in steps through the Envoy front's split: "
    "start, run (the controller), ingest, rate, rollback, status.",
    no_args_is_help=True,
)

CanaryArg = Annotated[str, typer.Argument(help="The canary id.")]
WhyOpt = Annotated[str, typer.Option("--why", help="Why (stored in the audit table).")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who asked (default: the OS user).")]
CanaryPolicyOpt = Annotated[
    Path | None,
    typer.Option("--policy", help="Canary policy YAML (default: the shipped one, 1 day a step)."),
]

CaptureLogOpt = Annotated[
    str,
    typer.Option(
        "--capture-log",
        "--source",
        help="The front end's capture-log directory, or the capture topic as "
        "kafka://HOST:PORT/TOPIC (read in the canary's own consumer group).",
    ),
]
_EXIT_OF_STATE = {"completed": 0, "running": 1, "rolled_back": 2}


def _tally(counts: Mapping[str, int]) -> str:
    """``"a 3, b 5"``: each key and its count, keys sorted (``""`` when there are none)."""
    return ", ".join(f"{key} {n}" for key, n in sorted(counts.items()))


@canary_app.command("start")
def start_command(
    run_id: ExistingRunOpt,
    why: WhyOpt,
    policy: CanaryPolicyOpt = None,
    name: Annotated[str, typer.Option("--name", help="Canary name.")] = "",
    actor: ActorOpt = None,
    without_promote: Annotated[
        bool,
        typer.Option(
            "--without-promote",
            help="Start although the run's latest gate verdict is not PROMOTE (audited).",
        ),
    ] = False,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Start a canary of the run's candidate (its gate verdict must be PROMOTE) at the
    policy's first step."""
    from shadoweval.application.canary import (
        load_canary_policy,
        split_spec_from_settings,
        start_canary,
    )
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    with exit_on_error(wide_console(stderr=True)):
        spec = split_spec_from_settings()
        loaded = load_canary_policy(policy)
        with open_repository(resolve_url(database_url)) as repo:
            canary = start_canary(
                repo,
                run_id=run_id,
                policy=loaded,
                spec=spec,
                name=name,
                actor=actor,
                why=why,
                require_promote=not without_promote,
            )
    wide_console().print(
        f"canary {canary.canary_id} started: step 0, candidate share {canary.candidate_share:g} "
        f"(split revision {canary.split_revision})",
        highlight=False,
    )


@canary_app.command("ingest")
def ingest_command(
    canary_id: CanaryArg,
    capture_log: CaptureLogOpt,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Read the capture log's new lines into the canary's observations."""
    from shadoweval.application.canary import ingest_source
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    with (
        exit_on_error(wide_console(stderr=True)),
        open_repository(resolve_url(database_url), upgrade=False) as repo,
    ):
        report = ingest_source(repo, canary_id, capture_log)
    wide_console().print(
        f"{report.lines} lines read: {report.stored} observations stored "
        f"({_tally(report.by_arm) or 'none'}), "
        f"{report.duplicates} already stored, {report.unassigned} outside the split, "
        f"{report.outside_steps} outside the canary's steps, {report.rejected} rejected",
        highlight=False,
    )


@canary_app.command("run")
def run_command(
    canary_id: CanaryArg,
    capture_log: CaptureLogOpt,
    interval_s: Annotated[
        float, typer.Option("--interval", help="Seconds between ticks (> 0).")
    ] = 60.0,
    once: Annotated[bool, typer.Option("--once", help="One tick, then exit.")] = False,
    actor: ActorOpt = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Drive the canary: ingest, judge the step, advance / hold / roll back, repeat."""
    import signal
    import threading

    from shadoweval.application.canary import TickReport, run_canary, split_spec_from_settings
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    console = wide_console()
    err_console = wide_console(stderr=True)
    stop = threading.Event()

    def show(report: TickReport) -> None:
        shares = (
            f"share {report.from_share:g} → {report.to_share:g}"
            if report.to_share != report.from_share
            else f"share {report.to_share:g}"
        )
        arms = ""
        if report.ingest is not None:
            arms = f", {report.ingest.stored} new observations"
        canary = report.canary
        if report.action == "none":
            console.print(
                f"canary {canary.canary_id} is {canary.state.value} already (step "
                f"{canary.step_index}, {shares}): nothing to do",
                highlight=False,
            )
            return
        reasons = "; ".join(report.reasons)
        console.print(
            f"canary {canary.canary_id} step {report.step_judged}: "
            f"{report.action} ({shares}{arms}){f' — {reasons}' if reasons else ''}",
            highlight=False,
            markup=False,
        )

    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with exit_on_error(err_console):
            spec = split_spec_from_settings()
            with open_repository(resolve_url(database_url), upgrade=False) as repo:
                canary = run_canary(
                    repo,
                    canary_id,
                    spec=spec,
                    capture_log=capture_log,
                    interval_s=interval_s,
                    stop=stop,
                    max_ticks=1 if once else None,
                    on_tick=show,
                    on_error=lambda exc: print_error(err_console, exc),
                    actor=actor,
                )
    except KeyboardInterrupt:
        console.print("stopped; the canary stays where it is", highlight=False)
        raise typer.Exit(_EXIT_OF_STATE["running"]) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if stop.is_set() and not canary.state.terminal:
        console.print("stopped (SIGTERM); the canary stays where it is", highlight=False)
    raise typer.Exit(_EXIT_OF_STATE[canary.state.value])


@canary_app.command("sample")
def sample_command(
    canary_id: CanaryArg,
    capture_log: Annotated[
        Path, typer.Option("--capture-log", help="The front end's capture-log directory.")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="The sheet to write: .csv or .jsonl (not overwritten).")
    ],
    per_arm: Annotated[int, typer.Option("--per-arm", help="Answers per arm (>= 1).")] = 30,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the draw.")] = 0,
    step: Annotated[
        int | None, typer.Option("--step", help="Only this step's requests (default: all).")
    ] = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Write a blind spot-check sheet: answers of both arms, shuffled, to rate 1-10."""
    from shadoweval.application.canary import rating_sheet_bytes, spot_check_sheet
    from shadoweval.application.database import open_repository
    from shadoweval.application.redaction import body_redaction
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console
    from shadoweval.errors import ConfigError

    with exit_on_error(wide_console(stderr=True)):
        fmt = out.suffix.lower().lstrip(".")
        if fmt not in ("csv", "jsonl"):
            raise ConfigError(
                f"--out {str(out)!r}: the sheet is .csv or .jsonl", field="out", value=str(out)
            )
        if out.exists():
            raise ConfigError(
                f"--out {str(out)!r} exists; it is not overwritten", field="out", value=str(out)
            )
        redaction = body_redaction()
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            sheet = spot_check_sheet(
                repo,
                canary_id,
                capture_log,
                per_arm=per_arm,
                seed=seed,
                step_index=step,
                redact=redaction.redact,
            )
        out.write_bytes(rating_sheet_bytes(sheet.rows, fmt))
    wide_console().print(
        f"{len(sheet.rows)} answers written to {out} (picked: "
        f"{_tally(sheet.picked_per_arm) or 'none'}; "
        f"{sheet.missing} no longer in the capture log); fill the rating column (1-10) and "
        f"import it with: shadow-eval canary rate {canary_id} --file {out} --rater NAME",
        highlight=False,
        markup=False,
    )


@canary_app.command("rate")
def rate_command(
    canary_id: CanaryArg,
    file: Annotated[
        Path,
        typer.Option(
            "--file", help="CSV, JSONL or Parquet with exchange_id, rating (1–10), rater, note."
        ),
    ],
    rater: Annotated[
        str, typer.Option("--rater", help="Who rated (for rows without a rater cell).")
    ],
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Import spot-check ratings of answers the canary observed."""
    from shadoweval.application.canary import import_canary_ratings
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    with (
        exit_on_error(wide_console(stderr=True)),
        open_repository(resolve_url(database_url), upgrade=False) as repo,
    ):
        result = import_canary_ratings(repo, canary_id, file, rater=rater)
    imported = result.imported
    console = wide_console()
    console.print(
        f"{result.stored} ratings stored, {len(imported.rejected)} rows rejected "
        f"({result.skipped} already kept), {imported.unrated} rows without a rating",
        highlight=False,
    )
    for row in imported.rejected[:10]:
        console.print(f"  rejected ({row.reason}): {row.detail}", highlight=False, markup=False)


@canary_app.command("rollback")
def rollback_command(
    canary_id: CanaryArg,
    why: WhyOpt,
    actor: ActorOpt = None,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Send every session back to the baseline at once and end the canary."""
    from contextlib import ExitStack

    from shadoweval.application.canary import (
        rollback_canary,
        rollback_without_database,
        split_spec_from_settings,
    )
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console
    from shadoweval.errors import ConfigError, StorageError

    with exit_on_error(wide_console(stderr=True)):
        spec = split_spec_from_settings()
        if not why.strip():
            raise ConfigError("why = '': a rollback must say why", field="why", value=why)
        with ExitStack() as stack:
            try:
                repo = stack.enter_context(
                    open_repository(resolve_url(database_url), upgrade=False)
                )
            except StorageError as exc:
                # the database is unreachable: the split still goes to share 0 at once
                raise rollback_without_database(spec, canary_id, exc) from exc
            canary = rollback_canary(repo, canary_id, spec=spec, why=why, actor=actor)
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
    from shadoweval.application.canary import canary_view, view_json
    from shadoweval.application.database import open_repository
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import wide_console

    with (
        exit_on_error(wide_console(stderr=True)),
        open_repository(resolve_url(database_url), upgrade=False) as repo,
    ):
        view = canary_view(repo, canary_id)
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
        if view.rejected_lines:
            kept = _tally(view.rejected_lines)
            console.print(
                f"  capture-log lines kept as rejected records: {kept}",
                highlight=False,
                markup=False,
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
    raise typer.Exit(_EXIT_OF_STATE[view.canary.state.value])


def register(app: typer.Typer) -> None:
    """Add the ``canary`` group to the CLI."""
    app.add_typer(canary_app, name="canary")
