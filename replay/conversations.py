"""Responses API conversations rebuilt from the capture, for ``previous_response_id``.

A Responses request may continue a conversation the *live* server stored: ``{"input":
"and in Rome?", "previous_response_id": "resp_1"}`` means "everything of ``resp_1``, then
this". A shadow holds no such state (and the replay sends ``store: false``, so it keeps
none of ours), so the replay rebuilds the conversation from the captured session instead:
the captured exchange whose ``response.response_id`` is ``resp_1`` gives its own
(rebuilt) input items and its answer as input items
(:func:`~shadoweval.llm_protocol.responses_request.answer_items`: an ``assistant``
message, ``function_call`` items); they are put before this request's ``input`` and
``previous_response_id`` is removed.

:class:`ResponsesConversations` is that index, filled by the replay as it reads exchanges
(:meth:`~ResponsesConversations.observe`, in capture-log or topic order, so a session's
turns come in capture order). It is **bounded**: the last ``max_turns`` turns are kept,
the oldest dropped first. A request naming a response that is not there — never captured
in this replay's source, read later than the turn that names it, or dropped by the
bound — is never sent with a wrong or partial context: it is skipped with a reason that
names the response id (:func:`resolve_previous`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from shadoweval.llm_protocol.responses_request import answer_items, input_items
from shadoweval.records import Exchange
from shadoweval.routes import RESPONSES, normalize_route

__all__ = ["MAX_TURNS", "ResponsesConversations", "resolve_previous"]

MAX_TURNS = 10_000
"""Responses turns a replay keeps for ``previous_response_id`` (the oldest go first)."""


class ResponsesConversations:
    """Response id → the conversation up to and including that answer, as input items.

    Args:
        max_turns: turns kept (≥ 1); beyond it the oldest turn is dropped and counted in
            :attr:`dropped`.
    """

    def __init__(self, max_turns: int = MAX_TURNS) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.dropped = 0
        self._items: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def observe(self, exchange: Exchange) -> None:
        """Keep ``exchange``'s conversation when it is a Responses turn with a captured
        ``response_id`` and a readable body whose own ``previous_response_id`` (if any) is
        known; anything else is left out (a later turn naming it is then skipped)."""
        response = exchange.response
        if normalize_route(exchange.request.path or exchange.route) != RESPONSES:
            return
        if response is None or not response.response_id:
            return
        body = exchange.request.json_body()
        if body is None:
            return
        previous = body.get("previous_response_id")
        earlier: list[dict[str, Any]] | None = []
        if isinstance(previous, str):
            earlier = self.items_before(previous)
        if earlier is None:
            return
        items = earlier + input_items(body.get("input"))
        items += answer_items(response.text, response.tool_calls)
        self._items[response.response_id] = items
        self._items.move_to_end(response.response_id)
        while len(self._items) > self.max_turns:
            self._items.popitem(last=False)
            self.dropped += 1

    def items_before(self, response_id: str) -> list[dict[str, Any]] | None:
        """The conversation up to and including response ``response_id`` (a copy), or
        ``None`` when it is not kept."""
        items = self._items.get(response_id)
        return None if items is None else [dict(item) for item in items]

    def missing_reason(self, response_id: str) -> str:
        """Why a request naming ``response_id`` is skipped."""
        reason = (
            f"previous_response_id {response_id}: the earlier turn was not captured in this "
            "replay's source (or comes later in it), so its conversation cannot be rebuilt "
            "and the request is not sent with a partial context"
        )
        if self.dropped:
            reason += f"; {self.dropped} older turns were dropped (the replay keeps the last "
            reason += f"{self.max_turns})"
        return reason


def resolve_previous(
    out: dict[str, Any], conversations: ResponsesConversations | None
) -> str | None:
    """Rebuild a Responses body's ``previous_response_id`` conversation in place.

    ``out["input"]`` becomes the earlier turn's conversation followed by this request's
    input items, and ``previous_response_id`` is removed. Returns ``None`` when done (or
    when the body names no previous response), else the skip reason
    (:meth:`ResponsesConversations.missing_reason`; with no index, the same).
    """
    previous = out.get("previous_response_id")
    if previous is None:
        out.pop("previous_response_id", None)
        return None
    if not isinstance(previous, str):
        return f"previous_response_id is not a string: {previous!r}"
    index = conversations if conversations is not None else ResponsesConversations()
    earlier = index.items_before(previous)
    if earlier is None:
        return index.missing_reason(previous)
    out["input"] = earlier + input_items(out.get("input"))
    del out["previous_response_id"]
    return None
