"""Every detector for one side (:func:`side_harms`), and the small facts of one response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shadoweval.compare.harms.degeneration import is_degenerate
from shadoweval.compare.harms.language import is_language_switch
from shadoweval.compare.harms.placeholder_json import is_placeholder_json
from shadoweval.compare.harms.refusal import RefusalPatterns, compile_refusal_patterns, is_refusal
from shadoweval.compare.leakage import template_leaks
from shadoweval.records import FinishReason, HarmKind, ResponseRecord


def is_runaway_length(response: ResponseRecord, max_tokens: int | None) -> bool:
    """The answer was cut by its token budget.

    True when ``finish_reason`` is ``length`` (any server's spelling, normalised), or the
    side reported ``usage.completion_tokens`` ≥ ``max_tokens`` (the request's
    ``max_completion_tokens``, else ``max_tokens``; ``None`` when it set neither). The
    gate adds the length-ratio bound of ``harm.length_ratio_max`` from ``output_chars``
    (:mod:`shadoweval.stats.frame`): that part needs both sides, this one does not.

    Source: the OpenAI chat-completions reference (``finish_reason: "length"`` — "the
    maximum number of tokens specified in the request was reached").
    """
    if response.finish_reason is FinishReason.LENGTH:
        return True
    tokens = response.usage.completion_tokens
    return max_tokens is not None and tokens is not None and tokens >= max_tokens


def is_missing_finish_reason(response: ResponseRecord) -> bool:
    """The answer ended without any ``finish_reason`` (``finish_reason_raw is None``).

    A server that finished sends one on the last choice (OpenAI reference); a stream that
    ends without it was cut (a dropped connection, a proxy timeout, a server crash mid
    stream). Only called for a side that answered without error; the caller leaves out
    imported baselines, whose tables record no finish reason for any row.
    """
    return response.finish_reason_raw is None


def has_template_markers(text: str | None) -> bool:
    """Chat-template markers leaked into the answer
    (:func:`shadoweval.compare.leakage.template_leaks`).

    Definition and sources in :mod:`shadoweval.compare.leakage` (exact, case-sensitive special
    tokens of ChatML, Llama 2/3/4, Mistral, Gemma, Zephyr, Phi, Command-R, DeepSeek).
    """
    return bool(template_leaks(text))


@dataclass(frozen=True, slots=True)
class SideContext:
    """What the detectors need from the request, the same for both sides.

    ``prompt``: the last user message's text (``None`` when unreadable);
    ``max_tokens``: the request's ``max_completion_tokens`` else ``max_tokens``;
    ``json_expected``: JSON was asked for (or the task type is structured), with the
    ``schema`` when one was given; ``refusal``: the compiled refusal patterns.
    """

    prompt: str | None = None
    max_tokens: int | None = None
    json_expected: bool = False
    schema: dict[str, Any] | None = None
    refusal: RefusalPatterns = field(default_factory=lambda: compile_refusal_patterns())


def side_harms(
    response: ResponseRecord,
    *,
    text: str,
    context: SideContext,
    check_finish_reason: bool = True,
) -> tuple[HarmKind, ...]:
    """Every harm detector that fires on one side's answer, in :class:`HarmKind` order.

    Args:
        response: the side's response (the caller passes only a side that answered
            without error: an errored side has no harms).
        text: the side text (:func:`shadoweval.compare.pair.side_text` of ``response``), read by
            the template-marker detector; the others read ``response.text``.
        context: the request's prompt, token budget, JSON expectation and the refusal
            patterns.
        check_finish_reason: ``False`` for a side whose record cannot carry a finish
            reason (an imported baseline).

    Returns:
        The fired :class:`~shadoweval.records.HarmKind` values, unique, in declaration
        order. Never raises.
    """
    content = response.text or ""
    fired = {
        HarmKind.DEGENERATION: is_degenerate(content),
        HarmKind.RUNAWAY_LENGTH: is_runaway_length(response, context.max_tokens),
        HarmKind.REFUSAL: is_refusal(content, context.refusal),
        HarmKind.MISSING_FINISH_REASON: check_finish_reason and is_missing_finish_reason(response),
        HarmKind.TEMPLATE_MARKERS: has_template_markers(text),
        HarmKind.LANGUAGE_SWITCH: is_language_switch(content, context.prompt),
        HarmKind.PLACEHOLDER_JSON: context.json_expected
        and is_placeholder_json(content, context.schema),
    }
    return tuple(kind for kind in HarmKind if fired[kind])
