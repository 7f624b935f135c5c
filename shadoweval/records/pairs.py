"""The compare stage's records: PairScore and its flags, harm kinds, tool changes."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import (
    AwareDatetime,
    Field,
)

from shadoweval.records.base import (
    _PairRecord,
    _Record,
    utc_now,
)
from shadoweval.records.enums import (
    FinishReason,
    ReplayErrorKind,
)
from shadoweval.records.environment import CONFIG_HTTP_STATUSES


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


class PairScore(_PairRecord):
    """Scores of one captured exchange against its candidate replay in one run.

    ``similarity`` is the cosine similarity of the two outputs' embeddings (in [-1, 1]):
    ``None`` when either side errored (errors are gated separately), 1.0 when both outputs
    are empty, 0.0 when exactly one is.
    ``noise_similarity`` is baseline vs baseline-repeat, when one exists. ``streamed``
    tells whether the captured request asked for a stream (TTFT exists only then).

    Errors come in two kinds (:func:`is_infra_failure`): an *infrastructure* error
    (``*_infra_error``: timeout, connection failure, HTTP 408/429/5xx, a configuration
    status 401/403/404/405/407, an undecodable body, a cancelled live request; for the
    candidate also a rejection repeated on most requests and a failure the baseline
    replica shares on the same exchange: :mod:`shadoweval.records.environment`) says
    nothing about the model's quality and is gated separately; any other error
    (``*_error`` without ``*_infra_error``: the server rejected the request with another
    4xx) is the model's or its serving config's.
    ``*_interrupted``: that side was an interrupted stream (HTTP 200, cut before its
    ``finish_reason``; :mod:`shadoweval.llm_protocol.interruption`), an infrastructure
    error; ``candidate_context_length``: the candidate failed at its own context window
    (a stream cut after content without finish or ``[DONE]``, or an HTTP error naming the
    context length), an infrastructure error that the gate's policy
    (``infra_error_rate.context_length``) may count as the candidate's instead.

    Direction (:mod:`shadoweval.compare.harms`): ``baseline_harms`` / ``candidate_harms`` list the
    :class:`HarmKind` detectors that fired on each side (empty for an errored side);
    ``tool_changes`` how the candidate's tool calls differ from the baseline's;
    ``output_chars`` each side's answer length in characters (content plus rendered tool
    calls); ``sampled`` whether the request sampled (temperature > 0 or not given: the
    server's default samples; ``False`` only for temperature 0; ``None`` when the body
    could not be read); ``noise_identical`` whether the baseline repeat returned exactly
    the captured answer (``None`` without a usable repeat) — the degenerate-noise-floor
    test of :mod:`shadoweval.stats.change` reads it. ``exact_differs``: where either
    answer is structured or short (JSON, tool calls, under ~40 tokens), whether their
    normalised exact forms differ (:func:`shadoweval.compare.exact.exact_differs`;
    ``None`` where neither is, a side errored, or the score predates the field): the
    gate counts such a pair as changed whatever its similarity says.

    Latency: ``ttft_ms``, ``ttfc_ms`` (time to first visible content,
    :class:`Timings`) and ``e2e_ms`` of each side; the baseline's come from the source
    ``latency_baseline_source`` names (``co_timed``: the baseline replica's replay sent
    together with the candidate's, the one control timed under the same conditions;
    ``baseline_repeat``: a replica replay that was not). ``baseline_cache_hit`` /
    ``candidate_cache_hit``:
    that side's answer (for the baseline, the response its latency was taken from) was
    served from a cache (:attr:`ResponseRecord.cache_hit`); the gate leaves such a pair
    out of every latency check and counts it (quality checks still use it).
    ``candidate_sent_at``: when the candidate's replay was sent
    (:attr:`ReplayOutcome.sent_at`; ``None`` unknown): the pairs' replay order, in which
    the latency checks account for serial dependence between pairs in flight together.
    """

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
    baseline_interrupted: bool = False
    candidate_interrupted: bool = False
    candidate_context_length: bool = False
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
    latency_baseline_source: Literal[
        "live", "recorded", "baseline_repeat", "missing", "co_timed"
    ] = "missing"
    candidate_warmup: bool = False
    candidate_sent_at: AwareDatetime | None = None
    baseline_harms: tuple[HarmKind, ...] = ()
    candidate_harms: tuple[HarmKind, ...] = ()
    tool_changes: tuple[ToolChange, ...] = ()
    output_chars: SidePair = SidePair()
    sampled: bool | None = None
    noise_identical: bool | None = None
    exact_differs: bool | None = None
    scored_at: AwareDatetime = Field(default_factory=utc_now)


INFRA_HTTP_STATUSES: frozenset[int] = frozenset({408, 429})
"""HTTP statuses below 500 that mean the server could not answer now, not a rejection."""


def is_infra_status(status_code: int) -> bool:
    """True for HTTP statuses that are the environment's failures, not the model's: 408,
    429 and every 5xx (the server could not answer now), and the configuration statuses
    401, 403, 404, 405, 407 (wrong path, model name or credential:
    :data:`~shadoweval.records.environment.CONFIG_HTTP_STATUSES`; issue 29)."""
    return (
        status_code >= 500
        or status_code in INFRA_HTTP_STATUSES
        or status_code in CONFIG_HTTP_STATUSES
    )


_INFRA_KINDS = frozenset(
    {
        ReplayErrorKind.TIMEOUT,
        ReplayErrorKind.CONNECT,
        ReplayErrorKind.DECODE,
        ReplayErrorKind.INTERRUPTED,
    }
)


def is_infra_failure(error_kind: ReplayErrorKind | None, status_code: int | None) -> bool:
    """Whether a failed replay failed for infrastructure reasons (reference failure case 11).

    Timeouts, connection failures, undecodable bodies and interrupted streams (HTTP 200
    cut before a ``finish_reason``, :mod:`shadoweval.llm_protocol.interruption`) are
    infrastructure; an HTTP failure is the environment's when :func:`is_infra_status` says
    so (408, 429, 5xx, and the configuration statuses 401/403/404/405/407). A skipped
    replay is not a failure at all (it was never sent). ``None`` kind with an infra
    status counts too.
    """
    if error_kind in _INFRA_KINDS:
        return True
    return status_code is not None and is_infra_status(status_code)
