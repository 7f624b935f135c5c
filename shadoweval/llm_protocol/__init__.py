"""OpenAI chat-completions (and legacy completions) protocol at the edge: lenient models,
SSE framing, reassembly.

* :mod:`.models` — tolerant pydantic models of requests, responses and stream chunks.
* :mod:`.sse` — incremental SSE framing with incremental UTF-8 decoding.
* :mod:`.assembler` — rebuilds a response (text, tool calls, usage, finish reason) and
  measures TTFB, TTFT, e2e, ITL and TPOT.
* :mod:`.latency` — the inter-token latency summary (count, mean, quantiles, max).
* :mod:`.finish_reason` — normalization of ``finish_reason`` variants.
"""

from shadoweval.llm_protocol.assembler import (
    AssembledResponse,
    ChatStreamAssembler,
    parse_completion_body,
    summarize_itl,
)
from shadoweval.llm_protocol.finish_reason import normalize_finish_reason
from shadoweval.llm_protocol.latency import tpot_ms
from shadoweval.llm_protocol.models import (
    COMPLETION_SAMPLING_PARAMS,
    SAMPLING_PARAMS,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessage,
    CompletionRequest,
    ResponseFormat,
    ToolDefinition,
)
from shadoweval.llm_protocol.sse import SSEDecoder, SSEEvent

__all__ = [
    "COMPLETION_SAMPLING_PARAMS",
    "SAMPLING_PARAMS",
    "AssembledResponse",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatMessage",
    "ChatStreamAssembler",
    "CompletionRequest",
    "ResponseFormat",
    "SSEDecoder",
    "SSEEvent",
    "ToolDefinition",
    "normalize_finish_reason",
    "parse_completion_body",
    "summarize_itl",
    "tpot_ms",
]
