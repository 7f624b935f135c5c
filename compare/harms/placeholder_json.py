"""Placeholder JSON: JSON was asked for and the answer is an empty or skeleton object."""

from __future__ import annotations

from typing import Any

from shadoweval.compare.formats import extract_json, strip_json_fence
from shadoweval.compare.json_parse import parse_json
from shadoweval.text import is_blank


def _best_json(text: str) -> tuple[bool, Any]:
    strict = parse_json(text)
    if strict.ok:
        return True, strict.value
    body = strip_json_fence(text)
    if body is not None:
        fenced = parse_json(body)
        if fenced.ok:
            return True, fenced.value
    found = extract_json(text)
    return (True, found) if found is not None else (False, None)


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return is_blank(value)
    if isinstance(value, list):
        return all(_is_empty(item) for item in value)
    if isinstance(value, dict):
        return all(_is_empty(item) for item in value.values())
    return False


def _missing_required(value: Any, schema: Any, depth: int = 0) -> bool:
    if depth > 32 or not isinstance(schema, dict):
        return False
    if isinstance(value, dict):
        required = schema.get("required")
        if isinstance(required, list) and any(
            isinstance(key, str) and key not in value for key in required
        ):
            return True
        properties = schema.get("properties")
        if isinstance(properties, dict):
            return any(
                _missing_required(value[key], sub, depth + 1)
                for key, sub in properties.items()
                if key in value
            )
        return False
    if isinstance(value, list):
        items = schema.get("items")
        return any(_missing_required(item, items, depth + 1) for item in value)
    return False


def is_placeholder_json(text: str | None, schema: dict[str, Any] | None) -> bool:
    """Valid JSON that says nothing, where JSON was asked for.

    Only called where JSON was expected (``response_format`` ``json_object`` /
    ``json_schema``, or a structured task type). The content is parsed as
    :func:`shadoweval.compare.formats.json_format_flags` does (strict, else one fenced block, else
    the first JSON container in the text). Placeholder when it parses and either

    * the value is empty: ``{}``, ``[]``, or a container whose every value is empty
      (``null``, a blank string, or an empty container, recursively) —
      ``{"name": "", "items": []}``; or
    * it misses a field the schema requires: an object lacks a key of its schema
      node's ``required``, following ``properties`` and ``items`` (not ``$ref``,
      ``anyOf`` or ``allOf``).

    Text that does not parse is not a placeholder (the format checks count it); nor is
    a JSON scalar (``42``, ``false``: a value).

    Source: the failure seen on a real llama.cpp server with the wrong chat template —
    JSON mode answered ``{}``, which parses, so the format-parse failure rate *fell*
    (issue 11); OpenAI structured outputs document ``required`` as the fields every
    answer must contain.
    """
    if is_blank(text):
        return False
    assert text is not None
    parsed, value = _best_json(text)
    if not parsed or not isinstance(value, dict | list):
        return False
    if _is_empty(value):
        return True
    return schema is not None and _missing_required(value, schema)
