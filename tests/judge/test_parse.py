"""The verdict parsers: lenient on the verdict line, strict on the JSON object, never a
default verdict."""

from __future__ import annotations

import pytest

from shadoweval.judge import VerdictParseError, parse_answer, parse_json_verdict, parse_verdict
from shadoweval.judge.parse import MAX_RATIONALE_CHARS


@pytest.mark.parametrize(
    ("text", "choice"),
    [
        ("A is right.\nVERDICT: A", "A"),
        ("B is right.\nverdict: b\n", "B"),
        ("Equal.\n  Verdict :  Tie.  ", "TIE"),
        ("Reasons.\n**VERDICT: B**", "B"),
        ("Reasons.\n**Verdict:** A", "A"),
        ("Reasons.\nVERDICT: [A]", "A"),
        ("Reasons.\nVERDICT: [[B]]", "B"),
        ("Reasons.\n`VERDICT: TIE`", "TIE"),
        ("Reasons.\n> **verdict**: tie", "TIE"),
        ("Reasons.\r\nVERDICT：A\r\n", "A"),  # CRLF, full-width colon
        ("VERDICT: B\n\nThat is my answer.", "B"),  # a line after it
        ("First VERDICT: A\nthen again\nVERDICT: A", "A"),  # repeated, same choice
    ],
)
def test_verdict_lines_read(text: str, choice: str) -> None:
    assert parse_verdict(text).choice == choice


def test_the_rationale_is_the_text_before_the_verdict_line() -> None:
    parsed = parse_verdict("  Answer B cites the source.\nIt is shorter too.\nVERDICT: B\n")
    assert parsed.rationale == "Answer B cites the source.\nIt is shorter too."
    long = parse_verdict("x" * 5000 + "\nVERDICT: A")
    assert len(long.rationale) == MAX_RATIONALE_CHARS


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "the judge's answer is empty"),
        ("   \n ", "the judge's answer is empty"),
        ("Answer A is better.", "no 'VERDICT: A|B|TIE' line"),
        ("VERDICT: C", "no 'VERDICT: A|B|TIE' line"),
        ("VERDICT: A or B", "no 'VERDICT: A|B|TIE' line"),
        ("The verdict is A", "no 'VERDICT: A|B|TIE' line"),
        ("VERDICT: A\nVERDICT: B\nVERDICT: TIE", "conflicting verdict lines (['A', 'B', 'TIE'])"),
        ("Hmm.\nVERDICT: A\nActually,\nVERDICT: B", "conflicting verdict lines (['A', 'B'])"),
    ],
)
def test_unparseable_answers_raise_and_never_default(text: str | None, message: str) -> None:
    with pytest.raises(VerdictParseError, match=r"^unparseable verdict: ") as info:
        parse_verdict(text)
    assert message in str(info.value)


def test_the_error_quotes_the_end_of_a_long_answer() -> None:
    with pytest.raises(VerdictParseError) as info:
        parse_verdict("word " * 500 + "so I pick neither")
    assert str(info.value).endswith("word so I pick neither')")


@pytest.mark.parametrize(
    ("text", "choice", "rationale"),
    [
        ('{"rationale": "B is right.", "verdict": "B"}', "B", "B is right."),
        ('  {"rationale":"Same.","verdict":"TIE"}\n', "TIE", "Same."),  # blanks around
        ('{"verdict": "A", "rationale": " A cites it. "}', "A", "A cites it."),  # any order
        ('{"verdict": "A"}', "A", ""),  # no rationale
        ('{"rationale": "x", "verdict": "B", "confidence": 0.9}', "B", "x"),  # extra key
        # A raw newline in a string, as llama-cpp-python's grammar lets SmolLM2 write it.
        ('{ "rationale": "The answer is: The\n}" ,"verdict": "A"}', "A", "The answer is: The\n}"),
    ],
)
def test_json_verdicts_read(text: str, choice: str, rationale: str) -> None:
    parsed = parse_json_verdict(text)
    assert (parsed.choice, parsed.rationale) == (choice, rationale)
    assert parse_answer(text, "json_schema") == parsed == parse_answer(text, "json_object")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "the judge's answer is empty"),
        ("", "the judge's answer is empty"),
        ('{"rationale": "Both answers have merits; I would rather not', "not a JSON object"),
        ("Answer A is better.\nVERDICT: A", "not a JSON object"),  # the text format
        ('```json\n{"rationale": "x", "verdict": "A"}\n```', "not a JSON object"),
        ('[{"verdict": "A"}]', "JSON but not an object (list"),
        ('"A"', "JSON but not an object (str"),
        ('{"rationale": "A is better"}', "has no 'verdict' (keys: rationale)"),
        ('{"rationale": "x", "verdict": "a"}', "'verdict' is 'a', not one of"),
        ('{"rationale": "x", "verdict": "C"}', "'verdict' is 'C', not one of"),
        ('{"rationale": "x", "verdict": ""}', "'verdict' is '', not one of"),
        ('{"rationale": "x", "verdict": ["A"]}', "'verdict' is ['A'], not one of"),
        ('{"rationale": "x", "verdict": null}', "'verdict' is None, not one of"),
        ('{"rationale": 3, "verdict": "A"}', "'rationale' is not a string (int)"),
    ],
)
def test_malformed_json_answers_raise_and_never_default(text: str | None, message: str) -> None:
    with pytest.raises(VerdictParseError, match=r"^unparseable verdict: ") as info:
        parse_json_verdict(text)
    assert message in str(info.value)


def test_each_format_has_its_parser() -> None:
    assert parse_answer("Fine.\nVERDICT: B").choice == "B"
    with pytest.raises(VerdictParseError, match=r"no 'VERDICT: A\|B\|TIE' line"):
        parse_answer('{"rationale": "x", "verdict": "A"}', "text")
    with pytest.raises(ValueError, match="response_format must be one of"):
        parse_answer("VERDICT: A", "yaml")
