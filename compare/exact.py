"""Normalised exact comparison of structured and short answers (issue 29, item 3).

An embedding similarity reads ``{"operating_hours": 11}`` and ``{"operating_hours": 23}``
as the same answer (all-MiniLM-L6-v2: cosine ≈ 0.99): on structured outputs and short
answers the one number that matters barely moves the vector. Such answers are therefore
also compared exactly, after a normalisation that removes what never counts as a change:

* **JSON** — a side whose text (one enclosing Markdown fence stripped) parses as JSON is
  its canonical JSON: sorted keys, no whitespace, integral numbers written as integers
  (``1`` and ``1.0`` are one JSON number) — the normalisation of tool-call arguments,
  :func:`shadoweval.compare.harms.tool_changes.normalised_arguments`.
* **Tool calls** — native calls (``tool_calls``) are ``name(<normalised arguments>)`` in
  ``index`` order; calls written as text in ``<tool_call>…</tool_call>`` blocks (the
  Hermes prompt format of BFCL's prompt-mode models) are each parsed as JSON, else as a
  Python literal (``'single quotes'``, ``True``: :func:`ast.literal_eval`, which
  evaluates no code), and normalised the same way; a block that parses as neither is
  kept as its whitespace-collapsed text.
* **Short text** — an answer of fewer than :data:`SHORT_TOKENS` tokens (words and
  punctuation marks, a cheap stand-in for a tokenizer's count) is compared case-folded,
  whitespace collapsed, trailing punctuation stripped and integral decimals written as
  integers (``11.0`` → ``11``).

Any other answer (prose of :data:`SHORT_TOKENS` tokens or more) has no exact form: the
embedding decides there. A pair is compared when at least one side has an exact form
(:func:`exact_differs`): a short answer against a long one differs.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Final

from shadoweval.compare.harms.tool_changes import json_numbers_normalised, normalised_arguments
from shadoweval.compare.json_parse import canonical_json, parse_json
from shadoweval.records import ToolCall

__all__ = ["SHORT_TOKENS", "exact_differs", "exact_form"]

SHORT_TOKENS: Final = 40
"""Answers with fewer tokens than this (words and punctuation marks) are compared exactly."""

_TOKEN = re.compile(r"\w+|[^\w\s]")
_SPACE = re.compile(r"\s+")
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*)\n\s*```$", re.DOTALL)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_INTEGRAL_DECIMAL = re.compile(r"(?<![\w.])(-?\d+)\.0+(?![\w.])")
_TRAILING = ".!?;:,"


def _structured(text: str) -> str | None:
    """The canonical form of a JSON or Python-literal text, or ``None`` when it is neither
    (a literal must be a dict or list: a bare word is text, not structure)."""
    parsed = parse_json(text)
    if parsed.ok:
        return canonical_json(json_numbers_normalised(parsed.value))
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict | list | tuple):
        return None
    try:
        return canonical_json(json_numbers_normalised(value))
    except (TypeError, ValueError):
        return None


def _collapsed(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _tool_blocks(text: str) -> str | None:
    """The normalised ``<tool_call>`` blocks of a text answer, one per line, or ``None``
    without such blocks."""
    blocks = _TOOL_BLOCK.findall(text)
    if not blocks:
        return None
    forms = []
    for block in blocks:
        body = block.strip()
        forms.append(_structured(body) or _collapsed(body))
    return "\n".join(forms)


def _short(text: str) -> str | None:
    """The normalised form of a short answer, or ``None`` when it has ``SHORT_TOKENS`` or
    more tokens."""
    if len(_TOKEN.findall(text)) >= SHORT_TOKENS:
        return None
    collapsed = _collapsed(text).casefold().rstrip(_TRAILING).rstrip()
    return _INTEGRAL_DECIMAL.sub(r"\1", collapsed)


def exact_form(text: str | None, calls: Sequence[ToolCall] = ()) -> str | None:
    """One side's normalised exact form, or ``None`` when it is long prose.

    Args:
        text: the side's content (``None`` or blank: no content).
        calls: the side's native tool calls.

    Returns:
        The content's form (JSON, ``<tool_call>`` blocks, or a short answer; see the
        module docstring) followed by one line per native call, ``name(<normalised
        arguments>)``; ``""`` for an answer with neither content nor calls; ``None`` when
        the content is prose of :data:`SHORT_TOKENS` tokens or more.
    """
    lines: list[str] = []
    content = (text or "").strip()
    if content:
        fenced = _FENCE.match(content)
        inner = fenced.group(1).strip() if fenced else content
        form = _tool_blocks(inner)
        if form is None:
            parsed = parse_json(inner)
            form = canonical_json(json_numbers_normalised(parsed.value)) if parsed.ok else None
        if form is None:
            form = _short(content)
        if form is None:
            return None
        lines.append(form)
    for call in sorted(calls, key=lambda c: c.index):
        lines.append(f"{call.name}({normalised_arguments(call.arguments)})")
    return "\n".join(lines)


def exact_differs(
    baseline: tuple[str | None, Sequence[ToolCall]],
    candidate: tuple[str | None, Sequence[ToolCall]],
) -> bool | None:
    """Whether two answers' normalised exact forms differ.

    Args:
        baseline, candidate: each side's content and native tool calls.

    Returns:
        ``None`` when neither side has an exact form (both are long prose: the embedding
        decides); ``True`` when only one side has one (structure or a short answer
        against long prose) or both have different ones; ``False`` when both are equal.
    """
    base = exact_form(*baseline)
    cand = exact_form(*candidate)
    if base is None and cand is None:
        return None
    return base != cand
