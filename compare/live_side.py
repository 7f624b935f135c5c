"""One live answer judged on its own: the facts a canary step compares between two arms.

On a live split (issue 16, a canary) each request is answered by one version only, so
there is no pair: every captured exchange is judged alone, with the same rules the pair
scorer (:mod:`shadoweval.compare.pair`) applies to each side of a pair — the error rule, the format
rule (:func:`shadoweval.pair_flags.format_ok` with the default success flag), the harm
detectors (:func:`shadoweval.compare.harms.side_harms`) — and its latency (e2e, TTFT), left out when
a cache answered. Pure: no I/O, never raises on a readable exchange.
"""

from __future__ import annotations

import math
from collections.abc import Set
from dataclasses import dataclass

from shadoweval.compare.formats import json_format_flags
from shadoweval.compare.harms import (
    RefusalPatterns,
    SideContext,
    compile_refusal_patterns,
    side_harms,
)
from shadoweval.compare.pair import request_view, side_text
from shadoweval.compare.tool_calls import tool_call_flags
from shadoweval.llm_protocol.interruption import response_interrupted
from shadoweval.pair_flags import format_ok
from shadoweval.records import Exchange, ExchangeOutcome, HarmKind, is_infra_status
from shadoweval.text import is_blank

__all__ = ["LiveSideFacts", "live_side_facts"]


@dataclass(frozen=True, slots=True)
class LiveSideFacts:
    """What one live answer shows on its own.

    ``error``: the request failed (not ``done``, no response, status ≥ 400, or an
    interrupted stream: :mod:`shadoweval.llm_protocol.interruption`, the rule the pair
    scorer applies); ``infra_error``: the failure was the infrastructure's (cancelled,
    408/429/5xx, no response, an interrupted stream); ``format_expected``: JSON was asked
    for, tools were offered or the task type is structured; ``format_ok``: ``None`` when
    not applicable (no format expected, or an infrastructure error), else whether the
    answer parsed; ``harms``: the harm
    detectors that fired (empty for a failed request); ``e2e_ms``/``ttft_ms``:
    milliseconds, ``None`` when unknown, when the request failed, or when a cache
    answered (``cache_hit``); ``status_code``: ``None`` without a response.
    """

    error: bool
    infra_error: bool
    format_expected: bool
    format_ok: bool | None
    harms: tuple[HarmKind, ...]
    cache_hit: bool
    e2e_ms: float | None
    ttft_ms: float | None
    status_code: int | None

    @property
    def harmed(self) -> bool:
        """At least one harm detector fired."""
        return bool(self.harms)


def live_side_facts(
    exchange: Exchange,
    *,
    structured_task_types: Set[str] = frozenset(),
    refusal: RefusalPatterns | None = None,
) -> LiveSideFacts:
    """Judge one captured live exchange alone (see the module docstring).

    Args:
        exchange: the captured exchange (request and the answer that served it).
        structured_task_types: task types whose answers must be JSON.
        refusal: compiled refusal patterns (the defaults when ``None``).
    """
    response = exchange.response
    status = response.status_code if response is not None else None
    interrupted = response_interrupted(response) is not None
    error = exchange.outcome != ExchangeOutcome.DONE or status is None or status >= 400
    error = error or interrupted
    infra = error and (
        exchange.outcome is ExchangeOutcome.CANCELLED
        or status is None
        or is_infra_status(status)
        or interrupted
    )
    view = request_view(exchange)
    structured = exchange.task_type in structured_task_types
    check_json = view.wants_json or structured
    expected = check_json or bool(view.tools)
    text = side_text(response)
    flags = (
        json_format_flags(response.text, view.schema)
        if check_json and not error and response is not None
        else None
    )
    tools = (
        tool_call_flags(response.tool_calls, view.tools)
        if view.tools and not error and response is not None
        else None
    )
    ok = format_ok(
        format_expected=expected,
        errored=error,
        empty=not error and is_blank(text),
        flags=flags,
        tools=tools,
        infra_error=infra,
    )
    harms: tuple[HarmKind, ...] = ()
    if not error and response is not None:
        context = SideContext(
            prompt=view.prompt,
            max_tokens=view.max_tokens,
            json_expected=check_json,
            schema=view.schema,
            refusal=refusal if refusal is not None else compile_refusal_patterns(),
        )
        harms = side_harms(response, text=text, context=context)
    cache_hit = response is not None and response.cache_hit
    timed = not error and not cache_hit
    return LiveSideFacts(
        error=error,
        infra_error=infra,
        format_expected=expected,
        format_ok=None if math.isnan(ok) else ok == 1.0,
        harms=harms,
        cache_hit=cache_hit,
        e2e_ms=exchange.timings.e2e_ms if timed else None,
        ttft_ms=exchange.timings.ttft_ms if timed else None,
        status_code=status,
    )
