"""Prometheus metrics of the capture sidecar (one registry per sidecar instance).

Names follow Prometheus conventions (``_total`` counters, ``_bytes`` units). Every way an
exchange can fail to reach a sink is a ``shadoweval_capture_dropped_total`` reason:

* ``queue_full`` / ``queue_bytes`` — the in-memory tee queue was full (count or bytes);
* ``build_failed`` — the builder could not turn the copy into an Exchange;
* ``spool_full`` — the broker was unreachable and the disk spool was full;
* ``sink_failed`` — a sink failed in a way the spool could not absorb;
* ``sink_backlog`` — the Kafka sink's in-memory backlog (before the spool) was full;
* ``spool_io`` / ``spool_corrupt`` — the spool could not write, or a torn record was cut;
* ``oversize`` / ``oversize_undecodable`` — over the broker's size even as a stub, or not
  decodable to shrink it; ``offload_full`` / ``offload_io`` — the offload store refused;
* ``file_queue_full`` — the file sink's writer queue was full;
* ``file_disk_full`` / ``file_io`` — the file sink's disk was full (``ENOSPC``,
  ``EDQUOT``) or failed (``EIO`` …): only lines that reached the file count as produced;
* ``shutdown`` — still queued when the grace period ended.
"""

from __future__ import annotations

from shadoweval.probes import MetricSet, counter, gauge, histogram


class CaptureMetrics(MetricSet):
    """The sidecar's metrics, registered in ``registry`` (a fresh one by default) in the
    order declared here (the exposition lists them so)."""

    # The live path: forwarded requests, upstream failures, refusals, connections.
    proxied = counter(
        "shadoweval_proxy_requests_total",
        "Requests forwarded to the upstream, by route kind and status class.",
        "route",
        "status_class",
    )
    upstream_errors = counter(
        "shadoweval_proxy_upstream_errors_total",
        "Upstream failures, by kind: connect/timeout (the client got a 502/504) or mid_stream "
        "(the upstream broke after the headers; the client saw the same break).",
        "kind",
    )
    rejected = counter(
        "shadoweval_proxy_rejected_total",
        "Client requests or connections refused by a live-port limit, by reason "
        "(header_timeout, body_timeout, headers_too_large, body_too_large, "
        "connection_limit, bad_request, bad_target, dot_segment).",
        "reason",
    )
    client_connections = gauge(
        "shadoweval_proxy_client_connections", "Open client connections on the live port."
    )
    upstream_stale = counter(
        "shadoweval_proxy_upstream_stale_total",
        "Idle upstream connections found closed by the upstream at the moment of use and "
        "discarded before any byte was written (the request went on another connection).",
    )

    # The copies: captured, built, left out by sampling, dropped, the tee queue.
    captured = counter(
        "shadoweval_capture_captured_total",
        "Exchanges copied aside and queued, by route and outcome as the live path saw "
        "it (before the builder: a stream cancelled after its [DONE] is still cancelled "
        "here; shadoweval_capture_built_total has the records' outcomes).",
        "route",
        "outcome",
    )
    built = counter(
        "shadoweval_capture_built_total",
        "Exchanges built into records, by route and the record's outcome.",
        "route",
        "outcome",
    )
    unsampled = counter(
        "shadoweval_capture_unsampled_total",
        "Requests on a captured route left out by sampling.",
    )
    dropped = counter(
        "shadoweval_capture_dropped_total",
        "Exchanges that will not reach any sink, by reason.",
        "reason",
    )
    queue_depth = gauge("shadoweval_capture_queue_depth", "Exchanges waiting in the tee queue.")
    queue_bytes = gauge("shadoweval_capture_queue_bytes", "Bytes held by the tee queue.")

    # The sinks: produced, produce errors, the disk spool, the Kafka producer, oversize.
    produced = counter(
        "shadoweval_capture_produced_total",
        "Exchanges acknowledged by a sink (kafka: broker ack; file: written and flushed "
        "to the operating system).",
        "sink",
    )
    produce_errors = counter(
        "shadoweval_capture_produce_errors_total",
        "Failed produce attempts (the exchange went to the spool), by reason.",
        "reason",
    )
    spooled = counter("shadoweval_capture_spooled_total", "Exchanges written to the disk spool.")
    spool_bytes = gauge("shadoweval_capture_spool_bytes", "Bytes held by the disk spool.")
    spool_records = gauge(
        "shadoweval_capture_spool_records", "Exchanges waiting in the disk spool."
    )
    spool_cursor_unsaved = gauge(
        "shadoweval_capture_spool_cursor_unsaved",
        "1 while the spool's read position is newer than its cursor file (the file "
        "could not be written, e.g. disk full): draining goes on, the save is retried; "
        "a restart meanwhile re-sends from the saved position (duplicates, no loss).",
    )
    sink_spooling = gauge(
        "shadoweval_capture_kafka_spooling",
        "1 while the Kafka sink writes to the spool instead of the broker.",
    )
    kafka_idempotent = gauge(
        "shadoweval_capture_kafka_idempotent",
        "1 when the broker granted an idempotent producer id.",
    )
    oversize = counter(
        "shadoweval_capture_oversize_total",
        "Exchanges over the broker's message size, by action (raw_body_dropped, offloaded).",
        "action",
    )

    # The builder: redaction hits, cache hits, fallbacks, build time.
    redactions = counter(
        "shadoweval_capture_redactions_total",
        "Redaction rule hits, by rule (values are never recorded).",
        "rule",
    )
    cache_hits = counter(
        "shadoweval_capture_cache_hits_total",
        "Captured answers a cache served (a cache-hit rule matched), by the first "
        "matched header; kept, and left out of latency by the gate.",
        "header",
    )
    build_fallbacks = counter(
        "shadoweval_capture_build_fallbacks_total",
        "Captures that could not be fully built and were kept as a minimal error record.",
    )
    build_seconds = histogram(
        "shadoweval_capture_build_seconds",
        "Time to build, redact and serialize one exchange (off the hot path).",
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
    )
