"""Build the request a shadow target receives from a captured exchange (pure).

Rules (DESIGN §1, failure cases in reference/llm-protocol-and-eval-tools.md §4):

* Only allow-listed inference routes are replayed: ``/v1/chat/completions`` (``messages`` →
  ``choices[].message``), the legacy ``/v1/completions`` (``prompt`` → ``choices[].text``),
  the Responses API ``/v1/responses`` (``input`` items → ``output`` items) and Anthropic's
  ``/v1/messages`` (sent with ``x-api-key`` + ``anthropic-version``, or translated to chat
  completions for a candidate that speaks only that: ``translate``) by default; anything
  else is *skipped with a reason*, so coverage shows it (LiteLLM #31888) and the gate names
  the route (a captured route that is never replayed is a HOLD); a route in
  :data:`NOT_REPLAYED` says why. The route is the path without its query and trailing
  slashes (:func:`shadoweval.routes.normalize_route`); a replay is sent to the route.
* Sampling parameters present in the captured request are replayed unchanged and listed
  as pinned; those it did not set are listed as missing — never invented.
* Captured headers are never forwarded (they may hold the client's credentials); the
  shadow gets its own credential and a marker header ``X-Shadow-Eval``.
* A streamed request is replayed streamed; only the replay may add
  ``stream_options.include_usage`` (the live path is never altered).
* A Responses request is replayed with ``store: false`` (the shadow keeps no state of
  ours; listed in ``pinned_params``), and one that names a ``previous_response_id`` is sent
  with that conversation rebuilt from the captured session and without the id
  (:mod:`shadoweval.replay.conversations`), or skipped with a reason naming the id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from shadoweval.llm_protocol import ChatCompletionRequest, CompletionRequest
from shadoweval.llm_protocol.messages_request import (
    ANTHROPIC_VERSION,
    MessagesRequest,
    translate_request,
)
from shadoweval.llm_protocol.responses_request import ResponsesRequest
from shadoweval.records import Exchange
from shadoweval.replay.conversations import ResponsesConversations, resolve_previous
from shadoweval.routes import CHAT_COMPLETIONS, COMPLETIONS, MESSAGES, RESPONSES, normalize_route

DEFAULT_REPLAY_ROUTES: frozenset[str] = frozenset(
    {CHAT_COMPLETIONS, COMPLETIONS, RESPONSES, MESSAGES}
)
"""The routes replayed: chat completions, legacy completions, the Responses API and
Anthropic Messages."""
SHADOW_MARKER_HEADER = "x-shadow-eval"

NOT_REPLAYED: Mapping[str, str] = {}
"""Inference routes known and deliberately not replayed, with the reason (part of their
skip reason, so the verdict can say why)."""


class ReplayableRequest(Protocol):
    """What a request reader parses a captured body into (a lenient pydantic model)."""

    @property
    def stream(self) -> bool | None:
        """Whether the request asked for a streamed response."""

    def sampling_params(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The sampling parameters set (name → value) and those left to the server."""


def _ask_stream_usage(out: dict[str, Any], *, stream: bool) -> None:
    """OpenAI streams report usage only when asked: the replay (never the live path) asks."""
    if stream:
        options = dict(out.get("stream_options") or {})
        options["include_usage"] = True
        out["stream_options"] = options


def _no_store(out: dict[str, Any], *, stream: bool) -> None:
    """A Responses replay is never stored by the shadow (``store: false``); its stream
    reports usage in ``response.completed`` without being asked."""
    out["store"] = False


def _bearer(api_key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"}


def _anthropic_key(api_key: str) -> dict[str, str]:
    """Anthropic's credential headers: ``x-api-key`` and the ``anthropic-version`` it needs."""
    return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}


def _as_sent(out: dict[str, Any], *, stream: bool) -> None:
    """Add nothing: a Messages stream reports usage without being asked."""


@dataclass(frozen=True, slots=True)
class RequestReader:
    """How one route's captured request becomes a replay body.

    ``model``: the lenient request model (validates the body; gives ``stream`` and the
    sampling parameters); ``what``: the request named in a skip reason ("a chat
    completion"); ``prepare(out, stream=…)``: edits the outgoing body in place (e.g.
    ask a stream for usage); ``credential(api_key)``: the headers carrying the shadow's
    own key (``Authorization: Bearer`` for OpenAI-compatible servers); ``context(out,
    conversations)``: rebuilds server-side state in the body, or returns why it cannot (the
    skip reason).
    """

    model: type[Any]
    what: str
    prepare: Callable[..., None] = _ask_stream_usage
    credential: Callable[[str], dict[str, str]] = _bearer
    context: Callable[[dict[str, Any], ResponsesConversations | None], str | None] | None = None


REQUEST_READERS: Mapping[str, RequestReader] = {
    CHAT_COMPLETIONS: RequestReader(ChatCompletionRequest, "a chat completion"),
    COMPLETIONS: RequestReader(CompletionRequest, "a legacy completion"),
    RESPONSES: RequestReader(
        ResponsesRequest, "a Responses API request", _no_store, context=resolve_previous
    ),
    MESSAGES: RequestReader(MessagesRequest, "a Messages API request", _as_sent, _anthropic_key),
}
"""The request reader of every replayable route."""


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
    translated_to: str | None = None
    """The route the body was translated to (``None``: the captured route's API)."""


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
    translate: Mapping[str, str] | None = None,
    conversations: ResponsesConversations | None = None,
) -> ReplayRequest | SkipReplay:
    """Return the replay request for ``exchange``, or why it is skipped.

    Args:
        model: the shadow's model name, written into ``model``; ``None`` keeps the captured one.
        api_key: the shadow's own bearer credential (never the captured client's).
        routes: replayable routes (exact paths, without a trailing slash); a route without
            a request reader (neither chat nor legacy completions) is skipped.
        max_body_bytes: larger request bodies are skipped with reason ``size``.
        translate: captured route → the route the target speaks instead (only
            ``/v1/messages`` → ``/v1/chat/completions``,
            :func:`~shadoweval.llm_protocol.messages_request.translate_request`): the body is
            translated, sent there with that route's credential, and every field the
            translation dropped is listed in ``missing_params``; an untranslatable request
            is skipped with the field and value named.
        conversations: the Responses turns read so far, for ``previous_response_id``
            (``None``: such a request is skipped).
    """
    # The route is the path without its query (a captured query may carry masked values
    # such as ``api_key=[REDACTED...]``; they are never sent to a shadow) and without a
    # trailing slash (``/v1/chat/completions/`` is the chat route).
    route = normalize_route(exchange.request.path or exchange.route)
    if route not in routes or route not in REQUEST_READERS:
        why = NOT_REPLAYED.get(route)
        detail = f"route not replayable: {route}" + (f" ({why})" if why else "")
        return SkipReplay(exchange.exchange_id, detail)
    raw = exchange.request.body_bytes()
    if len(raw) > max_body_bytes:
        return SkipReplay(
            exchange.exchange_id, f"size: request body {len(raw)} bytes > {max_body_bytes}"
        )
    body = exchange.request.json_body()
    if body is None:
        return SkipReplay(exchange.exchange_id, "request body is not a JSON object")
    reader = REQUEST_READERS[route]
    try:
        parsed: ReplayableRequest = reader.model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return SkipReplay(
            exchange.exchange_id, f"request is not {reader.what}: {where}: {first['msg']}"
        )
    pinned, missing = parsed.sampling_params()
    out: dict[str, Any] = dict(body)
    to = (translate or {}).get(route)
    if to is not None:
        translated = translate_request(route, to, out)
        if isinstance(translated, str):
            return SkipReplay(exchange.exchange_id, translated)
        out, route, reader = translated.body, to, REQUEST_READERS[to]
        missing = (*missing, *translated.losses)
    if model is not None:
        out["model"] = model
    if reader.context is not None and (problem := reader.context(out, conversations)):
        return SkipReplay(exchange.exchange_id, problem)
    stream = bool(parsed.stream)
    reader.prepare(out, stream=stream)
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        SHADOW_MARKER_HEADER: "replay",
        f"{SHADOW_MARKER_HEADER}-exchange-id": exchange.exchange_id,
    }
    if api_key:
        headers.update(reader.credential(api_key))
    return ReplayRequest(
        exchange_id=exchange.exchange_id,
        path=route,
        body=orjson.dumps(out),
        headers=headers,
        stream=stream,
        pinned_params=pinned,
        missing_params=missing,
        translated_to=to,
    )
