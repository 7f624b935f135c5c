"""Stream cuts of the mock server: llama.cpp's ``llama-cpp-python`` server, reproduced.

Two behaviours of that server (0.3.x) at its defaults, measured on a real stack (issue 29,
item 8), each switched on separately:

* ``interrupt_running`` — its ``interrupt_requests`` setting (on by default there): after
  sending a chunk, a running stream that sees another request waiting for the model sends
  ``data: [DONE]`` and stops, without a finish chunk. The mock cuts a stream when a newer
  chat request arrived after it started (checked before each content piece), so under
  concurrency most streams are a role chunk and then ``[DONE]`` (HTTP 200). The mock's
  Responses and Messages streams are cut the same way, their body ending without its
  terminal event (``response.completed``, ``message_stop``): a server or gateway that cuts
  running streams.
* ``context_tokens`` — its ``n_ctx``: a prompt of that many mock tokens or more is refused
  with HTTP 500 ``Requested tokens (P) exceed context window of N`` (the server's own
  words); a streamed answer that runs past the window stops after ``N − P`` pieces
  without a finish chunk and without ``[DONE]``; a non-streamed one is the same HTTP 500.
  Tokens are the mock's word pieces (:mod:`shadoweval.simulation.mock_llm.pieces`) of the
  messages' text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shadoweval.simulation.mock_llm.pieces import split_pieces

__all__ = ["StreamCuts", "prompt_pieces"]


class StreamCuts(BaseModel):
    """Which llama.cpp stream cuts the mock reproduces (module doc); both off by default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interrupt_running: bool = False
    context_tokens: int | None = Field(default=None, ge=1)

    def context_error(self, prompt_tokens: int) -> str | None:
        """The HTTP 500 message for a prompt of ``prompt_tokens`` that does not fit, else
        ``None``."""
        if self.context_tokens is None or prompt_tokens < self.context_tokens:
            return None
        return f"Requested tokens ({prompt_tokens}) exceed context window of {self.context_tokens}"

    def budget(self, prompt_tokens: int) -> int | None:
        """Pieces an answer may stream before the context window ends it (``None``: no
        window)."""
        if self.context_tokens is None:
            return None
        return max(self.context_tokens - prompt_tokens, 0)


def prompt_pieces(messages: Sequence[Mapping[str, Any]]) -> int:
    """The mock's token count of a prompt: word pieces of every message's text content
    (string contents, and the ``text`` of content parts)."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(split_pieces(content))
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    total += len(split_pieces(part["text"]))
    return total
