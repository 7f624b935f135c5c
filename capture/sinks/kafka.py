"""The Kafka sink: exchanges to a topic, through a bounded disk spool when the broker fails.

``write()`` appends to an in-memory deque and returns: it never awaits the broker or the
disk. A background *sender* task takes batches of up to ``batch_max_records`` and routes
them according to the sink's mode:

* **DIRECT** — the batch goes to the broker (:meth:`BusProducer.send_many`). The first
  record that is not acknowledged (timeout, broker down) goes to the spool together with
  every record after it, in order, and the sink switches to SPOOLING
  (``shadoweval_capture_kafka_spooling = 1``; ``produce_errors{reason}`` counted).
* **SPOOLING** — new batches are appended to the :class:`~shadoweval.capture.sinks.spool.DiskSpool`,
  never sent directly, so the order of the exchanges is kept. A *drainer* task re-sends
  from the spool head in order and commits the spool cursor only after the broker has
  acknowledged; after a failure it probes every ``retry_interval_s`` with one record. When
  the spool is empty the sink switches back to DIRECT. The only waits between batches are
  those after a failure (broker unreachable, a send not acknowledged, a spool read that
  failed): once the broker acknowledges, the spool drains batch after batch without a
  pause, also while the disk is full — a cursor that cannot be saved keeps the position
  in memory (:meth:`DiskSpool.commit`, ``shadoweval_capture_spool_cursor_unsaved = 1``),
  and the drainer saves it again every ``retry_interval_s`` until it succeeds.

The empty-check + switch to DIRECT and every spool append in SPOOLING happen under one
:class:`asyncio.Lock`; only the sender switches to SPOOLING and only the drainer switches
back, so DIRECT always means "the spool is empty" and nothing is reordered or lost.
Spool I/O and oversize handling run in threads (:func:`asyncio.to_thread`).

Delivery is **at-least-once**. A record whose acknowledgement timed out may still be
delivered later by aiokafka's own retries *and* be re-sent from the spool; a record sent
in the same batch after a failed one is spooled (and re-sent) even if it was acknowledged;
a crash between an acknowledgement and the cursor commit re-sends after restart. Consumers
deduplicate on ``exchange_id`` (DESIGN §6).

Order: per key (hence per partition) the first appearance of each exchange follows write
order, with two exceptions. An exchange the broker refused for its size is sent (smaller)
right after the refusal. And without an idempotent producer (Tansu refuses one), a batch
that the client library fails while a later one of the same partition succeeds leaves a
gap that the spool fills later; :meth:`BusProducer.send_many` can also skip one record
whose enqueue timed out and enqueue the next ones. The drainer makes this unlikely by
probing a failed broker with one record before sending full batches; when it happens a
warning is logged.

Records over the message size go through :mod:`shadoweval.capture.sinks.oversize` (drop the raw
body, else offload to ``<spool dir>/offload/``, else drop). Every loss is counted in
``shadoweval_capture_dropped_total{reason}``: ``spool_full``, ``spool_io`` (the spool's
disk failed), ``oversize``/``oversize_undecodable``/``offload_full``/``offload_io``,
``sink_backlog`` (the in-memory deque is over its bound), ``shutdown`` (written after
:meth:`KafkaSink.stop`), ``spool_corrupt`` (torn spool tails found at start, one per tail),
``sink_failed`` (an unexpected error in the sink itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from shadoweval.bus.errors import BusError
from shadoweval.bus.producer import BusProducer, Delivery, OutgoingRecord, RecordTooLargeError
from shadoweval.capture.metrics import CaptureMetrics
from shadoweval.capture.sinks.base import BuiltExchange
from shadoweval.capture.sinks.kafka_producer import SCHEMA_HEADER as SCHEMA_HEADER
from shadoweval.capture.sinks.kafka_producer import ProducerFactory as ProducerFactory
from shadoweval.capture.sinks.kafka_producer import ProducerLike as ProducerLike
from shadoweval.capture.sinks.kafka_producer import SinkMode as SinkMode
from shadoweval.capture.sinks.kafka_producer import Sleep as Sleep
from shadoweval.capture.sinks.kafka_producer import _reason, _Rec
from shadoweval.capture.sinks.oversize import FitResult, OversizeHandler, message_limit_bytes
from shadoweval.capture.sinks.spool import DiskSpool, SpoolError
from shadoweval.config import KafkaSettings, SpoolSettings
from shadoweval.disk import Opener
from shadoweval.lifecycle import AsyncLifecycle, LifecycleState
from shadoweval.log_limits import RateLimitedLog

logger = logging.getLogger(__name__)


class KafkaSink(AsyncLifecycle):
    """Exchanges to ``KafkaSettings.topic`` with a disk spool (an :class:`ExchangeSink`).

    Args:
        kafka: topic, bootstrap servers, ``max_message_bytes``, timeouts.
        spool: spool directory, ``max_bytes``, ``segment_bytes``, ``retry_interval_s``.
        metrics: where produced/spooled/dropped counts and spool gauges go.
        producer_factory: builds the producer from ``kafka`` (a seam for tests).
        batch_max_records: records per ``send_many`` and per spool read.
        max_pending_records, max_pending_bytes: bound on exchanges written but not yet
            taken by the sender; beyond it ``write()`` drops (``sink_backlog``).
        spool_fsync: fsync each spool append (see :class:`DiskSpool`).
        spool_opener: opens the files of the spool and of the offload directory (a seam
            for disk-full tests, :data:`shadoweval.disk.Opener`).
        sleep: how the drainer waits ``retry_interval_s`` after a failure (a seam for
            tests: count the waits).

    Kafka message: key ``BuiltExchange.key``, value the payload, header ``schema_version``.
    Use ``async with`` or :meth:`start`/:meth:`stop` (:mod:`shadoweval.lifecycle`: started
    once, not restartable).
    """

    name = "kafka"

    def __init__(
        self,
        kafka: KafkaSettings,
        spool: SpoolSettings,
        metrics: CaptureMetrics,
        *,
        producer_factory: ProducerFactory = BusProducer,
        batch_max_records: int = 500,
        max_pending_records: int = 10_000,
        max_pending_bytes: int = 64 * 1024 * 1024,
        spool_fsync: bool = False,
        spool_opener: Opener | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.kafka = kafka
        self.spool_settings = spool
        self.metrics = metrics
        self.producer_factory = producer_factory
        self.batch_max_records = batch_max_records
        self.max_pending_records = max_pending_records
        self.max_pending_bytes = max_pending_bytes
        self.spool_fsync = spool_fsync
        self.spool_opener = spool_opener
        self._sleep = sleep
        self._errors = RateLimitedLog(logger, interval_s=10.0, clock=time.monotonic)
        self._mode = SinkMode.SPOOLING
        self._pending: deque[_Rec] = deque()
        self._pending_bytes = 0
        self._inflight: list[_Rec] = []
        self._closing = False
        self._connected = False
        self._spool_full = False
        self._lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        self._drain_wanted = asyncio.Event()
        self._spool: DiskSpool | None = None
        self._producer: ProducerLike | None = None
        self._oversize: OversizeHandler | None = None
        self._sender: asyncio.Task[None] | None = None
        self._drainer: asyncio.Task[None] | None = None
        header_bytes = len(SCHEMA_HEADER[0]) + len(SCHEMA_HEADER[1])
        self._limit_base = message_limit_bytes(kafka.max_message_bytes, b"", header_bytes)

    # ------------------------------------------------------------------ status

    @property
    def mode(self) -> SinkMode:
        """DIRECT or SPOOLING (SPOOLING before :meth:`start`)."""
        return self._mode

    @property
    def spool(self) -> DiskSpool | None:
        """The open spool (``None`` before :meth:`start` and after :meth:`stop`)."""
        return self._spool

    @property
    def pending(self) -> int:
        """Exchanges written and not yet taken by the sender."""
        return len(self._pending)

    def status(self) -> str:
        """One line for ``/readyz``: the mode and what the spool holds."""
        spool = self.spool
        held = f"{spool.record_count} records, {spool.size_bytes} bytes" if spool else "unopened"
        if self._mode is SinkMode.DIRECT:
            return f"direct to the broker; spool {held}"
        return f"spooling (broker unreachable or slow); spool {held}"

    def ready(self) -> bool:
        """True when started and DIRECT, or started and the spool still has room.

        "No room" means the last spool append was refused for lack of space and nothing
        has been drained since.
        """
        started = self.lifecycle_state is LifecycleState.STARTED and self._producer is not None
        if not started or self._closing:
            return False
        return self._mode is SinkMode.DIRECT or not self._spool_full

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the spool, try to connect, start the sender and drainer tasks.

        Never fails because the broker is down: without a connection, or with records
        left in the spool by a previous process, the sink starts in SPOOLING and the
        drainer keeps connecting every ``retry_interval_s``. Waits at most
        ``send_timeout_s`` for the broker.

        Raises:
            SpoolError: the spool directory is locked by another process or unusable (the
                sink stays unstarted).
            LifecycleError: called twice, or after :meth:`stop`.
        """
        with self._starting():
            await self._open()

    async def _open(self) -> None:
        directory = Path(self.spool_settings.directory)
        spool = await asyncio.to_thread(
            DiskSpool,
            directory,
            max_bytes=self.spool_settings.max_bytes,
            segment_bytes=self.spool_settings.segment_bytes,
            fsync=self.spool_fsync,
            opener=self.spool_opener,
        )
        self._spool = spool
        if spool.corrupt_tails:
            self.metrics.dropped.labels(reason="spool_corrupt").inc(spool.corrupt_tails)
        self._oversize = OversizeHandler(
            self._limit_base,
            directory / "offload",
            max_offload_bytes=self.spool_settings.max_bytes,
            opener=self.spool_opener,
        )
        self._update_spool_gauges()
        self._producer = self.producer_factory(self.kafka)
        await self._try_connect()
        if not spool.empty:
            logger.info(
                "spool %s holds %d exchanges from a previous run; re-sending them first",
                directory,
                spool.record_count,
            )
        self._set_mode(SinkMode.DIRECT if self._connected and spool.empty else SinkMode.SPOOLING)
        self._sender = asyncio.create_task(self._send_loop(), name="kafka-sink-sender")
        self._drainer = asyncio.create_task(self._drain_loop(), name="kafka-sink-drainer")

    async def stop(self, deadline_s: float | None = None) -> None:
        """Send what is pending within ``deadline_s`` (default ``send_timeout_s``), spool
        the rest, then disconnect.

        Exchanges still in memory when the deadline passes are appended to the spool (a
        restart re-sends them); the producer's own stop is bounded by ``send_timeout_s``.
        Idempotent; never raises.
        """
        if not self._stopping():
            if self._pending:  # written but never started: nothing will send them
                self.metrics.dropped.labels(reason="shutdown").inc(len(self._pending))
                self._pending.clear()
            return
        if deadline_s is None:
            deadline_s = self.kafka.send_timeout_s
        self._closing = True
        self._wakeup.set()
        sender = self._sender
        if sender is not None:
            try:
                await asyncio.wait_for(asyncio.shield(sender), timeout=max(deadline_s, 0.0))
            except TimeoutError:
                sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        await self._cancel(self._drainer)
        leftover = [*self._inflight, *self._pending]
        self._inflight = []
        self._pending.clear()
        self._pending_bytes = 0
        if leftover:
            logger.warning("kafka sink stopping: %d exchanges go to the spool", len(leftover))
            await self._spool_append(leftover)
        if self._producer is not None:
            try:
                await self._producer.stop()
            except Exception:
                logger.warning("producer stop failed", exc_info=True)
        self._update_spool_gauges()
        if self._spool is not None:
            await asyncio.to_thread(self._spool.close)  # a last try to save the cursor
            self.metrics.spool_cursor_unsaved.set(0 if self._spool.cursor_saved else 1)
            self._spool = None

    async def _cancel(self, task: asyncio.Task[None] | None) -> None:
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # ------------------------------------------------------------------ write path

    async def write(self, built: BuiltExchange) -> None:
        """Queue one exchange for the sender: O(1), never awaits, never raises.

        Drops (counted) when the sink is stopping (``shutdown``) or the in-memory backlog
        is over ``max_pending_records``/``max_pending_bytes`` (``sink_backlog``).
        """
        try:
            if self._closing or self._lifecycle_state is LifecycleState.STOPPED:
                self.metrics.dropped.labels(reason="shutdown").inc()
                return
            size = len(built.payload)
            if (
                len(self._pending) >= self.max_pending_records
                or self._pending_bytes + size > self.max_pending_bytes
            ):
                self.metrics.dropped.labels(reason="sink_backlog").inc()
                return
            self._pending.append(_Rec(built.key, built.payload))
            self._pending_bytes += size
            self._wakeup.set()
        except Exception:  # never raise into the capture path
            logger.exception("kafka sink write failed")
            self.metrics.dropped.labels(reason="sink_failed").inc()

    async def _send_loop(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            batch = [
                self._pending.popleft()
                for _ in range(min(self.batch_max_records, len(self._pending)))
            ]
            self._pending_bytes -= sum(len(r.value) for r in batch)
            self._inflight = batch
            try:
                batch = await self._fit_batch(batch)
                self._inflight = batch
                await self._route(batch)
            except Exception:  # a bug must not stop the sender: count and go on
                logger.exception("kafka sink sender failed on a batch of %d", len(batch))
                self.metrics.dropped.labels(reason="sink_failed").inc(len(batch))
            self._inflight = []

    async def _fit_batch(self, batch: list[_Rec]) -> list[_Rec]:
        """Shrink the records over the message size (in a thread); drop what cannot fit."""
        if all(len(r.value) + len(r.key) <= self._limit_base for r in batch):
            return batch
        out: list[_Rec] = []
        for rec in batch:
            limit = self._limit_base - len(rec.key)
            if len(rec.value) <= limit:
                out.append(rec)
                continue
            result = await asyncio.to_thread(self._fit, rec, False)
            if result.payload is not None:
                out.append(_Rec(rec.key, result.payload))
        return out

    def _fit(self, rec: _Rec, rejected: bool) -> FitResult:
        """Run the oversize steps for one record and count the outcome (thread-safe)."""
        assert self._oversize is not None
        limit = self._limit_base - len(rec.key)
        result = self._oversize.fit(rec.value, rejected=rejected, limit_bytes=limit)
        if result.action == "dropped":
            self.metrics.dropped.labels(reason=result.reason).inc()
        elif result.action != "as_is":
            self.metrics.oversize.labels(action=result.action).inc()
        return result

    async def _route(self, batch: list[_Rec]) -> None:
        if not batch:
            return
        async with self._lock:
            if self._mode is SinkMode.SPOOLING:
                await self._spool_append(batch)
                self._drain_wanted.set()
                return
        try:
            acked, error = await self._deliver(batch)
        except Exception as exc:  # a producer that raises: keep the records in the spool
            logger.exception("kafka producer raised")
            acked, error = 0, BusError(f"producer raised: {exc!r}")
        if acked == len(batch):
            return
        reason = _reason(error) if error is not None else "broker_error"
        self.metrics.produce_errors.labels(reason=reason).inc(len(batch) - acked)
        logger.warning(
            "kafka produce failed (%s: %s); spooling %d exchanges",
            reason,
            error,
            len(batch) - acked,
        )
        async with self._lock:
            self._set_mode(SinkMode.SPOOLING)
            await self._spool_append(batch[acked:])
            self._drain_wanted.set()

    # ------------------------------------------------------------------ delivery

    def _outgoing(self, rec: _Rec) -> OutgoingRecord:
        return OutgoingRecord(value=rec.value, key=rec.key, headers=(SCHEMA_HEADER,))

    async def _deliver(self, recs: Sequence[_Rec]) -> tuple[int, BusError | None]:
        """Send ``recs`` in order; return the acknowledged prefix length and the error
        that ended it (``None`` when all were acknowledged or resolved as oversize)."""
        assert self._producer is not None
        results = await self._producer.send_many(
            self.kafka.topic, [self._outgoing(r) for r in recs]
        )
        for i, result in enumerate(results):
            if isinstance(result, Delivery):
                self.metrics.produced.labels(sink=self.name).inc()
                continue
            if isinstance(result, RecordTooLargeError):
                error = await self._deliver_oversize(recs[i])
                if error is None:
                    continue
                self._warn_gap(results, i)
                return i, error
            self._warn_gap(results, i)
            return i, result
        return len(recs), None

    def _warn_gap(self, results: Sequence[Delivery | BusError], failed_at: int) -> None:
        """Log records acknowledged after an unacknowledged one (order may differ there)."""
        later = sum(isinstance(r, Delivery) for r in results[failed_at + 1 :])
        if later:
            logger.warning(
                "%d records were acknowledged after an unacknowledged one; they are sent "
                "again from the spool (duplicates), and for their keys the first delivery "
                "may precede the earlier record's",
                later,
            )

    async def _deliver_oversize(self, rec: _Rec) -> BusError | None:
        """Shrink a record the producer or broker refused for its size and send it.

        Returns ``None`` when it was delivered or dropped (counted), else the retriable
        error that stopped it. At most three shrink steps, so it never loops forever.
        """
        assert self._producer is not None
        for _ in range(3):
            result = await asyncio.to_thread(self._fit, rec, True)
            if result.payload is None:
                return None
            rec = _Rec(rec.key, result.payload)
            (outcome,) = await self._producer.send_many(self.kafka.topic, [self._outgoing(rec)])
            if isinstance(outcome, Delivery):
                self.metrics.produced.labels(sink=self.name).inc()
                return None
            if not isinstance(outcome, RecordTooLargeError):
                return outcome
        self.metrics.dropped.labels(reason="oversize").inc()
        return None

    # ------------------------------------------------------------------ spool

    async def _spool_append(self, recs: Sequence[_Rec]) -> None:
        """Append to the spool (in a thread); count what does not fit or fails."""
        spool = self._spool
        if not recs or spool is None:
            return
        try:
            n = await asyncio.to_thread(spool.append, [(r.key, r.value) for r in recs])
        except (SpoolError, ValueError) as exc:
            self._errors.log(
                logging.ERROR,
                "spool append failed, %d exchanges dropped: %s",
                len(recs),
                exc,
                key="spool_append",
            )
            self.metrics.dropped.labels(reason="spool_io").inc(len(recs))
            return
        finally:
            self._update_spool_gauges()
        if n:
            self.metrics.spooled.inc(n)
        if n < len(recs):
            self._spool_full = True
            logger.warning(
                "spool full (%d of %d bytes): %d exchanges dropped",
                spool.size_bytes,
                spool.max_bytes,
                len(recs) - n,
            )
            self.metrics.dropped.labels(reason="spool_full").inc(len(recs) - n)

    async def _drain_loop(self) -> None:
        """Re-send the spool head in order while SPOOLING; switch to DIRECT when empty.

        Each spooling episode starts with a one-record probe (the broker just failed, or a
        previous run left records): a full batch sent to a broker that is still hung could
        leave a gap (see :meth:`BusProducer.send_many`), which would reorder a key.
        """
        spool = self._spool
        assert spool is not None
        probe = 1
        while True:
            if self._mode is SinkMode.DIRECT:
                probe = 1
                self._drain_wanted.clear()
                if spool.cursor_saved:
                    await self._drain_wanted.wait()
                else:  # drained while the cursor could not be saved: keep trying
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._drain_wanted.wait(), self.spool_settings.retry_interval_s
                        )
                    await self._save_cursor(spool)
                continue
            if not self._connected and not await self._try_connect():
                await self._sleep(self.spool_settings.retry_interval_s)
                continue
            async with self._lock:
                if spool.empty:
                    self._set_mode(SinkMode.DIRECT)
                    logger.info("spool drained; producing directly again")
                    continue
            recs: list[_Rec] = []
            acked, error, failed = 0, None, False
            try:
                recs = [_Rec(k, v) for k, v in await asyncio.to_thread(spool.peek, probe)]
                acked, error = await self._deliver(recs)
                if acked:
                    # A cursor that cannot be saved (disk full) is not a failure: the
                    # records are consumed in memory and the save is retried.
                    await asyncio.to_thread(spool.commit, acked)
                    self._spool_full = False
            except SpoolError as exc:
                self._errors.log(
                    logging.ERROR, "spool read/commit failed: %s", exc, key="spool_read"
                )
                failed = True
            except Exception:  # a bug or a raising producer must not end the drainer
                logger.exception("kafka sink drainer failed; retrying")
                failed = True
            finally:
                self._update_spool_gauges()
            if recs and acked == len(recs) and error is None and not failed:
                probe = self.batch_max_records
                continue
            if error is not None:
                self.metrics.produce_errors.labels(reason=_reason(error)).inc(len(recs) - acked)
            probe = 1
            await self._sleep(self.spool_settings.retry_interval_s)

    async def _save_cursor(self, spool: DiskSpool) -> None:
        """Retry saving the spool's cursor (in a thread); never raises."""
        try:
            await asyncio.to_thread(spool.save_cursor)
        except ValueError:  # closed meanwhile (stop)
            return
        finally:
            self._update_spool_gauges()

    async def _try_connect(self) -> bool:
        """Start the producer; ``False`` (counted, logged) when the broker is not there."""
        if self._connected:
            return True
        assert self._producer is not None
        try:
            await self._producer.start()
        except Exception as exc:  # BusError, or whatever a producer seam raises
            self.metrics.produce_errors.labels(reason="connect").inc()
            logger.warning(
                "kafka %s unreachable (%s); spooling and retrying every %.1f s",
                self.kafka.bootstrap_servers,
                exc,
                self.spool_settings.retry_interval_s,
            )
            return False
        self._connected = True
        self.metrics.kafka_idempotent.set(1 if self._producer.idempotent else 0)
        return True

    def _set_mode(self, mode: SinkMode) -> None:
        if mode is not self._mode:
            logger.info("kafka sink mode %s -> %s", self._mode.value, mode.value)
        self._mode = mode
        self.metrics.sink_spooling.set(1 if mode is SinkMode.SPOOLING else 0)

    def _update_spool_gauges(self) -> None:
        spool = self._spool
        if spool is not None:
            self.metrics.spool_bytes.set(spool.size_bytes)
            self.metrics.spool_records.set(spool.record_count)
            self.metrics.spool_cursor_unsaved.set(0 if spool.cursor_saved else 1)
