"""Stage-to-stage records: Exchange, ReplayOutcome, PairScore, Verdict.

These are the internal, strict records of DESIGN.md §4. They are frozen pydantic v2
models with ``extra="forbid"`` and a ``schema_version`` so that they cross process
boundaries (capture-log lines, Kafka payloads, database JSON columns) unchanged.
The lenient reading of what real servers send happens earlier, in
:mod:`shadoweval.llm_protocol`.

Conventions: durations are float milliseconds in fields ending ``_ms``; sizes end in
``_bytes``; wall-clock instants end in ``_at`` and are timezone-aware UTC; monotonic
clock readings end in ``_ns`` and are only comparable inside one process.
"""

from __future__ import annotations

import base64
import binascii
import enum
import math
import unicodedata
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    field_validator,
    model_validator,
)
from ulid import ULID

from shadoweval.text import is_blank

SCHEMA_VERSION: Literal[1] = 1
"""Version of every record shape in this module; bump on incompatible change."""

POOLED = "__pooled__"
"""Task-type label of a check computed over all task types together."""


def new_exchange_id() -> str:
    """Return a new sortable unique id (a ULID: 48-bit ms timestamp + 80 random bits)."""
    return str(ULID())


def utc_now() -> datetime:
    """Return the current wall-clock time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


STORED: dict[str, bool] = {"stored": True}
"""Validation context for records read back from storage
(``Exchange.model_validate(row.record, context=STORED)``).

The value rules of this module (non-negative timings and token counts, a body that decodes
as its ``body_encoding`` says, a non-blank task type, ids without control characters) are
checked wherever a record enters: a capture-log line, a Kafka record, a record built in
code. A record already stored was accepted once; reading it back with this context skips
those rules, so a database written before a rule existed stays readable (its shape is
still checked)."""


def _checks_values(info: ValidationInfo) -> bool:
    """False when validating with the :data:`STORED` context."""
    context = info.context
    return not (isinstance(context, dict) and context.get("stored") is True)


def decode_base64_body(body: str) -> bytes:
    """The bytes of a base64 request body (standard alphabet, padded, no white space).

    Raises:
        ValueError: ``body`` is not valid base64 (a :class:`binascii.Error`).
    """
    return base64.b64decode(body, validate=True)


def _control_characters(text: str) -> list[str]:
    """The control characters (Unicode category ``Cc``: NUL, tab, newline …) in ``text``."""
    return sorted({ch for ch in text if unicodedata.category(ch) == "Cc"})


def _non_negative_ms(value: float | None, info: ValidationInfo) -> float | None:
    if value is None or not _checks_values(info):
        return value
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{info.field_name} must be a finite number of milliseconds >= 0, got {value!r}"
        )
    return value


INT64_MAX = 2**63 - 1
"""Largest integer a record holds (a database column and every JSON reader take 64 bits)."""


def _int64(value: int | None, info: ValidationInfo) -> int | None:
    if value is None or not _checks_values(info):
        return value
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(
            f"{info.field_name} must fit in 64 bits, got an integer of {len(str(value))} digits"
        )
    return value


def _non_negative_count(value: int | None, info: ValidationInfo) -> int | None:
    if value is None or not _checks_values(info):
        return value
    if not 0 <= value <= INT64_MAX:
        shown = value if value < 0 else f"an integer of {len(str(value))} digits"
        raise ValueError(f"{info.field_name} must be >= 0 and fit in 64 bits, got {shown}")
    return value


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- enums


class FinishReason(enum.StrEnum):
    """Normalized ``finish_reason``; the raw value is always kept beside it."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    ABORT = "abort"
    UNKNOWN = "unknown"


class UsageSource(enum.StrEnum):
    """Where token counts came from. ``missing`` is never silently turned into 0."""

    REPORTED = "reported"
    MISSING = "missing"


class TimingSource(enum.StrEnum):
    """How a response's timings were obtained."""

    MEASURED = "measured"
    """Measured on a monotonic clock by our own reader (sidecar or replay client)."""
    RECORDED = "recorded"
    """Copied from an imported table (e.g. a benchmark harness's latency column)."""
    MISSING = "missing"
    """No timing is known."""


class ExchangeOutcome(enum.StrEnum):
    """How a captured request ended on the live path."""

    DONE = "done"
    ERROR = "error"
    CANCELLED = "cancelled"
    TRUNCATED = "truncated"


class ReplayTarget(enum.StrEnum):
    """Which shadow replica a replay went to."""

    CANDIDATE = "candidate"
    BASELINE_REPEAT = "baseline_repeat"


class ReplayErrorKind(enum.StrEnum):
    """Why a replay produced no usable response. Failures are data, never dropped."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    DECODE = "decode"
    SKIPPED = "skipped"


class Decision(enum.StrEnum):
    """Gate decision. PROMOTE and ROLLBACK are terminal for a run."""

    PROMOTE = "promote"
    HOLD = "hold"
    ROLLBACK = "rollback"


class CheckOutcome(enum.StrEnum):
    """Outcome of one check (one metric in one task type)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


# ----------------------------------------------------------------- shared parts


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
    """What redaction removed from an exchange before it was written anywhere."""

    headers_removed: tuple[str, ...] = ()
    hits: tuple[RedactionHit, ...] = ()


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
    and stored but excluded from latency statistics.
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
    replayed_at: AwareDatetime = Field(default_factory=utc_now)


class FormatFlags(_Record):
    """Four separate JSON format results for one side of a pair.

    * ``strict``: the whole output parses as JSON.
    * ``fence_stripped``: parses after removing one enclosing json/bare code fence.
    * ``extracted``: the first JSON object or array found in the surrounding text parses.
    * ``schema_valid``: the best parsed value validates against the requested JSON schema;
      ``None`` when no schema was given.
    """

    strict: bool
    fence_stripped: bool
    extracted: bool
    schema_valid: bool | None = None
    detail: str | None = None


class ToolCallFlags(_Record):
    """Tool-call checks for one side: every call's arguments parse / match its schema."""

    calls: int
    arguments_parse: bool
    schema_valid: bool
    unknown_tool: bool = False
    detail: str | None = None


class SimilarityDetail(_Record):
    """How a similarity was computed: wordpiece counts and chunks per side.

    Outputs longer than the encoder's window are chunked and mean-pooled, never silently
    truncated; ``truncated`` is true only if some text was cut (it should stay false).

    ``baseline_script`` / ``candidate_script``: the script most of that answer's letters
    are in (:func:`shadoweval.text.dominant_script`: ``Latin``, ``Han``, ``Cyrillic`` …;
    ``None`` for an answer too short to tell). ``uncovered_scripts``: those of the two
    that the embedding model is not declared to cover (``compare.model_scripts``), sorted;
    the gate warns about such pairs, since their similarity may not measure change.
    ``None`` / ``()`` in scores stored before scripts were detected.
    """

    baseline_tokens: int
    candidate_tokens: int
    baseline_chunks: int
    candidate_chunks: int
    truncated: bool = False
    method: str = "cosine_mean_pooled_chunks"
    baseline_script: str | None = None
    candidate_script: str | None = None
    uncovered_scripts: tuple[str, ...] = ()


class HarmKind(enum.StrEnum):
    """A directional harm that a detector finds in one side's answer.

    Each is a yes/no fact about one side (baseline or candidate) of one pair, set by
    :mod:`shadoweval.compare.harms` at scoring time (definitions, thresholds and sources there) and
    gated as a paired binary check (:mod:`shadoweval.stats.checks.harms`): harm is the candidate
    showing it where the baseline did not, more often than the reverse.
    """

    DEGENERATION = "degeneration"
    """A repetition loop: the answer repeats one n-gram or line far beyond normal prose."""
    RUNAWAY_LENGTH = "runaway_length"
    """The answer was cut by its token budget (``finish_reason = length`` or
    ``max_tokens`` reached). The gate adds the policy's length-ratio bound."""
    REFUSAL = "refusal"
    """The answer refuses or deflects (a documented, configurable pattern set)."""
    MISSING_FINISH_REASON = "missing_finish_reason"
    """The answer ended without a ``finish_reason`` (a truncated stream)."""
    TEMPLATE_MARKERS = "template_markers"
    """Chat-template markers (``[/INST]``, ``<|im_end|>``, ``<</SYS>>`` …) in the answer."""
    LANGUAGE_SWITCH = "language_switch"
    """The answer is written in another script or language than the prompt."""
    PLACEHOLDER_JSON = "placeholder_json"
    """Valid JSON that says nothing: ``{}``/``[]``, or missing the schema's required fields."""


class ToolChange(enum.StrEnum):
    """How the candidate's tool behaviour differs from the baseline's on one pair.

    Set by :func:`shadoweval.compare.harms.tool_changes` where the request offered tools and neither
    side errored; arguments are compared after JSON normalisation.
    """

    TEXT_INSTEAD_OF_CALL = "text_instead_of_call"
    """The baseline called a tool; the candidate answered in text."""
    CALL_INSTEAD_OF_TEXT = "call_instead_of_text"
    """The baseline answered in text; the candidate called a tool."""
    FUNCTION_CHANGED = "function_changed"
    """Both called tools, but not the same multiset of function names."""
    ARGUMENTS_CHANGED = "arguments_changed"
    """The same functions, but some call's normalised arguments differ."""
    ORDER_CHANGED = "order_changed"
    """The same calls with the same arguments, in another order."""


class SidePair(_Record):
    """A value measured on the baseline and on the candidate."""

    baseline: float | None = None
    candidate: float | None = None


class PairScore(_Record):
    """Scores of one captured exchange against its candidate replay in one run.

    ``similarity`` is the cosine similarity of the two outputs' embeddings (in [-1, 1]):
    ``None`` when either side errored (errors are gated separately), 1.0 when both outputs
    are empty, 0.0 when exactly one is.
    ``noise_similarity`` is baseline vs baseline-repeat, when one exists. ``streamed``
    tells whether the captured request asked for a stream (TTFT exists only then).

    Errors come in two kinds (:func:`is_infra_failure`): an *infrastructure* error
    (``*_infra_error``: timeout, connection failure, HTTP 408/429/5xx, an undecodable body,
    a cancelled live request) says nothing about the model's quality and is gated
    separately; any other error (``*_error`` without ``*_infra_error``: the server
    rejected the request with another 4xx) is the model's or its serving config's.

    Direction (:mod:`shadoweval.compare.harms`): ``baseline_harms`` / ``candidate_harms`` list the
    :class:`HarmKind` detectors that fired on each side (empty for an errored side);
    ``tool_changes`` how the candidate's tool calls differ from the baseline's;
    ``output_chars`` each side's answer length in characters (content plus rendered tool
    calls); ``sampled`` whether the request sampled (temperature > 0 or not given: the
    server's default samples; ``False`` only for temperature 0; ``None`` when the body
    could not be read); ``noise_identical`` whether the baseline repeat returned exactly
    the captured answer (``None`` without a usable repeat) — the degenerate-noise-floor
    test of :mod:`shadoweval.stats.change` reads it.

    Latency: ``ttft_ms``, ``ttfc_ms`` (time to first visible content,
    :class:`Timings`) and ``e2e_ms`` of each side; the baseline's come from the source
    ``latency_baseline_source`` names. ``baseline_cache_hit`` / ``candidate_cache_hit``:
    that side's answer (for the baseline, the response its latency was taken from) was
    served from a cache (:attr:`ResponseRecord.cache_hit`); the gate leaves such a pair
    out of every latency check and counts it (quality checks still use it).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    exchange_id: str
    task_type: str
    captured_at: AwareDatetime
    similarity: float | None = None
    similarity_detail: SimilarityDetail | None = None
    noise_similarity: float | None = None
    streamed: bool = False
    format_expected: bool = False
    baseline_format: FormatFlags | None = None
    candidate_format: FormatFlags | None = None
    baseline_tools: ToolCallFlags | None = None
    candidate_tools: ToolCallFlags | None = None
    baseline_error: bool = False
    candidate_error: bool = False
    baseline_infra_error: bool = False
    candidate_infra_error: bool = False
    candidate_error_kind: ReplayErrorKind | None = None
    baseline_empty: bool = False
    candidate_empty: bool = False
    baseline_finish_reason: FinishReason = FinishReason.UNKNOWN
    candidate_finish_reason: FinishReason = FinishReason.UNKNOWN
    output_token_ratio: float | None = None
    output_tokens: SidePair = SidePair()
    output_tokens_baseline_source: Literal["live", "baseline_repeat", "missing"] = "live"
    prompt_token_ratio: float | None = None
    template_leaks: tuple[str, ...] = ()
    ttft_ms: SidePair = SidePair()
    ttfc_ms: SidePair = SidePair()
    e2e_ms: SidePair = SidePair()
    baseline_cache_hit: bool = False
    candidate_cache_hit: bool = False
    latency_baseline_source: Literal["live", "recorded", "baseline_repeat", "missing"] = "missing"
    candidate_warmup: bool = False
    baseline_harms: tuple[HarmKind, ...] = ()
    candidate_harms: tuple[HarmKind, ...] = ()
    tool_changes: tuple[ToolChange, ...] = ()
    output_chars: SidePair = SidePair()
    sampled: bool | None = None
    noise_identical: bool | None = None
    scored_at: AwareDatetime = Field(default_factory=utc_now)


INFRA_HTTP_STATUSES: frozenset[int] = frozenset({408, 429})
"""HTTP statuses below 500 that mean the server could not answer now, not a rejection."""


def is_infra_status(status_code: int) -> bool:
    """True for HTTP statuses that are infrastructure failures: 408, 429 and every 5xx."""
    return status_code >= 500 or status_code in INFRA_HTTP_STATUSES


def is_infra_failure(error_kind: ReplayErrorKind | None, status_code: int | None) -> bool:
    """Whether a failed replay failed for infrastructure reasons (reference failure case 11).

    Timeouts, connection failures and undecodable bodies are infrastructure; an HTTP
    failure is infrastructure when its status is 408, 429 or 5xx. A skipped replay is not a
    failure at all (it was never sent). ``None`` kind with an infra status counts too.
    """
    if error_kind in (ReplayErrorKind.TIMEOUT, ReplayErrorKind.CONNECT, ReplayErrorKind.DECODE):
        return True
    return status_code is not None and is_infra_status(status_code)


class Check(_Record):
    """One gate check: one metric in one task type (or pooled).

    ``estimate`` and the interval are on the metric's own scale (a difference in
    proportions, a mean divergence, a quantile ratio); ``margin`` is the policy's
    threshold on that scale; ``p_value`` is one-sided unless ``statistic`` says otherwise.
    """

    metric: str
    task_type: str
    statistic: str
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    margin: float | None = None
    n: int = 0
    p_value: float | None = None
    outcome: CheckOutcome
    reason: str
    critical: bool = False


class RouteCoverage(_Record):
    """One route's part of a run's coverage (:attr:`Coverage.per_route`).

    ``captured``: the run's exchanges on the route; ``replayed``: candidate replays sent;
    ``skipped``: candidate outcomes deliberately not sent, with ``skip_reasons`` (reason →
    count; a reason is the skip detail up to its first ``": "`` when that names a number,
    e.g. ``size``); ``paired``: scored pairs. A captured route with no pair is traffic the
    gate did not evaluate.
    """

    captured: int
    replayed: int = 0
    skipped: int = 0
    paired: int = 0
    skip_reasons: dict[str, int] = Field(default_factory=dict)


class ReplayPace(enum.StrEnum):
    """How a replay spaced its request starts."""

    UNPACED = "unpaced"
    """As fast as the concurrency allows."""
    RATE = "rate"
    """``--rate``: starts ``1 / rate`` seconds apart."""
    CAPTURE = "capture"
    """``--pace capture``: at the captured inter-arrival times, divided by ``--pace-speed``."""


RATE_SHORTFALL_SHARE = 0.95
"""A replay whose measured requests started at less than this share of the asked rate ran
under a different load than asked: its latency checks say so."""
MIN_RATE_STARTS = 20
"""Fewer measured starts than this in a replay pass make no achieved rate (a resumed pass
that sent a handful of requests says nothing about the load)."""


class ReplayPass(_Record):
    """One replay pass over a run's source (a capture log to its end, or one Kafka worker's
    life): how its starts were paced, and the load the measured requests saw.

    ``asked_rate_per_s``: ``--rate``, or for ``--pace capture`` the captured arrival rate
    of the measured requests times ``pace_speed``; ``None`` unpaced. ``achieved_rate_per_s``:
    the start rate of the measured (not warm-up, not skipped) requests, (n − 1) / (last
    start − first start); ``None`` with fewer than 2. ``warmup_starts``: warm-up requests,
    sent and completed before the first measured one of their target.
    """

    source: Literal["capture_log", "kafka"]
    pace: ReplayPace = ReplayPace.UNPACED
    pace_speed: float | None = None
    asked_rate_per_s: float | None = None
    achieved_rate_per_s: float | None = None
    measured_starts: int = 0
    warmup_starts: int = 0
    finished_at: AwareDatetime = Field(default_factory=utc_now)

    @property
    def shortfall(self) -> bool:
        """The measured requests started at less than :data:`RATE_SHORTFALL_SHARE` of the
        asked rate (on at least :data:`MIN_RATE_STARTS` starts)."""
        return (
            self.asked_rate_per_s is not None
            and self.asked_rate_per_s > 0
            and self.achieved_rate_per_s is not None
            and self.measured_starts >= MIN_RATE_STARTS
            and self.achieved_rate_per_s < RATE_SHORTFALL_SHARE * self.asked_rate_per_s
        )

    def describe_load(self) -> str:
        """``"13.9 req/s of 500 asked"`` (the achieved and asked start rates)."""
        achieved = self.achieved_rate_per_s or 0.0
        asked = self.asked_rate_per_s or 0.0
        how = (
            f" (--pace capture at speed {self.pace_speed:g})"
            if self.pace is ReplayPace.CAPTURE
            else ""
        )
        return f"{achieved:.3g} req/s of {asked:.4g} asked{how}"


class Coverage(_Record):
    """How much of the capture log the run actually compared.

    ``captured`` counts every line of the run's capture log: the decoded exchanges (their
    task types in ``per_task_type``) plus the ``rejected`` lines that could not be decoded.
    ``share`` = ``paired`` / ``captured``: an unreadable line or a skipped replay lowers it.

    ``replayed``, ``errored``, ``warmup`` and ``skipped`` count candidate outcomes.
    ``baseline_repeat_replayed`` counts the baseline-repeat outcomes that were sent (not
    skipped) and ``baseline_repeat_errored`` those of them with an error: a run whose
    design includes baseline repeats (``baseline_repeat_replayed > 0``) is judged against
    the noise floor even when every repeat failed (0 for records written before these
    counts existed).

    ``per_route``: the same counts by route (:class:`RouteCoverage`; the route without a
    trailing slash), so traffic on a route that was captured but never replayed is named;
    ``paired_per_task_type``: scored pairs by task type (beside ``per_task_type``, the
    captured ones); ``replay_passes``: how each replay pass was paced and the load its
    measured requests saw (:class:`ReplayPass`). Empty in records written before they
    existed.
    """

    captured: int
    replayed: int
    paired: int
    errored: int
    warmup: int
    skipped: int
    share: float
    per_task_type: dict[str, int] = Field(default_factory=dict)
    rejected: int = 0
    baseline_repeat_replayed: int = 0
    baseline_repeat_errored: int = 0
    per_route: dict[str, RouteCoverage] = Field(default_factory=dict)
    paired_per_task_type: dict[str, int] = Field(default_factory=dict)
    replay_passes: tuple[ReplayPass, ...] = ()

    def unevaluated_routes(self) -> dict[str, RouteCoverage]:
        """Routes with captured exchanges and not one scored pair, by name."""
        return {
            route: counts
            for route, counts in sorted(self.per_route.items())
            if counts.captured > 0 and counts.paired == 0
        }

    def load_shortfalls(self) -> tuple[ReplayPass, ...]:
        """The replay passes whose measured requests started below the asked rate
        (:attr:`ReplayPass.shortfall`), the worst (lowest achieved / asked) first."""
        short = [p for p in self.replay_passes if p.shortfall]
        return tuple(
            sorted(short, key=lambda p: (p.achieved_rate_per_s or 0) / (p.asked_rate_per_s or 1))
        )


class LatencyCacheHits(_Record):
    """Pairs of a verdict's look left out of the latency checks because an answer was
    served from a cache (:attr:`PairScore.baseline_cache_hit` /
    :attr:`PairScore.candidate_cache_hit`).

    ``pairs`` counts pairs with a cache hit on either side; ``baseline`` and
    ``candidate`` count the sides (a pair cached on both sides counts in both, once in
    ``pairs``). Counted over all the look's pairs, before any other latency exclusion
    (each latency check's reason says how many of its own unit's pairs it left out).
    """

    pairs: int = 0
    baseline: int = 0
    candidate: int = 0


class Verdict(_Record):
    """A gate decision with one check per task type × metric (DESIGN §4).

    ``look`` is the checkpoint index of the pairs judged. Quality judgements (judge,
    human, reference) keep arriving after a checkpoint's pairs are fixed, so a look is
    re-evaluated when they change: ``judgements_sha256`` fingerprints the resolved
    judgements of the look's pairs and ``judgement_look`` counts the evaluations of this
    look with different judgements (1 for the first); the net-harm check spends its level
    over them (:mod:`shadoweval.stats.net_harm`). 0 / ``None`` in verdicts stored before judgements
    existed. ``latency_cache_hits`` counts the pairs left out of latency because an
    answer came from a cache (zeros in verdicts stored before it existed).
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    decided_at: AwareDatetime = Field(default_factory=utc_now)
    decision: Decision
    reasons: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    coverage: Coverage
    policy_hash: str
    look: int = 1
    judgement_look: int = 0
    judgements_sha256: str | None = None
    latency_cache_hits: LatencyCacheHits = LatencyCacheHits()


class LabelValue(enum.StrEnum):
    """An analyst's judgement of one pair: how the candidate's answer compares."""

    CANDIDATE_BETTER = "candidate_better"
    CANDIDATE_WORSE = "candidate_worse"
    SAME = "same"
    BOTH_BAD = "both_bad"


class HumanLabel(_Record):
    """One analyst's label of one pair (exchange) in one run.

    A pair has at most one label per ``labeller``; labelling again replaces it.
    ``source`` says whether it was given in the dashboard or imported from a labelled
    export; ``labelled_at`` is UTC.
    """

    run_id: str
    exchange_id: str
    task_type: str
    label: LabelValue
    note: str = ""
    labeller: str = Field(min_length=1)
    labelled_at: AwareDatetime = Field(default_factory=utc_now)
    source: Literal["dashboard", "import"]


class QualityOutcome(enum.StrEnum):
    """Which answer of a pair is better, as a judge, an analyst or a reference checker says."""

    CANDIDATE_BETTER = "candidate_better"
    CANDIDATE_WORSE = "candidate_worse"
    TIE = "tie"


class JudgementSource(enum.StrEnum):
    """Where a pair's quality judgement came from.

    When several exist for one pair the gate uses, in order: ``human`` (an analyst's label
    overrides everything), ``reference`` (a ground-truth checker's per-side pass/fail),
    ``judge`` (an LLM judge) — :func:`shadoweval.stats.judgements.resolve_judgements`.
    """

    JUDGE = "judge"
    HUMAN = "human"
    REFERENCE = "reference"


class JudgeIdentity(_Record):
    """Who judged: frozen with the run's policy (a different judge is refused).

    ``endpoint`` is the judge's base URL with credentials and query removed;
    ``prompt_sha256`` the SHA-256 of the pairwise prompt template; the sampling
    parameters sent with every judge request.
    """

    endpoint: str
    model: str
    prompt_sha256: str
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int | None = None


class JudgeVote(_Record):
    """One judge call on one pair in one presentation order.

    ``order`` says which answer was shown first (as "Answer A"); ``preferred`` is the
    judge's choice mapped back to the sides (``None`` when the call failed or its answer
    did not parse: ``error`` says why). Token counts are the judge's own usage, kept apart
    from the run's accounting.
    """

    order: Literal["baseline_first", "candidate_first"]
    preferred: Literal["candidate", "baseline", "tie"] | None = None
    rationale: str = ""
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class PairJudgement(_Record):
    """A quality judgement of one pair in one run, from one source.

    ``outcome`` is ``None`` when the judgement failed (kept as data: ``error`` says why;
    the estimator treats the pair as not judged). A judge's judgement carries both
    ``votes`` (each order once; orders that disagree make a tie: position bias) and its
    ``judge`` identity; a reference judgement carries ``baseline_pass`` /
    ``candidate_pass`` and the ``checker`` that produced them; a human one the
    ``labeller``. ``stratum`` is the divergence stratum the pair was sampled from (judge
    budget), ``None`` when not sampled.
    """

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    exchange_id: str
    task_type: str
    source: JudgementSource
    outcome: QualityOutcome | None = None
    rationale: str = ""
    votes: tuple[JudgeVote, ...] = ()
    judge: JudgeIdentity | None = None
    baseline_pass: bool | None = None
    candidate_pass: bool | None = None
    checker: str | None = None
    labeller: str | None = None
    stratum: int | None = None
    error: str | None = None
    judged_at: AwareDatetime = Field(default_factory=utc_now)
