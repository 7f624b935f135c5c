"""What the mock server says: recorded rows looked up by prompt, turned into OpenAI payloads.

Lookup (:class:`RecordedIndex`): by the request's prompt key (roles and text contents,
:func:`shadoweval.tables.prompt_key`). When several rows share a prompt (BFCL asks the same
question in two categories with different tools), the row whose tools equal the
request's tools wins, then the row with the same tool names, then the first row.

Payloads (:class:`Answer`) follow the OpenAI chat-completions wire format (and, for the
legacy ``/v1/completions``, ``text_completion`` objects whose ``choices[].text`` carries the
recorded text: :meth:`Answer.text_completion`, :meth:`Answer.text_chunk`):

* non-streamed: one ``chat.completion`` object with ``usage``;
* streamed: a role-only first chunk (``{"role": "assistant", "content": ""}``), one chunk
  per content piece (:func:`~shadoweval.simulation.mock_llm.pieces.split_pieces`), then per tool
  call
  a first fragment with ``index``, ``id``, ``type`` and ``function.name`` (arguments
  ``""``) and argument fragments with ``id: null``; a finish chunk (empty delta,
  ``finish_reason`` = the recorded one, else ``tool_calls`` or ``stop``); a usage-only
  chunk with ``choices: []`` when the request set ``stream_options.include_usage``; then
  ``data: [DONE]``.

Usage: ``prompt_tokens``/``completion_tokens`` from the table's token columns when present,
else the number of the mock's pieces (prompt: pieces of every message's text; completion:
the stream's token-bearing events, i.e. content pieces plus tool-call fragments).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from shadoweval.simulation.mock_llm.pieces import split_argument_pieces, split_pieces
from shadoweval.tables import RecordedRow, message_text, prompt_key


def _tools_json(tools: Sequence[Mapping[str, Any]] | None) -> bytes:
    return orjson.dumps(list(tools or []), option=orjson.OPT_SORT_KEYS)


def _tool_names(tools: Sequence[Mapping[str, Any]] | None) -> tuple[str, ...]:
    names = []
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return tuple(sorted(names))


class RecordedIndex:
    """Recorded rows by prompt key."""

    def __init__(self, rows: Iterable[RecordedRow]) -> None:
        self._by_key: dict[str, list[RecordedRow]] = {}
        self._count = 0
        for row in rows:
            self._by_key.setdefault(row.prompt_key, []).append(row)
            self._count += 1

    def __len__(self) -> int:
        return self._count

    def lookup(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> RecordedRow | None:
        """Return the recorded row for a request's messages and tools, or ``None``."""
        candidates = self._by_key.get(prompt_key(messages))
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        wanted = _tools_json(tools)
        for row in candidates:
            if _tools_json(row.tools) == wanted:
                return row
        names = _tool_names(tools)
        for row in candidates:
            if _tool_names(row.tools) == names:
                return row
        return candidates[0]


def prompt_excerpt(messages: Sequence[Mapping[str, Any]], limit: int = 80) -> str:
    """The first ``limit`` characters of the last user message (else of the last message)."""
    chosen = None
    for message in messages:
        if message.get("role") == "user" or chosen is None:
            chosen = message
    return message_text(chosen.get("content"))[:limit] if chosen is not None else ""


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Answer:
    """The response to one request for one recorded row.

    ``deltas`` are the token-bearing stream deltas in order (content pieces, then tool-call
    fragments); their count is the number of pieces that latency profiles pace.
    """

    completion_id: str
    created: int
    model: str
    text: str | None
    tool_calls: tuple[dict[str, Any], ...]
    finish_reason: str
    deltas: tuple[dict[str, Any], ...]
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def build(
        cls,
        row: RecordedRow,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        attempt: int,
    ) -> Answer:
        """Build the answer for ``row`` (ids are derived from the row key and attempt)."""
        deltas: list[dict[str, Any]] = [{"content": p} for p in split_pieces(row.output_text or "")]
        calls: list[dict[str, Any]] = []
        for i, call in enumerate(row.tool_calls):
            call_id = call.id or "call_" + _digest("call", row.key, i)[:24]
            calls.append(
                {
                    "id": call_id,
                    "type": call.type or "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            )
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call_id,
                            "type": call.type or "function",
                            "function": {"name": call.name, "arguments": ""},
                        }
                    ]
                }
            )
            deltas.extend(
                {"tool_calls": [{"index": i, "id": None, "function": {"arguments": piece}}]}
                for piece in split_argument_pieces(call.arguments)
            )
        finish = row.finish_reason or ("tool_calls" if row.tool_calls else "stop")
        prompt_pieces = sum(len(split_pieces(message_text(m.get("content")))) for m in messages)
        return cls(
            completion_id="chatcmpl-" + _digest("completion", row.key, attempt)[:24],
            created=int(time.time()),
            model=model,
            text=row.output_text,
            tool_calls=tuple(calls),
            finish_reason=finish,
            deltas=tuple(deltas),
            prompt_tokens=row.prompt_tokens if row.prompt_tokens is not None else prompt_pieces,
            completion_tokens=(
                row.completion_tokens if row.completion_tokens is not None else len(deltas)
            ),
        )

    @property
    def pieces(self) -> int:
        """Number of token-bearing stream events."""
        return len(self.deltas)

    def usage(self) -> dict[str, int]:
        """The ``usage`` object."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def completion(self) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` object."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": self.text if self.text is not None or not self.tool_calls else None,
        }
        if message["content"] is None and not self.tool_calls:
            message["content"] = ""
        if self.tool_calls:
            message["tool_calls"] = list(self.tool_calls)
        return {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage(),
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """One ``chat.completion.chunk`` with a single choice."""
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }

    def role_chunk(self) -> dict[str, Any]:
        """The role-only first chunk."""
        return self.chunk({"role": "assistant", "content": ""})

    def finish_chunk(self) -> dict[str, Any]:
        """The chunk that carries ``finish_reason``."""
        return self.chunk({}, self.finish_reason)

    def usage_chunk(self) -> dict[str, Any]:
        """The final usage-only chunk (``choices: []``)."""
        return {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(),
        }

    # -- legacy /v1/completions ------------------------------------------------------

    @property
    def text_pieces(self) -> tuple[str, ...]:
        """The content pieces of the answer (a legacy completion has no tool calls)."""
        return tuple(d["content"] for d in self.deltas if "content" in d)

    def text_completion(self) -> dict[str, Any]:
        """The non-streamed legacy ``text_completion`` object (``choices[0].text``)."""
        finish_reason = "stop" if self.tool_calls else self.finish_reason
        return self._text_completion_object(self.text or "", finish_reason) | {
            "usage": self.usage()
        }

    def text_chunk(self, text: str, finish_reason: str | None = None) -> dict[str, Any]:
        """One streamed ``text_completion`` event (``choices[0].text`` is the piece)."""
        return self._text_completion_object(text, finish_reason)

    def _text_completion_object(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        """A legacy ``text_completion`` object with one choice (``text``, ``finish_reason``)
        and no ``usage``; its id is the chat completion's with the ``cmpl-`` prefix."""
        return {
            "id": self.completion_id.replace("chatcmpl-", "cmpl-", 1),
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            ],
        }


def sse(payload: Mapping[str, Any]) -> bytes:
    """Encode one SSE ``data:`` event."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
