"""Reading the judge's verdict line: ``VERDICT: A``, ``VERDICT: B`` or ``VERDICT: TIE``.

Lenient on form, strict on meaning. A verdict line is a line that, after markdown
decoration (``**``, ``__``, backticks, ``#``, ``>``, list dashes) and blanks are set aside,
reads ``verdict`` (any case), a colon, and one of ``A``, ``B``, ``TIE`` (any case, optionally
in brackets, optionally followed by a full stop). So ``**VERDICT:** b``, ``Verdict : Tie.``
and ``VERDICT: [A]`` all read. The rationale is the text before the last verdict line.

An answer with no verdict line, or with verdict lines that disagree, is *unparseable*:
:func:`parse_verdict` raises :class:`VerdictParseError`, and the caller keeps the vote as a
failed one. It never falls back to a default verdict — reference failure "unparseable
judge output silently becomes the minimum score".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_RATIONALE_CHARS", "ParsedVerdict", "VerdictParseError", "parse_verdict"]

Choice = Literal["A", "B", "TIE"]

MAX_RATIONALE_CHARS = 2000
"""Longest rationale kept (its beginning)."""

_DECOR = r"[\s*_`#>\-]*"
_VERDICT_LINE = re.compile(
    rf"^{_DECOR}verdict{_DECOR}[:：]{_DECOR}\[{{0,2}}\s*(a|b|tie)\s*\]{{0,2}}[\s*_`.!]*$",
    re.IGNORECASE,
)
_SHOWN_CHARS = 120


class VerdictParseError(ValueError):
    """The judge's answer holds no usable verdict line (the message says what it held)."""


@dataclass(frozen=True, slots=True)
class ParsedVerdict:
    """The verdict (``A``, ``B`` or ``TIE``, as the judge saw the answers) and the rationale."""

    choice: Choice
    rationale: str


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN_CHARS else f"…{flat[-_SHOWN_CHARS:]}"


def parse_verdict(text: str | None) -> ParsedVerdict:
    """Read the verdict line of a judge's answer.

    Args:
        text: the judge's message content.

    Returns:
        The choice and the rationale (the text before the last verdict line, stripped,
        at most :data:`MAX_RATIONALE_CHARS` characters).

    Raises:
        VerdictParseError: ``text`` is empty, has no verdict line (the message quotes the
            answer's end), or has verdict lines naming different choices.
    """
    if text is None or not text.strip():
        raise VerdictParseError("unparseable verdict: the judge's answer is empty")
    lines = text.splitlines()
    found: list[tuple[int, Choice]] = []
    for number, line in enumerate(lines):
        match = _VERDICT_LINE.match(line)
        if match is not None:
            choice = match.group(1).upper()
            found.append((number, "TIE" if choice == "TIE" else "A" if choice == "A" else "B"))
    if not found:
        raise VerdictParseError(
            "unparseable verdict: no 'VERDICT: A|B|TIE' line in the judge's answer "
            f"(it ends {_excerpt(text)!r})"
        )
    choices = sorted({choice for _, choice in found})
    if len(choices) > 1:
        raise VerdictParseError(
            f"unparseable verdict: the judge's answer has conflicting verdict lines ({choices})"
        )
    last = found[-1][0]
    rationale = "\n".join(lines[:last]).strip()
    return ParsedVerdict(choice=found[-1][1], rationale=rationale[:MAX_RATIONALE_CHARS])
