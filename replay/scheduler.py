"""Bounded-concurrency, paced execution of replays: rate or captured pace, warm-up first.

:func:`run_paced` pulls items from an iterator only as fast as workers free up, so memory
stays bounded whatever the size of the capture log (a hung target fills at most
``concurrency`` slots). Starts are spaced by a pacer:

* :class:`RatePacer` — a target rate: starts ``1 / rate`` seconds apart;
* :class:`CapturePacer` — the captured pace: each start at its exchange's captured
  inter-arrival time after the one before, divided by a speed factor.

Neither catches up after a stall (a slow target lowers the achieved rate, which is
measured and reported rather than hidden — GoReplay #680, #1262). Each item's
:class:`Dispatch` says whether it is paced (a request sent; a skip starts at once),
whether it counts in the achieved rate (a measured request; not a warm-up or a skip), and
what it waits for before it takes a slot (the warm-up barrier of its target:
:class:`WarmupBarrier` — the first N requests per target are sent and *completed* before
the first measured one starts, so a cold replica's first, slow answers are never measured).

The clock and the sleep are injectable (``clock``, ``sleep``): tests assert on the
scheduled start times, never on wall time. :class:`StartMeter` measures the achieved start
rate of the measured requests, (n − 1) / (last start − first start), and the capture time
they span (the rate a captured pace asks for is (n − 1) / (captured span / speed)).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from shadoweval.records import ReplayPace

T = TypeVar("T")
R = TypeVar("R")

Clock = Callable[[], float]
"""Monotonic seconds (``time.monotonic`` by default)."""
Sleep = Callable[[float], Awaitable[None]]
"""Sleep this many seconds (``asyncio.sleep`` by default)."""


def _monotonic() -> float:
    # Looked up at call time, so a test may stand in for the module's ``time``.
    return time.monotonic()


class Pacer(Protocol):
    """Releases item starts on a schedule."""

    async def wait(self, at: datetime | None = None) -> float:
        """Return (on the pacer's clock) when the next start is allowed; ``at`` is the
        item's captured start time (read by :class:`CapturePacer` only)."""
        ...


class RatePacer:
    """Releases calls to :meth:`wait` on a schedule ``1 / rate_per_s`` seconds apart.

    Release *k* is never earlier than the one before it plus the interval on the
    schedule: the schedule advances from the planned time, so a wake-up that is late by
    δ (event-loop jitter) makes the next gap ``interval − δ`` and the average rate stays
    on target. A caller that arrives after its planned time is released at once and the
    schedule restarts from then, so time lost in a stall is never caught up in a burst.
    ``rate_per_s=None`` releases every call at once.
    """

    def __init__(
        self, rate_per_s: float | None, *, clock: Clock | None = None, sleep: Sleep | None = None
    ) -> None:
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be > 0, got {rate_per_s!r}")
        self.rate_per_s = rate_per_s
        self.interval_s = 0.0 if rate_per_s is None else 1.0 / rate_per_s
        self._clock = clock or _monotonic
        self._sleep = sleep or asyncio.sleep
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self, at: datetime | None = None) -> float:
        """Return when the next start is allowed (the release time on the pacer's clock)."""
        if self.interval_s == 0.0:
            return self._clock()
        async with self._lock:
            now = self._clock()
            if self._next > now:
                await self._sleep(self._next - now)
                now = self._next
            self._next = now + self.interval_s
            return now


class CapturePacer:
    """Releases each start at the captured inter-arrival time after the previous one,
    divided by ``speed`` (2.0 replays twice as fast as captured).

    The schedule is anchored at the first start: item *k* is due at
    ``anchor + (at_k − at_anchor) / speed``. A wake-up late by δ does not shift the
    schedule (the release counts as on time); a caller that arrives after its due time is
    released at once and the schedule is re-anchored there (a stall is never caught up in
    a burst). An item captured no later than the one released before it (out of order,
    e.g. across Kafka partitions) or without a capture time is released at once and
    leaves the schedule as it is.
    """

    def __init__(
        self, speed: float = 1.0, *, clock: Clock | None = None, sleep: Sleep | None = None
    ) -> None:
        if not speed > 0:
            raise ValueError(f"pace speed must be > 0, got {speed!r}")
        self.speed = speed
        self._clock = clock or _monotonic
        self._sleep = sleep or asyncio.sleep
        self._anchor: tuple[float, datetime] | None = None
        self._last_at: datetime | None = None
        self._lock = asyncio.Lock()

    def due(self, at: datetime) -> float | None:
        """When an item captured at ``at`` is due on the current schedule (``None``
        before the first start)."""
        if self._anchor is None:
            return None
        start, captured = self._anchor
        return start + max(0.0, (at - captured).total_seconds()) / self.speed

    async def wait(self, at: datetime | None = None) -> float:
        """Return when the item captured at ``at`` may start (the release time)."""
        async with self._lock:
            now = self._clock()
            if at is None:
                return now
            due = self.due(at)
            if due is None:
                self._anchor, self._last_at = (now, at), at
                return now
            if self._last_at is not None and at <= self._last_at:
                return now  # out of capture order: at once, the schedule unchanged
            self._last_at = at
            if due > now:
                await self._sleep(due - now)
                return due
            if due < now:
                self._anchor = (now, at)  # late: restart the schedule from here
            return now


def replay_pacer(
    pace: ReplayPace | None,
    *,
    pace_speed: float,
    rate_per_s: float | None,
    pacer: Pacer | None = None,
) -> tuple[ReplayPace, Pacer]:
    """The pace of a replay and the pacer that keeps it.

    ``pace`` left out is :attr:`ReplayPace.RATE` when ``rate_per_s`` is given, else
    :attr:`ReplayPace.UNPACED`. ``pacer`` (a test's, with its own clock) is used as given;
    without it the captured pace gets a :class:`CapturePacer` at ``pace_speed`` and any other
    pace a :class:`RatePacer` at ``rate_per_s`` (``None``: every start at once).

    Raises:
        ValueError: ``pace_speed`` or ``rate_per_s`` is not > 0 (from the pacer built).
    """
    pace = pace or (ReplayPace.RATE if rate_per_s is not None else ReplayPace.UNPACED)
    if pacer is None:
        pacer = CapturePacer(pace_speed) if pace is ReplayPace.CAPTURE else RatePacer(rate_per_s)
    return pace, pacer


@dataclass(frozen=True, slots=True)
class Dispatch:
    """How :func:`run_paced` starts one item.

    Attributes:
        paced: the item waits for the pacer (a request that is sent); ``False`` starts it
            at once (an exchange skipped without sending).
        measured: the item counts in the achieved start rate (``False``: a warm-up or a
            skip).
        ready: awaited before the item takes a concurrency slot (the warm-up barrier of
            its target); ``None``: nothing to wait for.
        at: the item's captured start time (for :class:`CapturePacer`).
        requests: the requests the item sends at once (2 for a co-timed pair,
            :mod:`shadoweval.replay.co_timed`): it takes as many concurrency slots (at most
            all of them) and pacer releases, and starts at the last release, so the asked
            rate and ``--concurrency`` keep counting requests.
    """

    paced: bool = True
    measured: bool = True
    ready: Callable[[], Awaitable[None]] | None = None
    at: datetime | None = None
    requests: int = 1


SEND = Dispatch()
"""A measured request with nothing to wait for (every item when no plan is given)."""


class StartMeter:
    """The start times of the measured requests: count, span, and the captured span.

    :attr:`achieved_rate_per_s` is (n − 1) / (last − first start) with at least two starts
    (``None`` before); :meth:`captured_rate_per_s` the same over the requests' captured
    times, times a speed — the rate a captured pace asks for.
    """

    def __init__(self) -> None:
        self.count = 0
        self.warmups = 0
        self.first: float | None = None
        self.last: float | None = None
        self._captured_min: datetime | None = None
        self._captured_max: datetime | None = None

    def record(self, started: float, dispatch: Dispatch) -> None:
        """Count one start at ``started`` (seconds on the pacer's clock)."""
        if not dispatch.paced:
            return
        if not dispatch.measured:
            self.warmups += 1
            return
        self.count += 1
        self.first = started if self.first is None else min(self.first, started)
        self.last = started if self.last is None else max(self.last, started)
        at = dispatch.at
        if at is not None:
            self._captured_min = at if self._captured_min is None else min(self._captured_min, at)
            self._captured_max = at if self._captured_max is None else max(self._captured_max, at)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last measured start."""
        return 0.0 if self.first is None or self.last is None else self.last - self.first

    @property
    def achieved_rate_per_s(self) -> float | None:
        """Measured starts per second, (n − 1) / span; ``None`` with fewer than two, or
        when they all started at the same instant (no rate to speak of)."""
        if self.count < 2 or self.span_s <= 0:
            return None
        return (self.count - 1) / self.span_s

    @property
    def captured_span_s(self) -> float | None:
        """Seconds of capture time the measured requests span (``None`` without times)."""
        if self._captured_min is None or self._captured_max is None:
            return None
        return (self._captured_max - self._captured_min).total_seconds()

    def stats(self, *, started: int, wall_s: float) -> PacedStats:
        """The :class:`PacedStats` of a run that started ``started`` items in ``wall_s``."""
        return PacedStats(
            started=started,
            wall_s=wall_s,
            measured_starts=self.count,
            achieved_rate_per_s=self.achieved_rate_per_s,
            warmup_starts=self.warmups,
            captured_span_s=self.captured_span_s,
        )


@dataclass(frozen=True, slots=True)
class PacedStats:
    """What a paced run achieved: items started, wall seconds, the measured requests'
    starts and achieved start rate (:attr:`StartMeter.achieved_rate_per_s`, ``None`` when
    it cannot be measured), warm-up requests started, and the capture time the measured
    requests span (what a captured pace asks: :meth:`captured_rate_per_s`)."""

    started: int
    wall_s: float
    measured_starts: int = 0
    achieved_rate_per_s: float | None = None
    warmup_starts: int = 0
    captured_span_s: float | None = None

    def captured_rate_per_s(self, speed: float) -> float | None:
        """The start rate the captured times of the measured requests ask for at
        ``speed``: (n − 1) / (captured span / speed); ``None`` when not defined."""
        span = self.captured_span_s
        if self.measured_starts < 2 or span is None or span <= 0:
            return None
        return (self.measured_starts - 1) / (span / speed)


class WarmupBarrier:
    """Per target: the first ``warmup`` requests are warm-up; the measured ones wait until
    every warm-up request of their target has completed.

    :meth:`assign` is called in dispatch order (it numbers the sends per target);
    :meth:`completed` when a warm-up send finished (also when it raised, so a failure never
    holds the measured requests back); :meth:`ready` returns once the target's warm-up is
    done. With ``warmup = 0`` nothing waits.
    """

    def __init__(self, warmup: int) -> None:
        if warmup < 0:
            raise ValueError(f"warm-up requests must be >= 0, got {warmup!r}")
        self.warmup = warmup
        self._assigned: Counter[Hashable] = Counter()
        self._completed: Counter[Hashable] = Counter()
        self._done: dict[Hashable, asyncio.Event] = {}

    def assign(self, key: Hashable) -> bool:
        """Number one more send to ``key``; True when it is a warm-up request."""
        index = self._assigned[key]
        self._assigned[key] += 1
        return index < self.warmup

    def completed(self, key: Hashable) -> None:
        """One warm-up request to ``key`` finished."""
        self._completed[key] += 1
        if self._completed[key] >= self.warmup:
            self._event(key).set()

    def is_done(self, key: Hashable) -> bool:
        """Every warm-up request of ``key`` has completed."""
        return self.warmup == 0 or self._completed[key] >= self.warmup

    async def ready(self, key: Hashable) -> None:
        """Return once every warm-up request of ``key`` has completed."""
        if self.is_done(key):
            return
        await self._event(key).wait()

    def _event(self, key: Hashable) -> asyncio.Event:
        event = self._done.get(key)
        if event is None:
            event = self._done[key] = asyncio.Event()
        return event


async def run_paced(
    items: Iterable[T] | AsyncIterator[T],
    work: Callable[[T, int], Awaitable[R]],
    on_result: Callable[[T, R], Awaitable[None]],
    *,
    concurrency: int,
    rate_per_s: float | None = None,
    pacer: Pacer | None = None,
    plan: Callable[[T], Dispatch] | None = None,
    clock: Clock | None = None,
) -> PacedStats:
    """Run ``work(item, dispatch_index)`` for every item with bounded concurrency.

    For each item, in order: its :class:`Dispatch` (``plan(item)``; every item a
    measured, paced send without a plan) — wait for ``ready``, take a concurrency slot per
    request (:attr:`Dispatch.requests`, at most ``concurrency``), wait for the pacer once
    per request (``pacer``, else a :class:`RatePacer` at ``rate_per_s``; items with
    ``paced=False`` do not), start at the last release. ``on_result`` is awaited for each
    finished item (in completion order). An exception from ``work``, ``on_result`` or the ``items``
    iterator cancels the rest and propagates as itself (not wrapped in an
    ``ExceptionGroup``; further concurrent errors are named in a note). Workers are
    expected to turn candidate failures into results, not exceptions.

    ``clock`` (default ``time.monotonic``) times the run; the measured start times are
    the pacer's release times.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    clock = clock or _monotonic
    pacer = pacer or RatePacer(rate_per_s, clock=clock)
    slots = asyncio.Semaphore(concurrency)
    meter = StartMeter()
    started = 0
    t0 = clock()

    async def one(item: T, index: int, taken: int) -> None:
        try:
            result = await work(item, index)
            await on_result(item, result)
        finally:
            for _ in range(taken):
                slots.release()

    try:
        async with asyncio.TaskGroup() as group:
            async for item in _as_async(items):
                dispatch = plan(item) if plan is not None else SEND
                if dispatch.ready is not None:
                    await dispatch.ready()
                # Only this loop acquires: taking a pair's slots one by one cannot deadlock.
                taken = min(max(dispatch.requests, 1), concurrency)
                for _ in range(taken):
                    await slots.acquire()
                if dispatch.paced:
                    releases = [await pacer.wait(dispatch.at) for _ in range(dispatch.requests)]
                    for _ in releases:
                        meter.record(releases[-1], dispatch)
                group.create_task(one(item, started, taken))
                started += 1
    except BaseExceptionGroup as errors:
        # Propagate the error itself, not TaskGroup's wrapper: callers catch the project's
        # exception types (a StorageError while persisting must stay a StorageError).
        first = errors.exceptions[0]
        if len(errors.exceptions) > 1:
            first.add_note(f"{len(errors.exceptions) - 1} more error(s) in the same run_paced")
        raise first from errors
    return meter.stats(started=started, wall_s=clock() - t0)


async def _as_async(items: Iterable[T] | AsyncIterator[T]) -> AsyncIterator[T]:
    if isinstance(items, AsyncIterator):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
