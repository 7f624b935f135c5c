"""JSON format checks of one model output: strict, fence-stripped, extracted, schema-valid.

The four results are reported separately (reference §3, "JSON validity" row; DESIGN §4
PairScore) because each tool in the field picks one and gets a different answer:
promptfoo ``is-json`` and OpenAI Evals are strict, DeepEval fails fenced JSON
(https://github.com/confident-ai/deepeval/issues/3166), promptfoo ``contains-json``
repairs. Each flag is "valid under this reading or a stricter one":

* ``strict`` — the whole output is one JSON text (:func:`shadoweval.compare.json_parse.parse_json`;
  surrounding whitespace allowed, top-level scalars valid).
* ``fence_stripped`` — strict, or the whole output is exactly one fenced code block whose
  info string is ``json`` (any case) or empty, and the block body is one JSON text. A
  ```` ```bash ```` or ```` ```python ```` block is never stripped
  (https://github.com/NVIDIA-NeMo/labs-OO-Agents/pull/238), nor is a fence with text
  before or after it.
* ``extracted`` — fence-stripped, or a JSON object or array is found inside surrounding
  text by a ``raw_decode`` scan (reference §4 case 6). The scan tries every ``{`` and
  ``[`` from left to right and takes the **first non-empty** object or array; an empty
  ``{}`` or ``[]`` is taken only when nothing else is found. So in
  ``Reasoning: []{"MyField":"x"}`` (https://github.com/promptfoo/promptfoo/issues/5283)
  the object is extracted: an empty container is what preambles and placeholders look
  like, while the payload a JSON-mode request asked for is non-empty. Scalars are never
  extracted from prose (``I have 3 apples`` has no JSON).
* ``schema_valid`` — the best parse (strict, else fence-stripped, else extracted)
  validates against the requested schema (:mod:`shadoweval.compare.schemas`); ``None`` when no
  schema was requested; ``False`` when nothing parsed or the schema itself is invalid.

Valid JSON is never repaired (``{"reason": "score is 1,} good"}`` parses unchanged,
https://github.com/confident-ai/deepeval/issues/2770).

``FormatFlags.detail`` starts with a class label — ``json`` (strict), ``fenced_json``,
``json_with_extra_text``, ``no_json``, ``empty`` — followed by ``; schema: <reason>``
when schema validation failed.
"""

from __future__ import annotations

import re
from typing import Any, Final

from shadoweval.compare.json_parse import JsonParse, JsonTooDeepError, parse_json, raw_decode_at
from shadoweval.compare.schemas import check_against_schema
from shadoweval.records import FormatFlags

__all__ = ["extract_json", "json_format_flags", "strip_json_fence"]

_FENCE: Final = re.compile(
    r"""\A\s*
    (?P<fence>`{3,})            # opening fence: three or more backticks
    [ \t]*(?:json)?[ \t]*       # info string: json (any case) or nothing
    \r?\n
    (?P<body>.*?)
    (?:\r?\n)?[ \t]*
    (?P=fence)                  # closing fence of the same length
    \s*\Z""",
    re.VERBOSE | re.DOTALL | re.IGNORECASE,
)

_CONTAINER_START: Final = re.compile(r"[{\[]")
_OPENER_RUNS: Final = {"[": re.compile(r"\[+"), "{": re.compile(r"\{+")}
_MAX_TOO_DEEP: Final = 8


def strip_json_fence(text: str) -> str | None:
    """Return the body of ``text`` when the whole text is one ``json``/bare fenced block.

    The opening fence is three or more backticks, optionally followed by ``json`` (any
    case), then a line break; the closing fence has the same number of backticks. Only
    whitespace may surround the block. Returns ``None`` for anything else (another info
    string such as ``bash``, text outside the fence, no fence).
    """
    match = _FENCE.match(text)
    return None if match is None else match.group("body")


def extract_json(text: str) -> Any | None:
    """Find the first non-empty JSON object or array in ``text`` (raw_decode scan).

    Returns the parsed value, an empty ``{}``/``[]`` when that is the only container
    found, or ``None`` when no object or array parses anywhere. Values nested inside an
    extracted container are not scanned separately; a ``{`` or ``[`` that starts no valid
    value is skipped and the scan moves on to the next one.

    Cost: one decode attempt per ``{``/``[`` outside extracted values; each failed
    attempt stops at the first invalid character. A value nested deeper than the
    decoder's recursion limit is not extracted: the whole run of the same opening bracket
    it starts with is skipped, so ``"[" * 100_000`` costs one attempt, not 100,000, and
    after 8 such values the scan stops (each costs a full-depth attempt), keeping the
    worst case near-linear in the text length.
    """
    fallback: Any | None = None
    position = 0
    too_deep = 0
    while True:
        match = _CONTAINER_START.search(text, position)
        if match is None:
            return fallback
        try:
            decoded = raw_decode_at(text, match.start())
        except JsonTooDeepError:
            too_deep += 1
            if too_deep >= _MAX_TOO_DEEP:
                return fallback
            run = _OPENER_RUNS[match.group(0)].match(text, match.start())
            position = run.end() if run is not None else match.start() + 1
            continue
        if decoded is None:
            position = match.start() + 1
            continue
        value, end = decoded
        if value:
            return value
        if fallback is None:
            fallback = value
        position = end


def json_format_flags(text: str | None, schema: dict[str, Any] | None) -> FormatFlags:
    """Compute the four JSON format flags of one output.

    Args:
        text: the output's content text; ``None`` (no content) is treated as empty.
        schema: the JSON Schema the request asked for (``response_format.json_schema``),
            or ``None`` when none was given.

    Returns:
        :class:`~shadoweval.records.FormatFlags`. A blank output fails every flag
        (``schema_valid`` is ``False`` when a schema was given). Never raises.
    """
    body = text or ""
    if not body.strip():
        return FormatFlags(
            strict=False,
            fence_stripped=False,
            extracted=False,
            schema_valid=None if schema is None else False,
            detail="empty",
        )

    strict = parse_json(body)
    best: JsonParse | None = strict if strict.ok else None
    label = "json"
    fenced_ok = strict.ok
    if not fenced_ok:
        fence_body = strip_json_fence(body)
        if fence_body is not None:
            fenced = parse_json(fence_body)
            if fenced.ok:
                fenced_ok = True
                best = fenced
                label = "fenced_json"
    extracted_ok = fenced_ok
    if not extracted_ok:
        found = extract_json(body)
        if found is not None:
            extracted_ok = True
            best = JsonParse(ok=True, value=found)
            label = "json_with_extra_text"
    if best is None:
        label = "no_json"

    schema_valid: bool | None = None
    detail = label
    if schema is not None:
        if best is None:
            schema_valid = False
        else:
            check = check_against_schema(best.value, schema)
            schema_valid = check.valid
            if check.detail is not None:
                detail = f"{label}; schema: {check.detail}"
    return FormatFlags(
        strict=strict.ok,
        fence_stripped=fenced_ok,
        extracted=extracted_ok,
        schema_valid=schema_valid,
        detail=detail,
    )
