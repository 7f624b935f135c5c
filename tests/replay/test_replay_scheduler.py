"""run_paced / RatePacer: bounded concurrency, paced starts, lazy pulling, errors propagate."""

from __future__ import annotations

import asyncio
import itertools
import selectors
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from shadoweval.replay.scheduler import Dispatch, PacedStats, RatePacer, StartMeter, run_paced

pytestmark = pytest.mark.anyio


class _JumpingSelector(selectors.DefaultSelector):
    """Never blocks: a wait for the next timer moves the virtual clock ``now`` instead."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout > 0:
            self.now += timeout
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: when nothing is ready it jumps to the next timer.

    Pacing tests run on it, so their start times are the schedule's and not the schedule
    plus however late a loaded machine woke the process: exact, and the same under load.
    """

    def __init__(self) -> None:
        self._jumps = _JumpingSelector()
        super().__init__(self._jumps)

    def time(self) -> float:
        return self._jumps.now


class _LoopClock:
    """Stands in for the ``time`` module in :mod:`shadoweval.replay.scheduler`: the loop's clock."""

    @staticmethod
    def monotonic() -> float:
        return asyncio.get_running_loop().time()


@pytest.fixture
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test on :class:`VirtualTimeLoop`, the scheduler reading its clock."""
    monkeypatch.setattr("shadoweval.replay.scheduler.time", _LoopClock)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> object:
    if "virtual_time" in request.fixturenames:
        return ("asyncio", {"loop_factory": VirtualTimeLoop})
    return "asyncio"


class Tracker:
    """Counts work in flight and records start times and dispatch indexes."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0
        self.starts: list[float] = []
        self.indexes: list[int] = []
        self.finished: list[int] = []

    async def work(self, item: int, index: int, duration: float = 0.0) -> int:
        self.starts.append(asyncio.get_running_loop().time())  # time.monotonic() unless virtual
        self.indexes.append(index)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(duration)
            return item * 10
        finally:
            self.in_flight -= 1

    async def on_result(self, item: int, result: int) -> None:
        assert result == item * 10
        self.finished.append(item)


@pytest.mark.parametrize("concurrency", [1, 3, 8])
async def test_concurrency_bound_is_never_exceeded_and_is_reached(concurrency: int) -> None:
    tracker = Tracker()

    async def work(item: int, index: int) -> int:
        # Uneven durations so slots free up out of order.
        return await tracker.work(item, index, duration=0.002 * (1 + item % 5))

    stats = await run_paced(range(40), work, tracker.on_result, concurrency=concurrency)
    assert tracker.max_in_flight == concurrency
    assert sorted(tracker.finished) == list(range(40))
    assert sorted(tracker.indexes) == list(range(40))
    assert stats.started == 40
    assert stats.wall_s > 0


async def test_dispatch_index_follows_item_order() -> None:
    tracker = Tracker()
    seen: dict[int, int] = {}

    async def work(item: int, index: int) -> int:
        seen[item] = index
        return await tracker.work(item, index, duration=0.001 * (item % 3))

    await run_paced(range(25), work, tracker.on_result, concurrency=4)
    assert seen == {i: i for i in range(25)}


async def test_items_are_pulled_lazily_so_memory_stays_bounded() -> None:
    """A hung target fills at most ``concurrency`` slots; the source is not drained ahead."""
    pulled = 0
    waiting = 0
    release = asyncio.Event()
    full = asyncio.Event()

    def source() -> Iterator[int]:
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield i

    async def work(item: int, index: int) -> int:
        nonlocal waiting
        waiting += 1
        if waiting == 5:
            full.set()
        await release.wait()
        return item

    async def on_result(item: int, result: int) -> None:
        return None

    task = asyncio.ensure_future(run_paced(source(), work, on_result, concurrency=5))
    await asyncio.wait_for(full.wait(), 60)  # every slot is taken
    await asyncio.sleep(0.1)  # a window in which a source drained ahead would show
    assert pulled <= 5 + 1  # five in flight, one waiting for a slot
    release.set()
    stats = await task
    assert stats.started == 10_000


async def test_async_iterator_source() -> None:
    async def source() -> AsyncIterator[int]:
        for i in range(12):
            await asyncio.sleep(0)
            yield i

    tracker = Tracker()
    stats = await run_paced(source(), tracker.work, tracker.on_result, concurrency=3)
    assert stats.started == 12
    assert sorted(tracker.finished) == list(range(12))


async def test_empty_source() -> None:
    tracker = Tracker()
    stats = await run_paced([], tracker.work, tracker.on_result, concurrency=2)
    assert stats.started == 0
    assert stats.achieved_rate_per_s is None  # no start, no rate


# ----------------------------------------------------------------------- pacing


def assert_never_ahead_of_schedule(starts: list[float], interval: float) -> None:
    """Start k is never earlier than k intervals after the first (no bunching, no burst).

    The pacer keeps starts on a grid ``interval`` apart; a wake-up that is late by δ
    shortens the next gap by δ, but no start ever runs ahead of the grid.
    """
    for k, at in enumerate(starts):
        assert at - starts[0] >= k * interval - 0.5 * interval, (k, at - starts[0])


@pytest.mark.parametrize("rate", [40.0, 100.0])
@pytest.mark.usefixtures("virtual_time")
async def test_rate_pacing_spaces_starts(rate: float) -> None:
    tracker = Tracker()
    n = 25
    stats = await run_paced(
        range(n), tracker.work, tracker.on_result, concurrency=8, rate_per_s=rate
    )
    starts = sorted(tracker.starts)
    interval = 1.0 / rate
    assert_never_ahead_of_schedule(starts, interval)
    # The starts span (n - 1) intervals: the achieved start rate matches the target.
    span_rate = (n - 1) / (starts[-1] - starts[0])
    assert 0.7 <= span_rate / rate <= 1.05
    # The achieved rate is the start rate of the measured requests, on the pacer's clock.
    assert stats.achieved_rate_per_s == pytest.approx(rate)
    assert stats.measured_starts == n


@pytest.mark.usefixtures("virtual_time")
async def test_unpaced_run_is_much_faster_than_a_paced_one() -> None:
    tracker = Tracker()
    fast = await run_paced(range(30), tracker.work, tracker.on_result, concurrency=8)
    slow = await run_paced(
        range(30), tracker.work, tracker.on_result, concurrency=8, rate_per_s=100
    )
    # the same 30 starts: a 3x higher start rate is a third of the wall time (on virtual
    # time the unpaced run takes none, so its rate would divide by zero)
    assert fast.wall_s < slow.wall_s / 3


@pytest.mark.usefixtures("virtual_time")
async def test_slow_target_lowers_the_achieved_rate_and_is_never_caught_up() -> None:
    """GoReplay #680: a slow target lowers the rate; starts do not burst afterwards."""
    tracker = Tracker()
    rate = 100.0

    async def work(item: int, index: int) -> int:
        # One slot; the first few items stall for 5 intervals each.
        return await tracker.work(item, index, duration=0.05 if item < 4 else 0.0)

    stats = await run_paced(range(20), work, tracker.on_result, concurrency=1, rate_per_s=rate)
    starts = sorted(tracker.starts)
    assert stats.achieved_rate_per_s is not None
    assert stats.achieved_rate_per_s < 0.75 * rate
    stall_gaps = [b - a for a, b in itertools.pairwise(starts[:5])]
    assert min(stall_gaps) >= 0.05 - 1e-9  # a float's rounding, no more
    # After the stall the schedule restarts from the first late start: no catch-up burst.
    assert_never_ahead_of_schedule(starts[4:], 1.0 / rate)


async def test_rate_pacer_alone() -> None:
    pacer = RatePacer(50.0)
    assert pacer.interval_s == pytest.approx(0.02)
    stamps = []
    for _ in range(6):
        await pacer.wait()
        stamps.append(time.monotonic())
    assert stamps[-1] - stamps[0] >= 5 * 0.02 * 0.9
    unpaced = RatePacer(None)
    for _ in range(1000):
        # Unpaced, wait() never suspends: its coroutine finishes on the first step (a
        # condition instead of a wall-clock bound on 1,000 calls).
        step = unpaced.wait()
        with pytest.raises(StopIteration):
            step.send(None)


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="rate_per_s must be > 0"):
        RatePacer(rate)


async def test_concurrency_must_be_positive() -> None:
    tracker = Tracker()
    with pytest.raises(ValueError, match="concurrency must be >= 1"):
        await run_paced([1], tracker.work, tracker.on_result, concurrency=0)


def test_start_meter_counts_measured_starts_only() -> None:
    meter = StartMeter()
    meter.record(0.0, Dispatch(measured=False))  # a warm-up request: counted apart
    meter.record(5.0, Dispatch(paced=False, measured=False))  # a skip: not a start at all
    assert meter.achieved_rate_per_s is None
    for k in range(11):
        meter.record(10.0 + 0.5 * k, Dispatch())
    assert (meter.count, meter.warmups) == (11, 1)
    assert meter.achieved_rate_per_s == pytest.approx(2.0)  # 10 gaps over 5 s
    same_instant = StartMeter()
    same_instant.record(1.0, Dispatch())
    same_instant.record(1.0, Dispatch())
    assert same_instant.achieved_rate_per_s is None
    assert PacedStats(started=0, wall_s=0.0).achieved_rate_per_s is None


# ----------------------------------------------------------------------- errors


class BoomError(Exception):
    """A failure of the caller's code (not a candidate failure)."""


async def test_exception_in_work_propagates_as_itself_and_cancels_the_rest() -> None:
    tracker = Tracker()
    cancelled = 0

    async def work(item: int, index: int) -> int:
        nonlocal cancelled
        if item == 5:
            raise BoomError("work failed on 5")
        try:
            return await tracker.work(item, index, duration=0.05)
        except asyncio.CancelledError:
            cancelled += 1
            raise

    with pytest.raises(BoomError, match="work failed on 5"):
        await run_paced(range(1000), work, tracker.on_result, concurrency=4)
    assert len(tracker.starts) < 20  # the source was not drained
    assert cancelled >= 1  # work in flight was cancelled


async def test_exception_in_on_result_propagates() -> None:
    tracker = Tracker()

    async def on_result(item: int, result: int) -> None:
        if item == 3:
            raise BoomError("could not persist 3")

    with pytest.raises(BoomError, match="could not persist 3"):
        await run_paced(range(50), tracker.work, on_result, concurrency=2)


async def test_exception_in_the_source_propagates() -> None:
    tracker = Tracker()

    def source() -> Iterator[int]:
        yield 1
        yield 2
        raise BoomError("source broke")

    with pytest.raises(BoomError, match="source broke"):
        await run_paced(source(), tracker.work, tracker.on_result, concurrency=2)


async def test_several_concurrent_errors_surface_the_first_with_a_note() -> None:
    started = asyncio.Event()
    waiting = 0

    async def work(item: int, index: int) -> int:
        nonlocal waiting
        waiting += 1
        if waiting == 3:
            started.set()
        await started.wait()
        raise BoomError(f"fail {item}")

    async def on_result(item: int, result: int) -> None:
        return None

    with pytest.raises(BoomError) as info:
        await run_paced(range(3), work, on_result, concurrency=3)
    assert str(info.value).startswith("fail ")
    assert any("more error(s)" in note for note in getattr(info.value, "__notes__", []))
