"""Cache hits: did a cache, not the model, serve this response?

An answer served from an HTTP cache or an LLM gateway's response cache (``X-Cache: HIT``,
``CF-Cache-Status: HIT``, ``Age: 30`` …) took the cache's time, not the model's, so it
says nothing about the model's latency. The rules are
:class:`~shadoweval.config.CacheHitRule` (defaults
:data:`~shadoweval.config.DEFAULT_CACHE_HIT_RULES`); the capture builder applies them to
live responses and the replay client to candidate responses, both off the live path.
A response a rule matched keeps its answer (quality checks use it) and is marked
``cache_hit`` with the matched headers; the gate leaves the pair out of latency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from shadoweval.config import CacheHitRule
from shadoweval.records import HeaderPair, ResponseRecord

__all__ = ["mark_cache_hit", "matches", "matching_headers"]


def matches(rule: CacheHitRule, value: str) -> bool:
    """Whether one header value satisfies ``rule``'s test (the name is not checked).

    ``contains``/``equals`` compare case-insensitively (``equals`` after trimming);
    ``greater_than`` reads the first comma-separated item as a number, and a value
    that is not a finite number does not match.
    """
    if rule.contains is not None:
        return rule.contains.strip().lower() in value.lower()
    if rule.equals is not None:
        wanted = value.strip().lower()
        return any(wanted == option.strip().lower() for option in rule.equals)
    assert rule.greater_than is not None
    first = value.split(",", 1)[0].strip()
    try:
        number = float(first)
    except ValueError:
        return False
    return math.isfinite(number) and number > rule.greater_than


def matching_headers(
    headers: Iterable[HeaderPair] | Iterable[tuple[str, str]],
    rules: Sequence[CacheHitRule],
) -> tuple[HeaderPair, ...]:
    """The headers that some rule matched, in header order, each once.

    Args:
        headers: ``HeaderPair``s or ``(name, value)`` pairs (names in any case; a repeated
            header is tested line by line).
        rules: the cache-hit rules; an empty sequence matches nothing.

    Returns:
        The matched headers with lower-case names and their values as received; empty
        when no rule matched (the response was not served from a cache, as far as the
        rules can tell).
    """
    if not rules:
        return ()
    by_name: dict[str, list[CacheHitRule]] = {}
    for rule in rules:
        by_name.setdefault(rule.header, []).append(rule)
    found: list[HeaderPair] = []
    for header in headers:
        name, value = (header.name, header.value) if isinstance(header, HeaderPair) else header
        lowered = name.lower()
        candidates = by_name.get(lowered)
        if candidates and any(matches(rule, value) for rule in candidates):
            pair = HeaderPair(name=lowered, value=value)
            if pair not in found:
                found.append(pair)
    return tuple(found)


def mark_cache_hit(
    response: ResponseRecord,
    rules: Sequence[CacheHitRule],
    headers: Iterable[HeaderPair] | Iterable[tuple[str, str]] | None = None,
) -> ResponseRecord:
    """``response`` with ``cache_hit`` / ``cache_hit_headers`` set from ``rules``.

    Args:
        response: the record to mark (returned unchanged when nothing matched).
        rules: the cache-hit rules.
        headers: the headers to test; by default ``response.headers`` (the recorded,
            redacted headers). The replay client passes every received header, since it
            records only a few.
    """
    matched = matching_headers(response.headers if headers is None else headers, rules)
    if not matched:
        return response
    return response.model_copy(update={"cache_hit": True, "cache_hit_headers": matched})
