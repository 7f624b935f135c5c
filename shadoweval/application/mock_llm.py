"""Serving a recorded table as a simulated model: mock-llm, a TEST DOUBLE of a model server.

mock-llm runs no model: it answers ``POST /v1/chat/completions`` only for prompts recorded
in its table, with the recorded text or tool calls, paced by a latency profile and with
seeded injected faults (:mod:`shadoweval.simulation.mock_llm`). Use it for demos and to exercise the
replay path, never to evaluate a model. :func:`build_mock_llm` loads the table and builds
the server; :func:`serve_mock_llm` runs it under uvicorn until stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette

from shadoweval.application.importing import TableSource, load_table
from shadoweval.errors import ShadowEvalError
from shadoweval.simulation.mock_llm import (
    FaultConfig,
    StreamCuts,
    create_app,
    parse_latency_profile,
)

__all__ = ["MockLlm", "MockLlmRequest", "build_mock_llm", "serve_mock_llm"]

DEFAULT_MODEL_NAME = "mock-llm"
"""The model id served when neither the request nor the table names one."""


@dataclass(frozen=True, slots=True)
class MockLlmRequest:
    """What mock-llm serves and how.

    Attributes:
        table: the recorded table answered from.
        latency_profile: ``none``, ``fixed:TTFT_MS,ITL_MS``, ``llmperf:FILE_OR_DIR`` (real
            per-request TTFT and decode gaps from LLMPerf leaderboard files) or ``table``
            (the table's own timing columns).
        seed: seeds latency draws and faults.
        time_scale: multiplies every delay (``0``: no waiting).
        model_name: the model id served; ``None``: the table's model when all its rows
            name the same one, else ``mock-llm``.
        error_rate: share of requests answered HTTP 500 with error JSON.
        hang_rate: share accepted and never answered.
        malformed_rate: share whose body or chunk is not JSON.
        html_rate: share answered by a 502 ``text/html`` proxy page.
        interrupt_running: cut a running stream (``[DONE]``, no finish chunk) when a new
            request arrives, as llama-cpp-python's ``interrupt_requests`` does.
        context_tokens: a context window in the mock's tokens, as llama.cpp's ``n_ctx``
            (a longer prompt: HTTP 500; a stream past it: cut without finish or
            ``[DONE]``); ``None``: none.
    """

    table: TableSource
    latency_profile: str = "none"
    seed: int = 0
    time_scale: float = 1.0
    model_name: str | None = None
    error_rate: float = 0.0
    hang_rate: float = 0.0
    malformed_rate: float = 0.0
    html_rate: float = 0.0
    interrupt_running: bool = False
    context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class MockLlm:
    """A built mock-llm server, ready to serve.

    Attributes:
        app: the ASGI app.
        model_name: the model id it serves.
        prompts: recorded prompts it answers (the table's usable rows).
        rejected: table rows it could not use.
        latency: the latency profile, described (``fixed 200 ms + 20 ms/token`` …).
        notes: what the table does not record (:attr:`LoadResult.notes`: a BFCL
            prompt-mode model has no latency column, so ``table`` latency falls back).
    """

    app: Starlette
    model_name: str
    prompts: int
    rejected: int
    latency: str
    notes: tuple[str, ...] = ()


def build_mock_llm(request: MockLlmRequest) -> MockLlm:
    """Load the table and build the server (nothing listens yet).

    Raises:
        ShadowEvalError: the table cannot be read or mapped (TableMappingError,
            RecordDecodeError), it has no usable rows, or an unknown latency profile
            (ConfigError).
        FileNotFoundError: no table at ``request.table.input``.
        pydantic.ValidationError: a fault rate out of [0, 1], or rates summing over 1; a
            ``context_tokens`` below 1.
    """
    loaded = load_table(request.table)
    if not loaded.rows:
        raise ShadowEvalError("the table has no usable rows")
    profile = parse_latency_profile(request.latency_profile)
    faults = FaultConfig(
        error_rate=request.error_rate,
        hang_rate=request.hang_rate,
        malformed_rate=request.malformed_rate,
        html_rate=request.html_rate,
    )
    models = {row.model for row in loaded.rows if row.model}
    name = request.model_name or (models.pop() if len(models) == 1 else DEFAULT_MODEL_NAME)
    app = create_app(
        loaded.rows,
        latency=profile,
        faults=faults,
        seed=request.seed,
        model_name=name,
        time_scale=request.time_scale,
        cuts=StreamCuts(
            interrupt_running=request.interrupt_running, context_tokens=request.context_tokens
        ),
    )
    return MockLlm(
        app=app,
        model_name=name,
        prompts=len(loaded.rows),
        rejected=len(loaded.rejected),
        latency=profile.describe(),
        notes=tuple(loaded.notes),
    )


def serve_mock_llm(server: MockLlm, *, host: str, port: int) -> None:
    """Serve ``server`` on ``host:port`` under uvicorn until SIGINT/SIGTERM (graceful
    shutdown up to 5 s; access log at ``info``)."""
    uvicorn.run(server.app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
