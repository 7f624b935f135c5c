"""Display formatting of the dashboard: numbers, intervals, task-type names, safe Markdown.

Pure functions (no Streamlit): the views build their tables with them and the tests can
check a shown cell against the number it came from.
"""

from __future__ import annotations

import math
import re

from shadoweval.records import POOLED

__all__ = [
    "POOLED_LABEL",
    "count_noun",
    "is_missing",
    "md_escape",
    "plural",
    "short_hash",
    "task_type_label",
]

POOLED_LABEL = "all (pooled)"
"""How the pooled analysis unit (:data:`shadoweval.records.POOLED`) is shown."""

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~$])")


def is_missing(value: object) -> bool:
    """True for ``None`` and float NaN (how the stats tables mark a missing number)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def task_type_label(task_type: str) -> str:
    """A task type as shown: the pooled unit becomes :data:`POOLED_LABEL`."""
    return POOLED_LABEL if task_type == POOLED else task_type


def md_escape(text: str) -> str:
    """``text`` with the characters Streamlit Markdown would interpret backslash-escaped.

    Escapes ``\\ ` * _ { } [ ] < > # | ~ $`` (``$`` would start LaTeX), so a reason,
    a model name or a task type is shown literally inside ``st.markdown`` and alerts.
    """
    return _MD_SPECIAL.sub(r"\\\1", text)


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``singular`` when ``count`` is 1 (or -1), else ``plural_form`` (default: ``singular``
    with an ``s``)."""
    if abs(count) == 1:
        return singular
    return plural_form if plural_form is not None else singular + "s"


def count_noun(count: int, singular: str, plural_form: str | None = None) -> str:
    """``count`` with thousands separators and the noun in agreement: ``"1 pair"``,
    ``"1,200 pairs"``, ``count_noun(2, "reply", "replies")`` → ``"2 replies"``."""
    return f"{count:,} {plural(count, singular, plural_form)}"


def short_hash(digest: str, length: int = 12) -> str:
    """The first ``length`` characters of a hash (after any ``sha256:`` prefix)."""
    _, _, tail = digest.rpartition(":")
    return tail[:length]
