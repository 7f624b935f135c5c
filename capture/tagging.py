"""Task-type tagging: which task type an exchange is gated under (DESIGN §1).

Precedence, first that applies wins:

1. the request header ``settings.task_type_header`` (default ``x-task-type``), when its
   value is a valid label: 1–64 characters of ``[A-Za-z0-9_.:-]``. An invalid value is
   ignored (never stored: it may be anything a client sent) and reported on the result;
2. the first :class:`~shadoweval.config.TaskTypeRule` whose conditions all hold (a rule
   with no condition matches everything — a catch-all);
3. ``default``.

Rule conditions, read from the original request (tagging runs before body redaction):

* ``route``: the request path, exactly (no query string);
* ``model``: the body's ``model``, exactly;
* ``metadata_field`` / ``metadata_value``: the body's ``metadata`` object has the field,
  and (when a value is given) its value, compared as a string (``true``/``false`` for JSON
  booleans, numbers as written by JSON); ``metadata_value`` alone: any metadata value
  equals it;
* ``has_response_format``: the body asks for structured output — ``response_format``
  present with a ``type`` other than ``text``;
* ``has_tools``: a non-empty ``tools`` (or legacy ``functions``) list.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shadoweval.config import TaskTypeRule

DEFAULT_TASK_TYPE = "default"
"""Task type when neither the header nor a rule applies."""

TASK_TYPE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A valid task-type label (matched in full)."""


class TagSource(enum.StrEnum):
    """Where a task type came from."""

    HEADER = "header"
    RULE = "rule"
    DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class TaskTag:
    """The chosen task type, where it came from, and whether a header value was refused.

    ``rule_index`` is the position of the matching rule (``None`` unless ``source`` is
    ``rule``); ``rejected_header`` is ``True`` when the header was present but invalid.
    """

    task_type: str
    source: TagSource
    rule_index: int | None = None
    rejected_header: bool = False


def valid_task_type(value: str) -> bool:
    """True when ``value`` is 1–64 characters of ``[A-Za-z0-9_.:-]``."""
    return TASK_TYPE_PATTERN.fullmatch(value) is not None


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode("utf-8")


def rule_matches(rule: TaskTypeRule, *, route: str, body: Mapping[str, Any] | None) -> bool:
    """Whether every condition ``rule`` sets holds for this request."""
    data: Mapping[str, Any] = body or {}
    if rule.route is not None and rule.route != route:
        return False
    if rule.model is not None and data.get("model") != rule.model:
        return False
    if rule.metadata_field is not None:
        metadata = data.get("metadata")
        if not isinstance(metadata, dict) or rule.metadata_field not in metadata:
            return False
        value = metadata[rule.metadata_field]
        if rule.metadata_value is not None and _as_text(value) != rule.metadata_value:
            return False
    elif rule.metadata_value is not None:
        metadata = data.get("metadata")
        if not isinstance(metadata, dict) or rule.metadata_value not in (
            _as_text(v) for v in metadata.values()
        ):
            return False
    if rule.has_response_format is not None:
        fmt = data.get("response_format")
        structured = fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text")
        if structured != rule.has_response_format:
            return False
    if rule.has_tools is not None:
        tools = data.get("tools") or data.get("functions")
        if (isinstance(tools, list) and len(tools) > 0) != rule.has_tools:
            return False
    return True


class TaskTagger:
    """Chooses an exchange's task type (see the module doc for the precedence).

    Args:
        header: the request header carrying an explicit task type (any case).
        rules: rules tried in order.
        default: the task type when nothing applies.
    """

    def __init__(
        self,
        header: str = "x-task-type",
        rules: Sequence[TaskTypeRule] = (),
        default: str = DEFAULT_TASK_TYPE,
    ) -> None:
        self.header = header.lower()
        self.rules = tuple(rules)
        self.default = default

    def tag(
        self,
        *,
        route: str,
        header_value: str | None,
        body: Mapping[str, Any] | None,
    ) -> TaskTag:
        """Return the :class:`TaskTag` for a request.

        Args:
            route: the request path (no query).
            header_value: the value of :attr:`header`, or ``None`` if absent.
            body: the parsed request body (``None`` when it is not a JSON object).
        """
        rejected = False
        if header_value is not None:
            value = header_value.strip()
            if valid_task_type(value):
                return TaskTag(value, TagSource.HEADER)
            rejected = True
        for i, rule in enumerate(self.rules):
            if rule_matches(rule, route=route, body=body):
                return TaskTag(rule.task_type, TagSource.RULE, i, rejected)
        return TaskTag(self.default, TagSource.DEFAULT, None, rejected)
