"""The tee: a bounded in-memory queue between the live path and the sinks.

Live path → :meth:`CapturePipeline.offer` (synchronous, O(1), never waits) → queue →
builder (decode, reassemble, tag, redact, serialize — in a worker process by default, so
its CPU never competes with the proxy's event loop for the GIL) → every sink.

Bounded twice: by item count and by bytes held. A capture that does not fit is dropped
and counted (``queue_full`` / ``queue_bytes``); nothing on the live path ever waits for
room. Builds run in parallel (``max_concurrent_builds``) but their results are delivered
to the sinks in capture order.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Literal

from capture.builder import BuildResult, ExchangeBuilder, build_in_worker, init_worker
from capture.metrics import CaptureMetrics
from capture.raw import RawCapture
from capture.sinks.base import ExchangeSink
from shadoweval.lifecycle import AsyncLifecycle

logger = logging.getLogger(__name__)

BuilderMode = Literal["process", "thread", "inline"]
"""Where exchanges are built: a worker process (default), a worker thread, or the loop."""


class CapturePipeline(AsyncLifecycle):
    """Queue, builder and sinks of one sidecar.

    Args:
        builder: the exchange builder (its settings and model identity are also sent to the
            worker process when ``mode="process"``).
        sinks: where built exchanges go; each gets every exchange.
        metrics: the sidecar's metrics.
        queue_max_items: queue capacity in captures.
        queue_max_bytes: queue capacity in bytes (request body + captured response bytes).
        mode: ``process`` (default; builds in ``build_workers`` spawned processes),
            ``thread`` (one worker thread; simpler, competes for the GIL) or ``inline``
            (in the event loop; tests only).
        max_concurrent_builds: builds in flight at once.

    Use ``async with`` or :meth:`start`/:meth:`stop` (:mod:`shadoweval.lifecycle`: started
    once, not restartable).
    """

    def __init__(
        self,
        builder: ExchangeBuilder,
        sinks: Sequence[ExchangeSink],
        metrics: CaptureMetrics,
        *,
        queue_max_items: int = 10_000,
        queue_max_bytes: int = 256 * 1024 * 1024,
        mode: BuilderMode = "process",
        build_workers: int = 1,
        max_concurrent_builds: int = 4,
    ) -> None:
        self.builder = builder
        self.sinks = list(sinks)
        self.metrics = metrics
        self.queue_max_items = queue_max_items
        self.queue_max_bytes = queue_max_bytes
        self.mode = mode
        self.build_workers = build_workers
        self.max_concurrent_builds = max(1, max_concurrent_builds)
        self._queue: collections.deque[RawCapture] = collections.deque()
        self._queue_bytes = 0
        self._wake = asyncio.Event()
        self._accepting = False
        self._task: asyncio.Task[None] | None = None
        self._executor: concurrent.futures.Executor | None = None
        self.delivered = 0

    # -- hot path ------------------------------------------------------------------

    def offer(self, raw: RawCapture) -> bool:
        """Queue one capture; return False (and count the reason) when it is dropped.

        Called on the live path: synchronous, constant time, never raises, never waits.
        """
        try:
            route = raw.path
            self.metrics.captured.labels(route=route, outcome=raw.outcome.value).inc()
            if not self._accepting:
                self.metrics.dropped.labels(reason="shutdown").inc()
                return False
            if len(self._queue) >= self.queue_max_items:
                self.metrics.dropped.labels(reason="queue_full").inc()
                return False
            size = raw.size_bytes()
            if self._queue_bytes + size > self.queue_max_bytes:
                self.metrics.dropped.labels(reason="queue_bytes").inc()
                return False
            self._queue.append(raw)
            self._queue_bytes += size
            self.metrics.queue_depth.set(len(self._queue))
            self.metrics.queue_bytes.set(self._queue_bytes)
            self._wake.set()
            return True
        except Exception:  # the live path must never see a tee failure
            logger.debug("capture offer failed", exc_info=True)
            return False

    # -- lifecycle -----------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Captures waiting to be built."""
        return len(self._queue)

    def running(self) -> bool:
        """Whether the pipeline accepts captures and its worker task is alive."""
        return self._accepting and self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start the sinks, the builder executor and the worker task (never raises for a
        sink whose backend is down: sinks are fail-open).

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            for sink in self.sinks:
                await sink.start()
            self._executor = self._make_executor()
            self._accepting = True
            self._task = asyncio.create_task(self._run(), name="capture-pipeline")

    def _make_executor(self) -> concurrent.futures.Executor | None:
        if self.mode == "inline":
            return None
        if self.mode == "thread":
            return concurrent.futures.ThreadPoolExecutor(
                max_workers=self.build_workers, thread_name_prefix="capture-build"
            )
        # The worker process rebuilds the builder from JSON (settings and identity pickle
        # poorly across the spawn boundary); the session salt is not needed there.
        settings_json = self.builder.settings.model_dump_json()
        model_json = self.builder.model.model_dump_json()
        source = self.builder.source
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.build_workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=init_worker,
            initargs=(settings_json, model_json, source),
        )

    async def stop(self, deadline_s: float | None = None) -> None:
        """Stop accepting, build and deliver what is queued within ``deadline_s`` (default
        the settings' ``flush_deadline_s``), then stop the sinks with the time left.
        Captures still queued at the deadline are counted as dropped (``shutdown``).
        Idempotent; a never-started pipeline has nothing to stop."""
        if not self._stopping():
            return
        if deadline_s is None:
            deadline_s = self.builder.settings.flush_deadline_s
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        self._accepting = False
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), max(0.0, end - loop.time()))
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        left = len(self._queue)
        if left:
            self.metrics.dropped.labels(reason="shutdown").inc(left)
            self._queue.clear()
            self._queue_bytes = 0
        for sink in self.sinks:
            await sink.stop(max(0.5, end - loop.time()))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- worker --------------------------------------------------------------------

    async def _run(self) -> None:
        in_flight: collections.deque[asyncio.Future[BuildResult | None]] = collections.deque()
        while True:
            while self._queue and len(in_flight) < self.max_concurrent_builds:
                raw = self._queue.popleft()
                self._queue_bytes -= raw.size_bytes()
                in_flight.append(self._submit(raw))
            self.metrics.queue_depth.set(len(self._queue))
            self.metrics.queue_bytes.set(self._queue_bytes)
            if in_flight:
                result = await in_flight.popleft()  # deliver in capture order
                if result is not None:
                    await self._deliver(result)
                continue
            if not self._accepting:
                return
            self._wake.clear()
            if not self._queue:
                await self._wake.wait()

    def _submit(self, raw: RawCapture) -> asyncio.Future[BuildResult | None]:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        if self._executor is None:
            fut: asyncio.Future[BuildResult] = loop.create_future()
            try:
                fut.set_result(self.builder.build(raw))
            except Exception as exc:
                fut.set_exception(exc)
        else:
            fn: Callable[[RawCapture], BuildResult] = (
                build_in_worker if self.mode == "process" else self.builder.build
            )
            fut = asyncio.ensure_future(loop.run_in_executor(self._executor, fn, raw))
        return asyncio.ensure_future(self._finish_build(fut, raw, started))

    async def _finish_build(
        self, fut: asyncio.Future[BuildResult], raw: RawCapture, started: float
    ) -> BuildResult | None:
        try:
            result = await fut
        except concurrent.futures.process.BrokenProcessPool:
            logger.error("capture builder process died; restarting it")
            self.metrics.dropped.labels(reason="build_failed").inc()
            self._restart_executor()
            return None
        except Exception:
            logger.exception("could not build exchange %s", raw.exchange_id)
            self.metrics.dropped.labels(reason="build_failed").inc()
            return None
        self.metrics.build_seconds.observe(time.perf_counter() - started)
        if result.fallback_reason is not None:
            # Kept as a minimal error record (never lost), but counted: the full capture
            # could not be built.
            logger.error(
                "exchange %s kept as a minimal record: %s", raw.exchange_id, result.fallback_reason
            )
            self.metrics.build_fallbacks.inc()
        for rule, count in result.redaction_hits.items():
            self.metrics.redactions.labels(rule=rule).inc(count)
        if result.cache_hit_headers:
            self.metrics.cache_hits.labels(header=result.cache_hit_headers[0]).inc()
        return result

    def _restart_executor(self) -> None:
        old = self._executor
        try:
            self._executor = self._make_executor()
        finally:
            if old is not None:
                old.shutdown(wait=False, cancel_futures=True)

    async def _deliver(self, result: BuildResult) -> None:
        for sink in self.sinks:
            try:
                await sink.write(result.built)
            except Exception:  # a sink must not raise; if one does, count and go on
                logger.exception("sink %s failed", getattr(sink, "name", sink))
                self.metrics.dropped.labels(reason="sink_failed").inc()
        self.delivered += 1
