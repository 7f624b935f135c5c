"""Canonical prompt keys: a stable hash of a chat's roles and text contents.

The key identifies "the same prompt" across tables (a baseline file and a candidate file),
across a capture log and a recorded table, and in the mock LLM server's lookup. Only
each message's role and text take part:

* ``content`` as a string, or the ``text`` parts of a content-part list joined with ``""``
  (the same rule as :meth:`shadoweval.llm_protocol.ChatMessage.text`); ``None`` is ``""``;
* everything else (``name``, tool calls, images, the request's tools and sampling
  parameters) is ignored.

The key is the first 32 hex digits of SHA-256 over the compact JSON array
``[[role, text], ...]`` (UTF-8), so it does not depend on key order, whitespace of the
JSON encoding or the Python version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson


def message_text(content: object) -> str:
    """Return a message ``content`` as text: a string as is, text parts joined, else ``""``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def canonical_messages(messages: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Return ``[(role, text), ...]`` of a message list (role ``""`` when absent)."""
    out: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        out.append((role if isinstance(role, str) else "", message_text(message.get("content"))))
    return out


def prompt_key(messages: Iterable[Mapping[str, Any]]) -> str:
    """Return the stable prompt key (32 hex digits) of a chat message list."""
    payload = orjson.dumps([list(pair) for pair in canonical_messages(messages)])
    return hashlib.sha256(payload).hexdigest()[:32]
