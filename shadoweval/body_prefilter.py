"""Which body rules can match a text at all, decided once per text.

:class:`~shadoweval.body_redaction.BodyRedactor` runs each rule only on a text holding one
of the rule's ``needs`` (or, with ``needs_digit``, a decimal digit). Checked rule by rule
that is a Python call per rule and text; :class:`Prefilter` checks all the needles with one
regular-expression search and a digit with another, and gives the rules left to run (each
still makes its own check). The result is exactly that of applying every rule:
``tests/capture/test_body_redaction_prefilter.py`` compares the two.
"""

from __future__ import annotations

import re
from typing import Generic, Protocol, TypeVar

_DIGIT = re.compile(r"\d")


class GatedRule(Protocol):
    """What the prefilter reads of a rule (:class:`~shadoweval.body_redaction.BodyRule`)."""

    @property
    def name(self) -> str: ...
    @property
    def needs(self) -> tuple[str, ...]: ...
    @property
    def needs_lower(self) -> bool: ...
    @property
    def needs_digit(self) -> bool: ...


R = TypeVar("R", bound=GatedRule)


def skippable(rule: GatedRule, before: tuple[GatedRule, ...]) -> bool:
    """Whether ``rule`` may be skipped on its ``needs``/``needs_digit`` as checked on the
    text before the rules ``before`` ran. Those rules only put ``[REDACTED:<name>]`` tokens
    into the text, so a needle that no token holds (nor straddles: no ``[`` or ``]``; ASCII
    when compared lower-cased, where case mapping depends on context only for sigma), or a
    digit when no token holds one, cannot appear on the way."""
    tokens = [f"[REDACTED:{r.name}]" for r in before]
    hay = [t.lower() for t in tokens] if rule.needs_lower else tokens
    for needle in rule.needs:
        if "[" in needle or "]" in needle or (rule.needs_lower and not needle.isascii()):
            return False
        if any(needle in t for t in hay):
            return False
    if rule.needs_digit and any(_DIGIT.search(t) for t in tokens):
        return False
    return bool(rule.needs or rule.needs_digit)


class Prefilter(Generic[R]):
    """The rules of a :class:`~shadoweval.body_redaction.BodyRedactor` (or its secret rules
    alone), grouped once by which of them a text may need.

    Args:
        rules: the rules in the order they are applied.
    """

    def __init__(self, rules: tuple[R, ...]) -> None:
        skip = [skippable(rule, rules[:k]) for k, rule in enumerate(rules)]
        needles = [
            (n, r.needs_lower) for r, s in zip(rules, skip, strict=True) if s for n in r.needs
        ]
        plain = sorted({n for n, low in needles if not low})
        self._plain = re.compile("|".join(map(re.escape, plain))) if plain else None
        self._lower = tuple(sorted({n for n, low in needles if low}))
        self._runs = {
            (needle, digit): tuple(
                r
                for r, s in zip(rules, skip, strict=True)
                if not (s and ((r.needs and not needle) or (r.needs_digit and not digit)))
            )
            for needle in (False, True)
            for digit in (False, True)
        }

    def rules_for(self, text: str) -> tuple[R, ...]:
        """The rules that may match ``text``, in order: all but the skippable ones whose
        needles (or digit) ``text`` lacks."""
        needle = (self._plain is not None and self._plain.search(text) is not None) or (
            bool(self._lower) and any(n in text.lower() for n in self._lower)
        )
        return self._runs[needle, _DIGIT.search(text) is not None]
