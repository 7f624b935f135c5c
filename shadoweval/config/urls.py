"""The URL checks the settings share: a model server's base URL, ``http(s)://HOST[:PORT]``."""

from __future__ import annotations

from urllib.parse import urlsplit


def http_origin(value: str) -> str:
    """``value`` unchanged when it is an ``http`` or ``https`` URL with a host.

    Raises:
        ValueError: another scheme or no host (pydantic reports it as the field's error).
    """
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http://HOST[:PORT] or https://HOST[:PORT]")
    return value
