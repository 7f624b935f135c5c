"""Which column of a recorded table means what: :class:`TableMapping`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from shadoweval.tables.bfcl_schema import BfclLanguage
from shadoweval.tables.values import OutputFormat

LatencyUnit = Literal["s", "ms"]
ToolsFormat = Literal["openai", "bfcl"]


class TableMapping(BaseModel):
    """Field mapping of a recorded table (one row = one prompt and the model's answer).

    Prompt (exactly one):
        ``prompt_col``: plain text, sent as one user message; or ``messages_col``: an OpenAI
        message list (or its JSON text). ``system_col`` optionally holds a system prompt,
        prepended as a system message when the cell is a non-empty string.

    Output:
        ``output_col`` in ``output_format``: ``text`` (a string); ``openai`` (a
        ``tool_calls`` list); ``bfcl`` (a list of one-key objects ``{name: arguments}``). In
        both tool formats a string cell is a text answer. ``finish_reason_col`` optionally
        holds the recorded raw ``finish_reason``.

    Labels:
        ``task_type_col`` and/or the constant ``task_type`` (the constant fills null cells;
        with neither the task type is ``"default"``); ``model_col`` and/or the constant
        ``model`` likewise; ``id_col`` gives each row its key (else a prompt hash).

    Measurements (all optional; ``latency_unit`` is required when a timing column is
    mapped, so seconds are never read as milliseconds):
        ``latency_col`` (end-to-end), ``ttft_col``, ``ttfc_col`` (time to first visible
        content, for tables from reasoning models: without it an import takes TTFC from
        TTFT), ``itl_col`` (mean inter-token latency), in ``latency_unit`` (``s`` or
        ``ms``); ``prompt_tokens_col``, ``completion_tokens_col`` (integers);
        ``captured_at_col``: when the request was served, as an ISO 8601 timestamp with a
        UTC offset (``2026-11-30T08:00:00Z``) or Unix epoch seconds. Without it an import
        records the import time (plus 1 ms per row), so the gate's observation window sees
        the whole table as one instant.

    Request fields:
        ``request_fields_col`` optionally holds a JSON object of further chat-request fields
        recorded with the prompt (``response_format``, ``tool_choice``, per-row sampling
        parameters …); they are written into the replayed request as recorded. Fields the
        mapping already sets (``model``, ``messages``, ``tools``, ``stream``) are refused.

    Tools:
        ``tools_col`` holds tool schemas in ``tools_format``: ``openai`` (``[{"type":
        "function", "function": {...}}]`` or bare function objects) or ``bfcl`` (BFCL
        function definitions, converted by
        :func:`~shadoweval.tables.bfcl_schema.bfcl_functions_to_openai_tools` with
        ``tools_language``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_col: str | None = None
    messages_col: str | None = None
    system_col: str | None = None
    output_col: str
    output_format: OutputFormat = "text"
    finish_reason_col: str | None = None
    task_type_col: str | None = None
    task_type: str | None = None
    model_col: str | None = None
    model: str | None = None
    id_col: str | None = None
    latency_col: str | None = None
    ttft_col: str | None = None
    ttfc_col: str | None = None
    itl_col: str | None = None
    latency_unit: LatencyUnit | None = None
    prompt_tokens_col: str | None = None
    completion_tokens_col: str | None = None
    captured_at_col: str | None = None
    tools_col: str | None = None
    tools_format: ToolsFormat = "openai"
    request_fields_col: str | None = None
    tools_language: BfclLanguage = "python"

    @model_validator(mode="after")
    def _check(self) -> TableMapping:
        if (self.prompt_col is None) == (self.messages_col is None):
            raise ValueError("map exactly one of prompt_col (plain text) or messages_col")
        timing = (self.latency_col, self.ttft_col, self.ttfc_col, self.itl_col)
        if any(c is not None for c in timing) and self.latency_unit is None:
            raise ValueError(
                "latency_unit ('s' or 'ms') is required when a timing column is mapped"
            )
        return self

    def mapped_columns(self) -> dict[str, str]:
        """Return ``{field name: column}`` for every column this mapping reads."""
        fields = (
            "prompt_col",
            "messages_col",
            "system_col",
            "output_col",
            "finish_reason_col",
            "task_type_col",
            "model_col",
            "id_col",
            "latency_col",
            "ttft_col",
            "ttfc_col",
            "itl_col",
            "prompt_tokens_col",
            "completion_tokens_col",
            "captured_at_col",
            "tools_col",
            "request_fields_col",
        )
        out: dict[str, str] = {}
        for name in fields:
            column = getattr(self, name)
            if column is not None:
                out[name] = column
        return out

    def to_ms(self, value: float | None) -> float | None:
        """Convert a timing cell in ``latency_unit`` to milliseconds."""
        if value is None:
            return None
        return value * 1000.0 if self.latency_unit == "s" else value
