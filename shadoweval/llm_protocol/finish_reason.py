"""Normalization of ``finish_reason`` across OpenAI-compatible servers.

Sources: OpenAI (``stop | length | tool_calls | content_filter``, legacy ``function_call``),
vLLM (``abort`` for aborted requests, vllm-project/vllm#47933), TGI before
huggingface/text-generation-inference#2344 (``eos_token``), SGLang streams that ended with
``""``, Anthropic's Messages API ``stop_reason`` (``end_turn``, ``stop_sequence``,
``max_tokens``, ``model_context_window_exceeded``, ``tool_use``, ``refusal``; ``pause_turn``
— a long server-tool turn paused, to be continued by the client — is deliberately left
``unknown``: the answer is not finished), the OpenAI Responses API's
``incomplete_details.reason`` (``max_output_tokens``, ``content_filter``;
:mod:`shadoweval.llm_protocol.responses_api`). The raw value is always stored next to the
normalized one."""

from __future__ import annotations

from shadoweval.records import FinishReason

_ALIASES: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "eos_token": FinishReason.STOP,
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "max_output_tokens": FinishReason.LENGTH,
    "max_length": FinishReason.LENGTH,
    "model_length": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "tool_use": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
    "refusal": FinishReason.CONTENT_FILTER,
    "abort": FinishReason.ABORT,
    "aborted": FinishReason.ABORT,
    "cancelled": FinishReason.ABORT,
}


def normalize_finish_reason(raw: str | None) -> FinishReason:
    """Map a server's raw ``finish_reason`` to :class:`FinishReason`.

    ``None``, ``""`` and values not known here map to ``UNKNOWN`` (a response that may
    have been cut short); matching is case-insensitive.
    """
    if not raw:
        return FinishReason.UNKNOWN
    return _ALIASES.get(raw.strip().lower(), FinishReason.UNKNOWN)
