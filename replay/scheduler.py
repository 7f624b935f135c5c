"""Bounded-concurrency, rate-paced execution of replays with warm-up flags.

:func:`run_paced` pulls items from an iterator only as fast as workers free up, so memory
stays bounded whatever the size of the capture log (a hung target fills at most
``concurrency`` slots). An optional target rate spaces request *starts* evenly
(1 / rate seconds apart, catching up after stalls is not allowed: a slow target lowers the
achieved rate, which is reported rather than hidden — GoReplay #680, #1262). The first
``warmup`` dispatched items are flagged so their latencies can be excluded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class RatePacer:
    """Releases calls to :meth:`wait` on a schedule ``1 / rate_per_s`` seconds apart.

    Release *k* is never earlier than the one before it plus the interval on the
    schedule: the schedule advances from the planned time, so a wake-up that is late by
    δ (event-loop jitter) makes the next gap ``interval − δ`` and the average rate stays
    on target. A caller that arrives after its planned time is released at once and the
    schedule restarts from then, so time lost in a stall is never caught up in a burst.
    """

    def __init__(self, rate_per_s: float | None) -> None:
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be > 0, got {rate_per_s!r}")
        self.interval_s = 0.0 if rate_per_s is None else 1.0 / rate_per_s
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        """Return when the next start is allowed."""
        if self.interval_s == 0.0:
            return
        async with self._lock:
            now = time.monotonic()
            if self._next > now:
                await asyncio.sleep(self._next - now)
                now = self._next
            self._next = now + self.interval_s


@dataclass(frozen=True, slots=True)
class PacedStats:
    """What a paced run achieved: items started, wall seconds, achieved start rate."""

    started: int
    wall_s: float

    @property
    def achieved_rate_per_s(self) -> float:
        """Items started per second of wall time."""
        return self.started / self.wall_s if self.wall_s > 0 else 0.0


async def run_paced(
    items: Iterable[T] | AsyncIterator[T],
    work: Callable[[T, int], Awaitable[R]],
    on_result: Callable[[T, R], Awaitable[None]],
    *,
    concurrency: int,
    rate_per_s: float | None = None,
) -> PacedStats:
    """Run ``work(item, dispatch_index)`` for every item with bounded concurrency.

    ``on_result`` is awaited for each finished item (in completion order). An exception
    from ``work``, ``on_result`` or the ``items`` iterator cancels the rest and propagates
    as itself (not wrapped in an ``ExceptionGroup``; further concurrent errors are named in
    a note). Workers are expected to turn candidate failures into results, not exceptions.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    pacer = RatePacer(rate_per_s)
    slots = asyncio.Semaphore(concurrency)
    started = 0
    t0 = time.monotonic()

    async def one(item: T, index: int) -> None:
        try:
            result = await work(item, index)
            await on_result(item, result)
        finally:
            slots.release()

    try:
        async with asyncio.TaskGroup() as group:
            async for item in _as_async(items):
                await slots.acquire()
                await pacer.wait()
                group.create_task(one(item, started))
                started += 1
    except BaseExceptionGroup as errors:
        # Propagate the error itself, not TaskGroup's wrapper: callers catch the project's
        # exception types (a StorageError while persisting must stay a StorageError).
        first = errors.exceptions[0]
        if len(errors.exceptions) > 1:
            first.add_note(f"{len(errors.exceptions) - 1} more error(s) in the same run_paced")
        raise first from errors
    return PacedStats(started=started, wall_s=time.monotonic() - t0)


async def _as_async(items: Iterable[T] | AsyncIterator[T]) -> AsyncIterator[T]:
    if isinstance(items, AsyncIterator):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
