"""``shadow-eval mock-llm``: serve a recorded table as a fake OpenAI-compatible model.

The table options are the ones of ``shadow-eval import`` (declared once in
:mod:`shadoweval.cli.table_options`); the server is :mod:`shadoweval.application.mock_llm`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from shadoweval.cli.exit_codes import EXIT_ERROR
from shadoweval.cli.render import print_error
from shadoweval.cli.table_options import TableOptions, with_table_options

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


@with_table_options
def mock_llm_command(
    table: TableOptions,
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
    interrupt_running: Annotated[
        bool,
        typer.Option(
            "--interrupt-running/--no-interrupt-running",
            help="Cut a running stream ([DONE], no finish chunk) when a new request arrives, "
            "as llama-cpp-python's interrupt_requests does.",
            rich_help_panel=_F,
        ),
    ] = False,
    context_tokens: Annotated[
        int | None,
        typer.Option(
            "--context-tokens",
            help="A context window in mock tokens, as llama.cpp's n_ctx: a longer prompt gets "
            "HTTP 500; a stream past it is cut without finish chunk or [DONE].",
            rich_help_panel=_F,
        ),
    ] = None,
) -> None:
    from pydantic import ValidationError
    from rich.console import Console

    from shadoweval.application.mock_llm import MockLlmRequest, build_mock_llm, serve_mock_llm
    from shadoweval.errors import ShadowEvalError

    console = Console(stderr=True, soft_wrap=True)
    try:
        server = build_mock_llm(
            MockLlmRequest(
                table=table.source(),
                latency_profile=latency_profile,
                seed=seed,
                time_scale=time_scale,
                model_name=model_name,
                error_rate=error_rate,
                hang_rate=hang_rate,
                malformed_rate=malformed_rate,
                html_rate=html_rate,
                interrupt_running=interrupt_running,
                context_tokens=context_tokens,
            )
        )
    except (ShadowEvalError, FileNotFoundError, ValidationError) as exc:
        print_error(console, exc)
        raise typer.Exit(EXIT_ERROR) from None
    console.print(
        f"mock-llm (test double) serving {server.prompts} recorded prompts as model "
        f"{server.model_name!r} on http://{host}:{port}/v1 — latency {server.latency}, "
        f"time scale {time_scale:g}, faults error={error_rate:g} hang={hang_rate:g} "
        f"malformed={malformed_rate:g} html={html_rate:g}, seed {seed}"
        + ("; interrupts running streams" if interrupt_running else "")
        + (f"; context window {context_tokens} tokens" if context_tokens else "")
        + (f"; {server.rejected} table rows rejected" if server.rejected else ""),
        highlight=False,
    )
    serve_mock_llm(server, host=host, port=port)


def register(app: typer.Typer) -> None:
    """Add the ``mock-llm`` command to the ``shadow-eval`` app."""
    app.command("mock-llm", help=MOCK_HELP)(mock_llm_command)
