"""The tee: a bounded in-memory queue between the live path and the sinks.

Live path → :meth:`CapturePipeline.offer` (synchronous, O(1), never waits) → queue →
builder (decode, reassemble, tag, redact, serialize — in a worker process by default, so
its CPU never competes with the proxy's event loop for the GIL) → every sink.

Bounded twice: by item count and by bytes held. A capture that does not fit is dropped
and counted (``queue_full`` / ``queue_bytes``); nothing on the live path ever waits for
room. Builds run in parallel (``max_concurrent_builds``) but their results are delivered
to the sinks in capture order. When it goes idle after a large batch, the memory the batch
took is handed back to the system, in this process and the builder's
(:mod:`shadoweval.capture.memory_release`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Literal

from shadoweval.capture.builder import BuildResult, ExchangeBuilder, build_in_worker, init_worker
from shadoweval.capture.memory_release import (
    LARGE_BATCH_BYTES,
    MIN_INTERVAL_S,
    release_in_worker,
    trim_heap,
)
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.raw import RawCapture
from shadoweval.capture.sinks.base import ExchangeSink
from shadoweval.config import CaptureSettings
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
        max_concurrent_builds: build batches in flight at once.
        batch_max_items: captures sent to the builder in one call at most (what is queued
            when a batch starts, up to this many: one pickle and one process round trip per
            batch instead of per capture).
        batch_linger_s: when the builder is idle and fewer than ``batch_max_items`` are
            queued, wait this long (seconds) before sending a batch so that several captures
            share the round trip; captures reach the sinks that much later, the live path
            never waits (not in ``inline`` mode).

    Use ``async with`` or :meth:`start`/:meth:`stop` (:mod:`shadoweval.lifecycle`: started
    once, not restartable).
    """

    @classmethod
    def from_settings(
        cls,
        settings: CaptureSettings,
        builder: ExchangeBuilder,
        sinks: Sequence[ExchangeSink],
        metrics: CaptureMetrics,
        mode: BuilderMode,
    ) -> CapturePipeline:
        """The pipeline ``capture.queue_max_items`` / ``queue_max_bytes`` / ``build_workers``
        / ``batch_linger_s`` describe (what the sidecar and the Envoy front end both build)."""
        pipeline = cls(
            builder,
            sinks,
            metrics,
            queue_max_items=settings.queue_max_items,
            queue_max_bytes=settings.queue_max_bytes,
            mode=mode,
            build_workers=settings.build_workers,
        )
        pipeline.batch_linger_s = settings.batch_linger_s  # read by the worker task
        return pipeline

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
        batch_max_items: int = 64,
        batch_linger_s: float = 0.025,
    ) -> None:
        self.builder = builder
        self.sinks = list(sinks)
        self.metrics = metrics
        self.queue_max_items = queue_max_items
        self.queue_max_bytes = queue_max_bytes
        self.mode = mode
        self.build_workers = build_workers
        self.max_concurrent_builds = max(1, max_concurrent_builds)
        self.batch_max_items = max(1, batch_max_items)
        self.batch_linger_s = max(0.0, batch_linger_s)
        self._queue: collections.deque[RawCapture] = collections.deque()
        self._queue_bytes = 0
        self._wake = asyncio.Event()
        self._accepting = False
        self._task: asyncio.Task[None] | None = None
        self._executor: concurrent.futures.Executor | None = None
        self.delivered = 0
        self._release_due = False
        self._released_at = -MIN_INTERVAL_S

    # -- hot path ------------------------------------------------------------------

    def offer(self, raw: RawCapture) -> bool:
        """Queue one capture; return False (and count the reason) when it is dropped.

        Called on the live path: synchronous, constant time, never raises, never waits.
        """
        try:
            route = raw.route
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
        # workers are spawned by submit(), on the event loop's thread (run_in_executor): it
        # lives as long as the service, so the workers' parent-death signal follows it
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
        in_flight: collections.deque[asyncio.Future[list[BuildResult | None]]] = collections.deque()
        linger_s = self.batch_linger_s if self.mode != "inline" else 0.0
        while True:
            if (
                linger_s
                and not in_flight
                and self._accepting
                and 0 < len(self._queue) < self.batch_max_items
            ):
                await asyncio.sleep(linger_s)  # let a batch form: one round trip for several
            while self._queue and len(in_flight) < self.max_concurrent_builds:
                in_flight.append(self._submit(self._take_batch()))
            self.metrics.queue_depth.set(len(self._queue))
            self.metrics.queue_bytes.set(self._queue_bytes)
            if in_flight:
                await self._deliver_batch(in_flight.popleft())  # deliver in capture order
                continue
            if not self._accepting:
                return
            self._wake.clear()
            if not self._queue:
                if self._release_due:
                    await self._release_memory()  # returns early when a capture comes
                    continue
                await self._wake.wait()

    # The batch and its results live in these helpers' frames only, never in the long-lived
    # _run frame: a large capture's bytes are freed once its batch is delivered (issue 33).

    def _take_batch(self) -> list[RawCapture]:
        """Up to ``batch_max_items`` captures off the queue (its byte count updated)."""
        batch: list[RawCapture] = []
        size = 0
        while self._queue and len(batch) < self.batch_max_items:
            raw = self._queue.popleft()
            self._queue_bytes -= raw.size_bytes()
            batch.append(raw)
            size += raw.size_bytes()
        if size >= LARGE_BATCH_BYTES:
            self._release_due = True
        return batch

    async def _release_memory(self) -> None:
        """Idle after a large batch: give its memory back (:mod:`.memory_release`), at most
        once per ``MIN_INTERVAL_S``; a capture arriving meanwhile postpones it."""
        wait_s = self._released_at + MIN_INTERVAL_S - time.monotonic()
        if wait_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)
            if self._wake.is_set():
                return
        self._release_due = False
        self._released_at = time.monotonic()
        try:
            if self._executor is not None and self.mode == "process":
                await asyncio.get_running_loop().run_in_executor(self._executor, release_in_worker)
            await asyncio.to_thread(trim_heap)
        except Exception:  # memory not returned is no failure of the capture
            logger.debug("could not release memory after a large batch", exc_info=True)

    async def _deliver_batch(self, built: asyncio.Future[list[BuildResult | None]]) -> None:
        """Wait for one batch's builds and hand each result to the sinks, in order."""
        for result in await built:
            if result is not None:
                await self._deliver(result)

    def _submit(self, batch: list[RawCapture]) -> asyncio.Future[list[BuildResult | None]]:
        """Build ``batch`` in one executor call (one pickle and one round trip to the
        builder process for all of them, not one per capture)."""
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        fut: asyncio.Future[list[BuildResult | str]]
        if self._executor is None:
            fut = loop.create_future()
            fut.set_result(_build_batch(self.builder.build, batch))
        else:
            fn: Callable[[list[RawCapture]], list[BuildResult | str]] = (
                build_batch_in_worker
                if self.mode == "process"
                else functools.partial(_build_batch, self.builder.build)
            )
            fut = asyncio.ensure_future(loop.run_in_executor(self._executor, fn, batch))
        return asyncio.ensure_future(self._finish_batch(fut, batch, started))

    async def _finish_batch(
        self,
        fut: asyncio.Future[list[BuildResult | str]],
        batch: list[RawCapture],
        started: float,
    ) -> list[BuildResult | None]:
        try:
            results = await fut
        except concurrent.futures.process.BrokenProcessPool:
            logger.error("capture builder process died; restarting it")
            self.metrics.dropped.labels(reason="build_failed").inc(len(batch))
            self._restart_executor()
            return []
        except Exception:
            logger.exception("could not build %d exchange(s)", len(batch))
            self.metrics.dropped.labels(reason="build_failed").inc(len(batch))
            return []
        elapsed = (time.perf_counter() - started) / max(1, len(batch))
        out: list[BuildResult | None] = []
        for raw, result in zip(batch, results, strict=True):
            if isinstance(result, str):
                logger.error("could not build exchange %s: %s", raw.exchange_id, result)
                self.metrics.dropped.labels(reason="build_failed").inc()
                out.append(None)
                continue
            self.metrics.build_seconds.observe(elapsed)
            if result.fallback_reason is not None:
                # Kept as a minimal error record (never lost), but counted: the full
                # capture could not be built.
                logger.error(
                    "exchange %s kept as a minimal record: %s",
                    raw.exchange_id,
                    result.fallback_reason,
                )
                self.metrics.build_fallbacks.inc()
            self.metrics.built.labels(route=raw.route, outcome=result.outcome.value).inc()
            for rule, count in result.redaction_hits.items():
                self.metrics.redactions.labels(rule=rule).inc(count)
            if result.cache_hit_headers:
                self.metrics.cache_hits.labels(header=result.cache_hit_headers[0]).inc()
            out.append(result)
        return out

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


def _build_batch(
    build: Callable[[RawCapture], BuildResult], batch: list[RawCapture]
) -> list[BuildResult | str]:
    """Build each capture; a build that raises gives its error text (counted by the caller)."""
    out: list[BuildResult | str] = []
    for raw in batch:
        try:
            out.append(build(raw))
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def build_batch_in_worker(batch: list[RawCapture]) -> list[BuildResult | str]:
    """In the builder process: :func:`capture.builder.build_in_worker` for each capture."""
    return _build_batch(build_in_worker, batch)
