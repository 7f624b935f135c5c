"""Pair scoring: every PairScore field from hand-built exchanges and replays."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.leakage import template_leaks
from shadoweval.compare.pair import PairInput, request_view, score_pairs, side_text
from shadoweval.records import (
    Exchange,
    ExchangeOutcome,
    FinishReason,
    ModelIdentity,
    PairScore,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
    RequestRecord,
    ResponseRecord,
    SidePair,
    Timings,
    TimingSource,
    ToolCall,
    Usage,
    UsageSource,
)
from shadoweval.text import is_blank

RUN = "run-1"
CAPTURED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
ENCODER = HashingEncoder()

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}


def body(**extra: Any) -> str:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})


def usage(prompt: int | None = None, completion: int | None = None) -> Usage:
    if prompt is None and completion is None:
        return Usage()
    return Usage(
        prompt_tokens=prompt, completion_tokens=completion, usage_source=UsageSource.REPORTED
    )


def response(
    text: str | None = "Paris is the capital of France.",
    *,
    status: int = 200,
    tool_calls: tuple[ToolCall, ...] = (),
    finish: FinishReason = FinishReason.STOP,
    use: Usage | None = None,
) -> ResponseRecord:
    return ResponseRecord(
        status_code=status,
        text=text,
        tool_calls=tool_calls,
        finish_reason=finish,
        finish_reason_raw=finish.value,
        usage=use or usage(10, 7),
    )


def exchange(
    resp: ResponseRecord | None = None,
    *,
    request_body: str | None = None,
    outcome: ExchangeOutcome = ExchangeOutcome.DONE,
    timings: Timings | None = None,
    task_type: str = "default",
    no_response: bool = False,
) -> Exchange:
    return Exchange(
        exchange_id="ex-1",
        captured_at=CAPTURED,
        task_type=task_type,
        request=RequestRecord(body=request_body or body()),
        response=None if no_response else (resp or response()),
        timings=timings or Timings(ttft_ms=100.0, e2e_ms=900.0, source=TimingSource.MEASURED),
        outcome=outcome,
        baseline_model=ModelIdentity(name="baseline"),
    )


def replay(
    resp: ResponseRecord | None = None,
    *,
    target: ReplayTarget = ReplayTarget.CANDIDATE,
    error_kind: ReplayErrorKind | None = None,
    timings: Timings | None = None,
    warmup: bool = False,
    no_response: bool = False,
    exchange_id: str = "ex-1",
    run_id: str = RUN,
) -> ReplayOutcome:
    return ReplayOutcome(
        run_id=run_id,
        exchange_id=exchange_id,
        target=target,
        model=ModelIdentity(name="candidate" if target is ReplayTarget.CANDIDATE else "baseline"),
        response=None if no_response else (resp or response()),
        timings=timings or Timings(ttft_ms=80.0, e2e_ms=700.0, source=TimingSource.MEASURED),
        error_kind=error_kind,
        warmup=warmup,
    )


def repeat(resp: ResponseRecord | None = None, **kwargs: Any) -> ReplayOutcome:
    return replay(resp, target=ReplayTarget.BASELINE_REPEAT, **kwargs)


def score(item: PairInput, **kwargs: Any) -> PairScore:
    [result] = score_pairs([item], ENCODER, run_id=RUN, **kwargs)
    return result


def call(name: str, arguments: str, index: int = 0) -> ToolCall:
    return ToolCall(index=index, id=f"c{index}", name=name, arguments=arguments)


# ---------------------------------------------------------------- side_text


def test_side_text_renders_content_then_canonical_tool_calls() -> None:
    resp = response(
        "Let me check.",
        tool_calls=(
            call("second", "not json", 1),
            call("get_weather", '{ "unit": "c",\n "city": "Paris" }', 0),
        ),
    )
    assert side_text(resp) == (
        'Let me check.\nget_weather({"city":"Paris","unit":"c"})\nsecond(not json)'
    )


def test_side_text_key_order_does_not_matter_and_blank_content_is_dropped() -> None:
    a = response(None, tool_calls=(call("f", '{"a": 1, "b": "é"}'),))
    b = response("  \n", tool_calls=(call("f", '{"b":"é","a":1}'),))
    assert side_text(a) == side_text(b) == 'f({"a":1,"b":"é"})'


def test_side_text_of_nothing() -> None:
    assert side_text(None) == ""
    assert side_text(response(None)) == ""


# ----------------------------------------------------------------- basics


def test_identical_outputs() -> None:
    s = score(PairInput(exchange(), replay()))
    assert s.run_id == RUN
    assert s.exchange_id == "ex-1"
    assert s.task_type == "default"
    assert s.captured_at == CAPTURED
    assert s.similarity == pytest.approx(1.0)
    assert s.similarity_detail is not None
    assert s.similarity_detail.baseline_tokens == 7
    assert s.similarity_detail.baseline_chunks == 1
    assert s.similarity_detail.method == "cosine_mean_pooled_chunks:hashing-256:v1"
    assert s.noise_similarity is None
    assert not s.format_expected
    assert s.baseline_format is s.candidate_format is None
    assert s.baseline_tools is s.candidate_tools is None
    assert not s.baseline_error
    assert not s.candidate_error
    assert not s.baseline_empty
    assert not s.candidate_empty
    assert s.candidate_error_kind is None
    assert s.baseline_finish_reason is s.candidate_finish_reason is FinishReason.STOP
    assert s.output_tokens == SidePair(baseline=7.0, candidate=7.0)
    assert s.output_token_ratio == 1.0
    assert s.prompt_token_ratio == 1.0
    assert s.template_leaks == ()
    assert s.ttft_ms == SidePair(baseline=100.0, candidate=80.0)
    assert s.e2e_ms == SidePair(baseline=900.0, candidate=700.0)
    assert s.latency_baseline_source == "live"
    assert not s.candidate_warmup


def test_order_is_kept_and_results_match_items() -> None:
    items = [
        PairInput(exchange(response("alpha beta")), replay(response("alpha beta"))),
        PairInput(exchange(response("alpha beta")), replay(response("gamma delta"))),
    ]
    first, second = score_pairs(items, ENCODER, run_id=RUN, batch_size=1)
    assert first.similarity == pytest.approx(1.0)
    assert second.similarity is not None
    assert second.similarity < 0.5


def test_empty_items() -> None:
    assert score_pairs([], ENCODER, run_id=RUN) == []


# ----------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "ex",
    [
        exchange(outcome=ExchangeOutcome.ERROR),
        exchange(outcome=ExchangeOutcome.CANCELLED),
        exchange(outcome=ExchangeOutcome.TRUNCATED),
        exchange(no_response=True),
        exchange(response("rate limited", status=429)),
    ],
)
def test_baseline_error(ex: Exchange) -> None:
    s = score(PairInput(ex, replay(), repeat()), structured_task_types=frozenset({"default"}))
    assert s.baseline_error
    assert not s.candidate_error
    assert s.similarity is None
    assert s.similarity_detail is None
    assert s.noise_similarity is None
    assert not s.baseline_empty
    assert s.baseline_format is None
    assert s.candidate_format is not None
    assert s.output_tokens.baseline is None
    assert s.output_token_ratio is None


@pytest.mark.parametrize(
    ("candidate", "kind"),
    [
        (replay(error_kind=ReplayErrorKind.TIMEOUT, no_response=True), ReplayErrorKind.TIMEOUT),
        (replay(no_response=True), None),
        (replay(response("overloaded", status=503)), ReplayErrorKind.HTTP_STATUS),
        (
            replay(response("<|im_start|>x", status=500), error_kind=ReplayErrorKind.DECODE),
            ReplayErrorKind.DECODE,
        ),
    ],
)
def test_candidate_error(candidate: ReplayOutcome, kind: ReplayErrorKind | None) -> None:
    s = score(PairInput(exchange(), candidate))
    assert s.candidate_error
    assert not s.baseline_error
    assert s.candidate_error_kind is kind
    assert s.similarity is None
    assert not s.candidate_empty
    assert s.template_leaks == ()
    assert s.output_tokens.candidate is None


# ------------------------------------------------------------------ empty


def test_empty_candidate_scores_zero_against_text() -> None:
    s = score(PairInput(exchange(), replay(response("   "))))
    assert s.candidate_empty
    assert not s.baseline_empty
    assert s.similarity == 0.0
    assert s.similarity_detail is not None
    assert s.similarity_detail.candidate_chunks == 0


@pytest.mark.parametrize("invisible", ["\u200b", " \u200b\u200c\u200d ", "\ufeff", "\u2060\n"])
def test_an_answer_of_invisible_characters_only_is_empty(invisible: str) -> None:
    """Issue 13: a zero-width-space-only answer was not empty (``str.strip`` keeps it)."""
    s = score(PairInput(exchange(), replay(response(invisible))))
    assert s.candidate_empty
    assert s.similarity == 0.0
    assert s.similarity_detail is not None
    assert s.similarity_detail.candidate_chunks == 0  # not embedded
    assert side_text(response(invisible)) == ""
    both = score(PairInput(exchange(response(invisible)), replay(response("\u200b"))))
    assert both.baseline_empty
    assert both.candidate_empty
    assert both.similarity == 1.0


def test_is_blank() -> None:
    assert is_blank(None)
    assert is_blank("")
    assert is_blank(" \t\n\u3000\u00a0")
    assert is_blank("\u200b\u00ad\u200e")
    assert not is_blank("\u200ba")
    assert not is_blank("0")
    assert not is_blank("\u2800")  # braille blank is a visible symbol cell


def test_both_empty_score_one() -> None:
    s = score(PairInput(exchange(response(None)), replay(response(""))))
    assert s.baseline_empty
    assert s.candidate_empty
    assert s.similarity == 1.0


def test_tool_call_only_answer_is_not_empty_and_diverges_from_text() -> None:
    tool_answer = response(None, tool_calls=(call("get_weather", '{"city":"Paris"}'),))
    s = score(PairInput(exchange(), replay(tool_answer)))
    assert not s.candidate_empty
    assert s.similarity is not None
    assert s.similarity < 0.5


# ----------------------------------------------------------------- formats


def test_json_schema_request_checks_both_sides_against_the_schema() -> None:
    request_body = body(
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": ANSWER_SCHEMA},
        }
    )
    base = response('{"answer": "Paris"}')
    cand = response('Sure!\n```json\n{"answer": "Paris"}\n```')
    s = score(PairInput(exchange(base, request_body=request_body), replay(cand)))
    assert s.format_expected
    assert s.baseline_format is not None
    assert s.candidate_format is not None
    assert (s.baseline_format.strict, s.baseline_format.schema_valid) == (True, True)
    cf = s.candidate_format
    assert (cf.strict, cf.fence_stripped, cf.extracted, cf.schema_valid) == (
        False,
        False,
        True,
        True,
    )
    assert s.baseline_tools is None


def test_json_object_request_must_answer_an_object() -> None:
    request_body = body(response_format={"type": "json_object"})
    s = score(PairInput(exchange(response('{"a": 1}'), request_body=request_body), replay()))
    assert s.format_expected
    assert s.baseline_format is not None
    assert s.baseline_format.strict
    assert s.baseline_format.schema_valid is True
    assert s.candidate_format is not None
    assert not s.candidate_format.extracted


@pytest.mark.parametrize("answer", ["null", '"a string"', "[1, 2]", "42"])
def test_json_object_mode_rejects_valid_json_that_is_not_an_object(answer: str) -> None:
    request_body = body(response_format={"type": "json_object"})
    s = score(
        PairInput(
            exchange(response('{"a": 1}'), request_body=request_body), replay(response(answer))
        )
    )
    assert s.candidate_format is not None
    assert s.candidate_format.strict
    assert s.candidate_format.schema_valid is False


@pytest.mark.parametrize(
    ("status", "kind", "infra"),
    [
        (500, ReplayErrorKind.HTTP_STATUS, True),
        (503, ReplayErrorKind.HTTP_STATUS, True),
        (429, ReplayErrorKind.HTTP_STATUS, True),
        (408, ReplayErrorKind.HTTP_STATUS, True),
        (400, ReplayErrorKind.HTTP_STATUS, False),
        (413, ReplayErrorKind.HTTP_STATUS, False),
        (None, ReplayErrorKind.TIMEOUT, True),
        (None, ReplayErrorKind.CONNECT, True),
        (200, ReplayErrorKind.DECODE, True),
    ],
)
def test_infrastructure_errors_are_told_apart_from_rejections(
    status: int | None, kind: ReplayErrorKind, infra: bool
) -> None:
    resp = None if status is None else ResponseRecord(status_code=status, text=None)
    outcome = replay(resp, error_kind=kind, no_response=resp is None)
    s = score(PairInput(exchange(response("ok")), outcome))
    assert s.candidate_error
    assert s.candidate_infra_error is infra
    assert not s.baseline_infra_error


def test_text_response_format_expects_nothing() -> None:
    request_body = body(response_format={"type": "text"})
    s = score(PairInput(exchange(request_body=request_body), replay()))
    assert not s.format_expected
    assert s.baseline_format is None


def test_structured_task_type_checks_json_without_response_format() -> None:
    ex = exchange(response('{"a": 1}'), task_type="extraction")
    s = score(PairInput(ex, replay()), structured_task_types=frozenset({"extraction"}))
    assert s.format_expected
    assert s.baseline_format is not None
    assert s.baseline_format.strict
    assert s.candidate_format is not None
    assert not s.candidate_format.strict
    assert s.task_type == "extraction"
    assert not score(PairInput(ex, replay())).format_expected


def test_tools_offered_gives_tool_flags_only() -> None:
    request_body = body(tools=[WEATHER_TOOL])
    base = response(None, tool_calls=(call("get_weather", '{"city": "Paris"}'),))
    cand = response(None, tool_calls=(call("get_weather", '{"town": "Paris"} // oops'),))
    s = score(PairInput(exchange(base, request_body=request_body), replay(cand)))
    assert s.format_expected
    assert s.baseline_format is s.candidate_format is None
    assert s.baseline_tools is not None
    assert s.candidate_tools is not None
    assert (s.baseline_tools.calls, s.baseline_tools.schema_valid) == (1, True)
    assert not s.candidate_tools.arguments_parse
    assert s.similarity is not None
    assert s.similarity < 1.0


def test_text_answer_when_tools_were_offered() -> None:
    request_body = body(tools=[WEATHER_TOOL])
    s = score(PairInput(exchange(request_body=request_body), replay()))
    assert s.candidate_tools is not None
    assert s.candidate_tools.calls == 0


def test_request_view_is_lenient() -> None:
    completions = exchange(
        request_body=json.dumps(
            {"prompt": "x", "response_format": {"type": "json_object"}, "tools": [WEATHER_TOOL, 3]}
        )
    )
    view = request_view(completions)
    assert view.wants_json
    assert [t.function.name for t in view.tools] == ["get_weather"]
    assert request_view(exchange(request_body="not json")) == request_view(
        exchange(request_body="[1, 2]")
    )
    assert not request_view(exchange(request_body="not json")).wants_json


# ------------------------------------------------------------------ tokens


def test_missing_usage_is_none_never_zero() -> None:
    s = score(PairInput(exchange(response(use=Usage())), replay()))
    assert s.output_tokens == SidePair(baseline=None, candidate=7.0)
    assert s.output_token_ratio is None
    assert s.prompt_token_ratio is None


def test_token_ratios() -> None:
    ex = exchange(response(use=usage(100, 40)))
    s = score(PairInput(ex, replay(response(use=usage(125, 60)))))
    assert s.output_tokens == SidePair(baseline=40.0, candidate=60.0)
    assert s.output_token_ratio == pytest.approx(1.5)
    assert s.prompt_token_ratio == pytest.approx(1.25)


def test_a_translated_candidate_gives_no_prompt_token_ratio() -> None:
    # Messages → chat completions: another API's count of another text is no tokenizer
    # evidence; the output tokens still compare
    ex = exchange(response(use=usage(100, 40)))
    cand = replay(response(use=usage(125, 60))).model_copy(
        update={"translated_to": "/v1/chat/completions"}
    )
    s = score(PairInput(ex, cand))
    assert s.prompt_token_ratio is None
    assert s.output_token_ratio == pytest.approx(1.5)


def test_zero_baseline_tokens_give_no_ratio() -> None:
    ex = exchange(response("", use=usage(0, 0)))
    s = score(PairInput(ex, replay(response(use=usage(10, 5)))))
    assert s.output_tokens == SidePair(baseline=0.0, candidate=5.0)
    assert s.output_token_ratio is None
    assert s.prompt_token_ratio is None


def test_live_answer_without_usage_takes_the_baseline_repeats_output_tokens() -> None:
    ex = exchange(response(use=Usage()))
    rep = repeat(response("Paris.", use=usage(100, 30)))
    s = score(PairInput(ex, replay(response(use=usage(100, 45))), rep))
    assert s.output_tokens == SidePair(baseline=30.0, candidate=45.0)
    assert s.output_tokens_baseline_source == "baseline_repeat"
    assert s.output_token_ratio == pytest.approx(1.5)


def test_live_usage_wins_over_the_repeat_and_an_errored_repeat_is_not_used() -> None:
    rep = repeat(response("Paris.", use=usage(100, 30)))
    s = score(PairInput(exchange(response(use=usage(100, 40))), replay(), rep))
    assert (s.output_tokens.baseline, s.output_tokens_baseline_source) == (40.0, "live")
    bad = repeat(response("x", status=500, use=usage(100, 30)))
    s = score(PairInput(exchange(response(use=Usage())), replay(), bad))
    assert (s.output_tokens.baseline, s.output_tokens_baseline_source) == (None, "missing")


def test_prompt_ratio_is_kept_when_the_candidate_errored() -> None:
    cand = replay(response("bad", status=400, use=usage(130, None)))
    s = score(PairInput(exchange(response(use=usage(100, 7))), cand))
    assert s.candidate_error
    assert s.prompt_token_ratio == pytest.approx(1.3)
    assert s.output_tokens.candidate is None


# ------------------------------------------------------------ leaks, finish


def test_template_leaks_on_candidate_only() -> None:
    base = response("I write <|im_end|> in my answer.")
    cand = response("Sure.<|eot_id|>\n<|start_header_id|>user<|end_header_id|> more [/INST]")
    s = score(PairInput(exchange(base), replay(cand)))
    assert s.template_leaks == (
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|start_header_id|>",
        "[/INST]",
    )
    assert s.template_leaks == template_leaks(cand.text)


def test_leak_inside_tool_arguments_counts() -> None:
    cand = response(None, tool_calls=(call("f", '{"q": "<|im_start|>system"}'),))
    assert score(PairInput(exchange(), replay(cand))).template_leaks == ("<|im_start|>",)


def test_finish_reasons() -> None:
    s = score(PairInput(exchange(), replay(response(finish=FinishReason.LENGTH))))
    assert s.baseline_finish_reason is FinishReason.STOP
    assert s.candidate_finish_reason is FinishReason.LENGTH
    s = score(PairInput(exchange(), replay(no_response=True)))
    assert s.candidate_finish_reason is FinishReason.UNKNOWN


# ---------------------------------------------------------- noise, latency


def test_baseline_repeat_gives_noise_floor_and_latency_baseline() -> None:
    rep = repeat(
        response("Paris is France's capital."),
        timings=Timings(ttft_ms=90.0, e2e_ms=800.0, source=TimingSource.MEASURED),
    )
    s = score(PairInput(exchange(), replay(), rep))
    assert s.noise_similarity is not None
    assert 0.0 < s.noise_similarity < 1.0
    assert s.latency_baseline_source == "baseline_repeat"
    assert s.ttft_ms == SidePair(baseline=90.0, candidate=80.0)
    assert s.e2e_ms == SidePair(baseline=800.0, candidate=700.0)


def test_errored_repeat_gives_no_noise_and_live_latency() -> None:
    rep = repeat(error_kind=ReplayErrorKind.TIMEOUT, no_response=True)
    s = score(PairInput(exchange(), replay(), rep))
    assert s.noise_similarity is None
    assert s.latency_baseline_source == "live"
    assert s.ttft_ms.baseline == 100.0


def test_warmup_repeat_gives_noise_but_not_latency() -> None:
    s = score(PairInput(exchange(), replay(), repeat(warmup=True)))
    assert s.noise_similarity == pytest.approx(1.0)
    assert s.latency_baseline_source == "live"


@pytest.mark.parametrize(
    ("timings", "source"),
    [
        (Timings(ttft_ms=1.0, e2e_ms=2.0, source=TimingSource.MEASURED), "live"),
        (Timings(e2e_ms=1234.0, source=TimingSource.RECORDED), "recorded"),
        (Timings(), "missing"),
    ],
)
def test_live_latency_source(timings: Timings, source: str) -> None:
    s = score(PairInput(exchange(timings=timings), replay()))
    assert s.latency_baseline_source == source
    assert s.ttft_ms.baseline == timings.ttft_ms
    assert s.e2e_ms.baseline == timings.e2e_ms


def test_candidate_warmup_is_flagged() -> None:
    assert score(PairInput(exchange(), replay(warmup=True))).candidate_warmup


# ------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (PairInput(exchange(), replay(exchange_id="ex-2")), "is for exchange ex-2"),
        (PairInput(exchange(), replay(run_id="run-0")), "belongs to run run-0"),
        (PairInput(exchange(), repeat()), "has target baseline_repeat"),
        (PairInput(exchange(), replay(), replay()), "has target candidate"),
    ],
)
def test_mismatched_replays_are_rejected(item: PairInput, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        score_pairs([item], ENCODER, run_id=RUN)
