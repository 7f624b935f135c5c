"""The file sink: exchanges into a capture-log directory, on one dedicated thread.

``write()`` puts the payload on a bounded :class:`queue.Queue` and returns; a full queue
drops and counts (``dropped{reason="file_queue_full"}``). One worker thread owns the
:class:`~shadoweval.capture_log.CaptureLogWriter` (segment rotation, optional gzip), so no
file I/O ever runs in the event loop.

The thread writes what is queued in batches (up to ``max_batch`` lines) and flushes each
batch to the operating system before it counts it: ``produced{sink="file"}`` counts only
lines that reached the file. A disk error never reaches the caller: the lines of the batch
that did not reach the disk are counted as ``dropped{reason="file_disk_full"}`` (``ENOSPC``,
``EDQUOT``) or ``dropped{reason="file_io"}`` (``EIO`` and other errors), the attempt as
``produce_errors{reason=…}`` with the same reason, and logged (at most one line per
``error_log_interval_s``, with the count of errors not logged). The writer cuts the segment
back to its last flush (an empty segment is deleted, a gzip one properly ended), so a
disk-full episode leaves no half-written line and no empty segment per failed write; the
next batch opens a fresh segment with the same writer (a transient "disk full" recovers
by itself).
:meth:`FileSink.stop` writes what is queued and closes the segment within its deadline;
what is still queued after it is counted as ``dropped{reason="shutdown"}``.

Flushed lines survive a crash of the process; a power loss can lose what the operating
system had not written yet (the sink does not fsync).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sinks.base import BuiltExchange
from shadoweval.capture_log import CaptureLogWriter
from shadoweval.config import CaptureSettings
from shadoweval.disk import Opener, disk_error_reason
from shadoweval.lifecycle import AsyncLifecycle, LifecycleState
from shadoweval.log_limits import RateLimitedLog

logger = logging.getLogger(__name__)


class LineWriter(Protocol):
    """What the worker thread writes through (:class:`CaptureLogWriter`, or a test fake).

    The contract the sink's counts rest on: :attr:`records_durable` counts the lines
    that reached the file (flushed, or in a segment closed without error); a line
    written after the last successful :meth:`flush` is not on disk until the next one
    succeeds, and is lost when it raises.
    """

    records_durable: int

    def write_line(self, line: bytes) -> None:
        """Append one serialized exchange; raise :class:`OSError` on a disk error,
        :class:`ValueError` for a line that is not one record."""

    def flush(self) -> None:
        """Push what was written to the operating system; raise :class:`OSError` on a
        disk error (the lines since the previous flush are then lost)."""

    def close(self) -> None:
        """Flush and close."""


WriterFactory = Callable[[], LineWriter]

DROP_REASONS = {"disk_full": "file_disk_full", "io_error": "file_io"}
"""``dropped{reason}`` of a line lost to a disk error, by :func:`disk_error_reason`."""


class FileSink(AsyncLifecycle):
    """Capture-log files as an :class:`~shadoweval.capture.sinks.base.ExchangeSink`.

    Args:
        directory: the capture-log directory (created by the worker thread).
        metrics: ``produced{sink="file"}``, ``dropped{reason}``, ``produce_errors``.
        compress: gzip each segment.
        max_segment_bytes: rotate after this many uncompressed bytes.
        max_queue: exchanges waiting for the thread; beyond it ``write()`` drops.
        max_batch: most lines written per flush.
        writer_factory: builds the writer inside the worker thread (a seam for tests;
            default a :class:`CaptureLogWriter` on ``directory``).
        opener: how the default writer opens its segments (a seam for disk-full tests,
            :data:`shadoweval.disk.Opener`; default :meth:`pathlib.Path.open`).
        error_log_interval_s: at most one log line per this many seconds about failing
            writes (the count of the others is in the next line and the metrics).
        clock: the time source of that limit (seconds; injectable for tests).

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
        max_batch: int = 512,
        writer_factory: WriterFactory | None = None,
        opener: Opener | None = None,
        error_log_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self.directory = Path(directory)
        self.metrics = metrics
        self.last_error: str | None = None
        self.compress = compress
        self.max_segment_bytes = max_segment_bytes
        self.max_batch = max_batch
        self.opener = opener
        self.writer_factory: WriterFactory = writer_factory or self._default_writer
        self._errors = RateLimitedLog(logger, interval_s=error_log_interval_s, clock=clock)
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=max_queue)
        # The batch the thread is writing: its size, and whether stop() gave up on it
        # (then stop() counted it as dropped and the thread counts nothing of it).
        self._count_lock = threading.Lock()
        self._inflight = 0
        self._inflight_given_up = False
        self._stop_event = threading.Event()
        self._abandon = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(cls, settings: CaptureSettings, metrics: CaptureMetrics) -> FileSink:
        """A file sink on ``file_sink_directory`` with ``file_sink_compress``."""
        return cls(settings.file_sink_directory, metrics, compress=settings.file_sink_compress)

    def _default_writer(self) -> LineWriter:
        return CaptureLogWriter(
            self.directory,
            compress=self.compress,
            max_segment_bytes=self.max_segment_bytes,
            opener=self.opener,
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

        Exchanges still queued at the deadline, and the batch the thread is stuck writing,
        are counted as dropped (``shutdown``) and the thread is told to stop after its
        current write. Idempotent; never raises.
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
            with self._count_lock:
                left = self.queued + self._inflight
                self._inflight_given_up = True
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
        try:
            while not self._abandon.is_set():
                batch = self._take_batch()
                if not batch:
                    if self._stop_event.is_set() and self._queue.empty():
                        return
                    continue
                with self._count_lock:
                    if self._inflight_given_up:  # stop() gave up before it saw this batch
                        self.metrics.dropped.labels(reason="shutdown").inc(len(batch))
                        return
                    self._inflight = len(batch)
                writer = self._write_batch(writer, batch)
        finally:
            if writer is not None:
                self._close(writer)

    def _take_batch(self) -> list[bytes]:
        """Wait up to 0.1 s for a line, then take what else is queued (``max_batch``)."""
        try:
            first = self._queue.get(timeout=0.1)
        except queue.Empty:
            return []
        batch = [] if first is None else [first]
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        return batch

    def _write_batch(self, writer: LineWriter | None, batch: list[bytes]) -> LineWriter | None:
        """Write and flush one batch; count what reached the file as produced and the
        rest as dropped. Returns the writer to go on with (``None``: make one next time)."""
        durable_before = writer.records_durable if writer is not None else 0
        bad = 0
        try:
            if writer is None:
                writer = self.writer_factory()
            for payload in batch:
                try:
                    writer.write_line(payload)
                except ValueError as exc:  # not one record (a newline inside): skip it
                    logger.error("file sink dropped a malformed record: %s", exc)
                    bad += 1
            writer.flush()
        except OSError as exc:
            # The writer cut its segment back to the last flush; it goes on with a fresh
            # segment (or, for the first write, is made again).
            on_disk = writer.records_durable - durable_before if writer is not None else 0
            self._count_failure(exc, lost=len(batch) - bad - on_disk, written=on_disk, bad=bad)
            return writer
        self.last_error = None
        self._settle(written=len(batch) - bad, bad=bad)
        return writer

    def _settle(self, *, written: int, bad: int, lost: int = 0, reason: str = "") -> None:
        """Count the batch's outcome, unless :meth:`stop` gave up on it (and counted it)."""
        with self._count_lock:
            self._inflight = 0
            if self._inflight_given_up:
                return
            if written:
                self.metrics.produced.labels(sink=self.name).inc(written)
            if bad:
                self.metrics.dropped.labels(reason="sink_failed").inc(bad)
            if lost:
                self.metrics.dropped.labels(reason=reason).inc(lost)

    def _count_failure(self, exc: OSError, *, lost: int, written: int, bad: int) -> None:
        reason = DROP_REASONS[disk_error_reason(exc)]
        self.metrics.produce_errors.labels(reason=reason).inc()
        self._settle(written=written, bad=bad, lost=lost, reason=reason)
        self.last_error = f"write failing: {type(exc).__name__}: {exc}"
        self._errors.log(
            logging.ERROR,
            "file sink cannot write to %s (%s): %d exchanges dropped (%s)",
            self.directory,
            exc,
            lost,
            reason,
            key=reason,
        )

    def _close(self, writer: LineWriter) -> None:
        try:
            writer.close()
        except (OSError, ValueError) as exc:
            self._errors.log(
                logging.ERROR,
                "file sink cannot close its segment in %s: %s",
                self.directory,
                exc,
                key="close",
            )
            self.metrics.produce_errors.labels(reason=DROP_REASONS[disk_error_reason(exc)]).inc()
