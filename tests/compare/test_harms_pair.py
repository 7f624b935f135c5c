"""The direction fields of PairScore filled at scoring time (shadoweval.compare.pair +
shadoweval.compare.harms).

Harms per side, tool changes, output chars, sampled and noise_identical, from hand-built
exchanges and replays (the builders of test_compare_pair).
"""

from __future__ import annotations

import json

import pytest

from shadoweval.compare.pair import PairInput, request_view, score_pairs, side_text
from shadoweval.errors import ConfigError
from shadoweval.records import (
    ExchangeOutcome,
    FinishReason,
    HarmKind,
    ReplayErrorKind,
    RequestRecord,
    ResponseRecord,
    SidePair,
    ToolChange,
    Usage,
)
from tests.compare.test_compare_pair import (
    ENCODER,
    RUN,
    WEATHER_TOOL,
    body,
    call,
    exchange,
    repeat,
    replay,
    response,
    score,
    usage,
)

LOOP = "Here is how. " + " one by one by one" * 80
CHINESE = (
    "观察顾客：如果餐厅里大多数顾客都是讲当地语言或者看起来像是当地人，"
    "那么这可能是当地人常去的地方。"
)


def stream_without_finish(text: str) -> ResponseRecord:
    """A streamed answer whose last chunk never carried a finish_reason (a cut stream)."""
    return ResponseRecord(
        status_code=200,
        streamed=True,
        text=text,
        finish_reason_raw=None,
        finish_reason=FinishReason.UNKNOWN,
        usage=usage(10, 7),
    )


def test_identical_outputs_have_no_harm_and_full_direction_fields() -> None:
    s = score(PairInput(exchange(), replay()))
    assert s.baseline_harms == s.candidate_harms == ()
    assert s.tool_changes == ()
    text = "Paris is the capital of France."
    assert s.output_chars == SidePair(baseline=float(len(text)), candidate=float(len(text)))
    assert s.sampled is True  # no temperature in the request: the server's default samples
    assert s.noise_identical is None  # no baseline repeat


def test_candidate_stream_without_finish_reason_is_interrupted_not_harmed() -> None:
    # Cut is not harm (issue 29, item 8): a 2xx stream that ended without a finish_reason
    # was interrupted, an infrastructure error, whatever it had said before the cut.
    s = score(PairInput(exchange(response("Paris.")), replay(stream_without_finish("Paris."))))
    assert s.baseline_finish_reason is FinishReason.STOP
    assert s.candidate_harms == s.baseline_harms == ()
    assert s.candidate_error
    assert s.candidate_infra_error
    assert s.candidate_interrupted
    assert s.candidate_error_kind is ReplayErrorKind.INTERRUPTED
    assert not s.candidate_context_length
    assert s.similarity is None


def test_a_live_baseline_stream_without_content_or_finish_is_interrupted() -> None:
    cut = stream_without_finish("").model_copy(update={"usage": Usage()})
    s = score(PairInput(exchange(cut), replay()))
    assert s.baseline_error
    assert s.baseline_infra_error
    assert s.baseline_interrupted
    assert not s.baseline_empty
    assert s.baseline_harms == ()


def test_a_non_streamed_answer_without_finish_reason_is_still_the_harm() -> None:
    unfinished = response("Paris.").model_copy(update={"finish_reason_raw": None})
    s = score(PairInput(exchange(), replay(unfinished)))
    assert s.candidate_harms == (HarmKind.MISSING_FINISH_REASON,)
    assert not s.candidate_error
    assert not s.candidate_interrupted


def test_imported_baseline_is_not_flagged_for_a_finish_reason_it_never_had() -> None:
    imported = exchange(response("Paris.")).model_copy(
        update={
            "source": "import:alpaca.json#3",
            "response": response("Paris.").model_copy(update={"finish_reason_raw": None}),
        }
    )
    live = exchange(response("Paris.")).model_copy(
        update={"response": response("Paris.").model_copy(update={"finish_reason_raw": None})}
    )
    assert score(PairInput(imported, replay())).baseline_harms == ()
    assert score(PairInput(live, replay())).baseline_harms == (HarmKind.MISSING_FINISH_REASON,)


def test_degeneration_and_runaway_per_side() -> None:
    request = body(max_tokens=300)
    cut = response(LOOP, finish=FinishReason.LENGTH, use=usage(10, 300))
    s = score(PairInput(exchange(cut, request_body=request), replay(response("Short answer."))))
    assert s.baseline_harms == (HarmKind.DEGENERATION, HarmKind.RUNAWAY_LENGTH)
    assert s.candidate_harms == ()
    assert s.output_chars.baseline == float(len(LOOP))


def test_runaway_by_the_token_budget_alone() -> None:
    request = body(max_completion_tokens=7, max_tokens=1000)  # max_completion_tokens wins
    s = score(PairInput(exchange(request_body=request), replay()))
    # Both sides report 7 completion tokens and stopped; 7 ≥ the budget of 7.
    assert s.baseline_harms == s.candidate_harms == (HarmKind.RUNAWAY_LENGTH,)
    assert request_view(exchange(request_body=body(max_tokens=True))).max_tokens is None


def test_refusal_with_default_and_configured_patterns() -> None:
    item = PairInput(exchange(), replay(response("I'm sorry, but I can't help with that.")))
    assert score(item).candidate_harms == (HarmKind.REFUSAL,)
    assert score(item, refusal_patterns=[r"\bnever\b"]).candidate_harms == ()
    with pytest.raises(ConfigError, match="'\\(bad' is not a valid regular expression"):
        score(item, refusal_patterns=["(bad"])


def test_language_switch_reads_the_last_user_message() -> None:
    request = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "你是一个有帮助的助手，请认真回答所有的问题。"},
                {"role": "user", "content": "你好"},
                {"role": "assistant", "content": "你好！"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "How can you tell whether a restaurant"},
                        {"type": "text", "text": "is popular with locals or with tourists?"},
                    ],
                },
            ],
        }
    )
    ex = exchange(response("Watch who eats there and when."), request_body=request)
    assert request_view(ex).prompt == (
        "How can you tell whether a restaurant\nis popular with locals or with tourists?"
    )
    s = score(PairInput(ex, replay(response(CHINESE * 2))))
    assert s.candidate_harms == (HarmKind.LANGUAGE_SWITCH,)
    assert s.baseline_harms == ()


def test_placeholder_json_only_where_json_was_expected() -> None:
    json_mode = body(response_format={"type": "json_object"})
    s = score(
        PairInput(exchange(response('{"a": 1}'), request_body=json_mode), replay(response("{}")))
    )
    assert s.candidate_harms == (HarmKind.PLACEHOLDER_JSON,)
    assert s.baseline_harms == ()
    plain = score(PairInput(exchange(response('{"a": 1}')), replay(response("{}"))))
    assert plain.candidate_harms == ()
    structured = score(
        PairInput(exchange(response('{"a": 1}'), task_type="extract"), replay(response("{}"))),
        structured_task_types=frozenset({"extract"}),
    )
    assert structured.candidate_harms == (HarmKind.PLACEHOLDER_JSON,)


def test_template_markers_on_both_sides() -> None:
    s = score(PairInput(exchange(response("Hi<|im_end|>")), replay(response("Hi [/INST] there"))))
    assert s.baseline_harms == s.candidate_harms == (HarmKind.TEMPLATE_MARKERS,)
    assert s.template_leaks == ("[/INST]",)  # kept as before: the candidate's markers


def test_an_errored_side_has_no_harms_and_no_chars() -> None:
    s = score(PairInput(exchange(), replay(response(LOOP, status=503))))
    assert s.candidate_error
    assert s.candidate_harms == ()
    assert s.output_chars.candidate is None
    assert s.output_chars.baseline is not None
    b = score(PairInput(exchange(outcome=ExchangeOutcome.ERROR), replay()))
    assert b.baseline_harms == ()
    assert b.output_chars.baseline is None


# ------------------------------------------------------------------ tool changes


def tools_body() -> str:
    return body(tools=[WEATHER_TOOL])


def test_tool_changes_where_tools_were_offered() -> None:
    called = response(None, tool_calls=(call("get_weather", '{"city": "Paris"}'),))
    text = response("It is sunny in Paris.")
    s = score(PairInput(exchange(called, request_body=tools_body()), replay(text)))
    assert s.tool_changes == (ToolChange.TEXT_INSTEAD_OF_CALL,)
    s = score(PairInput(exchange(text, request_body=tools_body()), replay(called)))
    assert s.tool_changes == (ToolChange.CALL_INSTEAD_OF_TEXT,)
    # Without tools offered there is no tool comparison.
    assert score(PairInput(exchange(called), replay(text))).tool_changes == ()
    # Neither with an errored side.
    errored = replay(response("busy", status=503))
    assert score(PairInput(exchange(called, request_body=tools_body()), errored)).tool_changes == ()


def test_the_same_two_calls_in_reverse_order() -> None:
    a = call("get_weather", '{"city": "Paris"}', 0)
    b = call("get_weather", '{"city": "Lyon"}', 1)
    base = response(None, tool_calls=(a, b))
    cand = response(
        None,
        tool_calls=(
            b.model_copy(update={"index": 0}),
            a.model_copy(update={"index": 1, "arguments": '{ "city" : "Paris" }'}),
        ),
    )
    s = score(PairInput(exchange(base, request_body=tools_body()), replay(cand)))
    assert s.tool_changes == (ToolChange.ORDER_CHANGED,)
    assert side_text(base) != side_text(cand)


# ------------------------------------------------------------------ sampled, noise


@pytest.mark.parametrize(
    ("request_body", "sampled"),
    [
        (body(), True),
        (body(temperature=None), True),
        (body(temperature=0.7), True),
        (body(temperature=0), False),
        (body(temperature=0.0), False),
        (body(temperature="hot"), None),
        (body(temperature=True), None),
        (body(temperature=-1), None),
        ("not json", None),
    ],
)
def test_sampled(request_body: str, sampled: bool | None) -> None:
    ex = exchange(request_body=request_body)
    assert score(PairInput(ex, replay())).sampled is sampled


def test_sampled_is_none_for_a_base64_body_that_is_not_json() -> None:
    ex = exchange().model_copy(
        update={"request": RequestRecord(body="AAEC", body_encoding="base64")}
    )
    assert score(PairInput(ex, replay())).sampled is None


def test_noise_identical() -> None:
    same = score(PairInput(exchange(), replay(), repeat()))
    assert same.noise_identical is True
    other = score(PairInput(exchange(), replay(), repeat(response("Paris, France."))))
    assert other.noise_identical is False
    failed = score(PairInput(exchange(), replay(), repeat(response("x", status=500))))
    assert failed.noise_identical is None
    no_base = score(PairInput(exchange(outcome=ExchangeOutcome.ERROR), replay(), repeat()))
    assert no_base.noise_identical is None


def test_score_pairs_keeps_the_refusal_default_across_batches() -> None:
    items = [
        PairInput(exchange(), replay(response("I cannot assist with that."))),
        PairInput(exchange(), replay()),
    ]
    first, second = score_pairs(items, ENCODER, run_id=RUN, batch_size=1)
    assert first.candidate_harms == (HarmKind.REFUSAL,)
    assert second.candidate_harms == ()
