"""Tool changes: how the candidate's tool calls differ from the baseline's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from shadoweval.compare.json_parse import canonical_json, parse_json
from shadoweval.records import ToolCall, ToolChange


def json_numbers_normalised(value: Any) -> Any:
    """``value`` (parsed JSON, or a Python literal of dicts, lists and tuples) with integral
    floats written as integers, recursively: JSON has one number type, so ``1`` and ``1.0``
    are the same value. Tuples become lists, dict keys strings; ``bool`` stays ``bool``."""
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list | tuple):
        return [json_numbers_normalised(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_numbers_normalised(item) for key, item in value.items()}
    return value


def normalised_arguments(arguments: str) -> str:
    """A tool call's arguments in canonical form: equal forms mean equal arguments.

    Arguments that parse as JSON become canonical JSON (sorted keys, no whitespace,
    :func:`shadoweval.compare.json_parse.canonical_json`) with integral numbers written as integers
    (JSON has one number type: ``1`` and ``1.0`` are the same value). Arguments that do
    not parse are compared as their text with surrounding whitespace stripped.
    """
    parsed = parse_json(arguments)
    if not parsed.ok:
        return arguments.strip()
    return canonical_json(json_numbers_normalised(parsed.value))


def tool_changes(
    baseline_calls: Sequence[ToolCall],
    candidate_calls: Sequence[ToolCall],
    *,
    order_free: bool = False,
) -> tuple[ToolChange, ...]:
    """How the candidate's tool calls differ from the baseline's, at most one change.

    Calls are taken in ``index`` order; a call is its name and its
    :func:`normalised_arguments`. The first rule that applies decides:

    * ``text_instead_of_call`` — the baseline called, the candidate made no call;
    * ``call_instead_of_text`` — the baseline made no call, the candidate called;
    * ``function_changed`` — both called, the multisets of function names differ
      (another function, or a different number of calls);
    * ``arguments_changed`` — the same names, but the multisets of (name, arguments)
      differ: some call's arguments changed after normalisation (key order, whitespace
      and ``1`` vs ``1.0`` never count);
    * ``order_changed`` — the same calls with the same arguments in another order;
      never with ``order_free=True``.

    No change (or no calls on either side) gives ``()``. The caller applies this only
    where the request offered tools and neither side errored. The compare stage calls
    it with ``order_free=False`` always, so the stored pair says an order difference
    happened; the policy's ``tool_calls.order_free`` decides at gate time whether it
    counts as a change.
    """
    base = sorted(baseline_calls, key=lambda call: call.index)
    cand = sorted(candidate_calls, key=lambda call: call.index)
    if not base and not cand:
        return ()
    if base and not cand:
        return (ToolChange.TEXT_INSTEAD_OF_CALL,)
    if cand and not base:
        return (ToolChange.CALL_INSTEAD_OF_TEXT,)
    if Counter(call.name for call in base) != Counter(call.name for call in cand):
        return (ToolChange.FUNCTION_CHANGED,)
    base_keys = [(call.name, normalised_arguments(call.arguments)) for call in base]
    cand_keys = [(call.name, normalised_arguments(call.arguments)) for call in cand]
    if Counter(base_keys) != Counter(cand_keys):
        return (ToolChange.ARGUMENTS_CHANGED,)
    if base_keys != cand_keys and not order_free:
        return (ToolChange.ORDER_CHANGED,)
    return ()
