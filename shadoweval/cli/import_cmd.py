"""``shadow-eval import``: recorded tables → capture log.

The table options are declared once in :mod:`shadoweval.cli.table_options` (shared with
``shadow-eval mock-llm``); the import itself is
:func:`shadoweval.application.importing.import_table`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.cli.render import exit_on_error
from shadoweval.cli.table_options import TableOptions, with_table_options

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.application.importing import ImportReport


IMPORT_HELP = (
    "Import a recorded table (benchmark or exported model outputs) as a capture log."
    "\n\n"
    "Every row becomes one exchange: the request the model was sent and its recorded answer. "
    "Rows that cannot be mapped are counted by reason and appended to OUT.rejected.jsonl "
    "beside the capture log. Sampling parameters are recorded only when given here."
    "\n\n"
    "Existing LLM logs import through trace presets: --preset otel_genai (OpenTelemetry "
    "GenAI spans, OTLP/JSON), --preset langfuse (Langfuse generations), --preset litellm "
    "(LiteLLM StandardLoggingPayload JSON Lines). They are redacted, tagged and their "
    "session ids hashed with the capture settings, as the sidecar would have done."
    "\n\n"
    "Exit status: 0 = rows written; 3 = nothing written, bad options or an unreadable table."
)


@with_table_options
def import_command(
    table: TableOptions,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Capture-log directory to write (created if missing)."),
    ],
    stream: Annotated[
        bool,
        typer.Option(
            "--stream/--no-stream",
            help="Record requests as streamed (with stream_options.include_usage) or not.",
        ),
    ] = True,
    temperature: Annotated[
        float | None,
        typer.Option("--temperature", help="Record this temperature in every request."),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option("--top-p", help="Record this top_p in every request.")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="Record this max_tokens in every request.")
    ] = None,
    gzip: Annotated[bool, typer.Option("--gzip", help="Gzip the capture-log segments.")] = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="Write at most N exchanges (the first N mapped)."),
    ] = None,
    redact: Annotated[
        bool | None,
        typer.Option(
            "--redact/--no-redact",
            help="Apply the capture's body redaction (SHADOWEVAL_CAPTURE__BODY_REDACTION__*). "
            "Default: on for trace presets (otel_genai, langfuse, litellm), off for tables.",
        ),
    ] = None,
) -> None:
    """Import a recorded table as a capture log (see ``IMPORT_HELP``)."""
    from rich.console import Console

    from shadoweval.application.importing import ImportRequest, import_table

    console = Console()
    with exit_on_error(console, FileNotFoundError):
        report = import_table(
            ImportRequest(
                table=table.source(),
                out=out,
                stream=stream,
                sampling={"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens},
                compress=gzip,
                redact=redact,
                limit=limit,
            )
        )
    _print_report(console, report)
    if report.written == 0:
        raise typer.Exit(EXIT_ERROR)


def _print_report(console: Console, report: ImportReport) -> None:
    from rich.table import Table

    summary = Table(title="shadow-eval import", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("files", str(len(report.files)))
    summary.add_row("rows read", str(report.rows_read))
    summary.add_row("written", str(report.written))
    summary.add_row("rejected", str(len(report.rejected)))
    if report.over_limit:
        summary.add_row("not written (over --limit)", str(report.over_limit))
    summary.add_row("redacted", str(report.redacted))
    summary.add_row("duplicate keys renamed", str(report.renamed_keys))
    summary.add_row("capture log", str(report.out_dir))
    console.print(summary)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    by_reason = report.rejected_by_reason()
    if by_reason:
        reasons = Table(title="rejected by reason")
        reasons.add_column("reason")
        reasons.add_column("rows", justify="right")
        for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
            reasons.add_row(reason, str(count))
        console.print(reasons)
        console.print(f"rejected rows written to {report.rejected_path}", highlight=False)
    if report.renamed_keys:
        console.print(
            f"{report.renamed_keys} rows repeated an earlier row's key (the same prompt, or "
            "the same --id-col value) and were kept under a renamed key (~2, ~3, …)",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    """Add the ``import`` command to the ``shadow-eval`` app."""
    app.command("import", help=IMPORT_HELP)(import_command)
