"""The Kafka replay worker co-times the replica and re-sends the environment's failures
(issue 29 items 1 and 2), as the capture-log replay does.

A real Tansu broker, mock-llm under uvicorn (one server per target) and the database; the
requests are watched through the client's transport seam (an ``httpx`` transport around
the real one: :class:`~tests.replay.test_co_timed_replay.Watch`), and the candidate's
failures are made there too (:class:`Broken`: HTTP 503 and refused connections for chosen
prompts). Every worker runs until its topic is idle; nothing waits on a clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.worker import run_compare
from shadoweval.config import WorkerSettings
from shadoweval.records import (
    Exchange,
    HumanLabel,
    LabelValue,
    ReplayOutcome,
    ReplayTarget,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.co_timed import candidate_first
from shadoweval.replay.runner import TargetSpec
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow
from tests.kafka_broker import TansuBroker
from tests.replay.conftest import ServeFn, mock_app
from tests.replay.test_co_timed_replay import FakeClock, Log, Watch
from tests.replay.test_kafka_rebalance import conversation, key_of
from tests.replay.test_kafka_worker import CANDIDATE, REPEAT, Harness, line, new_run, produce
from tests.replay.test_replay_runner import T0, exchanges_for

pytestmark = [pytest.mark.anyio, pytest.mark.kafka]


@pytest.fixture
def harness(kafka_broker: TansuBroker, sqlite_repo: Repository) -> Harness:
    return Harness(
        kafka_broker,
        sqlite_repo,
        new_run(sqlite_repo),
        WorkerSettings(max_buffered=32, fetch_max_records=16, commit_interval_s=0.2),
    )


@pytest.fixture(scope="module")
def rows(llama3_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama3_rows[:24]


def prompt_of(exchange: Exchange) -> str:
    content = orjson.loads(exchange.request.body or "{}")["messages"][-1]["content"]
    assert isinstance(content, str)
    return content


def watched(url: str, target: ReplayTarget, log: Log, share: float = 1.0) -> TargetSpec:
    client = CandidateClient(url, transport=Watch(target, log))
    if target is ReplayTarget.CANDIDATE:
        return TargetSpec(target, client, CANDIDATE, model_name=CANDIDATE.name)
    return TargetSpec(target, client, REPEAT, share=share)


async def co_timed_run(
    harness: Harness,
    serve: ServeFn,
    rows: list[RecordedRow],
    exchanges: Sequence[Exchange],
    *,
    concurrency: int,
    keys: Sequence[bytes] = (),
) -> tuple[Log, Any, dict[tuple[str, ReplayTarget], ReplayOutcome]]:
    """Replay ``exchanges`` to a candidate and a replica sampled at share 1.0."""
    await produce(harness.broker.bootstrap, [line(e) for e in exchanges], keys=keys)
    log = Log(FakeClock())  # only the start order is read, never a time
    with serve(mock_app(rows, model_name=CANDIDATE.name)) as cand, serve(mock_app(rows)) as rep:
        _, report = await harness.run(
            [
                watched(cand.url, ReplayTarget.CANDIDATE, log),
                watched(rep.url, ReplayTarget.BASELINE_REPEAT, log),
            ],
            concurrency=concurrency,
            warmup_requests=2,
        )
    stored = {(o.exchange_id, o.target): o for o in harness.repo.load_outcomes(harness.run_id)}
    return log, report, stored


def first_sent(log: Log, exchanges: Sequence[Exchange]) -> dict[str, ReplayTarget]:
    """Per exchange id, the target whose request reached its transport first."""
    ids = {prompt_of(e): e.exchange_id for e in exchanges}
    first: dict[str, ReplayTarget] = {}
    for target, prompt, _ in log.starts:
        first.setdefault(ids[prompt], target)
    return first


# ---------------------------------------------------------------------- co-timing


async def test_a_replica_sample_is_sent_with_the_candidate_in_a_seeded_order(
    harness: Harness, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    exchanges = exchanges_for(rows)
    log, report, stored = await co_timed_run(harness, serve, rows, exchanges, concurrency=8)

    assert dict(report.ok) == {"candidate": 24, "baseline_repeat": 24}
    assert report.co_timed == 24  # the two warm-up pairs too: both sides are warm-up
    assert report.as_dict()["co_timed"] == 24
    assert len(stored) == 48
    assert all(o.co_timed for o in stored.values())
    assert sum(o.warmup for o in stored.values()) == 4
    first = first_sent(log, exchanges)
    for e in exchanges:
        cand = stored[(e.exchange_id, ReplayTarget.CANDIDATE)]
        rep = stored[(e.exchange_id, ReplayTarget.BASELINE_REPEAT)]
        expected = (
            ReplayTarget.CANDIDATE
            if candidate_first(harness.run_id, e.exchange_id)
            else ReplayTarget.BASELINE_REPEAT
        )
        assert first[e.exchange_id] is expected, e.exchange_id
        one, two = (cand, rep) if expected is ReplayTarget.CANDIDATE else (rep, cand)
        # Started together: the first written first, and each sent before either answered.
        assert one.sent_at is not None
        assert two.sent_at is not None
        assert one.sent_at <= two.sent_at <= min(one.replayed_at, two.replayed_at), e
    # Neither side always goes first (a fixed order is a bias on a loaded host).
    assert set(Counter(first.values())) == set(ReplayTarget)


async def test_at_concurrency_one_a_pair_goes_back_to_back_under_one_slot(
    harness: Harness, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    """A semaphore of one cannot be taken twice: the pair holds one slot and sends its
    two requests one after the other (the worker goes idle instead of hanging)."""
    exchanges = exchanges_for(rows[:8])
    log, report, stored = await co_timed_run(harness, serve, rows, exchanges, concurrency=1)

    assert report.co_timed == 8
    assert log.max_in_flight == 1
    assert all(o.co_timed for o in stored.values())
    assert len(stored) == 16
    ids = {prompt_of(e): e.exchange_id for e in exchanges}
    order = [ids[prompt] for _, prompt, _ in log.starts]
    assert [order[i] == order[i + 1] for i in range(0, 16, 2)] == [True] * 8
    first = first_sent(log, exchanges)
    for e in exchanges:
        cand = stored[(e.exchange_id, ReplayTarget.CANDIDATE)]
        rep = stored[(e.exchange_id, ReplayTarget.BASELINE_REPEAT)]
        one, two = (cand, rep) if first[e.exchange_id] is ReplayTarget.CANDIDATE else (rep, cand)
        assert first[e.exchange_id] is (
            ReplayTarget.CANDIDATE
            if candidate_first(harness.run_id, e.exchange_id)
            else ReplayTarget.BASELINE_REPEAT
        )
        assert two.sent_at is not None
        assert one.replayed_at <= two.sent_at


async def test_pairs_take_both_slots_at_once_at_concurrency_two(
    harness: Harness, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    """Two pairs each holding one of the two slots would wait for each other forever: a
    pair takes both or none, and ``--concurrency`` still bounds the requests in flight."""
    exchanges = exchanges_for(rows[:16])
    log, report, stored = await co_timed_run(harness, serve, rows, exchanges, concurrency=2)

    assert report.co_timed == 16
    assert len(stored) == 32
    assert all(o.co_timed for o in stored.values())
    assert log.max_in_flight <= 2


async def test_a_pair_waits_for_its_session_s_previous_turn_on_both_targets(
    harness: Harness, serve: ServeFn, rows: list[RecordedRow]
) -> None:
    exchanges = conversation(rows[:12], sessions=3)
    _, report, stored = await co_timed_run(
        harness, serve, rows, exchanges, concurrency=8, keys=[key_of(e) for e in exchanges]
    )

    assert report.co_timed == 12
    for earlier, later in zip(exchanges, exchanges[3:], strict=False):
        assert earlier.session_key_hash == later.session_key_hash
        done = max(stored[(earlier.exchange_id, t)].replayed_at for t in ReplayTarget)
        for target in ReplayTarget:
            sent_at = stored[(later.exchange_id, target)].sent_at
            assert sent_at is not None
            assert done <= sent_at, (later.exchange_id, target)


# -------------------------------------------------------- environment failures


class Broken(httpx.AsyncBaseTransport):
    """The real transport, except for chosen prompts: HTTP 503 (an overloaded server) or a
    refused connection, as a misplaced or overloaded candidate gives them."""

    def __init__(self, unavailable: set[str], refused: set[str]) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._unavailable, self._refused = unavailable, refused

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        prompt = orjson.loads(request.content)["messages"][-1]["content"]
        if prompt in self._refused:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if prompt in self._unavailable:
            body = {"error": {"message": "overloaded", "type": "server_error"}}
            return httpx.Response(503, json=body, request=request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def label(run_id: str, exchange_id: str, task_type: str) -> HumanLabel:
    return HumanLabel(
        run_id=run_id,
        exchange_id=exchange_id,
        task_type=task_type,
        label=LabelValue.CANDIDATE_WORSE,
        note="checked by hand",
        labeller="ana",
        labelled_at=T0,
        source="dashboard",
    )


async def test_a_rerun_resends_exactly_the_environment_failures_and_keeps_ground_truth(
    harness: Harness,
    serve: ServeFn,
    rows: list[RecordedRow],
    llama31_rows: list[RecordedRow],
) -> None:
    h = harness
    exchanges = exchanges_for(rows[:12])
    unavailable = {e.exchange_id for e in exchanges[2:5]}
    refused = {e.exchange_id for e in exchanges[7:9]}
    failed = unavailable | refused
    prompts = {e.exchange_id: prompt_of(e) for e in exchanges}
    await produce(h.broker.bootstrap, [line(e) for e in exchanges])
    app = mock_app(llama31_rows, model_name=CANDIDATE.name)
    with serve(app) as server:
        broken = CandidateClient(
            server.url,
            connect_retries=0,
            transport=Broken({prompts[i] for i in unavailable}, {prompts[i] for i in refused}),
        )
        spec = TargetSpec(ReplayTarget.CANDIDATE, broken, CANDIDATE, model_name=CANDIDATE.name)
        _, first = await h.run([spec])
        assert dict(first.errors) == {"http_status": 3, "connect": 2}
        assert h.repo.environment_failed_ids(h.run_id, ReplayTarget.CANDIDATE) == failed
        # Scored and labelled before the re-run: the user's ground truth on a failed pair.
        run_compare(h.repo, h.run_id, HashingEncoder())
        scores = {s.exchange_id: s for s in h.repo.load_pair_scores(h.run_id)}
        assert {i for i, s in scores.items() if s.candidate_infra_error} == failed
        labelled = sorted(unavailable)[0]
        h.repo.save_labels([label(h.run_id, labelled, scores[labelled].task_type)])
        assert app.chat_requests == 7

        # The setup is fixed; the group's offsets are reset (another group reads the topic
        # from the start): only the failures are sent again.
        rerun = Harness(h.broker, h.repo, h.run_id, h.settings, "offsets-reset")
        healthy = CandidateClient(server.url)
        spec = TargetSpec(ReplayTarget.CANDIDATE, healthy, CANDIDATE, model_name=CANDIDATE.name)
        _, second = await rerun.run([spec])
    assert app.chat_requests == 7 + len(failed)
    assert second.lines_read == 12
    assert dict(second.retried) == {"candidate": len(failed)}
    assert dict(second.sent) == {"candidate": len(failed)}
    assert second.already_done == 12 - len(failed)
    assert second.duplicates == 0
    outcomes = {o.exchange_id: o for o in h.repo.load_outcomes(h.run_id)}
    assert len(outcomes) == 12
    assert {i for i, o in outcomes.items() if o.error_kind is not None} == set()
    assert h.repo.environment_failed_ids(h.run_id, ReplayTarget.CANDIDATE) == set()
    # The replaced pairs are scored again from the new outcomes; their label stays.
    assert h.repo.pair_exchange_ids(h.run_id, only_unscored=True) == sorted(failed)
    assert [lbl.exchange_id for lbl in h.repo.load_labels(h.run_id)] == [labelled]
    run_compare(h.repo, h.run_id, HashingEncoder())
    scores = {s.exchange_id: s for s in h.repo.load_pair_scores(h.run_id)}
    assert len(scores) == 12
    assert not any(s.candidate_error or s.candidate_infra_error for s in scores.values())
    assert all(s.similarity is not None for s in scores.values())
