"""ReplayRunner on SQLite and PostgreSQL: routes (legacy completions replayed, the Responses
API skipped with its reason, coverage by route), warm-up before measured, the captured pace.

The candidate is mock-llm (a test double) through ``httpx.ASGITransport``; a "cold replica"
holds its first answers until the test releases them, so the order is asserted on events.
Pacing runs on an injected clock (:class:`tests.replay.test_replay_pacing.FakeClock`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.capture_log import LogEntry
from shadoweval.records import (
    Exchange,
    ModelIdentity,
    ReplayErrorKind,
    ReplayPace,
    ReplayPass,
    ReplayTarget,
    RequestRecord,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.runner import ReplayReport, ReplayRunner, TargetSpec
from shadoweval.replay.scheduler import CapturePacer
from shadoweval.storage import Repository
from shadoweval.storage.queries import skip_reason_code
from shadoweval.tables import RecordedRow
from tests.replay.conftest import chat_body, make_exchange, mock_app
from tests.replay.test_replay_pacing import FakeClock, RecordingPacer

pytestmark = pytest.mark.anyio

BASELINE = ModelIdentity(name="Meta-Llama-3-8B-Instruct")
CANDIDATE = ModelIdentity(name="candidate-v2")
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def new_run(repo: Repository) -> str:
    return repo.create_run(
        name="routes",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id


def target(app: Any, which: ReplayTarget = ReplayTarget.CANDIDATE) -> TargetSpec:
    client = CandidateClient("http://candidate", transport=httpx.ASGITransport(app=app))
    return TargetSpec(which, client, CANDIDATE)


async def run(
    repo: Repository, run_id: str, specs: list[TargetSpec], exchanges: Any, **kw: Any
) -> ReplayReport:
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    for spec in specs:
        await spec.client.start()
    try:
        return await ReplayRunner(repo, run_id, specs, progress=False, **kw).run(entries)
    finally:
        for spec in specs:
            await spec.client.stop()


def completion_exchange(row: RecordedRow, *, stream: bool, i: int) -> Exchange:
    prompt = row.messages[-1]["content"]
    body = {"model": "live", "prompt": prompt, "max_tokens": 512, "stream": stream}
    return Exchange(
        exchange_id=f"cmpl-{i:03d}",
        captured_at=T0 + timedelta(seconds=i),
        route="/v1/completions",
        task_type="completion",
        request=RequestRecord(path="/v1/completions", body=orjson.dumps(body).decode()),
        baseline_model=BASELINE,
    )


# ------------------------------------------------------------------ routes


async def test_legacy_completions_are_replayed_and_embeddings_skipped_naming_the_route(
    repo: Repository, llama31_rows: list[RecordedRow]
) -> None:
    rows = llama31_rows[:6]
    completions = [completion_exchange(r, stream=i % 2 == 0, i=i) for i, r in enumerate(rows)]
    responses = [
        make_exchange({"model": "m", "input": "hi"}, path="/v1/embeddings", task_type="completion")
        for _ in range(3)
    ]
    slashed = [
        make_exchange(
            chat_body(rows[0].messages[-1]["content"]),
            path="/v1/chat/completions/",
            task_type="chat",
        ).model_copy(update={"route": "/v1/chat/completions"})
    ]
    run_id = new_run(repo)
    app = mock_app(llama31_rows)
    report = await run(repo, run_id, [target(app)], completions + responses + slashed)

    assert dict(report.sent) == {"candidate": 7}
    assert dict(report.skipped) == {"candidate": 3}
    assert dict(report.ok) == {"candidate": 7}
    outcomes = {o.exchange_id: o for o in repo.load_outcomes(run_id)}
    for row, exchange in zip(rows, completions, strict=True):
        outcome = outcomes[exchange.exchange_id]
        assert outcome.error_kind is None, outcome.error_detail
        assert outcome.response is not None
        assert outcome.response.text == row.output_text  # choices[0].text, reassembled
        assert outcome.response.streamed is (exchange.request.json_body() or {})["stream"]
        assert outcome.timings.e2e_ms is not None
    for exchange in responses:
        skipped = outcomes[exchange.exchange_id]
        assert skipped.error_kind is ReplayErrorKind.SKIPPED
        assert skipped.error_detail == "route not replayable: /v1/embeddings"
    assert outcomes[slashed[0].exchange_id].error_kind is None

    coverage = repo.coverage_counts(run_id)
    assert sorted(coverage.per_route) == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
    ]
    responses_route = coverage.per_route["/v1/embeddings"]
    assert (responses_route.captured, responses_route.replayed, responses_route.skipped) == (
        3,
        0,
        3,
    )
    assert responses_route.paired == 0
    [(reason, count)] = responses_route.skip_reasons.items()
    assert count == 3
    assert reason == "route not replayable: /v1/embeddings"
    done = coverage.per_route["/v1/completions"]
    assert (done.captured, done.replayed, done.skipped, done.skip_reasons) == (6, 6, 0, {})
    assert list(coverage.unevaluated_routes()) == [
        "/v1/chat/completions",  # replayed, not scored yet (no compare in this test)
        "/v1/completions",
        "/v1/embeddings",
    ]


async def test_skip_reasons_are_grouped_by_kind_per_route(repo: Repository) -> None:
    not_json = [make_exchange("not json") for _ in range(2)]
    not_chat = [make_exchange({"model": "m", "prompt": f"p{i}"}) for i in range(3)]
    run_id = new_run(repo)
    await run(repo, run_id, [target(mock_app([]))], not_json + not_chat)
    route = repo.coverage_counts(run_id).per_route["/v1/chat/completions"]
    assert (route.captured, route.replayed, route.skipped) == (5, 0, 5)
    assert route.skip_reasons == {
        "request is not a chat completion: messages: Field required": 3,
        "request body is not a JSON object": 2,
    }
    assert skip_reason_code("size: request body 17000000 bytes > 16777216") == "size"
    assert skip_reason_code(None) == "skipped"


# ------------------------------------------------------------------ warm-up first


class ColdReplica:
    """Wraps mock-llm: the first ``cold`` requests are held until :attr:`warm` is set; the
    order of arrivals and answers is recorded by exchange id."""

    def __init__(self, app: Any, cold: int) -> None:
        self.app = app
        self.cold = cold
        self.warm = asyncio.Event()
        self.events: list[tuple[str, str]] = []
        self.held = 0
        self.all_held = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        exchange_id = headers.get(b"x-shadow-eval-exchange-id", b"?").decode()
        self.events.append(("arrive", exchange_id))
        if self.held < self.cold:
            self.held += 1
            if self.held == self.cold:
                self.all_held.set()
            await self.warm.wait()
        await self.app(scope, receive, send)
        self.events.append(("answer", exchange_id))


async def test_warmup_requests_complete_before_the_first_measured_one_is_sent(
    repo: Repository, llama31_rows: list[RecordedRow]
) -> None:
    rows = llama31_rows[:12]
    exchanges = [
        make_exchange(chat_body(r.messages[-1]["content"])).model_copy(
            update={"exchange_id": f"ex-{i:03d}"}
        )
        for i, r in enumerate(rows)
    ]
    replica = ColdReplica(mock_app(llama31_rows), cold=3)
    run_id = new_run(repo)
    task = asyncio.ensure_future(
        run(repo, run_id, [target(replica)], exchanges, concurrency=8, warmup_requests=3)
    )
    await asyncio.wait_for(replica.all_held.wait(), 60)
    for _ in range(50):  # room for measured requests to go out, were they not held back
        await asyncio.sleep(0)
    assert [e for e in replica.events if e[0] == "arrive"] == [
        ("arrive", f"ex-{i:03d}") for i in range(3)
    ]
    replica.warm.set()
    report = await asyncio.wait_for(task, 120)

    warm_ids = {f"ex-{i:03d}" for i in range(3)}
    last_warm_answer = max(i for i, e in enumerate(replica.events) if e[1] in warm_ids)
    first_measured = min(
        i for i, e in enumerate(replica.events) if e[0] == "arrive" and e[1] not in warm_ids
    )
    assert first_measured > last_warm_answer
    flagged = {o.exchange_id for o in repo.load_outcomes(run_id) if o.warmup}
    assert flagged == warm_ids
    assert (report.warmup, report.warmup_starts, report.measured_starts) == (3, 3, 9)


# ------------------------------------------------------------------ the captured pace


async def test_runner_replays_at_the_captured_pace_and_records_the_load(
    repo: Repository, llama31_rows: list[RecordedRow]
) -> None:
    offsets = [0.0, 0.4, 0.5, 1.5, 3.0, 3.2]
    exchanges = [
        make_exchange(chat_body(r.messages[-1]["content"])).model_copy(
            update={"captured_at": T0 + timedelta(seconds=s)}
        )
        for r, s in zip(llama31_rows, offsets, strict=False)
    ]
    clock = FakeClock()
    pacer = RecordingPacer(CapturePacer(2.0, clock=clock, sleep=clock.sleep))
    run_id = new_run(repo)
    report = await run(
        repo,
        run_id,
        [target(mock_app(llama31_rows))],
        exchanges,
        concurrency=1,
        pace=ReplayPace.CAPTURE,
        pace_speed=2.0,
        pacer=pacer,
    )
    first = pacer.releases[0]
    assert [t - first for t in pacer.releases] == pytest.approx([s / 2.0 for s in offsets])
    assert report.pace is ReplayPace.CAPTURE
    assert report.pace_speed == 2.0
    assert report.asked_rate_per_s == pytest.approx(5 / 1.6)
    assert report.achieved_rate_per_s == pytest.approx(5 / 1.6)
    assert not report.rate_shortfall
    assert report.as_dict()["pace"] == "capture"

    repo.record_replay_pass(run_id, report.replay_pass("capture_log"))
    [stored] = repo.coverage_counts(run_id).replay_passes
    assert (stored.pace, stored.pace_speed, stored.measured_starts) == (ReplayPace.CAPTURE, 2.0, 6)
    assert stored.achieved_rate_per_s == pytest.approx(5 / 1.6)


async def test_replay_passes_accumulate_with_the_run(repo: Repository) -> None:
    run_id = new_run(repo)
    slow = ReplayPass(
        source="kafka",
        pace=ReplayPace.RATE,
        asked_rate_per_s=500.0,
        achieved_rate_per_s=13.9,
        measured_starts=400,
    )
    repo.record_replay_pass(run_id, slow)
    repo.record_replay_pass(run_id, slow.model_copy(update={"achieved_rate_per_s": 499.0}))
    coverage = repo.coverage_counts(run_id)
    assert [p.achieved_rate_per_s for p in coverage.replay_passes] == [13.9, 499.0]
    assert coverage.load_shortfalls() == (slow,)
    run = repo.get_run(run_id)
    assert run is not None
    assert len(run.settings["replay_passes"]) == 2  # type: ignore[arg-type]
