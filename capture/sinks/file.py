"""The file sink: exchanges into a capture-log directory, on one dedicated thread.

``write()`` puts the payload on a bounded :class:`queue.Queue` and returns; a full queue
drops and counts (``dropped{reason="file_queue_full"}``). One worker thread owns the
:class:`~shadoweval.capture_log.CaptureLogWriter` (segment rotation, optional gzip), so no
file I/O ever runs in the event loop.

A disk error never reaches the caller: it is logged, counted as
``produce_errors{reason="file_io"}`` and the exchange as ``dropped{reason="sink_failed"}``;
the writer is closed and a fresh segment is opened for the next exchange (a transient
"disk full" recovers by itself). :meth:`FileSink.stop` writes what is queued and closes
the segment within its deadline; what is still queued after it is counted as
``dropped{reason="shutdown"}``.

Lines are buffered by the writer and reach the file on rotation and close; a crash of
the process can lose the buffered tail (at most one buffer, plus gzip's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from capture.metrics import CaptureMetrics
from capture.sinks.base import BuiltExchange
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.config import CaptureSettings
from shadoweval.lifecycle import AsyncLifecycle, LifecycleState

logger = logging.getLogger(__name__)


class LineWriter(Protocol):
    """What the worker thread writes through (:class:`CaptureLogWriter`, or a test fake)."""

    def write_line(self, line: bytes) -> None:
        """Append one serialized exchange; raise :class:`OSError` on a disk error."""

    def close(self) -> None:
        """Flush and close."""


def _flush_quietly(writer: LineWriter) -> bool:
    """Flush a writer that can (``CaptureLogWriter.flush``); False on a disk error."""
    flush = getattr(writer, "flush", None)
    if flush is None:
        return True
    try:
        flush()
    except (OSError, ValueError):
        return False
    return True


WriterFactory = Callable[[], LineWriter]


class FileSink(AsyncLifecycle):
    """Capture-log files as an :class:`~capture.sinks.base.ExchangeSink`.

    Args:
        directory: the capture-log directory (created by the worker thread).
        metrics: ``produced{sink="file"}``, ``dropped{reason}``, ``produce_errors``.
        compress: gzip each segment.
        max_segment_bytes: rotate after this many uncompressed bytes.
        max_queue: exchanges waiting for the thread; beyond it ``write()`` drops.
        writer_factory: builds the writer inside the worker thread (a seam for tests;
            default a :class:`CaptureLogWriter` on ``directory``).

    Use ``async with`` or :meth:`start`/:meth:`stop` (:mod:`shadoweval.lifecycle`: started
    once, not restartable).
    """

    name = "file"

    def __init__(
        self,
        directory: str | Path,
        metrics: CaptureMetrics,
        *,
        compress: bool = False,
        max_segment_bytes: int = 64 * 1024 * 1024,
        max_queue: int = 10_000,
        writer_factory: WriterFactory | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.metrics = metrics
        self.last_error: str | None = None
        self.compress = compress
        self.max_segment_bytes = max_segment_bytes
        self.writer_factory: WriterFactory = writer_factory or self._default_writer
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=max_queue)
        self._stop_event = threading.Event()
        self._abandon = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: CaptureSettings, metrics: CaptureMetrics) -> FileSink:
        """A file sink on ``file_sink_directory`` with ``file_sink_compress``."""
        return cls(settings.file_sink_directory, metrics, compress=settings.file_sink_compress)

    def _default_writer(self) -> LineWriter:
        return CaptureLogWriter(
            self.directory, compress=self.compress, max_segment_bytes=self.max_segment_bytes
        )

    @property
    def queued(self) -> int:
        """Exchanges waiting for the worker thread."""
        with self._queue.mutex:
            return sum(1 for item in self._queue.queue if item is not None)

    def status(self) -> str:
        """One line for ``/readyz``: the last write error, or the queue depth."""
        if self.last_error is not None:
            return self.last_error
        return f"writing to {self.directory}, {self.queued} queued"

    def ready(self) -> bool:
        """True while the worker thread runs, its queue has room and writes succeed."""
        thread = self._thread
        return (
            self.last_error is None
            and thread is not None
            and thread.is_alive()
            and not self._stop_event.is_set()
            and not self._queue.full()
        )

    async def start(self) -> None:
        """Start the worker thread (it opens the directory). Never touches the disk here.

        Raises:
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            self._thread = threading.Thread(
                target=self._run, name=f"file-sink:{self.directory}", daemon=True
            )
            self._thread.start()

    async def write(self, built: BuiltExchange) -> None:
        """Queue one exchange for the thread: never blocks, never raises."""
        if self._lifecycle_state is LifecycleState.STOPPED or self._stop_event.is_set():
            self.metrics.dropped.labels(reason="shutdown").inc()
            return
        try:
            self._queue.put_nowait(built.payload)
        except queue.Full:
            self.metrics.dropped.labels(reason="file_queue_full").inc()

    async def stop(self, deadline_s: float = 10.0) -> None:
        """Write what is queued and close the segment, waiting at most ``deadline_s``
        (10 s by default, as on leaving ``async with``).

        Exchanges still queued at the deadline are counted as dropped (``shutdown``) and
        the thread is told to stop after its current write. Idempotent; never raises.
        """
        never_started = self.lifecycle_state is LifecycleState.NEW
        if not self._stopping():
            if never_started and self.queued:  # written but never started: nothing writes them
                self.metrics.dropped.labels(reason="shutdown").inc(self.queued)
            return
        thread = self._thread
        assert thread is not None
        self._stop_event.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)  # wake the thread now (else it polls every 0.1 s)
        await asyncio.to_thread(thread.join, max(deadline_s, 0.0))
        if thread.is_alive():
            self._abandon.set()
            left = self.queued
            logger.error(
                "file sink did not finish within %.1f s; %d queued exchanges dropped",
                deadline_s,
                left,
            )
            if left:
                self.metrics.dropped.labels(reason="shutdown").inc(left)

    # ------------------------------------------------------------------ worker thread

    def _run(self) -> None:
        writer: LineWriter | None = None
        dirty = False
        try:
            while not self._abandon.is_set():
                try:
                    payload = self._queue.get(timeout=0.1)
                except queue.Empty:
                    payload = None
                if payload is None:
                    if dirty and writer is not None:
                        # Idle: push what was written to the OS, so a crash loses nothing
                        # that was acknowledged more than ~0.1 s ago.
                        if not _flush_quietly(writer):
                            self.metrics.produce_errors.labels(reason="file_io").inc()
                        dirty = False
                    if self._stop_event.is_set() and self._queue.empty():
                        return
                    continue
                writer = self._write_one(writer, payload)
                dirty = True
        finally:
            if writer is not None:
                self._close(writer)

    def _write_one(self, writer: LineWriter | None, payload: bytes) -> LineWriter | None:
        """Write one line; on an error count it and return ``None`` (reopen next time)."""
        try:
            if writer is None:
                writer = self.writer_factory()
            writer.write_line(payload)
        except (OSError, ValueError) as exc:
            logger.error("file sink cannot write to %s: %s", self.directory, exc)
            self.metrics.produce_errors.labels(reason="file_io").inc()
            self.metrics.dropped.labels(reason="sink_failed").inc()
            self.last_error = f"write failing: {type(exc).__name__}: {exc}"
            if writer is not None:
                self._close(writer)
            return None
        self.last_error = None
        self.metrics.produced.labels(sink=self.name).inc()
        return writer

    def _close(self, writer: LineWriter) -> None:
        try:
            writer.close()
        except (OSError, ValueError) as exc:
            logger.error("file sink cannot close its segment in %s: %s", self.directory, exc)
            self.metrics.produce_errors.labels(reason="file_io").inc()
