"""Lenient pydantic models of OpenAI chat-completions requests, responses and chunks.

Responses of the legacy ``POST /v1/completions`` (``object: "text_completion"``,
``choices[].text`` instead of ``message``/``delta``) read through the same models: a
choice's ``text`` is that API's output.

Real traffic carries fields this project does not know (vendor extensions such as vLLM's
``stop_reason``, SGLang's ``matched_stop``, new OpenAI fields). These models are the
*tolerant reader* at the edge: ``extra="allow"`` keeps every unknown field (so nothing
is lost on a round trip) and the names of ignored fields are logged at DEBUG, following
vLLM's ``OpenAIBaseModel`` (vllm/entrypoints/openai/protocol.py). Field order follows the
OpenAI API reference for ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

logger = logging.getLogger(__name__)

SAMPLING_PARAMS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "n",
    "top_k",
    "min_p",
    "repetition_penalty",
)
"""Request fields that change what a model samples; a replay pins each one it finds."""

COMPLETION_SAMPLING_PARAMS: tuple[str, ...] = (
    *(name for name in SAMPLING_PARAMS if name != "max_completion_tokens"),
    "best_of",
)
"""The same for a legacy ``POST /v1/completions`` request (no ``max_completion_tokens``;
``best_of`` samples several and returns the best)."""


def _split_params(
    model: BaseModel, names: tuple[str, ...]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``names`` split into (present name → value, names not set) in ``model``'s fields."""
    data = model.model_dump(exclude_unset=True)
    present = {k: data[k] for k in names if k in data and data[k] is not None}
    missing = tuple(k for k in names if k not in present)
    return present, missing


class OpenAIModel(BaseModel):
    """Base of the lenient models: unknown fields are kept and their names logged."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @model_validator(mode="after")
    def _log_extra(self) -> OpenAIModel:
        extra = self.model_extra
        if extra:
            logger.debug("%s kept unknown fields %s", type(self).__name__, sorted(extra))
        return self


class FunctionCall(OpenAIModel):
    """``{"name": ..., "arguments": "<json string>"}``; both optional in stream deltas.

    ``arguments`` sent as a JSON value instead of a string (TGI's Messages API up to 3.0,
    huggingface/text-generation-inference#2461; llama.cpp's server in
    ggml-org/llama.cpp#20198) is kept as its compact JSON text, so the call is not lost.
    """

    name: str | None = None
    arguments: str | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments_as_text(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        try:
            return orjson.dumps(value).decode()
        except TypeError:
            return value  # not JSON-serializable: let validation report it


class ToolCallModel(OpenAIModel):
    """A tool call in a message, or a fragment of one in a stream delta."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: FunctionCall | None = None


class ChatMessage(OpenAIModel):
    """One chat message. ``content`` may be a string, a list of parts, or ``None``."""

    role: str | None = None
    content: str | list[Any] | None = None
    name: str | None = None
    tool_calls: list[ToolCallModel] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def reasoning(self) -> str | None:
        """The reasoning text: ``reasoning_content`` (DeepSeek, SGLang, vLLM < 0.11) or,
        when absent, ``reasoning`` (vLLM >= 0.11, Ollama's OpenAI compatibility,
        OpenRouter); ``None`` when the message carries neither as a string."""
        if self.reasoning_content is not None:
            return self.reasoning_content
        other = (self.model_extra or {}).get("reasoning")
        return other if isinstance(other, str) else None

    def text(self) -> str:
        """Return the message's text: the string content, or its text parts joined."""
        if isinstance(self.content, str):
            return self.content
        if isinstance(self.content, list):
            parts = []
            for part in self.content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    parts.append(part["text"])
            return "".join(parts)
        return ""


class FunctionDefinition(OpenAIModel):
    """A tool's function: name, description and JSON-Schema ``parameters``."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(OpenAIModel):
    """``{"type": "function", "function": {...}}``."""

    type: str = "function"
    function: FunctionDefinition


class ResponseFormat(OpenAIModel):
    """``response_format``: ``text``, ``json_object`` or ``json_schema`` (with its schema)."""

    type: str
    json_schema: dict[str, Any] | None = None

    def schema_dict(self) -> dict[str, Any] | None:
        """Return the JSON schema requested by ``json_schema`` mode, if any."""
        if self.json_schema is None:
            return None
        inner = self.json_schema.get("schema")
        return inner if isinstance(inner, dict) else None


class StreamOptions(OpenAIModel):
    """``stream_options``; ``include_usage`` asks for a final usage-only chunk."""

    include_usage: bool | None = None


class ChatCompletionRequest(OpenAIModel):
    """A ``POST /v1/chat/completions`` body, leniently parsed."""

    model: str | None = None
    messages: list[ChatMessage]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[ToolDefinition] | None = None
    tool_choice: Any = None
    response_format: ResponseFormat | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None

    def sampling_params(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Split :data:`SAMPLING_PARAMS` into (present name → value, names not set)."""
        return _split_params(self, SAMPLING_PARAMS)

    def wants_json(self) -> bool:
        """True when ``response_format`` asks for JSON (``json_object`` or ``json_schema``)."""
        return self.response_format is not None and self.response_format.type in (
            "json_object",
            "json_schema",
        )


class CompletionRequest(OpenAIModel):
    """A legacy ``POST /v1/completions`` body (``prompt`` → ``choices[].text``), leniently
    parsed. ``prompt`` is a string, a list of strings, or token ids (a list of integers or
    of lists of integers), as the API allows."""

    model: str | None = None
    prompt: str | list[Any]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    echo: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    best_of: int | None = None

    def sampling_params(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Split :data:`COMPLETION_SAMPLING_PARAMS` into (present name → value, names
        not set)."""
        return _split_params(self, COMPLETION_SAMPLING_PARAMS)

    def prompt_text(self) -> str | None:
        """The prompt as text: the string, or a list of strings joined by newlines;
        ``None`` for token ids."""
        if isinstance(self.prompt, str):
            return self.prompt
        if self.prompt and all(isinstance(part, str) for part in self.prompt):
            return "\n".join(self.prompt)
        return None


class UsageModel(OpenAIModel):
    """``usage``; ``prompt_tokens_details.cached_tokens`` is read when present."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None

    def cached_tokens(self) -> int | None:
        """Return ``prompt_tokens_details.cached_tokens`` when the server reported it."""
        details = self.prompt_tokens_details or {}
        value = details.get("cached_tokens")
        return value if isinstance(value, int) else None

    def reasoning_tokens(self) -> int | None:
        """Return ``completion_tokens_details.reasoning_tokens`` when reported."""
        details = self.completion_tokens_details or {}
        value = details.get("reasoning_tokens")
        return value if isinstance(value, int) else None


class Choice(OpenAIModel):
    """A non-streamed choice: a chat ``message``, or the legacy completions ``text``."""

    index: int = 0
    message: ChatMessage | None = None
    text: str | None = None
    finish_reason: str | None = None


class ChatCompletionResponse(OpenAIModel):
    """A non-streamed ``chat.completion`` body."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[Choice] = []
    usage: UsageModel | None = None


class ChunkChoice(OpenAIModel):
    """A streamed choice: a chat ``delta`` fragment, or a legacy completions ``text`` piece."""

    index: int = 0
    delta: ChatMessage | None = None
    text: str | None = None
    finish_reason: str | None = None


class ChatCompletionChunk(OpenAIModel):
    """One ``chat.completion.chunk`` event of a stream."""

    id: str | None = None
    object: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[ChunkChoice] = []
    usage: UsageModel | None = None


class ErrorBody(OpenAIModel):
    """OpenAI-style error: ``{"error": {"message", "type", "param", "code"}}``."""

    error: dict[str, Any]


def body_object(body: bytes) -> dict[str, Any]:
    """A non-streamed response body as a JSON object.

    Raises:
        RecordDecodeError: not JSON (reason ``invalid_json``) or not an object
            (``not_object``); the message quotes the first 80 bytes.
    """
    from shadoweval.errors import RecordDecodeError

    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RecordDecodeError(
            f"response body is not JSON: {body[:80]!r}", reason="invalid_json"
        ) from exc
    if not isinstance(payload, dict):
        raise RecordDecodeError(
            f"response body is JSON but not an object: {body[:80]!r}", reason="not_object"
        )
    return payload
