"""Stage-to-stage records: Exchange, ReplayOutcome, PairScore, Verdict.

These are the internal, strict records of DESIGN.md §4. They are frozen pydantic v2
models with ``extra="forbid"`` and a ``schema_version`` so that they cross process
boundaries (capture-log lines, Kafka payloads, database JSON columns) unchanged.
The lenient reading of what real servers send happens earlier, in
:mod:`shadoweval.llm_protocol`.

Conventions: durations are float milliseconds in fields ending ``_ms``; sizes end in
``_bytes``; wall-clock instants end in ``_at`` and are timezone-aware UTC; monotonic
clock readings end in ``_ns`` and are only comparable inside one process.
"""

from __future__ import annotations

import base64
import math
import unicodedata
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
)
from ulid import ULID

SCHEMA_VERSION: Literal[1] = 1
"""Version of every record shape in this module; bump on incompatible change."""

POOLED = "__pooled__"
"""Task-type label of a check computed over all task types together."""


def new_exchange_id() -> str:
    """Return a new sortable unique id (a ULID: 48-bit ms timestamp + 80 random bits)."""
    return str(ULID())


def utc_now() -> datetime:
    """Return the current wall-clock time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


STORED: dict[str, bool] = {"stored": True}
"""Validation context for records read back from storage
(``Exchange.model_validate(row.record, context=STORED)``).

The value rules of this module (non-negative timings and token counts, a body that decodes
as its ``body_encoding`` says, a non-blank task type, ids without control characters) are
checked wherever a record enters: a capture-log line, a Kafka record, a record built in
code. A record already stored was accepted once; reading it back with this context skips
those rules, so a database written before a rule existed stays readable (its shape is
still checked)."""


PAIR_KEY_FIELDS: tuple[str, ...] = ("run_id", "exchange_id", "task_type")
"""The fields that name one pair of a run in every per-pair record (score, judgement,
label) and its table row."""


def same_named(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``{name: source.name}`` for each of ``names``, in that order: the fields two shapes of
    the same data hold under the same name and in the same form (a record built from an
    assembled response, a record and its table row)."""
    return {name: getattr(source, name) for name in names}


def _checks_values(info: ValidationInfo) -> bool:
    """False when validating with the :data:`STORED` context."""
    context = info.context
    return not (isinstance(context, dict) and context.get("stored") is True)


def decode_base64_body(body: str) -> bytes:
    """The bytes of a base64 request body (standard alphabet, padded, no white space).

    Raises:
        ValueError: ``body`` is not valid base64 (a :class:`binascii.Error`).
    """
    return base64.b64decode(body, validate=True)


def _control_characters(text: str) -> list[str]:
    """The control characters (Unicode category ``Cc``: NUL, tab, newline …) in ``text``."""
    return sorted({ch for ch in text if unicodedata.category(ch) == "Cc"})


def _non_negative_ms(value: float | None, info: ValidationInfo) -> float | None:
    if value is None or not _checks_values(info):
        return value
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{info.field_name} must be a finite number of milliseconds >= 0, got {value!r}"
        )
    return value


INT64_MAX = 2**63 - 1
"""Largest integer a record holds (a database column and every JSON reader take 64 bits)."""


def _int64(value: int | None, info: ValidationInfo) -> int | None:
    if value is None or not _checks_values(info):
        return value
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(
            f"{info.field_name} must fit in 64 bits, got an integer of {len(str(value))} digits"
        )
    return value


def _non_negative_count(value: int | None, info: ValidationInfo) -> int | None:
    if value is None or not _checks_values(info):
        return value
    if not 0 <= value <= INT64_MAX:
        shown = value if value < 0 else f"an integer of {len(str(value))} digits"
        raise ValueError(f"{info.field_name} must be >= 0 and fit in 64 bits, got {shown}")
    return value


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _PairRecord(_Record):
    """Base of the per-pair records of a run (a pair's score, a judgement of it): the
    format version, then the :data:`PAIR_KEY_FIELDS` that name the pair."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    exchange_id: str
    task_type: str
