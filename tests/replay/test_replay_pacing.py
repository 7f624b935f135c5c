"""Pacing through an injected clock: the captured pace, warm-up before measured, shortfall.

Every test here gives the pacers a :class:`FakeClock` (its ``sleep`` moves the clock), so the
start times asserted are the schedule's, exact under any load; ordering is asserted on
events (a warm-up answer held back until the test releases it), never on wall time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from shadoweval.records import MIN_RATE_STARTS, ReplayPace, ReplayPass
from shadoweval.replay.scheduler import (
    CapturePacer,
    Dispatch,
    RatePacer,
    WarmupBarrier,
    replay_pacer,
    run_paced,
)

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClock:
    """A monotonic clock that only moves when someone sleeps on it (or :meth:`advance`)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@dataclass(frozen=True)
class Item:
    name: str
    at: datetime | None = None
    measured: bool = True
    paced: bool = True
    ready: Callable[[], Awaitable[None]] | None = None

    @property
    def dispatch(self) -> Dispatch:
        return Dispatch(paced=self.paced, measured=self.measured, ready=self.ready, at=self.at)


def captured(*offsets_s: float) -> list[Item]:
    return [Item(f"i{k}", T0 + timedelta(seconds=s)) for k, s in enumerate(offsets_s)]


class RecordingPacer:
    """Wraps a pacer and keeps its release times: the schedule the scheduler followed."""

    def __init__(self, inner: CapturePacer | RatePacer) -> None:
        self.inner = inner
        self.releases: list[float] = []

    async def wait(self, at: datetime | None = None) -> float:
        released = await self.inner.wait(at)
        self.releases.append(released)
        return released


async def starts_of(
    items: list[Item],
    pacer: CapturePacer | RatePacer,
    clock: FakeClock,
    *,
    concurrency: int = 8,
    work_s: float = 0.0,
) -> tuple[dict[str, float], float | None]:
    """Run ``items``; return each paced item's release time (the pacer's schedule, on
    ``clock``) and the achieved start rate. ``work_s`` is how long each item's work takes
    (it moves the clock)."""
    recording = RecordingPacer(pacer)

    async def work(item: Item, index: int) -> str:
        if work_s:
            clock.advance(work_s)
        await asyncio.sleep(0)
        return item.name

    async def on_result(item: Item, result: str) -> None:
        return None

    stats = await run_paced(
        items,
        work,
        on_result,
        concurrency=concurrency,
        pacer=recording,
        plan=lambda item: item.dispatch,
        clock=clock,
    )
    paced = [item.name for item in items if item.paced]
    assert len(recording.releases) == len(paced)
    return dict(zip(paced, recording.releases, strict=True)), stats.achieved_rate_per_s


# ----------------------------------------------------------------- the captured pace


@pytest.mark.parametrize("speed", [1.0, 2.0, 0.5])
async def test_capture_pace_replays_the_captured_inter_arrival_times(speed: float) -> None:
    clock = FakeClock()
    offsets = [0.0, 0.5, 0.7, 2.0, 2.0, 3.25]
    starts, achieved = await starts_of(
        captured(*offsets), CapturePacer(speed, clock=clock, sleep=clock.sleep), clock
    )
    first = starts["i0"]
    assert [starts[f"i{k}"] - first for k in range(len(offsets))] == pytest.approx(
        [s / speed for s in offsets]
    )
    assert achieved == pytest.approx((len(offsets) - 1) / (3.25 / speed))


async def test_capture_pace_never_catches_up_after_a_stall() -> None:
    """One slot and a request that takes 1 s: the next ones start late, then keep their gaps."""
    clock = FakeClock()
    items = captured(0.0, 0.1, 0.2, 0.3)
    starts, _ = await starts_of(
        items,
        CapturePacer(1.0, clock=clock, sleep=clock.sleep),
        clock,
        concurrency=1,
        work_s=1.0,
    )
    gaps = [starts[f"i{k + 1}"] - starts[f"i{k}"] for k in range(3)]
    # Each start is late (the slot was busy 1 s): released at once, the schedule re-anchored
    # there, so no burst makes up for lost time.
    assert gaps == pytest.approx([1.0, 1.0, 1.0])


async def test_capture_pace_releases_out_of_order_and_untimed_items_at_once() -> None:
    clock = FakeClock()
    items = [*captured(0.0, 1.0), Item("early", T0), Item("untimed", None)]
    items.append(Item("late", T0 + timedelta(seconds=1.5)))
    starts, _ = await starts_of(items, CapturePacer(1.0, clock=clock, sleep=clock.sleep), clock)
    assert starts["i1"] - starts["i0"] == pytest.approx(1.0)
    assert starts["early"] == starts["i1"]  # captured before the anchor: at once
    assert starts["untimed"] == starts["i1"]
    assert starts["late"] - starts["i0"] == pytest.approx(1.5)


def test_capture_pace_speed_must_be_positive() -> None:
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="pace speed must be > 0"):
            CapturePacer(bad)


def test_replay_pacer_picks_the_pace_and_its_pacer() -> None:
    """Both replayers (file and Kafka) choose pace and pacer with this one rule."""
    pace, pacer = replay_pacer(None, pace_speed=1.0, rate_per_s=5.0)
    assert pace is ReplayPace.RATE
    assert isinstance(pacer, RatePacer)
    assert pacer.rate_per_s == 5.0
    pace, pacer = replay_pacer(None, pace_speed=1.0, rate_per_s=None)
    assert pace is ReplayPace.UNPACED
    assert isinstance(pacer, RatePacer)
    pace, pacer = replay_pacer(ReplayPace.CAPTURE, pace_speed=2.0, rate_per_s=None)
    assert pace is ReplayPace.CAPTURE
    assert isinstance(pacer, CapturePacer)
    assert pacer.speed == 2.0
    given = RatePacer(1.0)
    assert replay_pacer(ReplayPace.CAPTURE, pace_speed=2.0, rate_per_s=None, pacer=given) == (
        ReplayPace.CAPTURE,
        given,
    )


# ----------------------------------------------------------------- rate, shortfall


async def test_rate_pacing_on_an_injected_clock_is_exact() -> None:
    clock = FakeClock()
    items = [Item(f"i{k}") for k in range(30)]
    starts, achieved = await starts_of(
        items, RatePacer(50.0, clock=clock, sleep=clock.sleep), clock
    )
    first = starts["i0"]
    assert [starts[f"i{k}"] - first for k in range(30)] == pytest.approx(
        [k / 50.0 for k in range(30)]
    )
    assert achieved == pytest.approx(50.0)


async def test_a_slow_target_is_a_measured_rate_shortfall() -> None:
    """500/s asked, one slot, 70 ms per request: about 14/s achieved — a shortfall."""
    clock = FakeClock()
    items = [Item(f"i{k}") for k in range(40)]
    _, achieved = await starts_of(
        items,
        RatePacer(500.0, clock=clock, sleep=clock.sleep),
        clock,
        concurrency=1,
        work_s=0.072,
    )
    assert achieved == pytest.approx(1 / 0.072)
    run = ReplayPass(
        source="capture_log",
        pace=ReplayPace.RATE,
        asked_rate_per_s=500.0,
        achieved_rate_per_s=achieved,
        measured_starts=40,
    )
    assert run.shortfall
    assert run.describe_load() == "13.9 req/s of 500 asked"
    on_target = run.model_copy(update={"achieved_rate_per_s": 0.96 * 500})
    assert not on_target.shortfall  # within 5%
    few = run.model_copy(update={"measured_starts": MIN_RATE_STARTS - 1})
    assert not few.shortfall  # a handful of starts makes no rate


async def test_warmups_and_skips_do_not_count_in_the_achieved_rate() -> None:
    clock = FakeClock()
    items = [Item("w0", measured=False), Item("w1", measured=False)]
    items += [Item("skip", paced=False, measured=False)]
    items += [Item(f"m{k}") for k in range(5)]
    starts, achieved = await starts_of(
        items, RatePacer(10.0, clock=clock, sleep=clock.sleep), clock
    )
    # The skip took no pacer slot: the measured ones follow the warm-up at the rate.
    assert starts["m0"] - starts["w1"] == pytest.approx(0.1)
    assert achieved == pytest.approx(10.0)


# ----------------------------------------------------------------- warm-up first


async def test_measured_requests_wait_until_every_warmup_request_completed() -> None:
    """Two targets, two warm-up requests each: no measured request of a target starts
    before both of its warm-up answers are in; the other target is not held back by it."""
    barrier = WarmupBarrier(2)
    release = {"a": asyncio.Event(), "b": asyncio.Event()}
    events: list[str] = []

    def item(name: str, target: str) -> Item:
        warm = barrier.assign(target)
        return Item(name, measured=not warm, ready=None if warm else lambda: barrier.ready(target))

    order = [("a", "a0"), ("b", "b0"), ("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")]
    items = [item(name, target) for target, name in order]
    items.append(item("b2", "b"))

    async def work(it: Item, index: int) -> str:
        target = it.name[0]
        events.append(f"start {it.name}")
        try:
            if not it.measured:
                await release[target].wait()
        finally:
            if not it.measured:
                barrier.completed(target)
        events.append(f"end {it.name}")
        return it.name

    async def on_result(it: Item, result: str) -> None:
        return None

    task = asyncio.ensure_future(
        run_paced(items, work, on_result, concurrency=8, plan=lambda it: it.dispatch)
    )
    while events.count("start a0") + events.count("start a1") < 2 or "start b1" not in events:  # noqa: ASYNC110 - steps the loop, no clock
        await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not any(e.startswith("start a2") for e in events)  # a's warm-up still running
    release["a"].set()
    while "start a3" not in events:  # noqa: ASYNC110 - steps the loop, no clock
        await asyncio.sleep(0)
    assert events.index("start a2") > max(events.index("end a0"), events.index("end a1"))
    assert "start b2" not in events  # b's warm-up is still held
    release["b"].set()
    stats = await task
    assert events.index("start b2") > max(events.index("end b0"), events.index("end b1"))
    assert (stats.started, stats.measured_starts, stats.warmup_starts) == (7, 3, 4)


async def test_warmup_barrier_opens_even_when_a_warmup_send_fails() -> None:
    barrier = WarmupBarrier(1)
    assert barrier.assign("t")
    assert not barrier.assign("t")
    assert not barrier.is_done("t")
    waiter = asyncio.ensure_future(barrier.ready("t"))
    await asyncio.sleep(0)
    assert not waiter.done()
    barrier.completed("t")  # what ExchangeReplayer.send does in its finally
    await asyncio.wait_for(waiter, 60)
    assert WarmupBarrier(0).is_done("anything")
    with pytest.raises(ValueError, match="warm-up requests must be >= 0"):
        WarmupBarrier(-1)
