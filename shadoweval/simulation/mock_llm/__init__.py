"""mock-llm: a test double of an OpenAI-compatible model server.

It answers ``/v1/chat/completions`` from a recorded table (AlpacaEval, MT-Bench, BFCL or
any mapped table), streamed or not, paced by a latency profile and with seeded injected
faults, so the replay path, the SSE reader and the statistics can be exercised end to
end without a GPU. It does not run a model and answers only prompts in its table.

* :func:`create_app` — the Starlette app.
* :mod:`.latency` — latency profiles (``none``, ``fixed``, ``llmperf``, ``table``).
* :mod:`.faults` — fault injection (error, hang, malformed, html).
* :mod:`.cuts` — llama.cpp's stream cuts (a running stream interrupted by a new request;
  a context window).
* :mod:`.answers` — lookup by prompt key and the OpenAI payloads.
* :mod:`.pieces` — the mock's tokenization (word pieces).
"""

from shadoweval.simulation.mock_llm.app import create_app
from shadoweval.simulation.mock_llm.cuts import StreamCuts
from shadoweval.simulation.mock_llm.faults import FaultConfig, FaultKind
from shadoweval.simulation.mock_llm.latency import (
    Delays,
    FixedLatency,
    LatencyProfile,
    LlmperfLatency,
    NoLatency,
    TableLatency,
    parse_latency_profile,
)
from shadoweval.simulation.mock_llm.pieces import split_argument_pieces, split_pieces

__all__ = [
    "Delays",
    "FaultConfig",
    "FaultKind",
    "FixedLatency",
    "LatencyProfile",
    "LlmperfLatency",
    "NoLatency",
    "StreamCuts",
    "TableLatency",
    "create_app",
    "parse_latency_profile",
    "split_argument_pieces",
    "split_pieces",
]
