"""``shadow-eval mock-llm``: serve a recorded table as a fake OpenAI-compatible model.

The table options are the ones of ``shadow-eval import`` (declared and parsed once in
:mod:`faces.cli.import_cmd`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from faces.cli.exit_codes import EXIT_ERROR
from faces.cli.import_cmd import (
    CompletionTokensColOpt,
    FormatOpt,
    IdColOpt,
    InputOpt,
    ItlColOpt,
    LatencyColOpt,
    LatencyUnitOpt,
    MessagesColOpt,
    ModelColOpt,
    ModelOpt,
    OutputColOpt,
    OutputFormatOpt,
    PresetOpt,
    PromptColOpt,
    PromptsOpt,
    PromptTokensColOpt,
    RequestFieldsColOpt,
    SystemColOpt,
    TableOptions,
    TaskTypeColOpt,
    TaskTypeOpt,
    ToolsColOpt,
    ToolsFormatOpt,
    TtftColOpt,
    load_table_or_exit,
)
from faces.cli.render import print_error

_S = "Server"
_F = "Injected faults (per request, seeded)"

MOCK_HELP = (
    "Run a TEST DOUBLE of an OpenAI-compatible model server: it runs no model."
    "\n\n"
    "It answers POST /v1/chat/completions only for prompts recorded in the table (other "
    "prompts get HTTP 404, code prompt_not_recorded) with the recorded text or tool calls, "
    "streamed as SSE or as JSON, paced by a latency profile, with seeded injected faults. "
    "Use it for demos and for testing the replay path, never to evaluate a model."
    "\n\n"
    "Latency profiles: none; fixed:TTFT_MS,ITL_MS; llmperf:PATH (real per-request TTFT and "
    "decode gaps from LLMPerf leaderboard files); table (the table's own timing columns)."
)


def mock_llm_command(
    input: InputOpt,
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
    latency_profile: Annotated[
        str,
        typer.Option(
            "--latency-profile",
            help="none | fixed:TTFT_MS,ITL_MS | llmperf:FILE_OR_DIR | table",
            rich_help_panel=_S,
        ),
    ] = "none",
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of latency draws and faults.", rich_help_panel=_S)
    ] = 0,
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", help="Multiply every delay by this.", rich_help_panel=_S),
    ] = 1.0,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model-name",
            help="Model id to serve (default: the table's model when it has one).",
            rich_help_panel=_S,
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", rich_help_panel=_S)] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", rich_help_panel=_S)] = 8000,
    error_rate: Annotated[
        float, typer.Option("--error-rate", help="HTTP 500 with error JSON.", rich_help_panel=_F)
    ] = 0.0,
    hang_rate: Annotated[
        float,
        typer.Option("--hang-rate", help="Accept, never answer.", rich_help_panel=_F),
    ] = 0.0,
    malformed_rate: Annotated[
        float,
        typer.Option("--malformed-rate", help="Body/chunk that is not JSON.", rich_help_panel=_F),
    ] = 0.0,
    html_rate: Annotated[
        float,
        typer.Option("--html-rate", help="502 text/html proxy page.", rich_help_panel=_F),
    ] = 0.0,
) -> None:
    params = dict(locals())  # first statement: exactly the command's parameters
    import uvicorn
    from pydantic import ValidationError
    from rich.console import Console

    from shadoweval.errors import ConfigError
    from simulation.mock_llm import FaultConfig, create_app, parse_latency_profile

    console = Console(stderr=True)
    loaded = load_table_or_exit(TableOptions.from_params(params), console)
    if not loaded.rows:
        console.print("[bold red]error:[/] the table has no usable rows", highlight=False)
        raise typer.Exit(EXIT_ERROR)
    try:
        profile = parse_latency_profile(latency_profile)
        faults = FaultConfig(
            error_rate=error_rate,
            hang_rate=hang_rate,
            malformed_rate=malformed_rate,
            html_rate=html_rate,
        )
    except (ConfigError, ValidationError) as exc:
        print_error(console, exc)
        raise typer.Exit(EXIT_ERROR) from None
    models = {row.model for row in loaded.rows if row.model}
    name = model_name or (models.pop() if len(models) == 1 else "mock-llm")
    app = create_app(
        loaded.rows,
        latency=profile,
        faults=faults,
        seed=seed,
        model_name=name,
        time_scale=time_scale,
    )
    console.print(
        f"mock-llm (test double) serving {len(loaded.rows)} recorded prompts as model "
        f"{name!r} on http://{host}:{port}/v1 — latency {profile.describe()}, "
        f"time scale {time_scale:g}, faults error={error_rate:g} hang={hang_rate:g} "
        f"malformed={malformed_rate:g} html={html_rate:g}, seed {seed}"
        + (f"; {len(loaded.rejected)} table rows rejected" if loaded.rejected else ""),
        highlight=False,
    )
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)


def register(app: typer.Typer) -> None:
    """Add the ``mock-llm`` command to the ``shadow-eval`` app."""
    app.command("mock-llm", help=MOCK_HELP)(mock_llm_command)
