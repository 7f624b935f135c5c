"""The capture service behind Envoy: an ``envoy.service.ext_proc.v3.ExternalProcessor``.

Envoy's external-processing filter in **observability mode**
(:mod:`shadoweval.capture.envoy_config`)
opens one bidirectional gRPC stream per captured HTTP request and sends, as they pass, a
``ProcessingRequest`` for the request headers, each request body piece, the response
headers, each response body piece and any trailers. It never waits for an answer and the
service sends none (the proto: in observability mode "the server must not respond to
this message"); the live request is never paused, whatever the service does.
:class:`StreamTap` turns the messages of one stream into one
:class:`~shadoweval.capture.raw.RawCapture`, exactly what the built-in sidecar's proxy builds, and
:class:`CaptureProcessor` hands it to :meth:`shadoweval.capture.pipeline.CapturePipeline.offer` —
then the same builder, redaction and sinks as the sidecar. A filter *not* in observability
mode (Envoy Gateway's ``EnvoyExtensionPolicy`` cannot set it) waits for an answer to each
message: the service then answers each at once with an unchanged ``CONTINUE``
(:data:`CONTINUE`), so its reply, not its capture work, is on the live path.

Capture semantics are the sidecar's (:mod:`shadoweval.capture.proxy`): only ``POST`` to a path in
``settings.routes`` (exact match, query string and trailing slashes apart), never a request carrying
``x-shadow-eval``, sticky sampling on the session headers (``unsampled`` counted), the
response copy cut at ``max_capture_bytes`` (outcome ``truncated``). The Envoy route table
already sends only ``POST`` to those paths without the marker; the service checks again,
so a hand-written Envoy config cannot make it capture more. For a request it will not
capture the service returns at once, which closes the stream: Envoy then sends nothing
more for it.

**Timings.** Envoy sends no per-piece timestamp, so the pieces are timed by the service:
each chunk's time, ``response_start_ns`` and ``end_ns`` are the service's
``time.perf_counter_ns()`` when it *read* that message from the stream. The start
(``start_ns``, from which TTFB/TTFT/e2e count) is Envoy's own ``request.time`` attribute —
when Envoy received the request's first byte (microsecond resolution, wall clock) — carried
onto the perf clock by the lag measured when the request headers were read
(``start_ns = read_ns - (now_wall - request.time)``). Anchoring there matters: a new gRPC
stream's set-up delays its first messages by a few milliseconds (3.8 ms on an idle
loopback here), which would otherwise be cut out of every TTFT. What remains:

* each piece's own transit and scheduling delay (gRPC over loopback and the event loop;
  well under a millisecond while the service keeps up) is *added* to its time, so TTFT,
  e2e and ITL read slightly high; the sidecar reads them at the proxy itself;
* the start is the first request byte, the sidecar's is after it read the whole request
  body: a long upload counts into the Envoy front end's TTFB/TTFT;
* when the service falls behind (CPU-starved, a long pause), messages queue in Envoy and
  in the stream and their read times are late, bunched: TTFT/e2e read high and ITL is
  distorted. ``shadoweval_ext_proc_arrival_lag_seconds`` (request headers read minus
  ``request.time``) shows how far behind the service is;
* ``request.time`` is a wall clock: with the service on another machine, clock skew adds
  to TTFT. A lag that is negative or over 10 s is not used: the start is then the arrival
  of the request's end (counted in ``shadoweval_ext_proc_timing_fallbacks_total``).

**Incomplete streams** are exchanges too, never dropped: the stream ends (Envoy
half-closes when the HTTP stream ended: client disconnected, upstream reset) before the
response's ``end_of_stream`` → outcome ``cancelled``; Envoy resets the stream (it waits
``deferred_close_timeout`` after the HTTP stream ended for the service to read the rest,
then resets: the service fell that far behind, or Envoy stopped) → ``cancelled``; the
service stops with streams open → ``cancelled``; the stream fails otherwise → ``error``.
Each has its reason in ``error`` and counts in
``shadoweval_ext_proc_incomplete_total{reason}``. A response Envoy generated itself (a
local reply: upstream unreachable, overflow, timeout — ``response.code_details`` is not
``via_upstream``) is kept with its status and body, outcome ``error`` and the details as
the reason.

**Serving version.** With the canary split (:mod:`shadoweval.capture.canary_split`) Envoy also sends
``xds.cluster_name`` with the response headers: the cluster that answered
(``live_model`` = baseline, ``candidate_model`` = candidate) becomes
``RawCapture.served_by`` and ``Exchange.served_by``.

Source: Envoy's ``envoy/service/ext_proc/v3/external_processor.proto`` and
``envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto`` (the ``xds-protos`` package's
generated modules), ``observability_mode`` and ``deferred_close_timeout`` fields.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from shadoweval.capture.envoy_config import EXT_PROC_FILTER
from shadoweval.capture.headers import SHADOW_MARKER
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sampling import StickySampler
from shadoweval.config import CaptureSettings
from shadoweval.probes import MetricSet, counter, gauge, histogram
from shadoweval.records import ExchangeOutcome, new_exchange_id, utc_now
from shadoweval.routes import normalize_route

logger = logging.getLogger(__name__)

_perf_ns = time.perf_counter_ns

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MAX_ANCHOR_LAG_NS = 10_000_000_000
"""Largest ``request.time`` lag (10 s) still used as the start of the exchange's timings;
beyond it (or negative: clocks of two machines disagree) the start is the arrival of the
request's end, and ``shadoweval_ext_proc_timing_fallbacks_total`` counts it."""

VIA_UPSTREAM = "via_upstream"
"""``response.code_details`` of a response that came from the upstream (Envoy's value)."""

_REPLIES = {
    "headers": ext_proc_pb2.HeadersResponse,
    "body": ext_proc_pb2.BodyResponse,
    "trailers": ext_proc_pb2.TrailersResponse,
}
CONTINUE: dict[str, Any] = {
    f"{side}_{part}": ext_proc_pb2.ProcessingResponse(**{f"{side}_{part}": reply()})
    for side in ("request", "response")
    for part, reply in _REPLIES.items()
}
"""The answer to each message of a filter *not* in observability mode, by message kind:
an empty ``CommonResponse`` (status ``CONTINUE``, no mutation), so the request and response
pass unchanged. Such a filter pauses on each message until it is answered (bounded by its
``message_timeout``; ``failure_mode_allow`` then lets the request go on uncaptured): the
service answers as it reads, before any capture work. Envoy Gateway's
``EnvoyExtensionPolicy`` has no observability mode (deploy/istio/README.md)."""

INCOMPLETE_REASONS: dict[str, str] = {
    "stream_closed": (
        "the processor stream ended before the response's end_of_stream: the HTTP stream "
        "ended early (client disconnected or upstream reset)"
    ),
    "stream_reset": (
        "Envoy reset the processor stream before the response's end_of_stream: the "
        "capture service fell behind deferred_close_timeout, or Envoy stopped"
    ),
    "shutdown": "the capture service stopped before the response's end_of_stream",
}
"""Reason text (``RawCapture.error``) per ``shadoweval_ext_proc_incomplete_total`` label
(``stream_failed`` adds the gRPC error)."""


class ExtProcMetrics(MetricSet):
    """The capture service's own metrics, beside :class:`~shadoweval.capture.metrics.CaptureMetrics`
    in the same registry.

    * ``shadoweval_ext_proc_streams_total{result}`` — processor streams, by what became
      of them: ``captured``, ``not_captured_route`` (not ``POST`` to a captured route),
      ``not_captured_marker`` (shadow-eval's own traffic), ``unsampled``, ``no_headers``
      (the stream ended before the request headers);
    * ``shadoweval_ext_proc_incomplete_total{reason}`` — captured exchanges whose stream
      ended before the response did (kept, outcome ``cancelled``/``error``):
      ``stream_closed``, ``stream_reset``, ``shutdown``, ``stream_failed``;
    * ``shadoweval_ext_proc_local_replies_total`` — responses Envoy generated itself;
    * ``shadoweval_ext_proc_messages_total{kind}`` — messages read, by ``request``
      one-of field;
    * ``shadoweval_ext_proc_streams_active`` — streams open now;
    * ``shadoweval_ext_proc_arrival_lag_seconds`` — request headers read minus Envoy's
      ``request.time`` (how far behind the service reads).
    """

    streams = counter(
        "shadoweval_ext_proc_streams_total",
        "ext_proc streams from Envoy, by what became of them.",
        "result",
    )
    incomplete = counter(
        "shadoweval_ext_proc_incomplete_total",
        "Captured exchanges whose stream ended before the response's end_of_stream.",
        "reason",
    )
    local_replies = counter(
        "shadoweval_ext_proc_local_replies_total",
        "Captured responses generated by Envoy itself (not via_upstream).",
    )
    messages = counter(
        "shadoweval_ext_proc_messages_total", "ProcessingRequest messages read, by kind.", "kind"
    )
    active = gauge("shadoweval_ext_proc_streams_active", "ext_proc streams open now.")
    timing_fallbacks = counter(
        "shadoweval_ext_proc_timing_fallbacks_total",
        "Captured exchanges timed from the service's arrival times only (request.time "
        "missing, negative or over 10 s behind).",
    )
    arrival_lag = histogram(
        "shadoweval_ext_proc_arrival_lag_seconds",
        "Request headers read by the service minus Envoy's request.time.",
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0),
    )


def _header_pairs(header_map: Any) -> list[tuple[bytes, bytes]]:
    """``(name, value)`` byte pairs of an ``envoy.config.core.v3.HeaderMap``, in order.

    Envoy 1.40 sends ``raw_value`` (bytes); older ones ``value`` (text).
    """
    return [
        (h.key.encode("latin-1"), h.raw_value if h.raw_value else h.value.encode("latin-1"))
        for h in header_map.headers
    ]


def _request_time(msg: Any) -> tuple[datetime, int] | None:
    """Envoy's ``request.time`` attribute (when it received the request's first byte) as
    ``(aware datetime, Unix ns)``, or ``None`` when absent or unreadable."""
    value = _attribute(msg, "request.time")
    if value is None or not value.string_value:
        return None
    try:
        at = datetime.fromisoformat(value.string_value)
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    delta = at - _EPOCH
    return at, (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def _attribute(msg: Any, name: str) -> Any:
    """Attribute ``name`` of a ``ProcessingRequest`` (a ``google.protobuf.Value``) or None."""
    # keyed by the filter's name: ours, or the one a control plane gave it (Envoy Gateway
    # names its filters per policy); one ext_proc filter sends one entry
    attrs = msg.attributes.get(EXT_PROC_FILTER)
    if attrs is None and len(msg.attributes) == 1:
        attrs = next(iter(msg.attributes.values()))
    if attrs is None or name not in attrs.fields:
        return None
    return attrs.fields[name]


class StreamTap:
    """The messages of one ext_proc stream → one :class:`~shadoweval.capture.raw.RawCapture`.

    Pure and synchronous (no I/O): :meth:`feed` each ``ProcessingRequest`` with the time
    it was read; when it returns True the stream needs nothing more (the exchange is
    complete, or it is not to be captured). :meth:`take` hands over the capture once.

    Args:
        settings: ``routes``, ``max_capture_bytes`` (response copy limit; the request body
            is bounded by it too).
        sampler: the sticky sampler (decides on the request headers).
        metrics: the capture metrics (``unsampled``).
        ext_metrics: the service's metrics (``streams``, ``incomplete``, ...).
    """

    __slots__ = (
        "_ext",
        "_max",
        "_metrics",
        "_request_done",
        "_routes",
        "_sampler",
        "done",
        "raw",
    )

    def __init__(
        self,
        settings: CaptureSettings,
        sampler: StickySampler,
        metrics: CaptureMetrics,
        ext_metrics: ExtProcMetrics,
    ) -> None:
        self._routes = frozenset(normalize_route(route) for route in settings.routes)
        self._max = settings.max_capture_bytes
        self._sampler = sampler
        self._metrics = metrics
        self._ext = ext_metrics
        self._request_done = False
        self.raw: RawCapture | None = None
        self.done = False

    # -- messages ------------------------------------------------------------------

    def feed(self, msg: Any, now_ns: int) -> bool:
        """Apply one ``ProcessingRequest`` read at ``now_ns``; True when the stream is done."""
        kind = msg.WhichOneof("request")
        if self.raw is None:
            if kind != "request_headers":  # a stream that does not start with the headers
                self._ext.streams.labels(result="no_headers").inc()
                self.done = True
                return True
            self._start(msg, now_ns)
            return self.done
        raw = self.raw
        if kind == "request_body":
            body = msg.request_body
            if body.body:
                if len(raw.request_body) + len(body.body) > self._max:
                    raw.truncated = True
                    raw.error = f"request body over max_capture_bytes={self._max}"
                else:
                    raw.request_body += body.body
            if body.end_of_stream:
                self._request_end(now_ns)
        elif kind == "request_trailers":
            self._request_end(now_ns)
        elif kind == "response_headers":
            self._response_start(msg, now_ns)
        elif kind == "response_body":
            self._response_body(msg.response_body, now_ns)
        elif kind == "response_trailers":
            self._response_end(now_ns)
        return self.done

    def _start(self, msg: Any, now_ns: int) -> None:
        headers = msg.request_headers
        pseudo: dict[bytes, bytes] = {}
        regular: list[tuple[bytes, bytes]] = []
        for name, value in _header_pairs(headers.headers):
            if name.startswith(b":"):
                pseudo.setdefault(name, value)
            else:
                regular.append((name.lower(), value))
        method = pseudo.get(b":method", b"").decode("latin-1")
        target = pseudo.get(b":path", b"").decode("latin-1")
        path, _, query = target.partition("?")
        self.done = True  # unless captured below
        route = normalize_route(path)
        if method != "POST" or route not in self._routes:
            self._ext.streams.labels(result="not_captured_route").inc()
            return
        if any(name == SHADOW_MARKER for name, _ in regular):
            self._ext.streams.labels(result="not_captured_marker").inc()
            return
        key_hash = self._sampler.session_key_hash(regular)
        exchange_id = new_exchange_id()
        if not self._sampler.sampled(key_hash, exchange_id):
            self._metrics.unsampled.inc()
            self._ext.streams.labels(result="unsampled").inc()
            return
        authority = pseudo.get(b":authority")
        if authority is not None:  # the client's Host (HTTP/1.1) or :authority (HTTP/2)
            regular.insert(0, (b"host", authority))
        self._ext.streams.labels(result="captured").inc()
        self.done = False
        raw = self.raw = RawCapture(
            exchange_id=exchange_id,
            captured_at=utc_now(),
            start_ns=now_ns,
            method=method,
            path=path,
            matched_route=route,
            query=query,
            request_headers=regular,
            session_key_hash=key_hash,
        )
        envoy_at = _request_time(msg)
        if envoy_at is not None:
            lag_ns = time.time_ns() - envoy_at[1]
            self._ext.arrival_lag.observe(max(0, lag_ns) / 1e9)
            if 0 <= lag_ns <= MAX_ANCHOR_LAG_NS:
                # Envoy's moment on this process's perf clock: the stream's set-up and
                # transit delay do not count into TTFT
                raw.start_ns = now_ns - lag_ns
                raw.captured_at = envoy_at[0]
                self._request_done = True
            else:
                self._ext.timing_fallbacks.inc()
        else:
            self._ext.timing_fallbacks.inc()
        if headers.end_of_stream:
            self._request_end(now_ns)

    def _request_end(self, now_ns: int) -> None:
        if not self._request_done and self.raw is not None:
            self._request_done = True
            self.raw.start_ns = now_ns

    def _response_start(self, msg: Any, now_ns: int) -> None:
        raw = self.raw
        assert raw is not None
        self._request_end(now_ns)  # a response before the request ended (an early reply)
        status = b""
        out: list[tuple[bytes, bytes]] = []
        for name, value in _header_pairs(msg.response_headers.headers):
            if name == b":status":
                status = value
            elif not name.startswith(b":"):
                out.append((name.lower(), value))
        try:
            raw.status_code = int(status)
        except ValueError:
            raw.status_code = None
        raw.response_headers = out
        raw.response_start_ns = now_ns
        cluster = _attribute(msg, "xds.cluster_name")
        if cluster is not None and cluster.string_value:
            raw.served_by = cluster.string_value
        details = _attribute(msg, "response.code_details")
        if details is not None and details.string_value and details.string_value != VIA_UPSTREAM:
            self._ext.local_replies.inc()
            raw.outcome = ExchangeOutcome.ERROR
            raw.error = f"Envoy local reply {raw.status_code}: {details.string_value}"
        if msg.response_headers.end_of_stream:
            self._response_end(now_ns)

    def _response_body(self, body: Any, now_ns: int) -> None:
        raw = self.raw
        assert raw is not None
        piece: bytes = body.body
        if piece and not raw.truncated:
            size = raw.captured_bytes + len(piece)
            if size > self._max:
                raw.truncated = True
                if raw.outcome is ExchangeOutcome.DONE:
                    raw.outcome = ExchangeOutcome.TRUNCATED
            else:
                raw.chunks.append((now_ns, piece))
                raw.captured_bytes = size
        if body.end_of_stream:
            self._response_end(now_ns)

    def _response_end(self, now_ns: int) -> None:
        assert self.raw is not None
        self.raw.end_ns = now_ns
        self.done = True

    # -- endings -------------------------------------------------------------------

    def incomplete(self, reason: str, now_ns: int, detail: str = "") -> None:
        """Record that the stream ended before the response did (no-op once done).

        ``reason`` is a key of :data:`INCOMPLETE_REASONS` or ``stream_failed`` (with the
        gRPC error as ``detail``); ``stream_failed`` gives outcome ``error``, the others
        ``cancelled``.
        """
        raw = self.raw
        if self.done or raw is None:
            if raw is None and not self.done:
                self._ext.streams.labels(result="no_headers").inc()
            self.done = True
            return
        self.done = True
        self._ext.incomplete.labels(reason=reason).inc()
        if reason == "stream_failed":
            raw.outcome = ExchangeOutcome.ERROR
            text = f"the processor stream failed: {detail}"
        else:
            raw.outcome = ExchangeOutcome.CANCELLED
            text = INCOMPLETE_REASONS[reason]
        raw.error = text if raw.error is None else f"{raw.error}; {text}"
        raw.end_ns = now_ns

    def take(self) -> RawCapture | None:
        """The capture, once (``None`` when nothing was captured or it was taken)."""
        raw, self.raw = self.raw, None
        return raw


class CaptureProcessor(ext_proc_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """The gRPC servicer: one :class:`StreamTap` per stream, the capture to ``on_capture``.

    Args:
        settings: the capture settings (routes, limits).
        sampler: the sticky sampler.
        on_capture: the tee (:meth:`CapturePipeline.offer`): called once per captured
            exchange, synchronously, guarded (an exception is logged and ignored).
        metrics: the capture metrics.
        ext_metrics: the service's metrics.
    """

    def __init__(
        self,
        settings: CaptureSettings,
        sampler: StickySampler,
        on_capture: Callable[[RawCapture], object],
        metrics: CaptureMetrics,
        ext_metrics: ExtProcMetrics,
    ) -> None:
        self.settings = settings
        self._sampler = sampler
        self._on_capture = on_capture
        self._metrics = metrics
        self._ext = ext_metrics
        self.stopping = False
        self.active = 0
        """Streams open now (the front end waits for 0 before it stops Envoy)."""
        self._kinds: dict[str, Any] = {}

    def _count(self, kind: str) -> None:
        child = self._kinds.get(kind)
        if child is None:
            child = self._ext.messages.labels(kind=kind)
            self._kinds[kind] = child
        child.inc()

    async def Process(  # noqa: N802 (the gRPC method's name)
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Read one stream to the end of its exchange; answer nothing in observability
        mode, and an unchanged ``CONTINUE`` to each message otherwise (a filter that waits
        for answers, e.g. Envoy Gateway's ``EnvoyExtensionPolicy``: see :data:`CONTINUE`).

        Returning closes the stream, which tells Envoy no more messages are needed.
        """
        tap = StreamTap(self.settings, self._sampler, self._metrics, self._ext)
        self._ext.active.inc()
        self.active += 1
        try:
            async for msg in request_iterator:
                now = _perf_ns()
                kind = msg.WhichOneof("request") or "none"
                self._count(kind)
                done = tap.feed(msg, now)
                if not msg.observability_mode and kind in CONTINUE:
                    yield CONTINUE[kind]
                if done:
                    break
            else:
                tap.incomplete("stream_closed", _perf_ns())
        except asyncio.CancelledError:
            tap.incomplete("shutdown" if self.stopping else "stream_reset", _perf_ns())
            raise
        except Exception as exc:  # a gRPC/transport failure: the exchange is kept
            tap.incomplete("stream_failed", _perf_ns(), f"{type(exc).__name__}: {exc}")
        finally:
            self._ext.active.dec()
            self.active -= 1
            raw = tap.take()
            if raw is not None:
                try:
                    self._on_capture(raw)
                except Exception:
                    logger.debug("on_capture raised; capture %s ignored", raw.exchange_id)
