"""Redaction of exported text, with the hits counted per rule for the manifest.

The export does not know the rules (the body rules live in ``capture``, which the core
must not import): the composition root passes a ``redact(text) -> text`` function —
:class:`shadoweval.body_redaction.BodyRedactor` with the configured
:class:`~shadoweval.config.BodyRedactionSettings` — and the rule names it applies
(:class:`ExportRedaction`). Every match is replaced by ``[REDACTED:<rule>]``
(the body redactor's marker), so :class:`CountingRedactor` counts the hits of each rule
as the markers a call adds: markers already in the stored text (the capture sidecar
redacted before storing) are not counted twice.

JSON values (request messages, tool calls) are redacted string by string and serialized
afterwards, so a replacement can never break the JSON text (a rule run over serialized
JSON could swallow half of an escape sequence).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MARKER = re.compile(r"\[REDACTED:([^\]\s]+)\]")
"""The replacement the redaction rules write: ``[REDACTED:<rule>]``."""

Redact = Callable[[str], str]
"""Returns its argument with every match of every rule replaced by ``[REDACTED:<rule>]``."""


@dataclass(frozen=True, slots=True)
class ExportRedaction:
    """The text redactor of exports and the names of the rules it applies (in order).

    Callable like the ``redact`` it wraps, so it can be passed wherever a
    :data:`Redact` is expected (:func:`~shadoweval.export.build.build_export` then
    takes the rule names from it).
    """

    redact: Redact
    rules: tuple[str, ...]

    def __call__(self, text: str) -> str:
        """``text`` redacted."""
        return self.redact(text)


class CountingRedactor:
    """Wraps ``redact`` and counts, per rule, the ``[REDACTED:<rule>]`` markers it adds.

    Not thread-safe: use one per export.
    """

    def __init__(self, redact: Redact) -> None:
        self._redact = redact
        self._counts: Counter[str] = Counter()

    def __call__(self, text: str) -> str:
        """``text`` redacted; the markers added are counted under their rule."""
        if not text:
            return text
        redacted = self._redact(text)
        if redacted == text:
            return text
        before = Counter(MARKER.findall(text))
        after = Counter(MARKER.findall(redacted))
        after.subtract(before)
        self._counts.update({rule: n for rule, n in after.items() if n > 0})
        return redacted

    def json(self, value: Any) -> Any:
        """A copy of a JSON value with every string (not the object keys) redacted."""
        return redact_json(value, self)

    def counts(self) -> dict[str, int]:
        """Hits so far per rule, rules sorted by name."""
        return {rule: self._counts[rule] for rule in sorted(self._counts)}


def redact_json(value: Any, redact: Redact) -> Any:
    """A copy of a JSON value with every non-empty string (not the object keys) passed
    through ``redact``; lists, tuples (as lists) and dicts are copied, other values kept."""
    if isinstance(value, str):
        return redact(value) if value else value
    if isinstance(value, list | tuple):
        return [redact_json(item, redact) for item in value]
    if isinstance(value, dict):
        return {key: redact_json(item, redact) for key, item in value.items()}
    return value
