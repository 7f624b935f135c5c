"""What the two replay drivers share: the capture-log
:class:`~shadoweval.replay.runner.ReplayRunner` and the
:class:`~shadoweval.replay.kafka_worker.KafkaReplayWorker` both replay into one run against
its targets, at a concurrency and a pace (:func:`~shadoweval.replay.scheduler.replay_pacer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, TypeVar

from shadoweval.records import ReplayPace
from shadoweval.replay.exchange_replay import ExchangeReplayer, ReplayReport, TargetSpec
from shadoweval.replay.scheduler import Pacer, replay_pacer
from shadoweval.storage import Repository

__all__ = ["ReplayDriver", "ReplayLoad"]

_Report = TypeVar("_Report", bound=ReplayReport)


class ReplayLoad(TypedDict, total=False):
    """The keyword arguments of :class:`ReplayDriver` that both drivers take unchanged: the
    load a pass is replayed at (documented there)."""

    concurrency: int
    rate_per_s: float | None
    warmup_requests: int
    pace: ReplayPace | None
    pace_speed: float
    pacer: Pacer | None


class ReplayDriver:
    """Base of the replay drivers: the run replayed into, its targets and the load.

    Args:
        repo: storage.
        run_id: an existing run.
        targets: the candidate and, optionally, a baseline-repeat target.
        concurrency: requests in flight, all targets together.
        rate_per_s: target start rate (``None``: as fast as concurrency allows).
        warmup_requests: the first N sends per target are flagged warm-up, and sent and
            completed before the target's first measured send.
        pace: left out, ``rate`` with ``rate_per_s`` and ``unpaced`` without;
            ``capture`` replays at the captured inter-arrival times divided by
            ``pace_speed`` (:class:`~shadoweval.replay.scheduler.CapturePacer`).
        pacer: a pacer to use instead (tests: one on an injected clock).

    Attributes:
        pace: the pace in effect; ``pacer`` the pacer that keeps it.

    Raises:
        ValueError: no target, ``concurrency`` < 1, or ``pace_speed`` / ``rate_per_s``
            not > 0.
    """

    def __init__(
        self,
        repo: Repository,
        run_id: str,
        targets: Sequence[TargetSpec],
        *,
        concurrency: int = 16,
        rate_per_s: float | None = None,
        warmup_requests: int = 0,
        pace: ReplayPace | None = None,
        pace_speed: float = 1.0,
        pacer: Pacer | None = None,
    ) -> None:
        if not targets:
            raise ValueError("at least one replay target is required")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
        self.repo = repo
        self.run_id = run_id
        self.targets = list(targets)
        self.concurrency = concurrency
        self.rate_per_s = rate_per_s
        self.pace_speed = pace_speed
        self.pace, self.pacer = replay_pacer(
            pace, pace_speed=pace_speed, rate_per_s=rate_per_s, pacer=pacer
        )
        self._replayer = ExchangeReplayer(run_id, warmup_requests=warmup_requests)

    def new_report(self, report: type[_Report]) -> _Report:
        """An empty report of this driver's run and load (``pace_speed`` only when the
        pace is ``capture``)."""
        return report(
            run_id=self.run_id,
            target_rate_per_s=self.rate_per_s,
            pace=self.pace,
            pace_speed=self.pace_speed if self.pace is ReplayPace.CAPTURE else None,
            concurrency=self.concurrency,
        )
