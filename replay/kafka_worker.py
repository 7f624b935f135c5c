"""A replay worker that consumes exchanges from Kafka (DESIGN §2: the scale-out path).

Flow per fetched record (topic ``shadoweval.exchanges.v1``, value = one capture-log line)::

    getmany ──► decode ──► undecodable: dead-letter topic + rejected record ─────────► done
                  │
                  ▼ offloaded stub? read offload_ref (else: skipped, offload_unavailable)
               request cannot be built, id reused with other content, any exception:
                  │                       dead-letter topic + rejected record ──────► done
                  ▼
               store exchange + run membership (headers redacted)
                  ▼
               per sampled target not done yet: replay (bounded concurrency, rate;
                  replica samples co-timed with the candidate)
                  ▼                   raised instead: dead letter (stage replay) ─────► done
               outcomes written in batches (idempotent) ──► record done when all its
               (a stored environment failure replaced)      outcomes are persisted
    every commit_interval_s: commit OffsetTracker.committable()

Decoding and the dead-letter topic are in :mod:`shadoweval.replay.dead_letter`; commit positions in
:mod:`shadoweval.replay.offsets`; the report and the bookkeeping per partition (tracking,
persisting, committing, revoking, shutting down) in :mod:`shadoweval.replay.kafka_partitions`;
the replay tasks (single sends and co-timed pairs) in :mod:`shadoweval.replay.kafka_sends`.

Guarantees (DESIGN §6; reference failure cases 7, 20):

* **Nothing stuck.** Whatever a record holds, it ends as stored outcomes or as a dead
  letter with its reason (:mod:`shadoweval.replay.dead_letter`); the worker goes on with the next
  record and the partition's offset moves past it. Only the infrastructure stops the
  worker: the database or the broker (the dead-letter topic) refusing a write. A dead
  letter too large to be written whole goes as a bounded envelope (issue 30), so only a
  refused envelope, never the record's size, stops it.
* **At-least-once, no duplicates.** An offset is committed only after its record's
  outcomes (or rejected record) are persisted, and never past an unfinished record; after a
  crash the uncommitted records are re-delivered, and outcomes are unique on
  ``(run_id, exchange_id, target)`` — exchanges with a stored outcome are not sent again,
  except those whose outcome failed for reasons of the environment (issue 29:
  :mod:`shadoweval.storage.environment`): when their records come again (the group's
  offsets reset, a rebalance, another group) they are sent again and the new outcome
  replaces the failure — a stored answer is never replaced, and the pair's score is kept
  and marked for rescoring, with its labels and judgements.
* **Co-timed replica.** An exchange sampled for the baseline replica is sent to the
  replica and the candidate together, in an order drawn from the run id and the exchange
  id, both outcomes ``co_timed`` (:mod:`shadoweval.replay.co_timed`; how the worker waits,
  takes slots and keeps the outcomes: :mod:`shadoweval.replay.kafka_sends`).
* **Bounded memory.** At most ``max_buffered`` records are fetched and unfinished; while
  that many are waiting (a hung shadow), the worker stops fetching. Each hung request ends
  as ``timeout`` after ``ReplaySettings.timeout_s`` and frees its place. Keep
  ``timeout_s`` well under the consumer's ``max_poll_interval_ms`` (300 s), or the group
  evicts a worker whose buffer stays full that long.
* **Graceful stop.** :meth:`KafkaReplayWorker.request_stop` (the CLI wires SIGTERM and
  SIGINT to it) stops fetching, lets in-flight replays finish within
  ``grace_period_s``, cancels the rest (their offsets stay uncommitted, so they are
  re-delivered), persists, commits and closes the consumer and producer.
* **Rebalance.** Before partitions are revoked the worker drops the replays of those
  partitions that have not been sent yet (waiting for a slot, the pacer, the warm-up or
  their session's previous turn: nothing reached the candidate, and the new owner reads
  them from the committed position), waits up to ``grace_period_s`` for the ones being
  sent, persists what is finished, commits it and forgets the partitions. Records of
  those partitions fetched before the revoke and not dispatched yet (the batch was being
  stored) are dropped too, never dispatched after it. A replay still
  running after that finishes and is stored; a copy re-delivered to this worker waits for
  it instead of being sent again, one re-delivered to another worker may be sent again
  (at-least-once) but its outcome is stored once.
* **Session order.** Turns of one session (``Exchange.session_key_hash``; the capture
  sinks key records by it, so they share a partition and arrive in capture order) are
  replayed one after the other per target: turn n+1 is not sent before turn n's replay
  has finished (answered, timed out or failed); a co-timed pair of turn n+1 waits for
  turn n on both targets. Different sessions, and exchanges without
  a session key, are replayed concurrently. The candidate version each session met is
  tracked (:mod:`shadoweval.replay.sessions`); a turn that meets another one than its session's
  first is counted in ``session_model_changes`` and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Unpack

from shadoweval.bus import BusConsumer, BusProducer, BusRecord
from shadoweval.config import KafkaSettings, WorkerSettings
from shadoweval.lifecycle import Lifecycle
from shadoweval.records import Exchange, ReplayTarget
from shadoweval.redaction import redact_exchange_headers
from shadoweval.replay.co_timed import co_time
from shadoweval.replay.dead_letter import (
    BadRecord,
    DeadLetterQueue,
    decode_record,
    record_location,
)
from shadoweval.replay.driver import ReplayLoad
from shadoweval.replay.exchange_replay import (
    OutcomeWriter,
    PreparedReplay,
    TargetSpec,
    describe_exception,
    resume_point,
    sampled_targets,
    skipped_outcome,
    split_conflicts,
    unreplayable,
)
from shadoweval.replay.kafka_partitions import WorkerReport, _InFlightRecord, _Replay
from shadoweval.replay.kafka_sends import _Sends
from shadoweval.replay.metrics import WorkerMetrics
from shadoweval.replay.offload import OffloadUnavailable, is_offloaded, resolve_offloaded
from shadoweval.replay.offsets import OffsetTracker, Partition
from shadoweval.replay.scheduler import StartMeter
from shadoweval.replay.sessions import SessionVersionTracker
from shadoweval.storage import Repository

__all__ = ["KafkaReplayWorker", "WorkerReport"]

logger = logging.getLogger(__name__)


class KafkaReplayWorker(_Sends, Lifecycle):
    """Consume exchanges from a topic and replay them into run ``run_id``.

    Args:
        repo: storage.
        run_id: an existing run (a restarted worker passes the same one).
        targets: the candidate and, optionally, a baseline-repeat target (``share``).
        consumer: subscribed to the exchange topic in this run's group; its
            ``on_revoked`` hook is taken over. The worker starts and stops it.
        dlq_producer: produces to ``kafka.dead_letter_topic``; started and stopped by the
            worker.
        settings: ``max_buffered``, ``fetch_max_records``, ``grace_period_s``,
            ``commit_interval_s``.
        kafka: ``dead_letter_topic``.
        load: ``concurrency``, ``rate_per_s``, ``warmup_requests`` (counted per process),
            ``pace``, ``pace_speed``, ``pacer``
            (:class:`~shadoweval.replay.driver.ReplayDriver`); ``pace`` ``capture`` replays
            a backlog at its captured pace, and records of several partitions that arrive
            out of capture order start at once.
        metrics: where to count (a private registry by default).
        offload_base_dir: relative ``offload_ref`` paths are resolved against it.
        fetch_timeout_ms: longest wait of one fetch (also the loop's tick).

    Attributes:
        buffered: records fetched and not finished now (≤ ``settings.max_buffered``).
        report: the counts so far (returned by :meth:`run`).
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        targets: Sequence[TargetSpec],
        consumer: BusConsumer,
        dlq_producer: BusProducer,
        settings: WorkerSettings,
        kafka: KafkaSettings,
        *,
        metrics: WorkerMetrics | None = None,
        offload_base_dir: Path | None = None,
        fetch_timeout_ms: int = 200,
        **load: Unpack[ReplayLoad],
    ) -> None:
        super().__init__(repo, run_id, targets, **load)
        self.consumer = consumer
        self.dlq_producer = dlq_producer
        self.settings = settings
        self.kafka = kafka
        self.metrics = metrics or WorkerMetrics()
        self.offload_base_dir = offload_base_dir
        self.fetch_timeout_ms = fetch_timeout_ms
        self.report = self.new_report(WorkerReport)
        self.buffered = 0
        consumer.on_revoked = self._on_revoked
        self._writer = OutcomeWriter(
            repo, batch=64, interval_s=settings.commit_interval_s, replace_failures=True
        )
        self._tracker = OffsetTracker()
        self._slots = asyncio.Semaphore(self.concurrency)
        self._slot_pairs = asyncio.Lock()
        self._meter = StartMeter()
        self._done: dict[ReplayTarget, set[str]] = {spec.target: set() for spec in self.targets}
        self._retry: dict[ReplayTarget, set[str]] = {spec.target: set() for spec in self.targets}
        self._waiting: dict[tuple[str, ReplayTarget], list[_InFlightRecord]] = {}
        self._replays: dict[tuple[str, ReplayTarget], _Replay] = {}
        self._session_tail: dict[tuple[str, ReplayTarget], _Replay] = {}
        self._versions = SessionVersionTracker()
        self._dead_letters = DeadLetterQueue(repo, run_id, dlq_producer, kafka.dead_letter_topic)
        self._tasks: set[asyncio.Task[None]] = set()
        self._committed: dict[Partition, int] = {}
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._failure: BaseException | None = None
        self._reload_done = False
        self._assigned: frozenset[Partition] = frozenset()
        self._revoking: set[Partition] = set()
        self._revocations: Counter[Partition] = Counter()
        self._running = False
        self._in_flight = 0
        self._sent = 0

    # ------------------------------------------------------------------ control

    @property
    def ready(self) -> bool:
        """True while the worker consumes (started, not stopping)."""
        return self._running and not self._stop.is_set()

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop gracefully (safe to call from a signal handler)."""
        self._stop.set()
        self._wake.set()

    async def run(self, until_idle_s: float | None = None) -> WorkerReport:
        """Consume until :meth:`request_stop`, or until the topic has been idle.

        Args:
            until_idle_s: return once no record was fetched and nothing was in flight for
                this many seconds (counted only while partitions are assigned); ``None``
                runs until stopped.

        Returns:
            The counts (also on :attr:`report`).

        Raises:
            StorageError: the database refused a write (finished work is persisted and
                committed before it propagates).
            BusError: the broker failed (start, fetch, or the dead-letter topic).
            LifecycleError: run twice (a worker runs once: :mod:`shadoweval.lifecycle`).
        """
        self._mark_started("run")
        try:
            return await self._run(until_idle_s)
        finally:
            self._stopping()

    async def _run(self, until_idle_s: float | None) -> WorkerReport:
        t0 = time.monotonic()
        await self._load_done()
        await self._dead_letters.load_rejected_locations()
        try:
            await self.dlq_producer.start()
            await self.consumer.start()
            self._running = True
            await self._loop(until_idle_s)
            if self._failure is not None:
                raise self._failure
        except BaseException:
            await self._shutdown(grace_s=0.0, failing=True)
            raise
        else:
            await self._shutdown(grace_s=self.settings.grace_period_s, failing=False)
        finally:
            self._running = False
            self.report.record_load(
                self._meter.stats(started=self._sent, wall_s=time.monotonic() - t0)
            )
        return self.report

    # --------------------------------------------------------------- main loop

    async def _loop(self, until_idle_s: float | None) -> None:
        idle_since: float | None = None
        last_commit = time.monotonic()
        while not self._stop.is_set():
            if self._failure is not None:
                raise self._failure
            room = self.settings.max_buffered - self.buffered
            records: list[BusRecord] = []
            if room > 0:
                records = await self.consumer.getmany(
                    timeout_ms=self.fetch_timeout_ms,
                    max_records=min(self.settings.fetch_max_records, room),
                )
            else:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.fetch_timeout_ms / 1000)
            epochs = self._epochs(records)  # before any await: a revoke may come in one
            assigned = frozenset(self.consumer.assignment())
            if assigned - self._assigned:
                # Partitions came (maybe inside that fetch): their previous owner may have
                # stored outcomes since this worker last looked.
                self._reload_done = True
            self._assigned = assigned
            if self._reload_done:  # a rebalance happened (maybe inside that fetch)
                await self._load_done()
            if records:
                await self._accept(records, epochs)
            if self._flush_wanted():
                await self._flush()
            now = time.monotonic()
            if now - last_commit >= self.settings.commit_interval_s:
                last_commit = now
                await self._commit()
                self.metrics.set_lag(await self.consumer.lag())
            if until_idle_s is not None:
                busy = bool(records) or self.buffered > 0 or not self.consumer.assignment()
                if busy:
                    idle_since = None
                elif idle_since is None:
                    idle_since = now
                elif now - idle_since >= until_idle_s:
                    logger.info("topic idle for %.1f s; stopping", now - idle_since)
                    break

    def _flush_wanted(self) -> bool:
        """Flush when a batch is full or due, when nothing else is running, or when the
        buffer is full (fetching waits for it) and a fetch's worth of outcomes waits."""
        pending = self._writer.pending
        if not pending:
            return False
        if self._writer.due() or not self._tasks:
            return True
        s = self.settings
        enough = min(self._writer.batch, s.fetch_max_records, s.max_buffered)
        return self.buffered >= s.max_buffered and pending >= enough

    async def _accept(self, records: list[BusRecord], epochs: dict[Partition, int | None]) -> None:
        """Track, decode, dead-letter, store and dispatch one fetched batch.

        Every record ends in exactly one place: dispatched (its exchange stored), or a
        dead letter with its reason — including any exception no rule foresaw while it
        was decoded, resolved or checked (``unprocessable``) — or, when its partition was
        revoked since the fetch (``epochs``, taken when the fetch returned), dropped
        unreplayed: the partition's new owner reads it again.
        """
        self.report.lines_read += len(records)
        fresh = [r for r in records if not self._stale(r.tp, epochs[r.tp])]
        self.report.abandoned += len(records) - len(fresh)
        entries: list[tuple[BusRecord, _InFlightRecord]] = []
        for record in fresh:
            entries.append((record, self._track(record, epochs[record.tp])))
        bad: list[tuple[BadRecord, _InFlightRecord]] = []
        unavailable: dict[str, OffloadUnavailable] = {}
        resolved: list[tuple[BusRecord, _InFlightRecord, Exchange]] = []
        for record, state in entries:
            try:
                admitted = await self._admit(record, unavailable)
            except Exception as exc:  # whatever a record does, it is dead-lettered
                location = record_location(record)
                detail = f"{location}: cannot be processed: {describe_exception(exc)}"
                text = (record.value or b"").decode("utf-8", errors="replace")
                admitted = BadRecord(record, "unprocessable", detail, text)
            if isinstance(admitted, BadRecord):
                bad.append((admitted, state))
            else:
                resolved.append((record, state, admitted))
        _, conflicting = await split_conflicts(self.repo, [e for _, _, e in resolved])
        refused = {e.exchange_id: reason for e, reason in conflicting}
        kept: list[tuple[_InFlightRecord, Exchange]] = []
        first: dict[str, tuple[Exchange, str]] = {}
        for record, state, exchange in resolved:
            reason = refused.get(exchange.exchange_id)
            earlier = first.get(exchange.exchange_id)
            if reason is None and earlier is not None and earlier[0] != exchange:
                reason = (
                    f"exchange_id {exchange.exchange_id} was fetched at {earlier[1]} with "
                    "different content in the same batch; the first is kept"
                )
            if reason is not None:
                conflict = BadRecord(
                    record, "conflicting_duplicate", reason, exchange.model_dump_json()
                )
                bad.append((conflict, state))
                continue
            first.setdefault(exchange.exchange_id, (exchange, record_location(record)))
            kept.append((state, exchange))
        bad = [(b, state) for b, state in bad if not self._dropped_if_stale(state)]
        await self._dead_letter([b for b, _ in bad])
        for _, state in bad:
            self._finish(state)
        kept = [(state, e) for state, e in kept if not self._dropped_if_stale(state)]
        exchanges = [e for _, e in kept]
        await asyncio.to_thread(self.repo.save_exchanges, self.run_id, exchanges)
        self.report.exchanges += len(exchanges)
        for state, exchange in kept:
            if self._dropped_if_stale(state):  # revoked while the exchanges were stored
                continue
            self._dispatch(state, exchange, unavailable.get(exchange.exchange_id))

    async def _admit(
        self, record: BusRecord, unavailable: dict[str, OffloadUnavailable]
    ) -> Exchange | BadRecord:
        """The exchange of ``record`` to store (offloaded stubs resolved, headers
        redacted), or the :class:`BadRecord` that dead-letters it. An offloaded stub whose
        file cannot be read is kept (its replay is skipped) and noted in ``unavailable``."""
        decoded = decode_record(record)
        if isinstance(decoded, BadRecord):
            return decoded
        exchange = decoded
        if is_offloaded(exchange):
            full = await asyncio.to_thread(
                resolve_offloaded, exchange, base_dir=self.offload_base_dir
            )
            if isinstance(full, OffloadUnavailable):
                unavailable[exchange.exchange_id] = full
            else:
                exchange = full
        exchange = redact_exchange_headers(exchange)
        if exchange.exchange_id not in unavailable:
            problem = unreplayable(exchange, self.targets)
            if problem is not None:
                location = record_location(record)
                detail = f"{location}: the replay request cannot be built: {problem}"
                text = (record.value or b"").decode("utf-8", errors="replace")
                return BadRecord(record, "unreplayable", detail, text)
        return exchange

    def _dispatch(
        self, state: _InFlightRecord, exchange: Exchange, unavailable: OffloadUnavailable | None
    ) -> None:
        """Start the replays of one stored exchange (or finish it when nothing is to send)."""
        exchange_id = exchange.exchange_id
        self._replayer.conversations.observe(exchange)  # previous_response_id context
        sends: list[PreparedReplay] = []
        for spec in sampled_targets(exchange_id, self.targets):
            if exchange_id in self._done[spec.target]:
                self.report.already_done += 1
                continue
            key = (exchange_id, spec.target)
            state.remaining += 1
            waiting = self._waiting.get(key)
            if waiting is not None:
                # The same exchange is being replayed for another delivery: wait for that
                # outcome to be persisted instead of sending it twice.
                waiting.append(state)
                self.report.duplicates += 1
                continue
            self._waiting[key] = [state]
            if unavailable is not None:
                self._queue(skipped_outcome(self.run_id, exchange, spec, unavailable.reason))
                continue
            if exchange_id in self._retry[spec.target]:
                self._retry[spec.target].discard(exchange_id)
                self.report.retried[spec.target.value] += 1
            # prepared in dispatch order: the first sends per target are the warm-up
            prepared = self._replayer.prepare(exchange, spec)
            if prepared.failure is not None:
                task = asyncio.create_task(self._replay_failed(exchange, spec, prepared.failure))
                self._tasks.add(task)
                task.add_done_callback(self._task_done)
                continue
            if prepared.skipped:
                self._queue(skipped_outcome(self.run_id, exchange, spec, prepared.reason))
                continue
            sends.append(prepared)
        # The candidate's and the replica's send of one exchange go together (issue 29).
        for item in co_time(sends, seed=self.run_id, together=self.concurrency > 1):
            self._launch(item)
        if state.remaining == 0:
            self._finish(state)

    async def _load_done(self) -> None:
        """Take the exchanges done per target from storage: every stored outcome except
        the failures of the environment, which are sent again when their records come
        (again) and replaced by the new outcome (issue 29: :func:`resume_point`). An
        exchange this worker stored itself stays done for the rest of its run."""
        self._reload_done = False
        for spec in self.targets:
            done, retry = await resume_point(self.repo, self.run_id, spec.target)
            self._retry[spec.target] |= retry - self._done[spec.target]
            self._done[spec.target] |= done
