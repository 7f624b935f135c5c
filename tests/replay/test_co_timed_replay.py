"""Co-timed pairs (issue 29 item 2): an exchange sampled for the baseline replica is sent
to the replica and the candidate at the same moment, in an order drawn per exchange from a
seeded hash, and both outcomes say so.

Real mock-llm under uvicorn (one server per target) on SQLite; the requests are watched
through the client's transport seam (an ``httpx`` transport wrapping the real one), and the
start times read on the pacer's injected clock (never the wall clock).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.capture_log import LogEntry
from shadoweval.records import ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.co_timed import candidate_first
from shadoweval.replay.scheduler import RatePacer
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_replay_runner import (
    CANDIDATE,
    candidate,
    exchanges_for,
    new_run,
    repeat,
    replay,
)

pytestmark = pytest.mark.anyio


class FakeClock:
    """A monotonic clock that only the pacer's sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class Watch(httpx.AsyncBaseTransport):
    """The real transport, noting each chat request as it starts: (target, prompt, clock
    time) in start order, and the most requests of both targets in flight at once."""

    def __init__(self, target: ReplayTarget, log: Log) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._target = target
        self._log = log

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self._log.started(self._target, body["messages"][-1]["content"])
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self._log.in_flight -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Ended(response.stream, self._log),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Ended(httpx.AsyncByteStream):
    """A response body that takes its request out of flight when it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, log: Log) -> None:
        self._inner, self._log, self._open = inner, log, True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._inner:
            yield piece

    async def aclose(self) -> None:
        if self._open:
            self._open = False
            self._log.in_flight -= 1
        await self._inner.aclose()


class Log:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.starts: list[tuple[ReplayTarget, str, float]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def started(self, target: ReplayTarget, prompt: str) -> None:
        self.starts.append((target, prompt, self.clock()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)


@pytest.fixture(scope="module")
def rows(llama3_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama3_rows[:24]


async def run_pair(
    repo: Repository,
    serve: ServeFn,
    rows: list[RecordedRow],
    *,
    share: float,
    concurrency: int,
    rate_per_s: float | None = 4.0,
) -> tuple[str, Log, Any]:
    exchanges = exchanges_for(rows)
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    clock = FakeClock()
    log = Log(clock)
    run_id = new_run(repo)
    with serve(mock_app(rows, model_name=CANDIDATE.name)) as cand, serve(mock_app(rows)) as rep:
        targets = [
            candidate(CandidateClient(cand.url, transport=Watch(ReplayTarget.CANDIDATE, log))),
            repeat(
                CandidateClient(rep.url, transport=Watch(ReplayTarget.BASELINE_REPEAT, log)), share
            ),
        ]
        pacer = RatePacer(rate_per_s, clock=clock, sleep=clock.sleep)
        report = await replay(repo, run_id, targets, entries, concurrency=concurrency, pacer=pacer)
    return run_id, log, report


async def test_replica_and_candidate_start_at_the_same_moment(
    repo: Repository, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    run_id, log, report = await run_pair(repo, serve, rows, share=1.0, concurrency=8)
    started: dict[str, dict[ReplayTarget, float]] = {}
    for target, prompt, at in log.starts:
        started.setdefault(prompt, {})[target] = at
    assert len(started) == len(rows)
    for prompt, times in started.items():
        # The same release of the pacer: the replica's start is the candidate's.
        assert times[ReplayTarget.CANDIDATE] == times[ReplayTarget.BASELINE_REPEAT], prompt
    # The pair counts as two requests at the asked rate (4/s): 48 starts 0.25 s apart.
    assert dict(report.sent) == {"candidate": 24, "baseline_repeat": 24}
    assert report.co_timed == 24
    for target in ReplayTarget:
        outcomes = repo.load_outcomes(run_id, target)
        assert len(outcomes) == 24
        assert all(o.co_timed for o in outcomes), target
        # Each send's wall-clock start is stored (the replay order the latency checks
        # read), taken before the answer came back.
        for o in outcomes:
            assert o.sent_at is not None, o
            assert o.sent_at <= o.replayed_at, o


async def test_the_send_order_is_a_seeded_hash_per_exchange(
    repo: Repository, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    run_id, log, _ = await run_pair(repo, serve, rows, share=1.0, concurrency=8)
    first: dict[str, ReplayTarget] = {}
    for target, prompt, _ in log.starts:
        first.setdefault(prompt, target)
    by_prompt = {
        orjson.loads(e.request.body or "{}")["messages"][-1]["content"]: e.exchange_id
        for e in exchanges_for(rows)
    }
    for prompt, target in first.items():
        expected = (
            ReplayTarget.CANDIDATE
            if candidate_first(run_id, by_prompt[prompt])
            else ReplayTarget.BASELINE_REPEAT
        )
        assert target == expected, prompt
    # Neither side always goes first (a fixed order is a bias on a loaded host).
    assert set(Counter(first.values())) == set(ReplayTarget)
    ids = [f"ex-{i:05d}" for i in range(2000)]
    share = sum(candidate_first("run", i) for i in ids) / len(ids)
    assert 0.45 < share < 0.55
    assert [candidate_first("run", i) for i in ids] == [candidate_first("run", i) for i in ids]
    assert [candidate_first("run", i) for i in ids] != [candidate_first("other", i) for i in ids]


async def test_exchanges_not_sampled_for_the_replica_are_not_co_timed(
    repo: Repository, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    run_id, _, report = await run_pair(repo, serve, rows, share=0.5, concurrency=8)
    repeats = {o.exchange_id for o in repo.load_outcomes(run_id, ReplayTarget.BASELINE_REPEAT)}
    assert 0 < len(repeats) < 24
    assert report.co_timed == len(repeats)
    for o in repo.load_outcomes(run_id, ReplayTarget.CANDIDATE):
        assert o.co_timed == (o.exchange_id in repeats)


async def test_at_concurrency_one_the_pair_is_sent_back_to_back(
    repo: Repository, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    run_id, log, report = await run_pair(
        repo, serve, rows[:6], share=1.0, concurrency=1, rate_per_s=None
    )
    assert log.max_in_flight == 1  # --concurrency is a bound on requests in flight
    prompts = [prompt for _, prompt, _ in log.starts]
    # One right after the other: the two sends of an exchange are adjacent.
    assert [prompts[i] == prompts[i + 1] for i in range(0, 12, 2)] == [True] * 6
    assert report.co_timed == 6
    assert all(o.co_timed for o in repo.load_outcomes(run_id, ReplayTarget.BASELINE_REPEAT))
