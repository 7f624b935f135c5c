"""JSON that holds numbers beyond what a double or a 64-bit integer holds, read exactly.

Real result files carry such numbers: a failed BFCL item's ``execution_result`` holds
1000! (2,568 digits). orjson refuses the whole document ("number is infinity when parsed
as double"), pandas' reader too ("Value is too big!"), so one such cell used to make a
whole file unreadable. :func:`loads_keeping_numbers` parses with orjson and, only when
orjson refuses, with the standard library, keeping every number that does not fit as
**its text, exactly as written** (a ``str``): integers outside the signed 64-bit range
(orjson cannot write them back) and decimals that overflow a double. ``NaN`` and
``Infinity`` literals (not JSON, but Python writes them) are kept as text too.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

__all__ = ["loads_keeping_numbers"]

_INT64_MIN = -(2**63)
_UINT64_MAX = 2**64 - 1


def _int_or_text(text: str) -> int | str:
    value = int(text)
    return value if _INT64_MIN <= value <= _UINT64_MAX else text


def _float_or_text(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def _constant_text(text: str) -> str:
    return text


def loads_keeping_numbers(data: bytes | str) -> Any:
    """Parse one JSON document; numbers beyond a double or int64 come back as their text.

    Raises:
        orjson.JSONDecodeError: ``data`` is not JSON (a :class:`ValueError`), with
            orjson's message when the standard library refuses it too.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as first:
        try:
            return json.loads(
                data,
                parse_int=_int_or_text,
                parse_float=_float_or_text,
                parse_constant=_constant_text,
            )
        except (ValueError, RecursionError):
            raise first from None
