"""Prometheus metrics of a Kafka replay worker, and the ASGI app that serves them.

Metrics (one registry per worker; names follow Prometheus conventions):

* ``shadoweval_replay_replayed_total{target,outcome}`` — finished replays; ``outcome`` is
  ``ok`` or the error kind (``timeout``, ``connect``, ``http_status``, ``decode``,
  ``skipped``);
* ``shadoweval_replay_dead_letter_total{reason}`` — records sent to the dead-letter topic
  (``invalid_json``, ``schema_version``, ``schema``, ``empty``, ``conflicting_duplicate``);
* ``shadoweval_replay_consumer_lag{partition}`` — records behind the high watermark, per
  assigned partition (``topic/partition``), refreshed periodically;
* ``shadoweval_replay_in_flight`` — requests being sent to shadow targets now;
* ``shadoweval_replay_buffered`` — records fetched and not yet finished (≤ ``max_buffered``);
* ``shadoweval_replay_committed_offset{partition}`` — the last committed position.

:func:`metrics_app` serves ``/metrics`` (Prometheus text format), ``/healthz`` (200 while
the process runs) and ``/readyz`` (200 once the worker consumes, 503 before and while it
stops); :class:`MetricsServer` runs it on a port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

Partition = tuple[str, int]


def partition_label(partition: Partition) -> str:
    """``topic/partition`` — the ``partition`` label value."""
    return f"{partition[0]}/{partition[1]}"


class WorkerMetrics:
    """The replay worker's metrics, registered in ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.replayed = Counter(
            "shadoweval_replay_replayed_total",
            "Finished replays, by target and outcome (ok or the error kind).",
            ["target", "outcome"],
            registry=r,
        )
        self.dead_letter = Counter(
            "shadoweval_replay_dead_letter_total",
            "Records sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=r,
        )
        self.consumer_lag = Gauge(
            "shadoweval_replay_consumer_lag",
            "Records behind the partition's high watermark, per assigned partition.",
            ["partition"],
            registry=r,
        )
        self.in_flight = Gauge(
            "shadoweval_replay_in_flight",
            "Requests being sent to shadow targets now.",
            registry=r,
        )
        self.buffered = Gauge(
            "shadoweval_replay_buffered",
            "Records fetched and not yet finished (bounded by max_buffered).",
            registry=r,
        )
        self.committed_offset = Gauge(
            "shadoweval_replay_committed_offset",
            "Last committed position (next offset to read), per partition.",
            ["partition"],
            registry=r,
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


def metrics_app(metrics: WorkerMetrics, ready: Callable[[], bool]) -> Any:
    """An ASGI app serving ``/metrics``, ``/healthz`` and ``/readyz``.

    ``ready`` is called on each ``/readyz`` request.
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def scrape(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> PlainTextResponse:
        if ready():
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready\n", status_code=503)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", scrape),
        ]
    )


class MetricsServer:
    """Serves :func:`metrics_app` with uvicorn in a daemon thread.

    A thread, not a task on the worker's loop: uvicorn's ``serve`` takes over SIGTERM and
    SIGINT when it runs on the main thread, and those belong to the worker's graceful stop.

    Raises (from :meth:`start`):
        RuntimeError: the port could not be bound within ``start_timeout_s``.
    """

    def __init__(
        self, app: Any, *, host: str = "0.0.0.0", port: int = 9465, start_timeout_s: float = 10.0
    ) -> None:
        import uvicorn

        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", ws="none"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, name="shadoweval-metrics", daemon=True
        )
        self._timeout = start_timeout_s
        self.port = port

    def start(self) -> MetricsServer:
        """Start serving; returns once the socket listens (``port`` is then the bound one)."""
        self._thread.start()
        deadline = time.monotonic() + self._timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"metrics server did not start on port {self.port}")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=5)
