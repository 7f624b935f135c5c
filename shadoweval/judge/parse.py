"""Reading the judge's verdict: a ``VERDICT: A|B|TIE`` line, or a JSON verdict object.

The ``text`` response format (:mod:`shadoweval.judge.prompt`) is read by :func:`parse_verdict`, the
JSON formats (``json_schema``, ``json_object``) by :func:`parse_json_verdict`;
:func:`parse_answer` picks by format.

**Verdict line** (``text``).

Lenient on form, strict on meaning. A verdict line is a line that, after markdown
decoration (``**``, ``__``, backticks, ``#``, ``>``, list dashes) and blanks are set aside,
reads ``verdict`` (any case), a colon, and one of ``A``, ``B``, ``TIE`` (any case, optionally
in brackets, optionally followed by a full stop). So ``**VERDICT:** b``, ``Verdict : Tie.``
and ``VERDICT: [A]`` all read. The rationale is the text before the last verdict line.

An answer with no verdict line, or with verdict lines that disagree, is *unparseable*:
:func:`parse_verdict` raises :class:`VerdictParseError`, and the caller keeps the vote as a
failed one. It never falls back to a default verdict — reference failure "unparseable
judge output silently becomes the minimum score".

**JSON verdict** (``json_schema`` / ``json_object``). Strict: the whole answer (blanks
around it aside) must be one JSON object whose ``verdict`` is exactly ``"A"``, ``"B"`` or
``"TIE"``; ``rationale``, when present, must be a string (other keys are ignored). No
markdown fence, no verdict line, no case folding: the server constrained the answer to
the schema, so anything else — text, a cut object (``max_tokens`` reached), an array, a
missing or other verdict — means the answer is not what was asked for, and
:func:`parse_json_verdict` raises :class:`VerdictParseError` (a failed vote, never a
default). One leniency on form: raw control characters (a newline, a tab) inside a string
are read (Python's ``json.loads(strict=False)``). RFC 8259 wants them escaped, but the
grammar llama-cpp-python 0.3.36 builds from a schema lets any character but a quote and a
backslash into a string unescaped, and SmolLM2-135M wrote a raw newline into its rationale
under it (the real-server run). The verdict is unaffected.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_RATIONALE_CHARS",
    "ParsedVerdict",
    "VerdictParseError",
    "parse_answer",
    "parse_json_verdict",
    "parse_verdict",
]

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


_JSON_CHOICES: dict[str, Choice] = {"A": "A", "B": "B", "TIE": "TIE"}


def parse_json_verdict(text: str | None) -> ParsedVerdict:
    """Read a JSON verdict object ``{"rationale": "...", "verdict": "A" | "B" | "TIE"}``.

    Args:
        text: the judge's message content.

    Returns:
        The choice and the rationale (stripped, at most :data:`MAX_RATIONALE_CHARS`
        characters; ``""`` when the object has no ``rationale``).

    Raises:
        VerdictParseError: ``text`` is empty, is not JSON (e.g. cut at ``max_tokens``; the
            message quotes its end; raw control characters inside strings are read), is
            JSON but not an object, has no ``verdict``, a ``verdict`` other than exactly
            ``"A"``, ``"B"`` or ``"TIE"``, or a ``rationale`` that is not a string.
    """
    if text is None or not text.strip():
        raise VerdictParseError("unparseable verdict: the judge's answer is empty")
    try:
        payload = json.loads(text.strip(), strict=False)  # raw control characters read
    except json.JSONDecodeError as exc:
        raise VerdictParseError(
            f"unparseable verdict: the judge's answer is not a JSON object ({exc}; it ends "
            f"{_excerpt(text)!r})"
        ) from None
    if not isinstance(payload, dict):
        raise VerdictParseError(
            f"unparseable verdict: the judge's answer is JSON but not an object "
            f"({type(payload).__name__}: {_excerpt(text)!r})"
        )
    if "verdict" not in payload:
        keys = ", ".join(sorted(map(str, payload))) or "none"
        raise VerdictParseError(
            f"unparseable verdict: the judge's JSON answer has no 'verdict' (keys: {keys})"
        )
    verdict = payload["verdict"]
    choice = _JSON_CHOICES.get(verdict) if isinstance(verdict, str) else None
    if choice is None:
        raise VerdictParseError(
            f"unparseable verdict: the judge's JSON 'verdict' is {verdict!r}, not one of "
            "'A', 'B', 'TIE'"
        )
    rationale = payload.get("rationale", "")
    if not isinstance(rationale, str):
        raise VerdictParseError(
            "unparseable verdict: the judge's JSON 'rationale' is not a string "
            f"({type(rationale).__name__})"
        )
    return ParsedVerdict(choice=choice, rationale=rationale.strip()[:MAX_RATIONALE_CHARS])


def parse_answer(text: str | None, response_format: str = "text") -> ParsedVerdict:
    """The verdict of an answer in ``response_format``: :func:`parse_verdict` for
    ``text``, :func:`parse_json_verdict` for ``json_schema`` and ``json_object``.

    Raises:
        VerdictParseError: the answer holds no verdict (see the two parsers).
        ValueError: an unknown ``response_format``.
    """
    if response_format == "text":
        return parse_verdict(text)
    if response_format in ("json_schema", "json_object"):
        return parse_json_verdict(text)
    raise ValueError(
        f"response_format must be one of text, json_schema, json_object, got {response_format!r}"
    )
