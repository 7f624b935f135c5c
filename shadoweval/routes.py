"""Inference routes: how a request path is named for capture, replay and coverage.

One rule, shared by the capture sidecar, the Envoy front end's capture service, the replay
rewrite and the coverage counts: :func:`normalize_route` — the path without its query and
without trailing slashes (``/v1/chat/completions/`` is ``/v1/chat/completions``). It is
used for *decisions and names* only; the bytes forwarded to the live model stay as the
client sent them, and a captured ``request.path`` keeps the path as received.
"""

from __future__ import annotations

__all__ = [
    "CHAT_COMPLETIONS",
    "COMPLETIONS",
    "MESSAGES",
    "RESPONSES",
    "normalize_route",
]

CHAT_COMPLETIONS = "/v1/chat/completions"
"""OpenAI chat completions: ``messages`` → ``choices[].message`` (or ``delta`` chunks)."""
COMPLETIONS = "/v1/completions"
"""OpenAI legacy completions: ``prompt`` → ``choices[].text``."""
MESSAGES = "/v1/messages"
"""Anthropic Messages API: ``messages`` (+ ``system``) → ``content`` blocks (or named SSE
events; :mod:`shadoweval.llm_protocol.messages_api`)."""
RESPONSES = "/v1/responses"
"""OpenAI Responses API: ``input`` items → ``output`` items (read by
:mod:`shadoweval.llm_protocol.responses_api`; replayed with ``store`` false and a
``previous_response_id`` conversation rebuilt, :mod:`shadoweval.replay.rewrite`)."""


def normalize_route(path: str) -> str:
    """The route of a request path: no query string, no trailing ``/`` (except ``/``).

    ``"/v1/chat/completions/"`` → ``"/v1/chat/completions"``; ``"/v1/completions?x=1"``
    → ``"/v1/completions"``; ``""`` and ``"/"`` → ``"/"``. Percent-decoding is the
    caller's (the sidecar decodes the path before it asks).
    """
    route = path.split("?", 1)[0].rstrip("/")
    return route or "/"
