"""Prometheus metrics of a Kafka replay worker, and the ASGI app that serves them.

Metrics (one registry per worker; names follow Prometheus conventions):

* ``shadoweval_replay_replayed_total{target,outcome}`` — finished replays; ``outcome`` is
  ``ok`` or the error kind (``timeout``, ``connect``, ``http_status``, ``decode``,
  ``skipped``);
* ``shadoweval_replay_dead_letter_total{reason}`` — records sent to the dead-letter topic
  (``invalid_json``, ``invalid_utf8``, ``schema_version``, ``schema``, ``empty``,
  ``conflicting_duplicate`` …);
* ``shadoweval_replay_dead_letter_enveloped_total{reason}`` — of those, the ones too large
  to be written whole, written as a bounded envelope (size, SHA-256, first bytes);
* ``shadoweval_replay_consumer_lag{partition}`` — records behind the high watermark, per
  assigned partition (``topic/partition``), refreshed periodically;
* ``shadoweval_replay_in_flight`` — requests being sent to shadow targets now;
* ``shadoweval_replay_buffered`` — records fetched and not yet finished (≤ ``max_buffered``);
* ``shadoweval_replay_committed_offset{partition}`` — the last committed position.
* ``shadoweval_replay_session_model_changes_total{target}`` — turns replayed against
  another candidate version (the model the response reported) than their session's first
  turn on this worker (:mod:`shadoweval.replay.sessions`).

:func:`metrics_app` serves ``/metrics`` (Prometheus text format), ``/healthz`` (200 while
the process runs) and ``/readyz`` (200 once the worker consumes, 503 before and while it
stops); :class:`MetricsServer` runs it on a port.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.applications import Starlette

from shadoweval.ports import REPLAY_METRICS_PORT
from shadoweval.probes import MetricSet, counter, gauge, probe_app
from shadoweval.serving import BackgroundServer

Partition = tuple[str, int]


def partition_label(partition: Partition) -> str:
    """``topic/partition`` — the ``partition`` label value."""
    return f"{partition[0]}/{partition[1]}"


class WorkerMetrics(MetricSet):
    """The replay worker's metrics, registered in ``registry`` (a fresh one by default)."""

    replayed = counter(
        "shadoweval_replay_replayed_total",
        "Finished replays, by target and outcome (ok or the error kind).",
        "target",
        "outcome",
    )
    dead_letter = counter(
        "shadoweval_replay_dead_letter_total",
        "Records sent to the dead-letter topic, by reason.",
        "reason",
    )
    dead_letter_enveloped = counter(
        "shadoweval_replay_dead_letter_enveloped_total",
        "Dead letters too large to be written whole, written as an envelope, by reason.",
        "reason",
    )
    consumer_lag = gauge(
        "shadoweval_replay_consumer_lag",
        "Records behind the partition's high watermark, per assigned partition.",
        "partition",
    )
    in_flight = gauge("shadoweval_replay_in_flight", "Requests being sent to shadow targets now.")
    buffered = gauge(
        "shadoweval_replay_buffered",
        "Records fetched and not yet finished (bounded by max_buffered).",
    )
    committed_offset = gauge(
        "shadoweval_replay_committed_offset",
        "Last committed position (next offset to read), per partition.",
        "partition",
    )
    session_model_changes = counter(
        "shadoweval_replay_session_model_changes_total",
        "Turns replayed against another candidate version than their session's first.",
        "target",
    )

    def set_lag(self, lag: Mapping[Partition, int]) -> None:
        """Replace the lag gauges with ``lag`` (partitions no longer assigned are removed)."""
        self.consumer_lag.clear()
        for tp, value in lag.items():
            self.consumer_lag.labels(partition=partition_label(tp)).set(value)

    def set_committed(self, offsets: Mapping[Partition, int]) -> None:
        """Record committed positions."""
        for tp, offset in offsets.items():
            self.committed_offset.labels(partition=partition_label(tp)).set(offset)


def metrics_app(metrics: WorkerMetrics, ready: Callable[[], bool]) -> Starlette:
    """An ASGI app serving ``/metrics``, ``/healthz`` and ``/readyz`` (text bodies:
    ``ok``, ``ready`` / ``not ready``; :func:`shadoweval.probes.probe_app`).

    ``ready`` is called on each ``/readyz`` request.
    """
    return probe_app(metrics.registry, lambda: (ready(), ""), style="text")


class MetricsServer(BackgroundServer):
    """Serves :func:`metrics_app` on a port (:class:`~shadoweval.serving.BackgroundServer`
    with the worker's defaults: every interface, port
    :data:`~shadoweval.ports.REPLAY_METRICS_PORT`, 9470).

    A thread, not a task on the worker's loop: uvicorn's ``serve`` takes over SIGTERM and
    SIGINT when it runs on the main thread, and those belong to the worker's graceful stop.

    Raises (from :meth:`start`):
        RuntimeError: the port could not be bound within ``start_timeout_s``.
        LifecycleError: started twice, or after :meth:`stop`.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "0.0.0.0",
        port: int = REPLAY_METRICS_PORT,
        start_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(
            app,
            host=host,
            port=port,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=5.0,
            thread_name="shadoweval-metrics",
        )
