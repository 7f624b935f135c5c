"""``shadow-eval import``: recorded tables → capture log; and the shared table options.

The table options (``--preset``, ``--input``, ``--prompts``, the explicit column mapping)
are declared once here as ``Annotated`` option types and parsed once by
:class:`TableOptions`; ``shadow-eval mock-llm`` reuses both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from faces.cli.exit_codes import EXIT_ERROR
from faces.cli.render import print_error

if TYPE_CHECKING:
    from rich.console import Console

    from shadoweval.tables import LoadResult, TableFormat, TableMapping

# ------------------------------------------------------------------ shared option types

_T = "Table"
_M = "Column mapping (instead of --preset)"

PresetOpt = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="Built-in mapping: alpaca_eval, mt_bench (first turns) or bfcl.",
        rich_help_panel=_T,
    ),
]
InputOpt = Annotated[
    Path,
    typer.Option(
        "--input",
        "-i",
        help="Outputs table: a file (JSON array, JSON Lines, CSV, Parquet) or a directory of them.",
        rich_help_panel=_T,
    ),
]
PromptsOpt = Annotated[
    Path | None,
    typer.Option(
        "--prompts",
        help="Prompts table joined to the outputs (mt_bench: question.jsonl; bfcl: data/).",
        rich_help_panel=_T,
    ),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Force the file format: json, jsonl, csv, tsv, parquet.",
        rich_help_panel=_T,
    ),
]
PromptColOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-col", help="Column with the prompt text (one user message).", rich_help_panel=_M
    ),
]
MessagesColOpt = Annotated[
    str | None,
    typer.Option("--messages-col", help="Column with an OpenAI message list.", rich_help_panel=_M),
]
SystemColOpt = Annotated[
    str | None,
    typer.Option("--system-col", help="Column with a system prompt.", rich_help_panel=_M),
]
OutputColOpt = Annotated[
    str | None,
    typer.Option("--output-col", help="Column with the model's answer.", rich_help_panel=_M),
]
OutputFormatOpt = Annotated[
    str,
    typer.Option(
        "--output-format",
        help="Answer format: text, openai (tool_calls list) or bfcl ({name: args} list).",
        rich_help_panel=_M,
    ),
]
TaskTypeColOpt = Annotated[
    str | None,
    typer.Option("--task-type-col", help="Column with the task type.", rich_help_panel=_M),
]
TaskTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--task-type", help="Task type for every row (or for null cells).", rich_help_panel=_M
    ),
]
ModelColOpt = Annotated[
    str | None,
    typer.Option("--model-col", help="Column with the model name.", rich_help_panel=_M),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model name for every row (or for null cells).", rich_help_panel=_M
    ),
]
IdColOpt = Annotated[
    str | None,
    typer.Option(
        "--id-col", help="Column with a row id (default: a prompt hash).", rich_help_panel=_M
    ),
]
LatencyColOpt = Annotated[
    str | None,
    typer.Option("--latency-col", help="Column with end-to-end latency.", rich_help_panel=_M),
]
TtftColOpt = Annotated[
    str | None,
    typer.Option("--ttft-col", help="Column with time to first token.", rich_help_panel=_M),
]
ItlColOpt = Annotated[
    str | None,
    typer.Option("--itl-col", help="Column with mean inter-token latency.", rich_help_panel=_M),
]
LatencyUnitOpt = Annotated[
    str | None,
    typer.Option(
        "--latency-unit",
        help="Unit of the timing columns: s or ms (required with a timing column).",
        rich_help_panel=_M,
    ),
]
PromptTokensColOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-tokens-col", help="Column with prompt token counts.", rich_help_panel=_M
    ),
]
CompletionTokensColOpt = Annotated[
    str | None,
    typer.Option(
        "--completion-tokens-col", help="Column with completion token counts.", rich_help_panel=_M
    ),
]
ToolsColOpt = Annotated[
    str | None,
    typer.Option("--tools-col", help="Column with tool schemas.", rich_help_panel=_M),
]
RequestFieldsColOpt = Annotated[
    str | None,
    typer.Option(
        "--request-fields-col",
        help="Column with a JSON object of further request fields (response_format, ...).",
        rich_help_panel=_M,
    ),
]
ToolsFormatOpt = Annotated[
    str,
    typer.Option("--tools-format", help="Tool schema format: openai or bfcl.", rich_help_panel=_M),
]

_COLUMN_OPTIONS = {
    "prompt_col": "--prompt-col",
    "messages_col": "--messages-col",
    "system_col": "--system-col",
    "output_col": "--output-col",
    "task_type_col": "--task-type-col",
    "task_type": "--task-type",
    "model_col": "--model-col",
    "model": "--model",
    "id_col": "--id-col",
    "latency_col": "--latency-col",
    "ttft_col": "--ttft-col",
    "itl_col": "--itl-col",
    "latency_unit": "--latency-unit",
    "prompt_tokens_col": "--prompt-tokens-col",
    "completion_tokens_col": "--completion-tokens-col",
    "tools_col": "--tools-col",
    "request_fields_col": "--request-fields-col",
}


@dataclass(frozen=True, slots=True)
class TableOptions:
    """The table options of ``import`` and ``mock-llm``, parsed in one place."""

    input: Path
    preset: str | None = None
    prompts: Path | None = None
    format: str | None = None
    prompt_col: str | None = None
    messages_col: str | None = None
    system_col: str | None = None
    output_col: str | None = None
    output_format: str = "text"
    task_type_col: str | None = None
    task_type: str | None = None
    model_col: str | None = None
    model: str | None = None
    id_col: str | None = None
    latency_col: str | None = None
    ttft_col: str | None = None
    itl_col: str | None = None
    latency_unit: str | None = None
    prompt_tokens_col: str | None = None
    completion_tokens_col: str | None = None
    tools_col: str | None = None
    tools_format: str = "openai"
    request_fields_col: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TableOptions:
        """Pick the table options out of a command's parameters (``dict(locals())``)."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})

    def mapping(self) -> TableMapping | None:
        """The explicit mapping, or ``None`` with ``--preset``.

        Raises:
            TableMappingError: a preset combined with column options, neither given, or an
                invalid mapping (the message names the option).
        """
        from pydantic import ValidationError

        from shadoweval.errors import TableMappingError
        from shadoweval.tables import TableMapping

        given = {name: getattr(self, name) for name in _COLUMN_OPTIONS}
        given = {k: v for k, v in given.items() if v is not None}
        if self.preset is not None:
            if given or self.output_format != "text" or self.tools_format != "openai":
                names = [_COLUMN_OPTIONS.get(k, k) for k in given] or [
                    "--output-format/--tools-format"
                ]
                raise TableMappingError(f"--preset cannot be combined with {', '.join(names)}")
            return None
        if self.output_col is None:
            raise TableMappingError(
                "give --preset, or an explicit mapping: "
                "--output-col and --prompt-col or --messages-col"
            )
        values: dict[str, Any] = {
            **given,
            "output_format": self.output_format,
            "tools_format": self.tools_format,
        }
        try:
            return TableMapping.model_validate(values)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"])
                option = _COLUMN_OPTIONS.get(
                    loc, "--" + loc.replace("_", "-") if loc else "mapping"
                )
                problems.append(f"{option}: {err['msg']}")
            raise TableMappingError("invalid column mapping: " + "; ".join(problems)) from None

    def load(self) -> LoadResult:
        """Load the rows (see :func:`shadoweval.tables.load_recorded_rows`)."""
        from shadoweval.errors import TableMappingError
        from shadoweval.tables import load_recorded_rows

        if self.format not in (None, "json", "jsonl", "csv", "tsv", "parquet"):
            raise TableMappingError(
                f"--format {self.format!r}: use json, jsonl, csv, tsv or parquet"
            )
        fmt = cast("TableFormat | None", self.format)
        return load_recorded_rows(
            self.input, self.mapping(), preset=self.preset, prompts=self.prompts, format=fmt
        )


def load_table_or_exit(options: TableOptions, console: Console) -> LoadResult:
    """Load the table; on a user error print it and exit with status 3."""
    from shadoweval.errors import ShadowEvalError

    try:
        return options.load()
    except (ShadowEvalError, FileNotFoundError) as exc:
        print_error(console, exc)
        raise typer.Exit(EXIT_ERROR) from None


# ----------------------------------------------------------------------------- import


IMPORT_HELP = (
    "Import a recorded table (benchmark or exported model outputs) as a capture log."
    "\n\n"
    "Every row becomes one exchange: the request the model was sent and its recorded answer. "
    "Rows that cannot be mapped are counted by reason and appended to OUT.rejected.jsonl "
    "beside the capture log. Sampling parameters are recorded only when given here."
    "\n\n"
    "Exit status: 0 = rows written; 3 = nothing written, bad options or an unreadable table."
)


def import_command(
    input: InputOpt,
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Capture-log directory to write (created if missing)."),
    ],
    preset: PresetOpt = None,
    prompts: PromptsOpt = None,
    format: FormatOpt = None,
    prompt_col: PromptColOpt = None,
    messages_col: MessagesColOpt = None,
    system_col: SystemColOpt = None,
    output_col: OutputColOpt = None,
    output_format: OutputFormatOpt = "text",
    task_type_col: TaskTypeColOpt = None,
    task_type: TaskTypeOpt = None,
    model_col: ModelColOpt = None,
    model: ModelOpt = None,
    id_col: IdColOpt = None,
    latency_col: LatencyColOpt = None,
    ttft_col: TtftColOpt = None,
    itl_col: ItlColOpt = None,
    latency_unit: LatencyUnitOpt = None,
    prompt_tokens_col: PromptTokensColOpt = None,
    completion_tokens_col: CompletionTokensColOpt = None,
    tools_col: ToolsColOpt = None,
    request_fields_col: RequestFieldsColOpt = None,
    tools_format: ToolsFormatOpt = "openai",
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
) -> None:
    """Import a recorded table as a capture log (see ``IMPORT_HELP``)."""
    params = dict(locals())  # first statement: exactly the command's parameters
    from rich.console import Console

    from capture.table_import import import_rows
    from shadoweval.errors import ShadowEvalError

    console = Console()
    options = TableOptions.from_params(params)
    loaded = load_table_or_exit(options, console)
    sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    try:
        report = import_rows(
            loaded,
            out=out,
            stream=stream,
            sampling={k: v for k, v in sampling.items() if v is not None},
            compress=gzip,
        )
    except ShadowEvalError as exc:
        print_error(console, exc)
        raise typer.Exit(EXIT_ERROR) from None
    _print_report(console, report)
    if report.written == 0:
        raise typer.Exit(EXIT_ERROR)


def _print_report(console: Console, report: Any) -> None:
    from rich.table import Table

    summary = Table(title="shadow-eval import", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    summary.add_row("files", str(len(report.files)))
    summary.add_row("rows read", str(report.rows_read))
    summary.add_row("written", str(report.written))
    summary.add_row("rejected", str(len(report.rejected)))
    summary.add_row("capture log", str(report.out_dir))
    console.print(summary)
    by_reason = report.rejected_by_reason()
    if by_reason:
        reasons = Table(title="rejected by reason")
        reasons.add_column("reason")
        reasons.add_column("rows", justify="right")
        for reason, count in sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
            reasons.add_row(reason, str(count))
        console.print(reasons)
        console.print(f"rejected rows written to {report.rejected_path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``import`` command to the ``shadow-eval`` app."""
    app.command("import", help=IMPORT_HELP)(import_command)
