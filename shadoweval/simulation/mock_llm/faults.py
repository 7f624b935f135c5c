"""Injected faults of the mock server, drawn per request from a seeded hash.

For each chat request the server draws ``u`` in [0, 1) from SHA-256 of (seed, prompt key,
attempt), where *attempt* counts earlier requests for the same prompt on this server (so
a client's retry draws again, and a run with the same seed and request sequence per
prompt gets the same faults whatever the interleaving). ``u`` falls into consecutive
bands of the configured rates, in this order:

* ``error`` — HTTP 500 with an OpenAI-style error JSON (``type: server_error``).
* ``hang`` — the request is accepted and never answered: no status line, no bytes, until
  the client disconnects (or :attr:`FaultConfig.hang_limit_s` passes, so a server under
  test never keeps a task forever).
* ``malformed`` — a response that is not valid JSON: a non-streamed body cut in the middle,
  or one stream chunk (the first content chunk) replaced by cut JSON; the rest of the
  stream follows as usual.
* ``html`` — HTTP 502 with a ``text/html`` page, as a reverse proxy answers when the
  model server behind it is down.
"""

from __future__ import annotations

import enum
import hashlib

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FaultKind(enum.StrEnum):
    """What the server does with one request."""

    NONE = "none"
    ERROR = "error"
    HANG = "hang"
    MALFORMED = "malformed"
    HTML = "html"


class FaultConfig(BaseModel):
    """Per-request fault probabilities (each in [0, 1], together at most 1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    hang_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    malformed_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    html_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    hang_limit_s: float = Field(default=600.0, gt=0.0)
    """A hung request is released after this long (real seconds, not time-scaled)."""

    @model_validator(mode="after")
    def _total(self) -> FaultConfig:
        total = self.error_rate + self.hang_rate + self.malformed_rate + self.html_rate
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {total:g}, more than 1")
        return self

    def pick(self, u: float) -> FaultKind:
        """Map a uniform draw ``u`` in [0, 1) to a fault kind (bands in declaration order)."""
        edge = 0.0
        for kind, rate in (
            (FaultKind.ERROR, self.error_rate),
            (FaultKind.HANG, self.hang_rate),
            (FaultKind.MALFORMED, self.malformed_rate),
            (FaultKind.HTML, self.html_rate),
        ):
            edge += rate
            if u < edge:
                return kind
        return FaultKind.NONE


def seeded_unit(seed: int, *parts: object) -> float:
    """A uniform number in [0, 1) from SHA-256 of the seed and parts (stable across runs)."""
    digest = hashlib.sha256(repr((seed, *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def seeded_int(seed: int, *parts: object) -> int:
    """A 64-bit integer from SHA-256 of the seed and parts, to seed ``random.Random``."""
    digest = hashlib.sha256(repr((seed, *parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")
