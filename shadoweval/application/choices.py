"""A user's choice among an enum's values (a page's or a command's option), checked."""

from __future__ import annotations

import enum
from typing import TypeVar

from shadoweval.errors import ConfigError

__all__ = ["enum_choice"]

E = TypeVar("E", bound=enum.Enum)


def enum_choice(kind: type[E], value: str, *, field: str) -> E:
    """The member of ``kind`` whose value is ``value`` (a member is returned as it is).

    Raises:
        ConfigError: ``value`` is no value of ``kind``; the message lists the values, e.g.
            ``source 'x' is not one of judge, human``; ``field`` and ``value`` are set.
    """
    try:
        return kind(value)
    except ValueError:
        known = ", ".join(str(member.value) for member in kind)
        raise ConfigError(
            f"{field} {value!r} is not one of {known}", field=field, value=value
        ) from None
