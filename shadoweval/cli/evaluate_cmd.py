"""``shadow-eval evaluate``: replay a capture log against a candidate, score, gate, report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from shadoweval.cli.option_groups import takes_option_groups
from shadoweval.cli.options import (
    DatabaseUrlOpt,
    EncoderOptions,
    JsonOpt,
    PolicyOpt,
    ProgressOpt,
    ReplayLoadOptions,
    RunIdOpt,
    RunNameOpt,
    RunTargetOptions,
    SendPairsOpt,
)
from shadoweval.cli.render import print_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from shadoweval.application.candidates import CandidatesEvaluation
    from shadoweval.application.evaluation import EvaluationResult
    from shadoweval.config import Settings

logger = logging.getLogger(__name__)

CaptureLogOpt = Annotated[
    Path, typer.Option("--capture-log", help="Capture log (a segment file or directory).")
]
ReportOpt = Annotated[Path | None, typer.Option("--report", help="Write the JSON report here.")]
JudgeOpt = Annotated[
    bool,
    typer.Option(
        "--judge",
        help="After scoring, send the changed pairs (within the policy's budget) to the "
        "judge configured by SHADOWEVAL_JUDGE__* before the gate; needs --send-pairs or "
        "SHADOWEVAL_JUDGE__SEND_PAIRS=true.",
    ),
]


def build_settings(
    *,
    database_url: str | None,
    load: ReplayLoadOptions,
    backend: str | None = None,
) -> Settings:
    """Settings from the environment with the command-line overrides applied
    (:func:`shadoweval.config.load_settings`; an option not given is ``None``).

    Raises:
        ConfigError: an environment variable or override is invalid (names the field and
            value), or a ``SHADOWEVAL_*`` variable names no setting.
    """
    from shadoweval.config import load_settings

    return load_settings(
        {
            "replay": load.settings_overrides(),
            "database": {"url": database_url or None},
            "compare": {"backend": backend},
        }
    )


def ensure_writable(path: Path) -> None:
    """Fail before a long run, not after it, when ``path`` cannot be written.

    Raises:
        ConfigError: the parent directory cannot be created or is not writable.
    """
    import os

    from shadoweval.errors import ConfigError

    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--report {path}: cannot create {parent}: {exc}", field="report"
        ) from exc
    if not os.access(parent, os.W_OK) or path.is_dir():
        raise ConfigError(
            f"--report {path}: not a writable file path", field="report", value=str(path)
        )


@takes_option_groups
def evaluate_command(
    capture_log: CaptureLogOpt,
    targets: RunTargetOptions,
    policy: PolicyOpt = None,
    database_url: DatabaseUrlOpt = None,
    run_id: RunIdOpt = None,
    name: RunNameOpt = None,
    report: ReportOpt = None,
    load: ReplayLoadOptions = ReplayLoadOptions(),
    scoring: EncoderOptions = EncoderOptions(),
    progress: ProgressOpt = True,
    as_json: JsonOpt = False,
    judge: JudgeOpt = False,
    send_pairs: SendPairsOpt = False,
) -> None:
    """Replay a capture log against a candidate, score every pair, (judge,) gate, and report.

    Several --candidate-url: one run per candidate on the same requests, each gated as
    alone, then compared side by side (no worse: Holm; best: paired sign tests,
    Bonferroni). Exit status: 0 PROMOTE, 1 HOLD, 2 ROLLBACK, 3 error; with several
    candidates 0 when one is no worse, 2 when all roll back, else 1.
    """
    from rich.console import Console

    from shadoweval.application.candidates import evaluate_candidates, same_url_warnings
    from shadoweval.application.evaluation import EvaluationRequest, evaluate
    from shadoweval.cli.exit_codes import EXIT_CODES
    from shadoweval.cli.render import exit_on_error, print_result, print_warnings, wide_console

    err = Console(stderr=True, soft_wrap=True)
    out = wide_console(stderr=as_json)
    with exit_on_error(err, FileNotFoundError):
        if report is not None:
            ensure_writable(report)
        settings = build_settings(database_url=database_url, load=load, backend=scoring.backend)
        candidates = targets.candidates()
        print_warnings(err, same_url_warnings(candidates))
        request = EvaluationRequest(
            capture_log=capture_log,
            run=targets.run_request(
                policy_path=policy,
                run_name=name,
                run_id=run_id,
                **scoring.run_fields(),
            ),
            device=scoring.device,
            progress=progress,
            judge=judge,
            send_pairs=send_pairs,
        )
        if len(candidates) > 1:
            several = evaluate_candidates(request, candidates, settings, console=err)
        else:
            result = evaluate(request, settings, console=err)
    if len(candidates) > 1:
        _finish_several(out, err, several, report, as_json)
    print_warnings(err, result.gate.warnings)
    if result.judge is not None and result.judge.budget_message:
        err.print(f"judge: {result.judge.budget_message}", highlight=False, markup=False)
    print_result(out, result.gate.summary, result.gate.verdict)
    _print_replay(out, err, result)
    _write_report(out, err, report, result.write_report, "the verdict is")
    if as_json:
        typer.echo(result.gate.verdict.model_dump_json(indent=2))
    raise typer.Exit(EXIT_CODES[result.gate.verdict.decision])


def _write_report(
    out: Console, err: Console, report: Path | None, write: Callable[[Path], None], stored: str
) -> None:
    """Write ``--report`` with ``write``; a failed write exits 3 (``EXIT_ERROR``) saying what
    is stored."""
    from shadoweval.cli.exit_codes import EXIT_ERROR

    if report is None:
        return
    try:
        write(report)
    except OSError as exc:
        print_error(err, f"{stored} stored, but the report could not be written: {exc}")
        raise typer.Exit(EXIT_ERROR) from None
    out.print(f"report written to {report}")


def _finish_several(
    out: Console,
    err: Console,
    several: CandidatesEvaluation,
    report: Path | None,
    as_json: bool,
) -> NoReturn:
    """Print the candidates side by side, write the report, and exit with the overall
    decision (:func:`shadoweval.application.candidates.overall_decision`)."""
    import json

    from shadoweval.cli.exit_codes import EXIT_CODES
    from shadoweval.cli.render import print_candidates, print_warnings

    for _, result in several.results:
        print_warnings(err, result.gate.warnings)
    rows = [(name, r.run, r.gate.verdict) for name, r in several.results]
    print_candidates(out, rows, several.comparison, several.decision)
    for name, result in several.results:
        out.print(f"[bold]{name}[/]: ", end="")
        _print_replay(out, err, result)
    _write_report(out, err, report, several.write_report, "the verdicts are")
    if as_json:
        typer.echo(json.dumps(several.report(), indent=2, ensure_ascii=False))
    raise typer.Exit(EXIT_CODES[several.decision])


def _print_replay(out: Console, err: Console, result: EvaluationResult) -> None:
    """The replay's load warnings (on ``err``) and its one summary line (on ``out``): sent,
    skipped, wall time, load, errors, rejected lines, cache hits, stage times, backend."""
    from shadoweval.cli.render import load_text, load_warnings, print_warnings

    rep = result.replay
    load = rep.as_dict()
    print_warnings(err, load_warnings(load))
    out.print(
        f"replayed {sum(rep.sent.values())} (skipped {sum(rep.skipped.values())}) "
        f"in {rep.wall_s:.1f}s ({load_text(load)}"
        + f"); errors {dict(rep.errors) or 0}; rejected lines {dict(rep.rejected) or 0}; "
        + (f"cache hits {dict(rep.cache_hits)}; " if rep.cache_hits else "")
        + f"stages {result.stages_s}; embedding backend {result.compare.backend or '-'}"
    )


def register(app: typer.Typer) -> None:
    """Add ``evaluate`` to the CLI."""
    app.command("evaluate")(evaluate_command)
