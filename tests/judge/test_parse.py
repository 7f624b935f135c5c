"""The verdict parser: lenient on form, never a default verdict."""

from __future__ import annotations

import pytest

from judge import VerdictParseError, parse_verdict
from judge.parse import MAX_RATIONALE_CHARS


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
