"""Sticky sampling: the same session (or tenant) is always in or always out.

The decision is made on the live path at request start, so an unsampled request costs one
hash at most. The key is the first present header of ``session_headers``; its salted
SHA-256 (the *session key hash*) is what records and Kafka keys carry, never the value.
Without a key each exchange is sampled on its own id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from shadoweval.config import CaptureSettings


def hash_session_key(salt: bytes, value: bytes) -> str:
    """The session key hash records carry: SHA-256 of ``salt + b"\\0" + value``, the
    first 32 hex digits (the sidecar's, and an import's of a recorded session id)."""
    return hashlib.sha256(salt + b"\0" + value).hexdigest()[:32]


class StickySampler:
    """Bernoulli(``percent``/100) per session key, deterministic for a given salt.

    Args:
        percent: share captured, 0–100.
        session_headers: header names (any case) tried in order for the session key.
        salt: mixed into the hash so a hash cannot be looked up from a known key.
    """

    def __init__(self, percent: float, session_headers: Iterable[str], salt: str) -> None:
        if not 0.0 <= percent <= 100.0:
            raise ValueError(f"sample_percent={percent!r} is outside [0, 100]")
        self.share = percent / 100.0
        self.session_headers = tuple(h.lower().encode("latin-1") for h in session_headers)
        self._salt = salt.encode()

    @classmethod
    def from_settings(cls, settings: CaptureSettings) -> StickySampler:
        """The sampler ``capture.sample_percent`` / ``session_headers`` / ``session_salt``
        describe (what the sidecar and the Envoy front end both use)."""
        return cls(
            settings.sample_percent,
            settings.session_headers,
            settings.session_salt.get_secret_value(),
        )

    def session_key_hash(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """Salted SHA-256 (hex, 32 chars) of the first session header present, else ``None``."""
        found: dict[bytes, bytes] = {}
        for name, value in headers:
            lname = name.lower()
            if lname in self.session_headers and lname not in found:
                found[lname] = value
        for name in self.session_headers:
            if name in found:
                return hash_session_key(self._salt, found[name])
        return None

    def sampled(self, session_key_hash: str | None, exchange_id: str) -> bool:
        """Whether to capture: by the session hash when there is one, else by the id."""
        if self.share >= 1.0:
            return True
        if self.share <= 0.0:
            return False
        basis = session_key_hash or hashlib.sha256(exchange_id.encode()).hexdigest()
        return int(basis[:16], 16) / 2**64 < self.share
