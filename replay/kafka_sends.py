"""The Kafka replay worker's sends: one replay task per scheduler item, single or co-timed.

Part of :mod:`shadoweval.replay.kafka_worker` (the guarantees are described there):
:class:`_Sends`, the worker's base class that starts the replay tasks of a dispatched
exchange and keeps what they give.

An item is one send, or the candidate's and the baseline replica's sends of one exchange as
a :class:`~shadoweval.replay.co_timed.CoTimedPair` (issue 29 item 2, the same pairs as a
capture-log replay: :func:`~shadoweval.replay.co_timed.co_time`). A pair's task waits for
the previous turn of its session on *both* targets and for both targets' warm-up, takes
two concurrency slots (one at ``concurrency`` 1, where the two sends go back to back) and
two pacer releases, then starts both sends together in the order
:func:`~shadoweval.replay.co_timed.candidate_first` draws from the run id; both outcomes
carry ``co_timed``. Each send keeps its own handle (:class:`_Replay`), so the session
order, the revoke and the duplicate bookkeeping stay per (exchange, target).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from shadoweval.records import Exchange, ReplayErrorKind, ReplayOutcome, ReplayTarget
from shadoweval.replay.co_timed import ReplayItem, send_item
from shadoweval.replay.dead_letter import BadRecord, record_location
from shadoweval.replay.driver import ReplayDriver
from shadoweval.replay.exchange_replay import PreparedReplay, ReplayFailure, TargetSpec
from shadoweval.replay.kafka_partitions import _PartitionBook, _Replay
from shadoweval.replay.scheduler import StartMeter
from shadoweval.replay.sessions import SessionVersionTracker
from shadoweval.storage import RejectStage

# The worker's logger: records keep the name they had before the split.
logger = logging.getLogger("shadoweval.replay.kafka_worker")


class _Sends(_PartitionBook, ReplayDriver):
    """Base of :class:`~shadoweval.replay.kafka_worker.KafkaReplayWorker`: its replay
    tasks. The attributes are set by the worker's ``__init__``."""

    _slots: asyncio.Semaphore
    _slot_pairs: asyncio.Lock
    _meter: StartMeter
    _session_tail: dict[tuple[str, ReplayTarget], _Replay]
    _versions: SessionVersionTracker
    _in_flight: int
    _sent: int
    _failure: BaseException | None

    def _launch(self, item: ReplayItem) -> None:
        """Start the task of one item: a handle per send, chained after its session's
        previous turn to the same target."""
        sends = (item,) if isinstance(item, PreparedReplay) else item.sends
        handles: list[_Replay] = []
        for prepared in sends:
            exchange, target = prepared.exchange, prepared.spec.target
            session = (
                None if exchange.session_key_hash is None else (exchange.session_key_hash, target)
            )
            # Turns of a session reach this point in partition (capture) order: each one
            # waits for the replay of the turn dispatched before it.
            after = None if session is None else self._session_tail.get(session)
            handle = _Replay((exchange.exchange_id, target), session, after)
            if session is not None:
                self._session_tail[session] = handle
            self._replays[handle.key] = handle
            handles.append(handle)
        task = asyncio.create_task(self._replay(item, handles))
        for handle in handles:
            handle.task = task
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        """A task ended: wake the loop; the first exception of one stops the worker."""
        self._tasks.discard(task)
        self._wake.set()
        if not task.cancelled() and task.exception() is not None and self._failure is None:
            self._failure = task.exception()
            self._stop.set()

    @contextlib.asynccontextmanager
    async def _taking(self, slots: int) -> AsyncIterator[None]:
        """Hold ``slots`` concurrency slots. A pair takes its two under a lock: two pairs
        each holding one slot of the last two would wait for each other forever."""
        taken = 0
        try:
            if slots == 1:
                await self._slots.acquire()
                taken = 1
            else:
                async with self._slot_pairs:
                    for _ in range(slots):
                        await self._slots.acquire()
                        taken += 1
            yield
        finally:
            for _ in range(taken):
                self._slots.release()

    async def _replay(self, item: ReplayItem, handles: list[_Replay]) -> None:
        """Send one item when its sessions' previous turns and its targets' warm-up are
        done, and keep each outcome (a send that raised: :meth:`_replay_failed`)."""
        dispatch = item.dispatch
        sends = (item,) if isinstance(item, PreparedReplay) else item.sends
        try:
            for handle in handles:
                if handle.after is not None:
                    await handle.after.finished.wait()  # the session's previous turn is done
            if dispatch.ready is not None:
                await dispatch.ready()  # the targets' warm-up requests have all completed
            slots = min(dispatch.requests, self.concurrency)
            async with self._taking(slots):
                releases = [await self.pacer.wait(dispatch.at) for _ in range(dispatch.requests)]
                for _ in releases:
                    self._meter.record(releases[-1], dispatch)
                for handle in handles:
                    handle.started = True
                self._in_flight += slots
                self.metrics.in_flight.set(self._in_flight)
                try:
                    sent = await send_item(self._replayer, item)
                finally:
                    self._in_flight -= slots
                    self.metrics.in_flight.set(self._in_flight)
            if any(isinstance(o, ReplayOutcome) and o.co_timed for _, o in sent):
                self.report.co_timed += 1
            for prepared, outcome in sent:
                if isinstance(outcome, ReplayFailure):
                    await self._replay_failed(prepared.exchange, prepared.spec, outcome)
                    continue
                self._note_version(prepared.exchange, outcome)
                self._queue(outcome)
        finally:
            for prepared, handle in zip(sends, handles, strict=True):
                self._end(prepared, handle)

    def _end(self, prepared: PreparedReplay, handle: _Replay) -> None:
        """A send's task ended, however it ended: release what waits for it."""
        if prepared.warmup and not handle.started:
            # dropped before it was sent: measured requests must not wait for it
            self._replayer.barrier.completed(prepared.spec.target)
        handle.after = None  # a long session does not keep a chain of handles alive
        handle.finished.set()
        if self._replays.get(handle.key) is handle:
            del self._replays[handle.key]
        if handle.session is not None and self._session_tail.get(handle.session) is handle:
            del self._session_tail[handle.session]

    def _note_version(self, exchange: Exchange, outcome: ReplayOutcome) -> None:
        """Count a turn that met another candidate version than its session's first."""
        change = self._versions.observe(exchange, outcome)
        if change is None:
            return
        self.report.session_model_changes[outcome.target.value] += 1
        self.metrics.session_model_changes.labels(target=outcome.target.value).inc()
        logger.warning(
            "session %s: exchange %s was replayed to %s against %r, its session's first "
            "turn against %r",
            change.session_key_hash,
            change.exchange_id,
            outcome.target.value,
            change.version,
            change.first_version,
        )

    async def _replay_failed(
        self, exchange: Exchange, spec: TargetSpec, failure: ReplayFailure
    ) -> None:
        """A replay raised: dead-letter every record waiting for it (stage ``replay``: the
        exchange is stored and counts as captured), then finish them — no outcome is
        stored, the partition moves on."""
        # Popped first: a delivery of the same exchange fetched meanwhile is replayed (and
        # kept) on its own instead of being finished without a dead letter.
        waiting = self._waiting.pop((exchange.exchange_id, spec.target), [])
        self.report.replay_failed[failure.reason] += len(waiting)
        letters = []
        for state in waiting:
            location = record_location(state.record)
            detail = (
                f"{location}: the replay of exchange {exchange.exchange_id} to "
                f"{spec.target.value} failed: {failure.detail}"
            )
            logger.warning("%s", detail)
            text = (state.record.value or b"").decode("utf-8", errors="replace")
            letters.append(
                BadRecord(state.record, failure.reason, detail, text, stage=RejectStage.REPLAY)
            )
        await self._dead_letter(letters)
        for state in waiting:
            state.remaining -= 1
            if state.remaining == 0:
                self._finish(state)

    def _queue(self, outcome: ReplayOutcome) -> None:
        self.report.count_outcome(outcome)
        if outcome.error_kind is not ReplayErrorKind.SKIPPED:
            self._sent += 1
        kind = "ok" if outcome.error_kind is None else outcome.error_kind.value
        self.metrics.replayed.labels(target=outcome.target.value, outcome=kind).inc()
        self._writer.add(outcome)
