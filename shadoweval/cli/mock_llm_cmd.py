"""``shadow-eval mock-llm``: serve a recorded table as a fake OpenAI-compatible model.

The table options are the ones of ``shadow-eval import`` (declared once in
:mod:`shadoweval.cli.table_options`); the server is :mod:`shadoweval.application.mock_llm`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from shadoweval.cli.render import exit_on_error
from shadoweval.cli.table_options import TableOptions, with_table_options
from shadoweval.ports import MOCK_LLM_PORT

_S = "Server"
_F = "Injected faults (per request, seeded)"

MOCK_HELP = (
    "Run a TEST DOUBLE of an OpenAI-compatible model server: it runs no model."
    "\n\n"
    "It answers POST /v1/chat/completions, /v1/completions, the Responses API "
    "/v1/responses (store, previous_response_id) and the Anthropic Messages API "
    "/v1/messages only for prompts recorded in the table (other prompts get HTTP 404, code "
    "prompt_not_recorded) with the recorded text or tool calls, streamed as SSE or as JSON, "
    "paced by a latency profile, with seeded injected faults. "
    "Use it for demos and for testing the replay path, never to evaluate a model."
    "\n\n"
    "Latency profiles: none; fixed:TTFT_MS,ITL_MS; llmperf:PATH (real per-request TTFT and "
    "decode gaps from LLMPerf leaderboard files); table (the table's own timing columns)."
)


def _server_option(flag: str, help: str | None = None) -> Any:
    """A server option (``--help`` panel "Server")."""
    return typer.Option(flag, help=help, rich_help_panel=_S)


def _fault_rate(flag: str, help: str) -> Any:
    """The share of requests given one injected fault (its ``--help`` panel)."""
    return typer.Option(flag, help=help, rich_help_panel=_F)


@with_table_options
def mock_llm_command(
    table: TableOptions,
    latency_profile: Annotated[
        str,
        _server_option(
            "--latency-profile", "none | fixed:TTFT_MS,ITL_MS | llmperf:FILE_OR_DIR | table"
        ),
    ] = "none",
    seed: Annotated[int, _server_option("--seed", "Seed of latency draws and faults.")] = 0,
    time_scale: Annotated[
        float, _server_option("--time-scale", "Multiply every delay by this.")
    ] = 1.0,
    model_name: Annotated[
        str | None,
        _server_option(
            "--model-name", "Model id to serve (default: the table's model when it has one)."
        ),
    ] = None,
    host: Annotated[str, _server_option("--host")] = "127.0.0.1",
    port: Annotated[int, _server_option("--port")] = MOCK_LLM_PORT,
    error_rate: Annotated[float, _fault_rate("--error-rate", "HTTP 500 with error JSON.")] = 0.0,
    hang_rate: Annotated[float, _fault_rate("--hang-rate", "Accept, never answer.")] = 0.0,
    malformed_rate: Annotated[
        float, _fault_rate("--malformed-rate", "Body/chunk that is not JSON.")
    ] = 0.0,
    html_rate: Annotated[float, _fault_rate("--html-rate", "502 text/html proxy page.")] = 0.0,
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

    console = Console(stderr=True, soft_wrap=True)
    with exit_on_error(console, FileNotFoundError, ValidationError):
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
    for note in server.notes:
        console.print(f"note: {note}", highlight=False)
    serve_mock_llm(server, host=host, port=port)


def register(app: typer.Typer) -> None:
    """Add the ``mock-llm`` command to the ``shadow-eval`` app."""
    app.command("mock-llm", help=MOCK_HELP)(mock_llm_command)
