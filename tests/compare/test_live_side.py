"""shadoweval.compare.live_side: one live answer judged alone with the pair scorer's side rules."""

from __future__ import annotations

import json

from shadoweval.compare.live_side import live_side_facts
from shadoweval.records import ExchangeOutcome, HarmKind, Timings, TimingSource
from tests.compare.test_compare_pair import (
    ANSWER_SCHEMA,
    WEATHER_TOOL,
    body,
    call,
    exchange,
    response,
)

TIMED = Timings(source=TimingSource.MEASURED, ttft_ms=20.0, e2e_ms=120.0)


def test_a_good_answer_has_no_error_no_harm_and_its_latency() -> None:
    facts = live_side_facts(exchange(timings=TIMED))
    assert not facts.error
    assert not facts.harmed
    assert facts.format_expected is False
    assert facts.format_ok is None
    assert (facts.e2e_ms, facts.ttft_ms, facts.status_code) == (120.0, 20.0, 200)


def test_a_5xx_is_an_infra_error_without_latency_or_harms() -> None:
    facts = live_side_facts(exchange(response(None, status=503), timings=TIMED))
    assert facts.error
    assert facts.infra_error
    assert facts.harms == ()
    assert facts.e2e_ms is None
    assert facts.format_ok is None


def test_json_asked_and_prose_answered_is_a_format_failure() -> None:
    request = body(
        response_format={"type": "json_schema", "json_schema": {"schema": ANSWER_SCHEMA}}
    )
    bad = live_side_facts(exchange(response("Sure, Paris."), request_body=request))
    good = live_side_facts(
        exchange(response(json.dumps({"answer": "Paris"})), request_body=request)
    )
    assert (bad.format_expected, bad.format_ok) == (True, False)
    assert good.format_ok is True


def test_tool_calls_are_judged_by_their_schema() -> None:
    request = body(tools=[WEATHER_TOOL])
    wrong = response(None, tool_calls=(call("get_weather", '{"town": "Paris"}'),))
    facts = live_side_facts(exchange(wrong, request_body=request))
    assert (facts.format_expected, facts.format_ok) == (True, False)


def test_a_refusal_is_a_harm() -> None:
    facts = live_side_facts(exchange(response("I'm sorry, but I can't help with that.")))
    assert facts.harms == (HarmKind.REFUSAL,)
    assert facts.harmed


def test_a_cancelled_request_is_an_infra_error() -> None:
    facts = live_side_facts(exchange(outcome=ExchangeOutcome.CANCELLED, no_response=True))
    assert facts.error
    assert facts.infra_error
    assert facts.status_code is None
