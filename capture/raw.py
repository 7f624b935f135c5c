"""What the proxy copies aside for one captured request: :class:`RawCapture`.

The live path does the least work possible: it appends ``(arrival_ns, bytes)`` pieces as
they pass and, when the response ends, hands one RawCapture to the pipeline. Decoding,
reassembly, tagging, redaction and serialization happen later, off the hot path
(:mod:`shadoweval.capture.builder`). A RawCapture holds secrets (headers, bodies) and never leaves
the sidecar process's memory and its builder worker: nothing writes it anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from shadoweval.records import ExchangeOutcome


@dataclass(slots=True)
class RawCapture:
    """One captured request and the response bytes as received from the upstream.

    Times are ``time.perf_counter_ns()`` readings of the sidecar process:

    * ``start_ns``: the request was forwarded upstream (all latencies count from here);
    * ``response_start_ns``: the upstream's status line and headers arrived;
    * ``chunks``: ``(arrival_ns, raw_bytes)`` per piece read from the upstream, still
      content-encoded (gzip/br bodies are decoded by the builder, never on the live path);
    * ``end_ns``: the last byte was read (or the exchange ended otherwise).

    ``captured_bytes`` counts the response bytes kept in ``chunks``; once it would exceed
    the capture limit the copy stops and ``truncated`` is set (the client still receives
    every byte). ``status_code`` is ``None`` when no response started (connect failure,
    cancelled before headers). ``session_key_hash`` is the salted hash of the sticky
    sampling key (never the key itself). ``path`` is the path as received (percent-decoded,
    without the query); ``route`` the captured route it was matched as
    (:func:`shadoweval.routes.normalize_route`: no trailing slash), the path when unset.
    ``served_by`` is the Envoy cluster that answered (the ``xds.cluster_name`` attribute of
    the Envoy front end's canary split: ``live_model`` or ``candidate_model``), ``None``
    outside a canary split or when unknown.
    """

    exchange_id: str
    captured_at: datetime
    start_ns: int
    method: str
    path: str
    query: str = ""
    request_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    request_body: bytes = b""
    status_code: int | None = None
    response_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    response_start_ns: int | None = None
    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    captured_bytes: int = 0
    truncated: bool = False
    end_ns: int | None = None
    outcome: ExchangeOutcome = ExchangeOutcome.DONE
    error: str | None = None
    session_key_hash: str | None = None
    matched_route: str | None = None
    served_by: str | None = None

    @property
    def route(self) -> str:
        """The captured route (``path`` without a trailing slash), for records and metrics."""
        return self.matched_route or self.path

    def size_bytes(self) -> int:
        """Approximate memory held: request body plus captured response bytes."""
        return len(self.request_body) + self.captured_bytes

    def header(self, name: str) -> str | None:
        """First request header ``name`` (case-insensitive), decoded as latin-1."""
        key = name.lower().encode("latin-1")
        for k, v in self.request_headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    def response_header(self, name: str) -> str | None:
        """First response header ``name`` (case-insensitive), decoded as latin-1."""
        key = name.lower().encode("latin-1")
        for k, v in self.response_headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None
