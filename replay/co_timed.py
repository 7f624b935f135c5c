"""Co-timed pairs: the candidate and the baseline replica timed under the same conditions.

A latency ratio candidate / baseline means something only when both sides were measured
on the same hardware, under the same load, at the same moment. The live or recorded
baseline was not (another host, another day, another load), and neither is a replica
replay sent at another time: on a loaded replay host two identical 20 ms servers gave a
p50 ratio of 1.71 against the recorded latencies and 0.53 against a replica replayed
apart from the candidate (issue 29 item 2).

So an exchange sampled for the baseline replica is sent to the replica and to the
candidate together (:class:`CoTimedPair`, one scheduler item of two requests,
:attr:`~shadoweval.replay.scheduler.Dispatch.requests`):

* both sends are started at the same moment (two tasks created one after the other), or,
  at ``--concurrency 1``, back to back (the second as soon as the first finished);
* the order — which one is written first — is drawn per exchange from a seeded hash
  (:func:`candidate_first`: SHA-256 of the seed and the exchange id), so neither side is
  always first (a fixed order is itself a bias when the host is loaded);
* both outcomes carry ``co_timed=True`` (:class:`~shadoweval.records.ReplayOutcome`);
  compare marks the pair's latency source ``co_timed`` and the gate's latency checks are
  gated on those pairs only (:mod:`shadoweval.stats.checks.latency`).

Only two sends of the same kind pair up: both are requests (a skip or a request that
cannot be built is its own item), and both warm-up or both measured.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from shadoweval.records import ReplayOutcome, ReplayTarget
from shadoweval.replay.exchange_replay import ExchangeReplayer, PreparedReplay, ReplayFailure
from shadoweval.replay.scheduler import Dispatch

__all__ = ["CoTimedPair", "ReplayItem", "SentReplay", "candidate_first", "co_time", "send_item"]

SentReplay = tuple[PreparedReplay, ReplayOutcome | ReplayFailure]
"""One send and what it gave."""


def candidate_first(seed: str, exchange_id: str) -> bool:
    """Whether the candidate's request of ``exchange_id`` is sent before the replica's:
    the low bit of SHA-256(``seed`` NUL ``exchange_id``) — deterministic for a seed (the
    run id by default), half and half over exchanges, and different across seeds."""
    digest = hashlib.sha256(f"{seed}\0{exchange_id}".encode()).digest()
    return digest[0] & 1 == 0


@dataclass(frozen=True, slots=True)
class CoTimedPair:
    """One exchange's candidate and replica sends, in the order they are written.

    ``first`` and ``second`` are the two prepared sends (``first`` is written first);
    ``together``: started at the same moment (``False``: back to back, at concurrency 1).
    """

    first: PreparedReplay
    second: PreparedReplay
    together: bool = True

    @property
    def sends(self) -> tuple[PreparedReplay, PreparedReplay]:
        """Both sends, in the order they are written."""
        return self.first, self.second

    @property
    def dispatch(self) -> Dispatch:
        """Two requests, paced, measured when the sends are; ready when both targets'
        warm-up requests have completed."""
        readies = [r for r in (p.dispatch.ready for p in self.sends) if r is not None]
        return Dispatch(
            measured=not self.first.warmup,
            ready=_all(readies) if readies else None,
            at=self.first.exchange.captured_at,
            requests=2,
        )


ReplayItem = PreparedReplay | CoTimedPair
"""What the capture-log runner schedules: one send, or a co-timed pair of two."""


def _all(readies: Sequence[Callable[[], Awaitable[None]]]) -> Callable[[], Awaitable[None]]:
    async def ready() -> None:
        for wait in readies:
            await wait()

    return ready


def _pairable(a: PreparedReplay, b: PreparedReplay) -> bool:
    return not a.skipped and not b.skipped and a.warmup == b.warmup


def co_time(
    prepared: Sequence[PreparedReplay], *, seed: str, together: bool = True
) -> list[ReplayItem]:
    """The scheduler items of one exchange's prepared sends: the candidate's and the
    replica's as one :class:`CoTimedPair` (order from :func:`candidate_first`) when both
    are requests of the same kind (both warm-up or both measured); every other send alone.
    """
    by_target = {p.spec.target: p for p in prepared}
    cand = by_target.get(ReplayTarget.CANDIDATE)
    rep = by_target.get(ReplayTarget.BASELINE_REPEAT)
    if cand is None or rep is None or not _pairable(cand, rep):
        return list(prepared)
    first, second = (cand, rep) if candidate_first(seed, cand.exchange.exchange_id) else (rep, cand)
    pair = CoTimedPair(first, second, together)
    return [pair, *(p for p in prepared if p is not cand and p is not rep)]


async def send_item(replayer: ExchangeReplayer, item: ReplayItem) -> list[SentReplay]:
    """Send one item: a single send, or both sends of a pair (started together, or back
    to back), each outcome marked ``co_timed``.

    Raises:
        ReplayError: a target cannot be used at all (the other send of a pair is
            cancelled).
    """
    if isinstance(item, PreparedReplay):
        return [(item, await replayer.send(item))]
    if not item.together:
        first = await replayer.send(item.first, co_timed=True)
        return [(item.first, first), (item.second, await replayer.send(item.second, co_timed=True))]
    # Created one right after the other: the first task writes its request first.
    tasks = [asyncio.ensure_future(replayer.send(p, co_timed=True)) for p in item.sends]
    try:
        results = await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return list(zip(item.sends, results, strict=True))
