"""Build the request a shadow target receives from a captured exchange (pure).

Rules (DESIGN §1, failure cases in reference/llm-protocol-and-eval-tools.md §4):

* Only allow-listed inference routes are replayed (``/v1/chat/completions`` by default);
  anything else is *skipped with a reason*, so coverage shows it (LiteLLM #31888).
* Sampling parameters present in the captured request are replayed unchanged and listed
  as pinned; those it did not set are listed as missing — never invented.
* Captured headers are never forwarded (they may hold the client's credentials); the
  shadow gets its own credential and a marker header ``X-Shadow-Eval``.
* A streamed request is replayed streamed; only the replay may add
  ``stream_options.include_usage`` (the live path is never altered).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from shadoweval.llm_protocol import ChatCompletionRequest
from shadoweval.records import Exchange

DEFAULT_REPLAY_ROUTES: frozenset[str] = frozenset({"/v1/chat/completions"})
SHADOW_MARKER_HEADER = "x-shadow-eval"


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """A request ready to send: ``path`` relative to the target base URL, raw ``body``."""

    exchange_id: str
    path: str
    body: bytes
    headers: Mapping[str, str]
    stream: bool
    pinned_params: Mapping[str, Any] = field(default_factory=dict)
    missing_params: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SkipReplay:
    """Why an exchange is not replayed (stored as ``error_kind = skipped``)."""

    exchange_id: str
    reason: str


def build_replay_request(
    exchange: Exchange,
    *,
    model: str | None = None,
    api_key: str | None = None,
    routes: frozenset[str] = DEFAULT_REPLAY_ROUTES,
    max_body_bytes: int = 16 * 1024 * 1024,
) -> ReplayRequest | SkipReplay:
    """Return the replay request for ``exchange``, or why it is skipped.

    Args:
        model: the shadow's model name, written into ``model``; ``None`` keeps the captured one.
        api_key: the shadow's own bearer credential (never the captured client's).
        routes: replayable routes (exact paths).
        max_body_bytes: larger request bodies are skipped with reason ``size``.
    """
    # The route is the path without its query (a captured query may carry masked values
    # such as ``api_key=[REDACTED...]``; they are never sent to a shadow).
    route = exchange.request.path.split("?", 1)[0] or exchange.route
    if route not in routes:
        return SkipReplay(exchange.exchange_id, f"route not replayable: {route}")
    raw = exchange.request.body_bytes()
    if len(raw) > max_body_bytes:
        return SkipReplay(
            exchange.exchange_id, f"size: request body {len(raw)} bytes > {max_body_bytes}"
        )
    body = exchange.request.json_body()
    if body is None:
        return SkipReplay(exchange.exchange_id, "request body is not a JSON object")
    try:
        parsed = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return SkipReplay(
            exchange.exchange_id, f"request is not a chat completion: {where}: {first['msg']}"
        )
    pinned, missing = parsed.sampling_params()
    out: dict[str, Any] = dict(body)
    if model is not None:
        out["model"] = model
    stream = bool(parsed.stream)
    if stream:
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        SHADOW_MARKER_HEADER: "replay",
        f"{SHADOW_MARKER_HEADER}-exchange-id": exchange.exchange_id,
    }
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return ReplayRequest(
        exchange_id=exchange.exchange_id,
        path=route,
        body=orjson.dumps(out),
        headers=headers,
        stream=stream,
        pinned_params=pinned,
        missing_params=missing,
    )
