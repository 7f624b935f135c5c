"""Score one captured exchange against its candidate replay: the PairScore record.

Pure: no I/O, no clock except ``PairScore.scored_at``. The compare worker reads pairs from
storage, calls :func:`score_pairs` with an :class:`~shadoweval.compare.encoders.Encoder`, and writes
the records back. Every field of :class:`~shadoweval.records.PairScore` is filled by the
rules below (one place, so the dashboard and the gate read the same definitions).

Errors are data, kept apart from quality (reference §4 case 11): a side that errored gets
no similarity, no format or tool flags and no output-token count, and the gate counts it
in its own error-rate check.

* **baseline error** — the live exchange did not end ``done``, has no response, or has
  HTTP status ≥ 400. **candidate error** — the replay has an ``error_kind``, no response,
  or HTTP status ≥ 400 (``candidate_error_kind`` is then ``http_status`` if the replay
  layer left it unset). **candidate infrastructure error** — the environment's failure,
  not the model's (:mod:`shadoweval.records.environment`): timeout, connection, undecodable
  body, HTTP 408/429/5xx or 401/403/404/405/407, a rejection repeated on most requests
  (``PairInput.repeated_rejection``), or a failure the baseline replica shares. An
  interrupted stream (either side) is an error too, and infrastructure. One rule
  (:mod:`shadoweval.llm_protocol.interruption`): a 2xx stream without a finish_reason was
  cut, never an empty or unfinished answer (an imported baseline is exempt: its table
  records no finish reasons). ``*_interrupted`` and ``candidate_context_length`` say
  why (:func:`~shadoweval.llm_protocol.interruption.failure_cause`).
* **empty** — no error, blank content (:func:`shadoweval.text.is_blank`: white space and
  invisible format characters such as U+200B only) and no tool calls.
* **similarity** — cosine of :func:`side_text` of both sides
  (:func:`shadoweval.compare.similarity.pairwise_similarity`), only when neither side errored;
  **noise_similarity** — baseline vs the baseline-repeat replay of the same request,
  when that replay exists without error (the noise floor, Diffy's primary/secondary).
* **format_expected** — the captured request asks for JSON (``response_format``
  ``json_object``/``json_schema``), offers tools, or its task type is listed in
  ``structured_task_types``. JSON flags (:func:`shadoweval.compare.formats.json_format_flags` of the
  content text, with the ``json_schema`` schema) are computed when JSON was asked or the
  task type is structured; tool flags (:func:`shadoweval.compare.tool_calls.tool_call_flags`) when
  the request offered tools.
* **tokens** — ``usage.completion_tokens`` per side (``None`` when not reported, never
  0; ``None`` for an errored side; a live answer without usage takes the baseline
  repeat's count, ``output_tokens_baseline_source`` says which), their ratio
  candidate/baseline when both are known and the baseline's is > 0;
  ``prompt_token_ratio`` likewise from ``prompt_tokens``, taken from any response
  that reports it (the prompt is the same whatever happened
  after), the tokenizer-change signal; ``None`` when the candidate was sent the request
  translated to another API (``ReplayOutcome.translated_to``): two APIs count prompt
  tokens differently (Anthropic's ``input_tokens`` leaves out cached tokens) and the
  translated prompt is not the same text.
* **template_leaks** — :func:`shadoweval.compare.leakage.template_leaks` of the candidate's side
text
  (content and tool-call arguments); empty when the candidate errored.
* **baseline_harms / candidate_harms** — :func:`shadoweval.compare.harms.side_harms` of each side
  that answered without error (empty for an errored side): degeneration, runaway length
  (``finish_reason`` ``length`` or ``completion_tokens`` ≥ the request's
  ``max_completion_tokens``/``max_tokens``), refusal (the configured patterns), missing
  ``finish_reason`` (not for an imported baseline, ``source`` ``import:…``: its table
  records none), template markers, language switch against the last user message, and
  placeholder JSON where JSON was checked (as for the format flags). Definitions,
  thresholds and sources in :mod:`shadoweval.compare.harms`.
* **tool_changes** — :func:`shadoweval.compare.harms.tool_changes` of the two sides' calls, when the
  request offered tools and neither side errored (else empty); always computed
  order-sensitive (the policy's ``tool_calls.order_free`` applies at gate time).
* **output_chars** — ``len`` of :func:`side_text` per side; ``None`` for an errored side.
* **sampled** — the captured request's ``temperature`` is absent, ``null`` or > 0
  (``True``: the server samples), exactly 0 (``False``); ``None`` when the body is not
  a JSON object or the temperature is not a non-negative number.
* **noise_identical** — the baseline-repeat replay's side text equals the captured
  baseline's, character for character; ``None`` without a repeat that answered without
  error, or when the baseline errored.
* **exact_differs** — :func:`shadoweval.compare.exact.exact_differs` of the two sides'
  content and tool calls (structured or short answers compared exactly after
  normalisation); ``None`` when either side errored or both are long prose.
* **latency** — candidate TTFT/TTFC/e2e from its replay; baseline from the
  baseline-repeat replay when one exists without error, not warm-up, with timings
  (``latency_baseline_source="co_timed"`` when both replays were sent together — equal
  hardware, load and moment — else ``"baseline_repeat"``), else from the
  live exchange (``live`` when measured by the sidecar, ``recorded`` when imported,
  ``missing`` when unknown). Timings are copied even for an errored or warm-up candidate;
  ``candidate_error`` and ``candidate_warmup`` tell the gate to leave them out.
  **baseline_cache_hit / candidate_cache_hit** — the response those timings came from
  was served from a cache (``ResponseRecord.cache_hit``); the gate leaves the pair out of
  latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from shadoweval.compare.encoders import Encoder
from shadoweval.compare.exact import exact_differs
from shadoweval.compare.formats import json_format_flags
from shadoweval.compare.harms import (
    RefusalPatterns,
    SideContext,
    compile_refusal_patterns,
    side_harms,
    tool_changes,
)
from shadoweval.compare.json_parse import canonical_json, parse_json
from shadoweval.compare.leakage import template_leaks
from shadoweval.compare.request_view import RequestView, request_view
from shadoweval.compare.similarity import EmbeddingCache, SimilarityResult, pairwise_similarity
from shadoweval.compare.tool_calls import tool_call_flags
from shadoweval.llm_protocol.interruption import failure_cause, response_interrupted
from shadoweval.records import (
    Exchange,
    ExchangeOutcome,
    FailureCause,
    FinishReason,
    FormatFlags,
    HarmKind,
    PairScore,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
    ResponseRecord,
    SidePair,
    SimilarityDetail,
    Timings,
    TimingSource,
    ToolCallFlags,
    ToolChange,
    is_infra_failure,
    is_infra_status,
)
from shadoweval.text import dominant_script, is_blank

__all__ = ["PairInput", "RequestView", "request_view", "score_pairs", "side_text"]

LatencySource = Literal["live", "recorded", "baseline_repeat", "missing", "co_timed"]
TokenSource = Literal["live", "baseline_repeat", "missing"]

_LIVE_SOURCE: dict[TimingSource, LatencySource] = {
    TimingSource.MEASURED: "live",
    TimingSource.RECORDED: "recorded",
    TimingSource.MISSING: "missing",
}


@dataclass(frozen=True, slots=True)
class PairInput:
    """One exchange with its candidate replay and, optionally, its baseline-repeat replay.

    Both replays must carry the exchange's ``exchange_id``, the candidate must have
    ``target=candidate`` and the repeat ``target=baseline_repeat``.
    """

    exchange: Exchange
    candidate: ReplayOutcome
    baseline_repeat: ReplayOutcome | None = None
    repeated_rejection: bool = False
    """The candidate's failure is a rejection repeated on most of the run's requests
    (:func:`shadoweval.records.repeated_rejections`): the environment's, not the model's."""


def side_text(response: ResponseRecord | None) -> str:
    """The text one side is compared on: content, then one line per tool call.

    Each tool call is rendered ``name(<arguments>)`` with the arguments as canonical JSON
    (sorted keys, no spaces) when they parse, else the raw string, so that key order and
    whitespace do not count as divergence but a text answer vs a tool call does. Calls
    are in ``index`` order. Blank content is left out; no response gives ``""``.
    """
    if response is None:
        return ""
    lines: list[str] = []
    if not is_blank(response.text):
        assert response.text is not None
        lines.append(response.text)
    for call in sorted(response.tool_calls, key=lambda c: c.index):
        parsed = parse_json(call.arguments)
        arguments = canonical_json(parsed.value) if parsed.ok else call.arguments
        lines.append(f"{call.name}({arguments})")
    return "\n".join(lines)


def score_pairs(
    items: Sequence[PairInput],
    encoder: Encoder,
    *,
    run_id: str,
    structured_task_types: frozenset[str] = frozenset(),
    batch_size: int = 64,
    refusal_patterns: Sequence[str] | None = None,
    covered_scripts: frozenset[str] | None = None,
    embedding_cache: EmbeddingCache | None = None,
) -> list[PairScore]:
    """Score each exchange against its candidate replay (rules in the module docstring).

    Args:
        items: pairs to score; results come back in the same order.
        encoder: embeds side texts for similarity (all pairs in one batched pass).
        run_id: the run these scores belong to; every replay must carry it.
        structured_task_types: task types whose outputs must be JSON even when the
            request did not say so (e.g. ``{"extraction"}``).
        batch_size: pieces per encoder call, passed to
            :func:`~shadoweval.compare.similarity.pairwise_similarity`.
        refusal_patterns: the refusal detector's regular expressions
            (:func:`shadoweval.compare.harms.compile_refusal_patterns`); ``None`` for
            :data:`shadoweval.compare.harms.DEFAULT_REFUSAL_PATTERNS`.
        covered_scripts: the scripts the embedding model covers (``compare.model_scripts``:
            ``{"Latin"}`` for the English-only default); an answer in another script is
            listed in ``SimilarityDetail.uncovered_scripts``. ``None``: any script.
        embedding_cache: pooled text embeddings kept across calls and runs
            (:class:`~shadoweval.compare.similarity.EmbeddingCache`; ``None``: embed every text).

    Returns:
        One :class:`~shadoweval.records.PairScore` per item.

    Raises:
        ConfigError: a refusal pattern is invalid (checked before any pair is scored).
        ValueError: a replay belongs to another exchange or run, or has the wrong target;
            ``batch_size`` < 1; the encoder misbehaves (see ``pairwise_similarity``).
    """
    refusal = compile_refusal_patterns(refusal_patterns)
    for item in items:
        _check_item(item, run_id)

    texts: list[tuple[str, str, str | None]] = []
    pairs: list[tuple[str, str]] = []
    pair_index: list[tuple[int | None, int | None]] = []
    for item in items:
        base_ok = not _baseline_error(item.exchange)
        cand_ok = not _replay_error(item.candidate)
        repeat = item.baseline_repeat
        base_text = side_text(item.exchange.response)
        cand_text = side_text(item.candidate.response)
        repeat_ok = repeat is not None and not _replay_error(repeat)
        repeat_text = side_text(repeat.response) if repeat is not None and repeat_ok else None
        texts.append((base_text, cand_text, repeat_text))
        main = noise = None
        if base_ok and cand_ok:
            main = len(pairs)
            pairs.append((base_text, cand_text))
        if base_ok and repeat_text is not None:
            noise = len(pairs)
            pairs.append((base_text, repeat_text))
        pair_index.append((main, noise))

    similarities = pairwise_similarity(encoder, pairs, batch_size=batch_size, cache=embedding_cache)
    scores: list[PairScore] = []
    for item, (base_text, cand_text, repeat_text), (main, noise) in zip(
        items, texts, pair_index, strict=True
    ):
        main_result = similarities[main] if main is not None else None
        noise_result = similarities[noise] if noise is not None else None
        scores.append(
            _score_one(
                item,
                run_id=run_id,
                structured_task_types=structured_task_types,
                texts=_SideTexts(base_text, cand_text, repeat_text),
                similarity=main_result,
                noise=noise_result,
                refusal=refusal,
                covered_scripts=covered_scripts,
            )
        )
    return scores


def _similarity_detail(
    similarity: SimilarityResult, base_text: str, cand_text: str, covered: frozenset[str] | None
) -> SimilarityDetail:
    """The record form of ``similarity`` with each answer's script and those not covered."""
    scripts = (dominant_script(base_text), dominant_script(cand_text))
    uncovered = () if covered is None else sorted({s for s in scripts if s and s not in covered})
    return similarity.detail().model_copy(
        update={
            "baseline_script": scripts[0],
            "candidate_script": scripts[1],
            "uncovered_scripts": tuple(uncovered),
        }
    )


@dataclass(frozen=True, slots=True)
class _SideTexts:
    baseline: str
    candidate: str
    repeat: str | None  # None: no repeat, or it errored


class _SideChecks:
    """The checks of one side's answer that the request calls for (either side alike).

    JSON format flags when JSON is expected (asked for, or a structured task type), tool
    call flags when tools were offered, and the harm detectors; an errored or missing
    response gets none of them.
    """

    __slots__ = ("_check_json", "_context", "_view")

    def __init__(self, view: RequestView, check_json: bool, refusal: RefusalPatterns) -> None:
        self._view = view
        self._check_json = check_json
        self._context = SideContext(
            prompt=view.prompt,
            max_tokens=view.max_tokens,
            json_expected=check_json,
            schema=view.schema,
            refusal=refusal,
        )

    def formats(self, resp: ResponseRecord | None, error: bool) -> FormatFlags | None:
        """JSON format flags of the answer, ``None`` when JSON is not expected."""
        if error or resp is None or not self._check_json:
            return None
        return json_format_flags(resp.text, self._view.schema)

    def tools(self, resp: ResponseRecord | None, error: bool) -> ToolCallFlags | None:
        """Tool-call flags of the answer, ``None`` when no tools were offered."""
        if error or resp is None or not self._view.tools:
            return None
        return tool_call_flags(resp.tool_calls, self._view.tools)

    def harms(
        self, resp: ResponseRecord | None, error: bool, text: str, *, imported: bool = False
    ) -> tuple[HarmKind, ...]:
        """The harms that fire on the answer (:func:`shadoweval.compare.harms.side_harms`)."""
        if error or resp is None:
            return ()
        return side_harms(resp, text=text, context=self._context, check_finish_reason=not imported)


def _score_one(
    item: PairInput,
    *,
    run_id: str,
    structured_task_types: frozenset[str],
    texts: _SideTexts,
    similarity: SimilarityResult | None,
    noise: SimilarityResult | None,
    refusal: RefusalPatterns,
    covered_scripts: frozenset[str] | None,
) -> PairScore:
    base_text, cand_text = texts.baseline, texts.candidate
    exchange, candidate = item.exchange, item.candidate
    base_resp, cand_resp = exchange.response, candidate.response
    base_error = _baseline_error(exchange)
    cand_error = _replay_error(candidate)
    cand_cause = _replay_cause(candidate)
    view = request_view(exchange)
    structured = exchange.task_type in structured_task_types
    check_json = view.wants_json or structured

    base_out, tokens_source = _baseline_output_tokens(item, base_error)
    cand_out = _completion_tokens(cand_resp, cand_error)
    base_prompt = base_resp.usage.prompt_tokens if base_resp is not None else None
    cand_prompt = cand_resp.usage.prompt_tokens if cand_resp is not None else None
    if candidate.translated_to is not None:
        cand_prompt = None  # another API's count of another text: not tokenizer evidence
    base_timings, latency_source, base_cached = _baseline_timings(item)
    checks = _SideChecks(view, check_json, refusal)

    changes: tuple[ToolChange, ...] = ()
    if view.tools and not base_error and not cand_error and base_resp and cand_resp:
        changes = tool_changes(base_resp.tool_calls, cand_resp.tool_calls)

    return PairScore(
        run_id=run_id,
        exchange_id=exchange.exchange_id,
        task_type=exchange.task_type,
        captured_at=exchange.captured_at,
        similarity=similarity.similarity if similarity is not None else None,
        similarity_detail=(
            _similarity_detail(similarity, base_text, cand_text, covered_scripts)
            if similarity is not None
            else None
        ),
        noise_similarity=noise.similarity if noise is not None else None,
        streamed=view.stream,
        format_expected=view.wants_json or bool(view.tools) or structured,
        baseline_format=checks.formats(base_resp, base_error),
        candidate_format=checks.formats(cand_resp, cand_error),
        baseline_tools=checks.tools(base_resp, base_error),
        candidate_tools=checks.tools(cand_resp, cand_error),
        baseline_error=base_error,
        candidate_error=cand_error,
        baseline_infra_error=base_error and _baseline_infra_error(exchange),
        candidate_infra_error=_candidate_environment_error(item),
        candidate_error_kind=_candidate_error_kind(candidate),
        baseline_interrupted=_baseline_interrupted(exchange),
        candidate_interrupted=cand_error and cand_cause is FailureCause.INTERRUPTED,
        candidate_context_length=cand_error and cand_cause is FailureCause.CONTEXT_LENGTH,
        baseline_empty=not base_error and is_blank(base_text),
        candidate_empty=not cand_error and is_blank(cand_text),
        baseline_finish_reason=_finish(base_resp),
        candidate_finish_reason=_finish(cand_resp),
        output_token_ratio=_ratio(cand_out, base_out),
        output_tokens=SidePair(baseline=base_out, candidate=cand_out),
        output_tokens_baseline_source=tokens_source,
        prompt_token_ratio=_ratio(cand_prompt, base_prompt),
        template_leaks=template_leaks(cand_text) if not cand_error else (),
        ttft_ms=SidePair(baseline=base_timings.ttft_ms, candidate=candidate.timings.ttft_ms),
        ttfc_ms=SidePair(baseline=base_timings.ttfc_ms, candidate=candidate.timings.ttfc_ms),
        e2e_ms=SidePair(baseline=base_timings.e2e_ms, candidate=candidate.timings.e2e_ms),
        baseline_cache_hit=base_cached,
        candidate_cache_hit=_cache_hit(cand_resp),
        latency_baseline_source=latency_source,
        candidate_warmup=candidate.warmup,
        candidate_sent_at=candidate.sent_at,
        baseline_harms=checks.harms(base_resp, base_error, base_text, imported=_imported(exchange)),
        candidate_harms=checks.harms(cand_resp, cand_error, cand_text),
        tool_changes=changes,
        output_chars=SidePair(
            baseline=None if base_error else float(len(base_text)),
            candidate=None if cand_error else float(len(cand_text)),
        ),
        sampled=view.sampled,
        noise_identical=(None if base_error or texts.repeat is None else texts.repeat == base_text),
        exact_differs=_exact_differs(base_resp, cand_resp, base_error or cand_error),
    )


def _exact_differs(
    base: ResponseRecord | None, cand: ResponseRecord | None, errored: bool
) -> bool | None:
    """:func:`shadoweval.compare.exact.exact_differs` of the two answers; ``None`` when a
    side errored or has no response."""
    if errored or base is None or cand is None:
        return None
    return exact_differs((base.text, base.tool_calls), (cand.text, cand.tool_calls))


def _imported(exchange: Exchange) -> bool:
    """An exchange synthesized from a recorded table (``shadoweval.capture.table_import``)."""
    return exchange.source is not None and exchange.source.startswith("import:")


def _check_item(item: PairInput, run_id: str) -> None:
    exchange_id = item.exchange.exchange_id
    replays = [(item.candidate, ReplayTarget.CANDIDATE)]
    if item.baseline_repeat is not None:
        replays.append((item.baseline_repeat, ReplayTarget.BASELINE_REPEAT))
    for replay, target in replays:
        if replay.exchange_id != exchange_id:
            raise ValueError(
                f"{target.value} replay is for exchange {replay.exchange_id}, "
                f"paired with exchange {exchange_id}"
            )
        if replay.run_id != run_id:
            raise ValueError(
                f"{target.value} replay of exchange {exchange_id} belongs to run "
                f"{replay.run_id}, not {run_id}"
            )
        if replay.target != target:
            raise ValueError(
                f"replay of exchange {exchange_id} has target {replay.target.value}, "
                f"expected {target.value}"
            )


def _failed_status(response: ResponseRecord | None) -> bool:
    return response is None or response.status_code >= 400


def _baseline_interrupted(exchange: Exchange) -> bool:
    """The live answer was an interrupted stream (the rule on the stored record,
    :func:`~shadoweval.llm_protocol.interruption.response_interrupted`); never for an
    imported baseline, whose table records no finish reason for any row."""
    return not _imported(exchange) and response_interrupted(exchange.response) is not None


def _baseline_error(exchange: Exchange) -> bool:
    return (
        exchange.outcome != ExchangeOutcome.DONE
        or _failed_status(exchange.response)
        or _baseline_interrupted(exchange)
    )


def _replay_cause(outcome: ReplayOutcome) -> FailureCause | None:
    """Why the replay failed, where the interruption rule or the message says more than
    its error kind (:func:`~shadoweval.llm_protocol.interruption.failure_cause`)."""
    return failure_cause(outcome.error_kind, outcome.response, outcome.error_detail)


def _replay_error(outcome: ReplayOutcome) -> bool:
    """The replay failed: an error kind, no response, HTTP ≥ 400, or a stored 2xx stream
    that the interruption rule finds cut (stored before the replay client applied it)."""
    return (
        outcome.error_kind is not None
        or _failed_status(outcome.response)
        or response_interrupted(outcome.response) is not None
    )


def _baseline_infra_error(exchange: Exchange) -> bool:
    """The live request was cancelled, timed out upstream, got 408/429/5xx, or was an
    interrupted stream."""
    if exchange.outcome is ExchangeOutcome.CANCELLED or _baseline_interrupted(exchange):
        return True
    response = exchange.response
    if response is None:
        return exchange.outcome is not ExchangeOutcome.DONE
    return is_infra_status(response.status_code)


def _replay_infra_error(outcome: ReplayOutcome) -> bool:
    """An infrastructure failure (:func:`~shadoweval.records.is_infra_failure`), an
    interruption, or a failure at the context length (the gate's policy decides whose)."""
    status = outcome.response.status_code if outcome.response is not None else None
    return _replay_error(outcome) and (
        is_infra_failure(outcome.error_kind, status) or _replay_cause(outcome) is not None
    )


def _candidate_environment_error(item: PairInput) -> bool:
    """The candidate's failure is the environment's (issue 29): an infrastructure or
    configuration failure, a rejection repeated on most requests, or a failure the baseline
    replica shares on the same exchange."""
    candidate, repeat = item.candidate, item.baseline_repeat
    if not _replay_error(candidate):
        return False
    if _replay_infra_error(candidate) or item.repeated_rejection:
        return True
    return (
        repeat is not None
        and repeat.error_kind is not ReplayErrorKind.SKIPPED
        and _replay_error(repeat)
    )


def _candidate_error_kind(candidate: ReplayOutcome) -> ReplayErrorKind | None:
    if candidate.error_kind is not None:
        return candidate.error_kind
    if candidate.response is not None and candidate.response.status_code >= 400:
        return ReplayErrorKind.HTTP_STATUS
    if response_interrupted(candidate.response) is not None:
        return ReplayErrorKind.INTERRUPTED
    return None


def _finish(response: ResponseRecord | None) -> FinishReason:
    return response.finish_reason if response is not None else FinishReason.UNKNOWN


def _completion_tokens(response: ResponseRecord | None, error: bool) -> float | None:
    if error or response is None or response.usage.completion_tokens is None:
        return None
    return float(response.usage.completion_tokens)


def _baseline_output_tokens(item: PairInput, base_error: bool) -> tuple[float | None, TokenSource]:
    """The baseline's output tokens: the live answer's usage, else the baseline repeat's.

    A live server that reports no usage (a stream without ``include_usage``, an imported
    table without counts) would leave the cost check without a control; the baseline repeat
    is the same model answering the same request, so its count stands in (gate-statistics.md
    §2.2 uses the baseline replay as the control for latency for the same reason).
    """
    live = _completion_tokens(item.exchange.response, base_error)
    if live is not None:
        return live, "live"
    repeat = item.baseline_repeat
    if base_error or repeat is None or _replay_error(repeat):
        return None, "missing"
    from_repeat = _completion_tokens(repeat.response, False)
    return (from_repeat, "baseline_repeat") if from_repeat is not None else (None, "missing")


def _ratio(candidate: float | None, baseline: float | None) -> float | None:
    if candidate is None or baseline is None or baseline <= 0:
        return None
    return float(candidate) / float(baseline)


def _baseline_timings(item: PairInput) -> tuple[Timings, LatencySource, bool]:
    """The baseline's timings, their source, and whether that response was a cache hit."""
    repeat = item.baseline_repeat
    if (
        repeat is not None
        and not _replay_error(repeat)
        and not repeat.warmup
        and repeat.timings.source != TimingSource.MISSING
    ):
        # Timed under the same conditions only when both were sent together (issue 29).
        co_timed = repeat.co_timed and item.candidate.co_timed
        source: LatencySource = "co_timed" if co_timed else "baseline_repeat"
        return repeat.timings, source, _cache_hit(repeat.response)
    timings = item.exchange.timings
    return timings, _LIVE_SOURCE[timings.source], _cache_hit(item.exchange.response)


def _cache_hit(response: ResponseRecord | None) -> bool:
    return response is not None and response.cache_hit
