"""JSON format flags: strict, fence-stripped, extracted, schema-valid (reference §4 cases 5–7)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from shadoweval.compare.formats import extract_json, json_format_flags, strip_json_fence
from shadoweval.compare.json_parse import parse_json

SCHEMA_MYFIELD = {
    "type": "object",
    "properties": {"MyField": {"type": "string"}},
    "required": ["MyField"],
}


def flags_tuple(text: str | None, schema: dict[str, Any] | None = None) -> tuple[bool, bool, bool]:
    f = json_format_flags(text, schema)
    return f.strict, f.fence_stripped, f.extracted


# ------------------------------------------------------------------ case 5: fences


@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"a":1}\n```',
        '```JSON\n{"a": 1}\n```\n',
        '```\n{"a": 1}\n```',
        '  \n```json  \r\n{"a": 1}\r\n```  \n',
        '```json\n{\n  "a": 1\n}```',
        '````json\n{"a": "```"}\n````',
    ],
)
def test_one_enclosing_json_or_bare_fence_is_stripped(text: str) -> None:
    flags = json_format_flags(text, None)
    assert (flags.strict, flags.fence_stripped, flags.extracted) == (False, True, True)
    assert flags.schema_valid is None
    assert flags.detail == "fenced_json"


def test_bash_fence_is_not_stripped_but_object_can_be_extracted() -> None:
    text = '```bash\n{"a": 1}\n```'
    assert strip_json_fence(text) is None
    assert flags_tuple(text) == (False, False, True)
    assert json_format_flags(text, None).detail == "json_with_extra_text"


@pytest.mark.parametrize(
    "text",
    [
        'Here you go:\n```json\n{"a": 1}\n```',
        '```json\n{"a": 1}\n```\nAnything else?',
        '```json\n{"a": 1}\n```\n\n```json\n{"b": 2}\n```',
        '```python\nprint({"a": 1})\n```',
    ],
)
def test_fence_with_text_outside_or_several_fences_is_not_stripped(text: str) -> None:
    flags = json_format_flags(text, None)
    assert not flags.strict
    assert not flags.fence_stripped
    assert flags.extracted
    assert extract_json(text) == {"a": 1}


def test_fence_with_invalid_body_fails_fence_flag() -> None:
    assert flags_tuple("```json\n{'a': 1}\n```") == (False, False, False)
    assert flags_tuple("```json\n```") == (False, False, False)


# ------------------------------------------------------- case 6: prefix / suffix


def test_reasoning_prefix_extracts_the_object_not_the_empty_list() -> None:
    text = 'Reasoning: []{"MyField":"x"}'
    flags = json_format_flags(text, SCHEMA_MYFIELD)
    assert (flags.strict, flags.fence_stripped, flags.extracted) == (False, False, True)
    assert flags.schema_valid is True
    assert flags.detail == "json_with_extra_text"
    assert extract_json(text) == {"MyField": "x"}


def test_suffix_after_object() -> None:
    text = '{"a":1}\nHope this helps!'
    assert flags_tuple(text) == (False, False, True)
    assert extract_json(text) == {"a": 1}


def test_first_non_empty_container_wins_and_empty_is_only_a_fallback() -> None:
    assert extract_json('Steps: [] then {} then [1, 2] and {"a": 1}') == [1, 2]
    assert extract_json("The list is [] and that is all.") == []
    assert extract_json("Nothing: {} here") == {}
    assert flags_tuple("The list is [] and that is all.") == (False, False, True)


def test_scan_skips_brackets_that_start_no_value() -> None:
    assert extract_json('{not json} but {"a": 1}') == {"a": 1}
    assert extract_json('{"a": {"b": 1}') == {"b": 1}  # unbalanced outer object
    assert extract_json("see [1] and [2") == [1]


def test_nested_braces_and_escaped_quotes_inside_strings() -> None:
    value = {"a": "}{", "b": [1, {"c": "]"}], "q": 'he said "hi" {x}'}
    text = 'Answer: {"a": "}{", "b": [1, {"c": "]"}], "q": "he said \\"hi\\" {x}"} -- done'
    assert extract_json(text) == value
    assert flags_tuple(text) == (False, False, True)


def test_scalars_are_not_extracted_from_prose() -> None:
    flags = json_format_flags("I have 3 apples and true friends.", SCHEMA_MYFIELD)
    assert (flags.strict, flags.fence_stripped, flags.extracted) == (False, False, False)
    assert flags.schema_valid is False
    assert flags.detail == "no_json"


@pytest.mark.parametrize(
    "text",
    ["{" * 20_000, "[" * 5_000 + "x", '{"a":' * 20_000, "[1," * 30_000, "[ " * 50_000],
)
def test_extraction_is_fast_on_pathological_brackets(text: str) -> None:
    started = time.perf_counter()
    assert extract_json(text) is None
    assert not json_format_flags(text, None).extracted
    # a bound on a hang, not a speed check: linear work takes well under a second here, a
    # quadratic or exponential scan of these brackets would not end
    assert time.perf_counter() - started < 30.0


def test_too_deep_prefix_does_not_hide_a_later_object() -> None:
    assert extract_json("[" * 5_000 + '{"a": 1}') == {"a": 1}


# ------------------------------------------------------- case 7: no repair, strict


def test_valid_json_with_brace_comma_in_string_parses_unchanged() -> None:
    text = '{"reason": "score is 1,} good"}'
    schema = {"properties": {"reason": {"const": "score is 1,} good"}}, "required": ["reason"]}
    flags = json_format_flags(text, schema)
    assert (flags.strict, flags.fence_stripped, flags.extracted) == (True, True, True)
    assert flags.schema_valid is True
    assert flags.detail == "json"


@pytest.mark.parametrize(
    "text",
    [
        '{"名前": "テスト 😺", "emoji": "\\ud83d\\ude3a"}',
        '  \n\t{"a": [1, 2, {"b": null}]}\r\n ',
        "42",
        '"just a string"',
        "null",
        "true",
        "[]",
        "-0.5e10",
    ],
)
def test_strict_accepts_any_json_text_with_surrounding_whitespace(text: str) -> None:
    assert flags_tuple(text) == (True, True, True)


@pytest.mark.parametrize(
    "text",
    ["NaN", '{"a": NaN}', '{"a": Infinity}', "{'a': 1}", '{"a": 1,}', '{"a": 1} {"b": 2}'],
)
def test_strict_rejects_non_standard_json(text: str) -> None:
    assert not json_format_flags(text, None).strict


def test_big_integers_keep_their_exact_value() -> None:
    n = 123456789012345678901234567890
    schema = {"properties": {"n": {"const": n}}}
    assert json_format_flags(f'{{"n": {n}}}', schema).schema_valid is True


def test_deep_nesting_does_not_crash() -> None:
    text = "[" * 100_000 + "]" * 100_000
    assert parse_json(text).ok is False
    assert json_format_flags(text, None).strict is False


@pytest.mark.parametrize("text", [None, "", "   \n\t "])
def test_empty_output_fails_every_flag(text: str | None) -> None:
    flags = json_format_flags(text, None)
    assert (flags.strict, flags.fence_stripped, flags.extracted) == (False, False, False)
    assert flags.schema_valid is None
    assert flags.detail == "empty"
    assert json_format_flags(text, SCHEMA_MYFIELD).schema_valid is False


# -------------------------------------------------------------------- schemas


def test_schema_mismatch_is_reported_with_the_path() -> None:
    flags = json_format_flags('{"MyField": 3}', SCHEMA_MYFIELD)
    assert flags.strict
    assert flags.schema_valid is False
    assert flags.detail is not None
    assert flags.detail.startswith("json; schema: at /MyField:")


def test_schema_uses_the_best_parse() -> None:
    text = '```json\n{"MyField": "x"}\n```'
    flags = json_format_flags(text, SCHEMA_MYFIELD)
    assert flags.schema_valid is True
    assert flags.detail == "fenced_json"


def test_invalid_schema_gives_false_with_detail_and_never_raises() -> None:
    flags = json_format_flags('{"a": 1}', {"type": "dict"})
    assert flags.strict
    assert flags.schema_valid is False
    assert flags.detail is not None
    assert "schema itself is invalid" in flags.detail


def test_remote_ref_is_not_fetched() -> None:
    schema = {"$ref": "https://example.invalid/schema.json"}
    started = time.perf_counter()
    flags = json_format_flags('{"a": 1}', schema)
    assert flags.schema_valid is False
    assert flags.detail is not None
    assert "cannot be evaluated" in flags.detail
    assert time.perf_counter() - started < 30.0  # a bound on a hang (a network wait)


def test_local_ref_resolves() -> None:
    schema = {
        "$defs": {"name": {"type": "string", "minLength": 1}},
        "type": "object",
        "properties": {"name": {"$ref": "#/$defs/name"}},
        "required": ["name"],
    }
    assert json_format_flags('{"name": "x"}', schema).schema_valid is True
    assert json_format_flags('{"name": ""}', schema).schema_valid is False
