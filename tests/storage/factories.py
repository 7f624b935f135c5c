"""Builders of realistic, fully populated records for storage tests.

Every builder fills nested parts (usage, timings, tool calls, redaction, format flags,
checks) and uses non-ASCII text, so a round trip through the database exercises every
field type: aware datetimes, enums, tuples, nested models, floats, unicode and emoji.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shadoweval.records import (
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    Exchange,
    ExchangeOutcome,
    FinishReason,
    FormatFlags,
    HeaderPair,
    LatencySummary,
    ModelIdentity,
    PairScore,
    RedactionHit,
    RedactionReport,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
    RequestRecord,
    ResponseRecord,
    SidePair,
    SimilarityDetail,
    Timings,
    TimingSource,
    ToolCall,
    ToolCallFlags,
    Usage,
    UsageSource,
    Verdict,
)

T0 = datetime(2025, 3, 9, 1, 59, 58, 123456, tzinfo=UTC)
"""A fixed instant with microseconds."""

UNICODE_TEXT = "Grüße 👋🏽 — 你好, мир! ∑ x² «ok» \u200d👩‍💻"

BASELINE = ModelIdentity(
    name="llama-3.1-8b-instruct",
    weights_hash="sha256:" + "a" * 64,
    tokenizer_hash="sha256:" + "b" * 64,
    chat_template_hash="sha256:" + "c" * 64,
    sampling_defaults={"temperature": 0.7, "top_p": 0.95, "stop": ["</s>"]},
    base_url="http://live:8000/v1",
)
CANDIDATE = ModelIdentity(
    name="llama-3.3-8b-instruct 🚀",
    weights_hash="sha256:" + "d" * 64,
    sampling_defaults={"temperature": 0.6},
    base_url="http://shadow:8000/v1",
)


def make_exchange(
    n: int,
    *,
    captured_at: datetime | None = None,
    task_type: str = "chat",
    text: str = UNICODE_TEXT,
) -> Exchange:
    """Exchange number ``n`` (id ``ex-{n:05d}``), captured ``n`` seconds after :data:`T0`."""
    body = '{"model":"m","messages":[{"role":"user","content":"Sag hallo 👋"}],"temperature":0.2}'
    return Exchange(
        exchange_id=f"ex-{n:05d}",
        captured_at=captured_at or T0 + timedelta(seconds=n),
        monotonic_start_ns=10_000_000_000 + n,
        task_type=task_type,
        session_key_hash="h" * 16,
        request=RequestRecord(
            headers=(HeaderPair(name="content-type", value="application/json"),),
            body=body,
        ),
        response=ResponseRecord(
            status_code=200,
            headers=(HeaderPair(name="content-type", value="text/event-stream"),),
            body="data: {}\n\ndata: [DONE]\n\n",
            streamed=True,
            model="llama-3.1-8b-instruct",
            text=f"{text} #{n}",
            reasoning_text="denke… 🤔",
            tool_calls=(ToolCall(index=0, id="call_1", name="lookup", arguments='{"q":"Zürich"}'),),
            finish_reason_raw="stop",
            finish_reason=FinishReason.STOP,
            usage=Usage(
                prompt_tokens=12,
                completion_tokens=34,
                total_tokens=46,
                usage_source=UsageSource.REPORTED,
            ),
        ),
        timings=Timings(
            ttfb_ms=10.5,
            ttft_ms=42.25,
            e2e_ms=812.0625,
            tpot_ms=23.1,
            itl=LatencySummary(
                count=33, mean_ms=23.1, p50_ms=22.0, p95_ms=31.5, p99_ms=40.0, max_ms=55.0
            ),
            source=TimingSource.MEASURED,
        ),
        outcome=ExchangeOutcome.DONE,
        baseline_model=BASELINE,
        redaction=RedactionReport(
            headers_removed=("authorization", "cookie"),
            hits=(RedactionHit(rule="api_key", location="body", count=1),),
        ),
        source=f"sidecar:pod-ü-{n % 3}",
    )


def make_outcome(
    run_id: str,
    exchange_id: str,
    *,
    target: ReplayTarget = ReplayTarget.CANDIDATE,
    attempt: int = 1,
    error_kind: ReplayErrorKind | None = None,
    warmup: bool = False,
    text: str = "Hallo 👋 zurück",
    replayed_at: datetime | None = None,
) -> ReplayOutcome:
    """A replay outcome; with ``error_kind`` it has no response."""
    model = CANDIDATE if target is ReplayTarget.CANDIDATE else BASELINE
    response = (
        None
        if error_kind is not None
        else ResponseRecord(
            status_code=200,
            text=text,
            finish_reason_raw="stop",
            finish_reason=FinishReason.STOP,
            usage=Usage(prompt_tokens=12, completion_tokens=7, usage_source=UsageSource.REPORTED),
        )
    )
    return ReplayOutcome(
        run_id=run_id,
        exchange_id=exchange_id,
        target=target,
        attempt=attempt,
        model=model,
        pinned_params={"temperature": 0.2, "seed": None},
        missing_params=("top_p",),
        response=response,
        timings=Timings(ttft_ms=55.5, e2e_ms=900.25, source=TimingSource.MEASURED),
        error_kind=error_kind,
        error_detail=None if error_kind is None else f"{error_kind.value}: ⏱ nach 30 s",
        warmup=warmup,
        replayed_at=replayed_at or T0 + timedelta(hours=1),
    )


def make_pair_score(
    run_id: str,
    exchange: Exchange,
    *,
    similarity: float | None = 0.875,
    candidate_error: bool = False,
) -> PairScore:
    """A fully populated pair score of ``exchange`` in ``run_id``."""
    flags = FormatFlags(strict=False, fence_stripped=True, extracted=True, schema_valid=None)
    return PairScore(
        run_id=run_id,
        exchange_id=exchange.exchange_id,
        task_type=exchange.task_type,
        captured_at=exchange.captured_at,
        similarity=similarity,
        similarity_detail=SimilarityDetail(
            baseline_tokens=300, candidate_tokens=310, baseline_chunks=2, candidate_chunks=2
        ),
        noise_similarity=0.91,
        format_expected=True,
        baseline_format=flags,
        candidate_format=flags.model_copy(update={"detail": "fence ```json 🧩"}),
        baseline_tools=ToolCallFlags(calls=1, arguments_parse=True, schema_valid=True),
        candidate_tools=ToolCallFlags(calls=1, arguments_parse=False, schema_valid=False),
        candidate_error=candidate_error,
        candidate_error_kind=ReplayErrorKind.TIMEOUT if candidate_error else None,
        baseline_finish_reason=FinishReason.STOP,
        candidate_finish_reason=FinishReason.LENGTH,
        output_token_ratio=1.0333,
        output_tokens=SidePair(baseline=300.0, candidate=310.0),
        prompt_token_ratio=1.25,
        template_leaks=("<|im_start|>", "[INST]"),
        ttft_ms=SidePair(baseline=42.25, candidate=55.5),
        e2e_ms=SidePair(baseline=812.0625, candidate=900.25),
        latency_baseline_source="live",
        scored_at=T0 + timedelta(hours=2),
    )


def make_verdict(
    run_id: str,
    *,
    decided_at: datetime,
    decision: Decision = Decision.HOLD,
    look: int = 1,
    policy_hash: str = "sha256:policy",
) -> Verdict:
    """A verdict with two checks and a coverage block."""
    return Verdict(
        run_id=run_id,
        decided_at=decided_at,
        decision=decision,
        reasons=("too few pairs in «summarize» 📉",),
        checks=(
            Check(
                metric="similarity",
                task_type="chat",
                statistic="one-sided t",
                estimate=-0.01,
                ci_low=-0.03,
                ci_high=0.01,
                margin=-0.05,
                n=120,
                p_value=0.0012,
                outcome=CheckOutcome.PASS,
                reason="non-inferior at margin −0.05",
                critical=True,
            ),
            Check(
                metric="error_rate",
                task_type="summarize",
                statistic="McNemar",
                n=3,
                outcome=CheckOutcome.INCONCLUSIVE,
                reason="n=3 < 30",
            ),
        ),
        coverage=Coverage(
            captured=200,
            replayed=190,
            paired=180,
            errored=5,
            warmup=5,
            skipped=5,
            share=0.9,
            per_task_type={"chat": 150, "summarize": 50},
        ),
        policy_hash=policy_hash,
        look=look,
    )


def as_stored(outcome: ReplayOutcome) -> ReplayOutcome:
    """``outcome`` as the repository stores it: through the default body rules, stamped with
    their version (:class:`shadoweval.outcome_redaction.OutcomeRedactor`, issue 30)."""
    from shadoweval.outcome_redaction import OutcomeRedactor

    return OutcomeRedactor().redact(outcome)
