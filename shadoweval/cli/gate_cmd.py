"""``shadow-eval gate``: the verdict of a run, as an exit status for CI.

With ``--wait`` the command polls while traffic accumulates: each poll re-evaluates the
run (workers may have added pairs) until the verdict cannot change — terminal (PROMOTE
or ROLLBACK), or a final HOLD at the sample cap ``sequential.n_max`` — or the wait runs
out, printing one progress line per poll on stderr. The exit status is that of the last
verdict: 0 PROMOTE, 1 HOLD, 2 ROLLBACK; 3 on any error.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shadoweval.cli.options import DatabaseUrlOpt, ExistingRunOpt, JsonOpt, PolicyOpt
from shadoweval.cli.render import print_error
from shadoweval.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.application.gating import GateResult
    from shadoweval.records import Coverage
    from shadoweval.storage import Repository, RunInfo

GATE_COMMAND = "shadow-eval gate"
"""What the verdict history and the policy audit log record as the asking command."""

DEFAULT_POLL_INTERVAL = "30s"

_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")

WaitOpt = Annotated[
    str | None,
    typer.Option(
        "--wait",
        help="Poll until the verdict cannot change (PROMOTE, ROLLBACK, or a final HOLD at "
        "the sample cap n_max), or until this much time has passed (90s, 15m, 2h, 1h30m "
        "or plain seconds); exit with the last verdict.",
    ),
]
PollIntervalOpt = Annotated[
    str,
    typer.Option("--poll-interval", help="Time between polls with --wait (same format)."),
]
CandidatesOpt = Annotated[
    bool,
    typer.Option(
        "--candidates",
        help="Gate every run of the run's candidate group (evaluate or replay run with "
        "several --candidate-url) and compare them: which are no worse, which is best; exit "
        "0 when one is no worse, 2 when all rolled back, else 1.",
    ),
]
JunitOpt = Annotated[
    Path | None,
    typer.Option("--junit", help="Also write the checks as JUnit XML (one case per check)."),
]


def parse_duration(text: str, option: str) -> float:
    """Seconds in a duration: ``90s``, ``15m``, ``2h``, ``1h30m``, ``1.5h`` or plain seconds.

    Raises:
        ConfigError: not a duration, or negative / not finite; the message names
            ``option`` and the value (``--wait '3x' is not a duration: ...``).
    """
    cleaned = text.strip().lower()
    seconds: float | None = None
    try:
        seconds = float(cleaned)
    except ValueError:
        if cleaned and _PART.sub("", cleaned) == "":
            seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(cleaned))
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(
            f"{option} {text!r} is not a duration: use e.g. 90s, 15m, 2h, 1h30m or plain "
            "seconds (>= 0)",
            field=option,
            value=text,
        )
    return seconds


def _format_s(seconds: float) -> str:
    """``1h02m``, ``4m05s``, ``12s`` or ``0.5s``: a short human duration."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _progress_line(poll: int, result: GateResult, note: str) -> str:
    verdict = result.verdict
    coverage = verdict.coverage
    return (
        f"gate run {verdict.run_id} poll {poll}: {verdict.decision.value.upper()} "
        f"(look {verdict.look}, {coverage.paired} pairs, coverage {coverage.share:.1%}) {note}"
    )


def _settled(result: GateResult) -> str:
    """Why no later poll can change ``result``'s verdict (``""`` when one can):
    :meth:`~shadoweval.application.gating.GateResult.settled`."""
    return result.settled()


def poll_verdict(
    repo: Repository,
    run: RunInfo,
    *,
    wait_s: float,
    poll_s: float,
    progress: Callable[[str], None],
    command: str = GATE_COMMAND,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> GateResult:
    """Gate ``run`` now and then every ``poll_s`` seconds until the verdict cannot change
    (terminal, or a final HOLD at the sample cap) or ``wait_s`` passed.

    Every poll whose data changed (the run's coverage counts: captured, replayed, paired
    ...) computes and stores a new verdict through :func:`~shadoweval.application.gating.gate_run`
    (the code path of a plain ``gate``). A poll on unchanged data keeps the previous
    verdict and stores nothing: asking again about the same sample is not a new look.
    The last poll happens when the wait runs out. A database error after the first poll
    is reported through ``progress`` and retried at the next poll.

    Returns:
        The last verdict's :class:`~shadoweval.application.gating.GateResult`.

    Raises:
        ShadowEvalError: the first poll, or the last one, failed.
    """
    from shadoweval.application.gating import gate_run
    from shadoweval.errors import StorageError

    deadline = clock() + wait_s
    last: GateResult | None = None
    seen: Coverage | None = None
    poll = 0
    while True:
        poll += 1
        failure: StorageError | None = None
        note = ""
        try:
            coverage = repo.coverage_counts(run.run_id)
            if last is not None and coverage == seen:
                note = "no new data, verdict kept;"
            else:
                last = gate_run(repo, run, command=command)
                seen = coverage
        except StorageError as exc:
            if last is None:
                raise
            failure = exc
        assert last is not None
        left = deadline - clock()
        settled = _settled(last)
        if failure is not None:
            if left <= 0:
                raise failure
            progress(f"gate run {run.run_id} poll {poll}: database error ({failure}); retrying")
        elif settled:
            progress(_progress_line(poll, last, f"{note} {settled}".strip()))
            return last
        elif left <= 0:
            progress(_progress_line(poll, last, f"{note} wait over".strip()))
            return last
        else:
            wait = min(poll_s, left)
            progress(
                _progress_line(
                    poll, last, f"{note} next poll in {_format_s(wait)}, {_format_s(left)} left"
                )
            )
        sleep(min(poll_s, left))


def gate_command(
    run_id: ExistingRunOpt,
    database_url: DatabaseUrlOpt = None,
    policy: PolicyOpt = None,
    as_json: JsonOpt = False,
    junit: JunitOpt = None,
    wait: WaitOpt = None,
    poll_interval: PollIntervalOpt = DEFAULT_POLL_INTERVAL,
    candidates: CandidatesOpt = False,
) -> None:
    """Compute and store the verdict of a run under its frozen policy.

    Exit status: 0 PROMOTE, 1 HOLD, 2 ROLLBACK, 3 error. PROMOTE and ROLLBACK are terminal:
    once reached, later calls return the same verdict. ``--policy`` is only a check: a
    policy other than the run's is an error (a different policy means a new run). With
    ``--wait`` the run is re-evaluated every ``--poll-interval`` until the verdict cannot
    change (terminal, or a final HOLD at the sample cap) or the wait runs out (one progress
    line per poll on stderr). With ``--candidates`` every run of the run's candidate group is
    gated and the candidates are compared (``shadoweval.application.candidates``).
    """
    from shadoweval.application.database import open_repository
    from shadoweval.application.gating import gate_run
    from shadoweval.application.runs import check_presented_policy
    from shadoweval.cli.exit_codes import EXIT_CODES, EXIT_ERROR
    from shadoweval.cli.options import database_url as resolve_url
    from shadoweval.cli.render import print_result, print_warnings, wide_console
    from shadoweval.errors import ShadowEvalError

    err = wide_console(stderr=True)
    out = wide_console(stderr=as_json)
    try:
        wait_s = None if wait is None else parse_duration(wait, "--wait")
        poll_s = parse_duration(poll_interval, "--poll-interval")
        if poll_s <= 0:
            raise ConfigError(
                f"--poll-interval {poll_interval!r} must be > 0",
                field="--poll-interval",
                value=poll_interval,
            )
        if junit is not None and junit.is_dir():
            raise ConfigError(
                f"--junit {str(junit)!r} is a directory; give the path of the XML file to write",
                field="--junit",
                value=str(junit),
            )
        with open_repository(resolve_url(database_url), upgrade=False) as repo:
            run = repo.get_run(run_id)
            if run is None:
                raise ShadowEvalError(f"run {run_id!r} not found{_group_hint(repo, run_id)}")
            check_presented_policy(repo, run, policy, command=GATE_COMMAND)
            if candidates:
                _gate_candidates(repo, run, out, as_json=as_json, wait=wait, junit=junit)
            if wait_s is None:
                result = gate_run(repo, run, command=GATE_COMMAND)
            else:
                result = poll_verdict(
                    repo,
                    run,
                    wait_s=wait_s,
                    poll_s=poll_s,
                    progress=lambda line: typer.echo(line, err=True),
                )
    except ShadowEvalError as exc:
        print_error(err, exc)
        raise typer.Exit(EXIT_ERROR) from None
    except KeyboardInterrupt:
        print_error(err, "interrupted before a decision")
        raise typer.Exit(EXIT_ERROR) from None
    print_warnings(err, result.warnings)
    print_result(out, result.summary, result.verdict)
    if result.reused_terminal:
        out.print("(terminal verdict: returned as stored)")
    elif result.reused_look:
        out.print(
            f"(look {result.verdict.look}'s verdict, as stored: each checkpoint is evaluated "
            "once; the next look comes with the next checkpoint)"
        )
    if junit is not None:
        from shadoweval.cli.junit import write_junit

        try:
            write_junit(result.verdict, junit)
        except OSError as exc:
            print_error(
                err,
                f"cannot write --junit {str(junit)!r}: {exc.strerror or exc} "
                f"(the verdict {result.verdict.decision.value.upper()} was stored)",
            )
            raise typer.Exit(EXIT_ERROR) from None
    if as_json:
        typer.echo(result.verdict.model_dump_json(indent=2))
    raise typer.Exit(EXIT_CODES[result.verdict.decision])


def _group_hint(repo: Repository, name: str) -> str:
    """``; 'g' is a candidate group: its runs are g-a, g-b (gate one with --candidates)``
    when ``name`` is a group id, else ``""``."""
    members = sorted(
        r.run_id for r in repo.list_runs() if r.settings.get("candidate_group") == name
    )
    if not members:
        return ""
    return (
        f"; {name!r} is a candidate group: its runs are {', '.join(members)} (gate one of "
        "them with --candidates to gate and compare them all)"
    )


def _gate_candidates(
    repo: Repository,
    run: RunInfo,
    out: Console,
    *,
    as_json: bool,
    wait: str | None,
    junit: Path | None,
) -> None:
    """``gate --candidates``: gate the group, print it side by side (JSON with
    ``--json``), exit with the overall decision."""
    import json

    from shadoweval.application.candidates import gate_candidates, overall_decision
    from shadoweval.cli.exit_codes import EXIT_CODES
    from shadoweval.cli.render import print_candidates

    for option, value in (("--wait", wait), ("--junit", junit)):
        if value is not None:
            raise ConfigError(
                f"{option} cannot be combined with --candidates",
                field=option,
                value=str(value),
            )
    gated, comparison = gate_candidates(repo, run, command=GATE_COMMAND)
    if len(gated) == 1:
        out.print(
            f"run {run.run_id} is not in a candidate group (evaluate or replay run with several "
            "--candidate-url make one): one candidate only",
            highlight=False,
        )
    decision = overall_decision(comparison)
    rows = [(name, member, gate.verdict) for name, member, gate in gated]
    print_candidates(out, rows, comparison, decision)
    if as_json:
        report = {
            "decision": decision.value,
            "comparison": comparison.as_dict(),
            "candidates": [
                {"name": name, "run_id": member.run_id, "decision": verdict.decision.value,
                 "reasons": list(verdict.reasons)}
                for name, member, verdict in rows
            ],
        }  # fmt: skip
        typer.echo(json.dumps(report, indent=2, ensure_ascii=False))
    raise typer.Exit(EXIT_CODES[decision])


def register(app: typer.Typer) -> None:
    """Add ``gate`` to the CLI."""
    app.command("gate")(gate_command)
