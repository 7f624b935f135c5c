"""Shared parts and the capture/replay records: Exchange, ReplayOutcome and their parts."""

from __future__ import annotations

import binascii
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)

from shadoweval.records.base import (
    SCHEMA_VERSION,
    _checks_values,
    _control_characters,
    _int64,
    _non_negative_count,
    _non_negative_ms,
    _Record,
    decode_base64_body,
    new_exchange_id,
    utc_now,
)
from shadoweval.records.enums import (
    ExchangeOutcome,
    FinishReason,
    ReplayErrorKind,
    ReplayTarget,
    TimingSource,
    UsageSource,
)
from shadoweval.text import is_blank

# ----------------------------------------------------------------- shared parts


UNKNOWN_MODEL = "unknown"
"""The model name recorded when it could not be learned: the live upstream's ``/v1/models``
did not say and the response carried no ``model`` (an error, a cut connection). It names
no model: a run's exchanges that record it never count as a change of model."""


class ModelIdentity(_Record):
    """Identity of a model behind an endpoint.

    A model swap changes weights, tokenizer, chat template and sampling defaults;
    each is recorded separately when the operator knows it.
    """

    name: str
    weights_hash: str | None = None
    tokenizer_hash: str | None = None
    chat_template_hash: str | None = None
    sampling_defaults: dict[str, JsonValue] = Field(default_factory=dict)
    base_url: str | None = None


class Usage(_Record):
    """Token usage of one response. All counts are ``None`` when ``usage_source`` is missing."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    usage_source: UsageSource = UsageSource.MISSING

    _counts = field_validator(
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "cached_tokens",
        "reasoning_tokens",
    )(_non_negative_count)


class ToolCall(_Record):
    """One tool call of an assistant message. ``arguments`` is the raw JSON string as sent."""

    index: int
    id: str | None = None
    type: str = "function"
    name: str
    arguments: str

    _index = field_validator("index")(_int64)


class LatencySummary(_Record):
    """Summary of a response's inter-token latencies (ITL), milliseconds.

    ITL is the gap between consecutive token-bearing events (vLLM ``benchmark_serving``).
    Every value is finite and ``>= 0``.
    """

    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    _count = field_validator("count")(_non_negative_count)
    _ms = field_validator("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")(_non_negative_ms)


class Timings(_Record):
    """Timings of one response, milliseconds from when the request was sent.

    * ``ttfb_ms``: first response byte.
    * ``ttft_ms``: first content, reasoning or tool-call token (a role-only first chunk
      does not count); ``None`` for a non-streamed response.
    * ``ttfc_ms``: time to first *content*: the first event carrying visible output, a
      non-empty ``delta.content`` (or legacy ``text``) or a tool-call fragment; reasoning
      (``delta.reasoning_content`` / ``delta.reasoning``) does not count, so for a
      reasoning model TTFC − TTFT is the time spent thinking before the answer shows.
      For a non-streamed response it equals ``e2e_ms`` (nothing shows before the whole
      body); ``None`` for a stream that never carried content (e.g. only reasoning, or
      records written before this field existed).
    * ``e2e_ms``: last token-bearing event (a usage-only chunk does not count); for a
      non-streamed response, the end of the body.
    * ``tpot_ms``: (e2e − TTFT) / (output tokens − 1); ``None`` with ≤ 1 output token or
      unknown token count.

    Every duration is ``None`` or a finite number ``>= 0`` (a negative or infinite one is
    refused naming the field and the value: a clock cannot run backwards).
    """

    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    ttfc_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    itl: LatencySummary | None = None
    source: TimingSource = TimingSource.MISSING

    _durations = field_validator("ttfb_ms", "ttft_ms", "ttfc_ms", "e2e_ms", "tpot_ms")(
        _non_negative_ms
    )


class HeaderPair(_Record):
    """One HTTP header (name lower-cased)."""

    name: str
    value: str


class RequestRecord(_Record):
    """An HTTP request as captured, after redaction.

    ``body`` is the raw body as UTF-8 text, or base64 when ``body_encoding`` says so
    (standard alphabet, padded, no white space: :func:`decode_base64_body`). A base64 body
    that does not decode is refused when the record is validated, so every record that
    exists has a body :meth:`body_bytes` can return. :meth:`json_body` gives the parsed view.
    """

    method: str = "POST"
    path: str = "/v1/chat/completions"
    headers: tuple[HeaderPair, ...] = ()
    body: str
    body_encoding: Literal["utf-8", "base64"] = "utf-8"

    @model_validator(mode="after")
    def _body_decodes(self, info: ValidationInfo) -> RequestRecord:
        if self.body_encoding == "base64" and _checks_values(info):
            try:
                decode_base64_body(self.body)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(
                    f"request.body is not valid base64 (body_encoding is 'base64'): {exc}; "
                    f"body {self.body[:40]!r}{'…' if len(self.body) > 40 else ''} "
                    f"({len(self.body)} characters)"
                ) from None
        return self

    def body_bytes(self) -> bytes:
        """Return the raw body bytes.

        Raises:
            ValueError: a base64 body that does not decode (only in a record read back
                with the :data:`STORED` context, which skips that check), or a text body
                holding lone surrogates (not encodable as UTF-8).
        """
        if self.body_encoding == "base64":
            return decode_base64_body(self.body)
        return self.body.encode("utf-8")

    @cached_property
    def _parsed(self) -> Any:
        import orjson

        try:
            return orjson.loads(self.body_bytes())
        except orjson.JSONDecodeError:
            return None

    def json_body(self) -> dict[str, Any] | None:
        """Return the body parsed as a JSON object, or ``None`` if it is not one."""
        parsed = self._parsed
        return parsed if isinstance(parsed, dict) else None


class ResponseRecord(_Record):
    """A response as received and reassembled.

    ``body`` holds the raw body after content-decoding (the SSE text for a stream), or
    ``None`` when it was not kept. ``text`` is choice 0's reassembled content.

    ``cache_hit`` is true when a response header matched one of the configured cache-hit
    rules (:class:`shadoweval.config.CacheHitRule`, evaluated by
    :func:`shadoweval.cache_hits.mark_cache_hit`): the answer was served from a cache
    (``X-Cache: HIT``, ``CF-Cache-Status: HIT``, ``Age: 12`` …), so its timings say
    nothing about the model and it is left out of the latency checks.
    ``cache_hit_headers`` are the matched headers (name lower-cased, value as received);
    empty exactly when ``cache_hit`` is false.

    ``response_id`` is the server's id of a Responses API answer (``resp_…``), which a later
    request names as ``previous_response_id`` (the replay rebuilds that conversation from
    it); ``None`` for other routes and for records written before it existed.
    """

    status_code: int
    headers: tuple[HeaderPair, ...] = ()
    body: str | None = None
    streamed: bool = False
    model: str | None = None
    text: str | None = None
    reasoning_text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason_raw: str | None = None
    finish_reason: FinishReason = FinishReason.UNKNOWN
    usage: Usage = Usage()
    choices_count: int = 1
    error_message: str | None = None
    cache_hit: bool = False
    cache_hit_headers: tuple[HeaderPair, ...] = ()
    response_id: str | None = None

    _ints = field_validator("status_code", "choices_count")(_int64)

    @model_validator(mode="after")
    def _cache_hit_has_headers(self) -> ResponseRecord:
        if self.cache_hit != bool(self.cache_hit_headers):
            raise ValueError(
                f"cache_hit is {self.cache_hit} but cache_hit_headers has "
                f"{len(self.cache_hit_headers)} header(s): a cache hit names the headers "
                "that matched, and only a cache hit does"
            )
        return self


class RedactionHit(_Record):
    """One redaction rule that fired: which rule, where, how often (never the value)."""

    rule: str
    location: str
    count: int


class RedactionReport(_Record):
    """What redaction removed from an exchange (or a replay outcome) before it was written.

    ``rules_version``: the body rules the text passed
    (:attr:`shadoweval.body_redaction.BodyRedactor.version`); set on replay outcomes by the
    store (issue 30), ``None`` where not recorded (the live side, older records).
    """

    headers_removed: tuple[str, ...] = ()
    hits: tuple[RedactionHit, ...] = ()
    rules_version: str | None = None


class OversizeNote(_Record):
    """Set when an exchange was larger than the transport's maximum message size.

    ``action``: ``raw_body_dropped`` — the raw response body was left out (the reassembled
    text, tool calls and usage are kept); ``offloaded`` — the full record was written to
    ``offload_ref`` (a one-line capture-log file) and the record carried on the transport
    is a stub without request or response bodies. Sizes are of the serialized record.
    """

    original_bytes: int
    limit_bytes: int
    action: Literal["raw_body_dropped", "offloaded"]
    offload_ref: str | None = None

    _sizes = field_validator("original_bytes", "limit_bytes")(_non_negative_count)


# ---------------------------------------------------------------------- records


class Exchange(_Record):
    """One request that reached the capture point, whatever its outcome (DESIGN §4).

    ``response`` is ``None`` when no response started (e.g. cancelled before headers);
    ``error_detail`` then says why (an upstream connection failure, redacted), and
    ``response.error_message`` carries it when a response did start.
    ``source`` says where the record came from (``"sidecar:<host>"``,
    ``"import:<file>#<row>"``). ``served_by`` is the Envoy cluster that answered the
    request under the Envoy front end's canary split (``live_model`` = the baseline,
    ``candidate_model`` = the candidate; :mod:`shadoweval.capture.canary_split`), ``None`` outside a
    canary split or when unknown.

    Value rules (each refusal names the field and the value): ``exchange_id`` is 1–200
    characters without white space or control characters; ``task_type`` is not blank
    (empty or white space only: refused, never turned into ``default`` — a record that
    says nothing about its task type is a broken record) and, like ``route`` and
    ``source``, holds no control characters (they are database columns, and PostgreSQL
    text cannot hold NUL).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    exchange_id: str = Field(default_factory=new_exchange_id)
    captured_at: AwareDatetime = Field(default_factory=utc_now)
    monotonic_start_ns: int | None = None
    route: str = "/v1/chat/completions"
    task_type: str = "default"
    session_key_hash: str | None = None
    request: RequestRecord
    response: ResponseRecord | None = None
    timings: Timings = Timings()
    outcome: ExchangeOutcome = ExchangeOutcome.DONE
    baseline_model: ModelIdentity
    redaction: RedactionReport = RedactionReport()
    source: str | None = None
    oversize: OversizeNote | None = None
    error_detail: str | None = None
    served_by: str | None = None

    _monotonic = field_validator("monotonic_start_ns")(_int64)

    @field_validator("exchange_id")
    @classmethod
    def _valid_id(cls, value: str, info: ValidationInfo) -> str:
        if not _checks_values(info):
            return value
        if not 1 <= len(value) <= MAX_EXCHANGE_ID_CHARS:
            raise ValueError(
                f"exchange_id must have 1–{MAX_EXCHANGE_ID_CHARS} characters, got "
                f"{len(value)} ({value[:40]!r})"
            )
        bad = [ch for ch in value if ch.isspace() or unicodedata.category(ch) == "Cc"]
        if bad:
            raise ValueError(
                f"exchange_id {value[:80]!r} holds white space or control characters "
                f"{sorted(set(bad))!r}"
            )
        return value

    @field_validator("task_type")
    @classmethod
    def _valid_task_type(cls, value: str, info: ValidationInfo) -> str:
        if not _checks_values(info):
            return value
        if is_blank(value):  # also a zero width space alone: it would print as nothing
            raise ValueError(f"task_type must not be blank, got {value!r}")
        return _no_control_characters(value, "task_type")

    @field_validator("route", "source", "served_by")
    @classmethod
    def _printable(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not _checks_values(info):
            return value
        return _no_control_characters(value, info.field_name or "value")


MAX_EXCHANGE_ID_CHARS = 200
"""Longest ``exchange_id`` accepted."""


def _no_control_characters(value: str, name: str) -> str:
    bad = _control_characters(value)
    if bad:
        raise ValueError(f"{name} {value[:80]!r} holds control characters {bad!r}")
    return value


class ReplayOutcome(_Record):
    """The result of replaying one exchange to one shadow target.

    ``error_kind`` is set when no usable response came back (timeout, connect,
    http_status, decode) or the exchange was deliberately not sent (``skipped``,
    ``error_detail`` says why). ``pinned_params`` are the sampling parameters copied from
    the captured request; ``missing_params`` names those the captured request did not
    set (they are recorded as missing, never invented). ``warmup`` outcomes are replayed
    and stored but excluded from latency statistics. ``co_timed``: sent together with the
    other target's replay of the same exchange (candidate and baseline replica started at
    the same moment, or back to back at concurrency 1; issue 29 item 2) — the pairs whose
    latencies were measured under the same conditions. ``sent_at``: the wall-clock moment
    the request was handed to the client (before its first attempt; ``None`` when not
    sent, or for records written before the field): the replay order, which the latency
    checks read for serial dependence between pairs in flight together. ``redaction``:
    what the body rules replaced before the outcome was stored, and their version
    (:mod:`shadoweval.outcome_redaction`; ``None`` for records stored before issue 30).
    ``translated_to``: the route the request was sent to when the replay translated it to
    another API for this target (``/v1/chat/completions`` for a captured ``/v1/messages``,
    ``replay.candidate_translate``); ``None`` when it went to the captured route. What the
    translation dropped is in ``missing_params``.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    exchange_id: str
    target: ReplayTarget = ReplayTarget.CANDIDATE
    attempt: int = 1
    model: ModelIdentity
    pinned_params: dict[str, JsonValue] = Field(default_factory=dict)
    missing_params: tuple[str, ...] = ()
    response: ResponseRecord | None = None
    timings: Timings = Timings()
    error_kind: ReplayErrorKind | None = None
    error_detail: str | None = None
    warmup: bool = False
    co_timed: bool = False
    sent_at: AwareDatetime | None = None
    replayed_at: AwareDatetime = Field(default_factory=utc_now)
    redaction: RedactionReport | None = None
    translated_to: str | None = None


@dataclass(frozen=True, slots=True)
class CapturedTokens:
    """The usage counts the capture and the replay stored for one pair (``None``: none).

    Read by the judge's cost estimate (:func:`shadoweval.judge.cost.estimate_pair`) from a
    stored sample (:attr:`shadoweval.storage.samples.Sample.tokens`).

    Attributes:
        request_prompt_tokens: the live response's ``usage.prompt_tokens``.
        baseline_completion_tokens: the live response's ``usage.completion_tokens``.
        candidate_completion_tokens: the replayed response's ``usage.completion_tokens``.
    """

    request_prompt_tokens: int | None = None
    baseline_completion_tokens: int | None = None
    candidate_completion_tokens: int | None = None
