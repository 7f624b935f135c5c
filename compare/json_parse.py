"""Strict JSON parsing shared by the format, tool-call and pair scorers.

One parser for every scorer, so that "parses" means the same thing everywhere: the
standard library decoder (RFC 8259 grammar, arbitrary-precision integers) with the
non-standard constants ``NaN``, ``Infinity`` and ``-Infinity`` rejected. orjson is not
used here because it silently turns integers beyond 64 bits into floats.

Nothing in this module repairs JSON: a text either parses unchanged or it does not
(reference §4 case 7, https://github.com/confident-ai/deepeval/issues/2770).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["JsonParse", "JsonTooDeepError", "canonical_json", "parse_json", "raw_decode_at"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


@dataclass(frozen=True, slots=True)
class JsonParse:
    """Result of one parse attempt.

    ``ok`` says whether the text parsed; ``value`` is the parsed value (``None`` both for
    a failed parse and for the JSON text ``null``, so always look at ``ok``); ``error`` is
    the decoder's message when ``ok`` is false.
    """

    ok: bool
    value: Any = None
    error: str | None = None


def parse_json(text: str) -> JsonParse:
    """Parse ``text`` as one complete JSON text.

    Surrounding JSON whitespace (space, tab, LF, CR) is allowed; anything else before or
    after the value fails. Top-level scalars (``42``, ``"x"``, ``null``) are valid JSON
    texts and parse. Never raises: deep nesting (``RecursionError``) and non-standard
    constants are reported as failures.
    """
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        return JsonParse(ok=False, error=_message(exc))
    return JsonParse(ok=True, value=value)


class JsonTooDeepError(ValueError):
    """A JSON value nested deeper than the decoder's recursion limit."""


def raw_decode_at(text: str, index: int) -> tuple[Any, int] | None:
    """Decode one JSON value starting exactly at ``text[index]``.

    Returns ``(value, end)`` where ``end`` is the index just past the value, or ``None``
    when no value starts there. This is :meth:`json.JSONDecoder.raw_decode` with the
    same strictness as :func:`parse_json`.

    Raises:
        JsonTooDeepError: the value nests deeper than the decoder can recurse.
    """
    try:
        return _DECODER.raw_decode(text, index)
    except RecursionError as exc:
        raise JsonTooDeepError("JSON nested too deeply to parse") from exc
    except ValueError:
        return None


def canonical_json(value: Any) -> str:
    """Serialize a parsed JSON value canonically: sorted keys, no spaces, UTF-8 kept.

    Two argument strings that differ only in key order or whitespace give the same text.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _message(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to parse"
    return str(exc)
