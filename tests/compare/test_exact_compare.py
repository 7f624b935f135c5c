"""Normalised exact comparison of structured and short answers (issue 29, item 3).

MiniLM reads ``"operating_hours": 11`` vs ``23`` as the same answer; the exact comparison
must call it changed, and must not call a change what only key order, whitespace or
``1`` vs ``1.0`` tell apart. The Hermes prompt-mode texts are the form of BFCL's
``NousResearch_Hermes-2-Pro-*`` results (``<tool_call>`` blocks, single-quoted keys).
"""

from __future__ import annotations

from shadoweval.compare.exact import SHORT_TOKENS, exact_differs, exact_form
from shadoweval.records import ToolCall

HERMES = '<tool_call>\n{"arguments": {%s}, "name": "requests_get"}\n</tool_call>\n'


def text(value: str) -> tuple[str, tuple[ToolCall, ...]]:
    return value, ()


def call(arguments: str, name: str = "open_hours") -> tuple[None, tuple[ToolCall, ...]]:
    return None, (ToolCall(index=0, id="c0", name=name, arguments=arguments),)


def test_a_number_in_json_arguments_is_a_change() -> None:
    assert exact_differs(text('{"operating_hours": 11}'), text('{"operating_hours": 23}'))
    assert exact_differs(call('{"operating_hours": 11}'), call('{"operating_hours": 23}'))


def test_key_order_whitespace_and_integral_floats_are_not_a_change() -> None:
    base = '{"a": 1, "b": [1.0, "x"]}'
    cand = '```json\n{ "b":[1, "x"],\n  "a":1.0 }\n```'
    assert exact_differs(text(base), text(cand)) is False
    assert exact_differs(call('{"a":1,"b":2}'), call('{"b": 2.0, "a": 1}')) is False


def test_hermes_tool_call_blocks_are_parsed_with_python_literals() -> None:
    single = HERMES % "'lat': 48.8584, 'lon': 2.2945, 'verify': True"
    double = HERMES % '"lon": 2.2945, "lat": 48.8584, "verify": true'
    other = HERMES % '"lon": 2.2945, "lat": 40.7128, "verify": true'
    assert exact_differs(text(single), text(double)) is False
    assert exact_differs(text(single), text(other)) is True
    assert exact_form(single) == exact_form(double)


def test_short_answers_are_compared_normalised_and_long_prose_is_left_to_the_embedding() -> None:
    assert exact_differs(text("Paris."), text("  paris ")) is False
    assert exact_differs(text("The total is 11.0"), text("the total is 11")) is False
    assert exact_differs(text("11"), text("23")) is True
    long_a = " ".join(["word"] * SHORT_TOKENS)
    long_b = " ".join(["other"] * SHORT_TOKENS)
    assert exact_form(long_a) is None
    assert exact_differs(text(long_a), text(long_b)) is None
    # A short answer against long prose differs.
    assert exact_differs(text("11"), text(long_a)) is True
