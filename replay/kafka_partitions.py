"""The Kafka replay worker's records and partitions: what it reports, what it holds per
fetched record, and its bookkeeping per partition.

Part of :mod:`shadoweval.replay.kafka_worker` (moved here unchanged to keep the modules short;
the guarantees are described there): :class:`WorkerReport`, the in-flight record and replay
handles, and :class:`_PartitionBook`, the worker's base class holding the bookkeeping that
follows its partitions — tracking fetched records and dropping stale ones, persisting
outcomes and dead letters, committing positions, the rebalance (revoke) and the shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from shadoweval.bus import BusConsumer, BusError, BusProducer, BusRecord
from shadoweval.config import WorkerSettings
from shadoweval.records import ReplayTarget
from shadoweval.replay.dead_letter import BadRecord, DeadLetterQueue, record_location
from shadoweval.replay.exchange_replay import OutcomeWriter, ReplayReport
from shadoweval.replay.metrics import WorkerMetrics, partition_label
from shadoweval.replay.offsets import OffsetTracker, Partition
from shadoweval.storage import RejectStage

# The worker's logger: records keep the name they had before the split.
logger = logging.getLogger("shadoweval.replay.kafka_worker")


@dataclass(slots=True)
class WorkerReport(ReplayReport):
    """:class:`ReplayReport` counts plus the Kafka side.

    ``lines_read`` counts records fetched (re-deliveries included); ``dead_letter``:
    records produced to the dead-letter topic, by reason; ``dead_letter_enveloped``: those
    of them written as a bounded envelope, too large to be written whole
    (:func:`shadoweval.replay.dead_letter.envelope_record`); ``cancelled``: replays cancelled
    when the grace period ended (their records are re-delivered); ``committed``: the last
    committed position per ``topic/partition``; ``max_buffered_seen``: the most records
    ever fetched and unfinished at once; ``abandoned``: replays not sent yet, and records
    fetched but not yet dispatched, when their partition was revoked (dropped here, read
    again by the partition's new owner);
    ``session_model_changes``: per target, turns replayed against another candidate
    version than their session's first turn on this worker (:mod:`shadoweval.replay.sessions`).
    """

    dead_letter: Counter[str] = field(default_factory=Counter)
    dead_letter_enveloped: Counter[str] = field(default_factory=Counter)
    cancelled: int = 0
    committed: dict[str, int] = field(default_factory=dict)
    max_buffered_seen: int = 0
    abandoned: int = 0
    session_model_changes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view (the file runner's keys plus the Kafka ones)."""
        return {
            **ReplayReport.as_dict(self),
            "dead_letter": dict(self.dead_letter),
            "dead_letter_enveloped": dict(self.dead_letter_enveloped),
            "cancelled": self.cancelled,
            "committed": dict(sorted(self.committed.items())),
            "max_buffered_seen": self.max_buffered_seen,
            "abandoned": self.abandoned,
            "session_model_changes": dict(self.session_model_changes),
        }


@dataclass(slots=True, eq=False)
class _InFlightRecord:
    """A fetched record until all its outcomes are persisted (or it is dead-lettered)."""

    tp: Partition
    offset: int
    record: BusRecord
    remaining: int = 0
    """Outcomes of this record not yet persisted."""
    epoch: int | None = None
    """Revocations of its partition when it was fetched (see ``_stale``)."""


@dataclass(slots=True, eq=False)
class _Replay:
    """One replay task of this worker: one exchange to one target.

    ``after``: the replay of the same session's previous turn to the same target, awaited
    before this one takes a slot (``None``: nothing to wait for). ``started``: it is being
    sent (from then on a revoke waits for it instead of dropping it). ``finished`` is set
    when the task ends, however it ends.
    """

    key: tuple[str, ReplayTarget]
    session: tuple[str, ReplayTarget] | None
    after: _Replay | None
    started: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class _PartitionBook:
    """Base of :class:`~shadoweval.replay.kafka_worker.KafkaReplayWorker`: the bookkeeping
    that follows its partitions. The attributes are set by the worker's ``__init__``."""

    settings: WorkerSettings
    consumer: BusConsumer
    dlq_producer: BusProducer
    metrics: WorkerMetrics
    report: WorkerReport
    buffered: int
    _writer: OutcomeWriter
    _tracker: OffsetTracker
    _done: dict[ReplayTarget, set[str]]
    _waiting: dict[tuple[str, ReplayTarget], list[_InFlightRecord]]
    _replays: dict[tuple[str, ReplayTarget], _Replay]
    _dead_letters: DeadLetterQueue
    _tasks: set[asyncio.Task[None]]
    _committed: dict[Partition, int]
    _stop: asyncio.Event
    _wake: asyncio.Event
    _reload_done: bool
    _revoking: set[Partition]
    _revocations: Counter[Partition]

    def _epochs(self, records: list[BusRecord]) -> dict[Partition, int | None]:
        """Each fetched partition's revocation count now; ``None`` while it is being
        revoked (its records are stale from the start)."""
        return {r.tp: None if r.tp in self._revoking else self._revocations[r.tp] for r in records}

    def _stale(self, tp: Partition, epoch: int | None) -> bool:
        """The partition was revoked (or is being revoked) since its records were fetched:
        they belong to its new owner, which reads them from the committed position."""
        return epoch is None or tp in self._revoking or self._revocations[tp] != epoch

    def _drop_stale(self, state: _InFlightRecord) -> None:
        """Forget a fetched record of a revoked partition without replaying it (the
        revoke already forgot its offset, so it never counts as done)."""
        self.buffered -= 1
        self.metrics.buffered.set(self.buffered)
        self.report.abandoned += 1
        self._wake.set()

    def _dropped_if_stale(self, state: _InFlightRecord) -> bool:
        """Drop ``state`` when its partition was revoked since the fetch; say so."""
        if not self._stale(state.tp, state.epoch):
            return False
        self._drop_stale(state)
        return True

    def _track(self, record: BusRecord, epoch: int | None = None) -> _InFlightRecord:
        try:
            self._tracker.add(record.tp, record.offset)
        except ValueError:
            # Re-read from an earlier position without a revoke (a seek): start the
            # partition afresh; commits can only move back, never past unfinished work.
            logger.warning("offset %s re-read without a revoke", record_location(record))
            self._tracker.forget([record.tp])
            self._committed.pop(record.tp, None)
            self._tracker.add(record.tp, record.offset)
        self.buffered += 1
        self.report.max_buffered_seen = max(self.report.max_buffered_seen, self.buffered)
        self.metrics.buffered.set(self.buffered)
        return _InFlightRecord(record.tp, record.offset, record, epoch=epoch)

    def _finish(self, state: _InFlightRecord) -> None:
        """A record is finished: everything it produced is persisted."""
        self.buffered -= 1
        self.metrics.buffered.set(self.buffered)
        self._tracker.done(state.tp, state.offset)
        self._wake.set()

    async def _flush(self) -> None:
        """Persist queued outcomes, then finish the records they complete."""
        result = await self._writer.flush()
        self.report.duplicates += result.duplicates
        for outcome in result.written:
            self._done[outcome.target].add(outcome.exchange_id)
            for state in self._waiting.pop((outcome.exchange_id, outcome.target), []):
                state.remaining -= 1
                if state.remaining == 0:
                    self._finish(state)

    async def _dead_letter(self, bad: list[BadRecord]) -> None:
        """Dead-letter and store bad records, then count them by reason.

        A record already rejected for this run (a re-delivery after a crash) is not
        produced, stored or counted again (:class:`shadoweval.replay.dead_letter.DeadLetterQueue`).

        Raises:
            BusError: the dead-letter topic did not acknowledge a record or its envelope
                (one too large to be written whole goes as an envelope; nothing is
                marked finished, so the records are re-delivered after a restart).
        """
        for b, enveloped in await self._dead_letters.send(bad):
            if b.stage is RejectStage.CAPTURE_LOG:  # a replay-stage one's exchange is stored
                self.report.rejected[b.reason] += 1
            self.report.dead_letter[b.reason] += 1
            self.metrics.dead_letter.labels(reason=b.reason).inc()
            if enveloped:
                self.report.dead_letter_enveloped[b.reason] += 1
                self.metrics.dead_letter_enveloped.labels(reason=b.reason).inc()

    async def _commit(self, partitions: Sequence[Partition] | None = None) -> None:
        """Commit the committable positions that moved (of ``partitions``, or all).

        A failed commit is logged and retried at the next interval (the records are
        re-delivered if it never succeeds; outcomes are idempotent).
        """
        wanted = {
            tp: offset
            for tp, offset in self._tracker.committable().items()
            if self._committed.get(tp) != offset and (partitions is None or tp in partitions)
        }
        if not wanted:
            return
        try:
            await self.consumer.commit(wanted)
        except BusError as exc:
            logger.warning("commit of %s failed (retried later): %s", wanted, exc)
            return
        self._committed.update(wanted)
        self.metrics.set_committed(wanted)
        for tp, offset in wanted.items():
            self.report.committed[partition_label(tp)] = offset

    async def _on_revoked(self, partitions: list[Partition]) -> None:
        """Rebalance: drop the replays of these partitions not sent yet, let those being
        sent finish (up to ``grace_period_s``), persist what is finished, commit it,
        forget the partitions."""
        logger.info("partitions revoked: %s", [partition_label(tp) for tp in partitions])
        revoked = set(partitions)
        self._revoking |= revoked  # records of these fetched from now on are stale
        dropped: list[_InFlightRecord] = []
        try:
            dropped = await self._abandon_unsent(revoked)
            await self._await_sending(revoked)
            await self._flush()
            await self._commit(partitions)
        finally:
            self._tracker.forget(partitions)
            self._revoking -= revoked
            for tp in partitions:
                self._committed.pop(tp, None)
                self._revocations[tp] += 1  # records fetched before now are stale
            # Forgotten first: a dropped record must never count as done for a commit.
            for state in dropped:
                state.remaining -= 1
                if state.remaining == 0:
                    self._finish(state)
            # Another worker may have replayed these partitions' records meanwhile.
            self._reload_done = True

    def _of(self, revoked: set[Partition], key: tuple[str, ReplayTarget]) -> bool:
        """Every record waiting for replay ``key`` is of a revoked partition."""
        waiting = self._waiting.get(key, [])
        return bool(waiting) and all(state.tp in revoked for state in waiting)

    async def _abandon_unsent(self, revoked: set[Partition]) -> list[_InFlightRecord]:
        """Cancel the replays of ``revoked`` partitions that have not been sent; return
        the records that waited for them (one entry per replay dropped). A co-timed pair
        is one task of two replays: it is dropped only when both may be."""
        unsent: dict[asyncio.Task[None], list[tuple[str, ReplayTarget]]] = {}
        for key, handle in self._replays.items():
            if not handle.started and handle.task is not None:
                unsent.setdefault(handle.task, []).append(key)
        cancelled: list[asyncio.Task[None]] = []
        dropped: list[_InFlightRecord] = []
        for task, keys in unsent.items():
            if not all(self._of(revoked, key) for key in keys):
                continue
            task.cancel()
            cancelled.append(task)
            for key in keys:
                dropped.extend(self._waiting.pop(key))
        if cancelled:
            await asyncio.gather(*cancelled, return_exceptions=True)
            abandoned = sum(len(unsent[task]) for task in cancelled)
            self.report.abandoned += abandoned
            logger.info(
                "%d replay(s) of revoked partitions were not sent yet; the new owner reads "
                "them again",
                abandoned,
            )
        return dropped

    async def _await_sending(self, revoked: set[Partition]) -> None:
        """Wait up to ``grace_period_s`` for the replays of ``revoked`` partitions that
        are being sent (their outcomes are then persisted and committed before the
        partitions go to another worker)."""
        sending = {
            handle.task
            for key, handle in self._replays.items()
            if handle.started and handle.task is not None and self._of(revoked, key)
        }
        if sending:
            _, late = await asyncio.wait(sending, timeout=self.settings.grace_period_s)
            if late:
                logger.warning(
                    "%d replay(s) of revoked partitions still running after %.1f s; the "
                    "new owner may send them again (their outcome is stored once)",
                    len(late),
                    self.settings.grace_period_s,
                )

    async def _shutdown(self, *, grace_s: float, failing: bool) -> None:
        """Stop fetching; let replays finish within ``grace_s``; cancel the rest; persist,
        commit and close. When ``failing`` (another error propagates), an error while
        persisting is logged instead of raised."""
        self._stop.set()
        deadline = time.monotonic() + grace_s
        while self._tasks and time.monotonic() < deadline:
            step = min(self.settings.commit_interval_s, deadline - time.monotonic())
            await asyncio.wait(set(self._tasks), timeout=max(step, 0.0))
            with contextlib.suppress(Exception):
                await self._flush()
                await self._commit()
        pending = set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            self.report.cancelled += len(pending)
            logger.warning(
                "%d replay(s) cancelled after the %.1f s grace period; their records stay "
                "uncommitted and are re-delivered",
                len(pending),
                grace_s,
            )
        try:
            await asyncio.shield(self._flush())
            await self._commit()
        except Exception:
            if not failing:
                raise
            logger.exception("could not persist and commit while stopping")
        finally:
            await self.consumer.stop()
            await self.dlq_producer.stop()
