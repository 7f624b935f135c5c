"""TTFC and cache hits from capture and replay through pair scoring into the gate.

Real parts end to end: the builder turns recorded SSE bytes (reasoning, then content; an
``X-Cache: HIT`` header) into the live Exchange, the replay client reads a candidate's
stream through an ``httpx.MockTransport`` seam, :func:`shadoweval.compare.pair.score_pairs` pairs
them, and the gate's frame and verdict count the cached pair.
"""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import orjson
import pytest

from shadoweval.compare.encoders import HashingEncoder
from shadoweval.compare.pair import PairInput, score_pairs
from shadoweval.records import (
    Coverage,
    Exchange,
    ModelIdentity,
    ReplayOutcome,
    ReplayTarget,
    Timings,
    TimingSource,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.rewrite import ReplayRequest, build_replay_request
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.policy import GatePolicy
from tests.capture.test_builder import builder, exchange_of, make_raw, split_events
from tests.capture.test_builder_timing import reasoning_events

pytestmark = pytest.mark.anyio
RUN = "run-t"
SENT_AT = datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)


def live_exchange(*, cached: bool) -> Exchange:
    headers = [("X-Cache", "HIT"), ("Age", "4")] if cached else [("X-Cache", "MISS")]
    raw = make_raw(chunks=split_events(reasoning_events("reasoning")), response_headers=headers)
    return exchange_of(builder().build(raw))


async def candidate_outcome(exchange: Exchange, headers: dict[str, str]) -> ReplayOutcome:
    def piece(delta: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({"model": "cand", "choices": [choice]}) + b"\n\n"

    def handler(_: httpx.Request) -> httpx.Response:
        body = (
            piece({"reasoning_content": "hmm"})
            + piece({"content": "Die Antwort: 42 🙂"}, finish="stop")
            + b"data: [DONE]\n\n"
        )
        return httpx.Response(
            200, headers={"content-type": "text/event-stream", **headers}, content=body
        )

    request = build_replay_request(exchange, api_key="k")
    assert isinstance(request, ReplayRequest)
    async with CandidateClient("http://mock", transport=httpx.MockTransport(handler)) as client:
        result = await client.send(request)
    return ReplayOutcome(
        run_id=RUN,
        exchange_id=exchange.exchange_id,
        model=ModelIdentity(name="cand"),
        response=result.response,
        timings=result.timings,
        error_kind=result.error_kind,
    )


async def test_ttfc_and_cache_hits_reach_the_pair_score_and_the_verdict() -> None:
    live = live_exchange(cached=True)
    assert live.response is not None
    assert live.response.cache_hit
    candidate = await candidate_outcome(live, {"cf-cache-status": "MISS"})
    [score] = score_pairs([PairInput(live, candidate)], HashingEncoder(), run_id=RUN)
    assert score.ttft_ms.baseline == pytest.approx(120.0)
    assert score.ttfc_ms.baseline == pytest.approx(950.0)
    assert score.ttfc_ms.candidate is not None
    assert score.ttft_ms.candidate is not None
    assert score.ttfc_ms.candidate >= score.ttft_ms.candidate
    assert (score.baseline_cache_hit, score.candidate_cache_hit) == (True, False)
    assert score.latency_baseline_source == "live"

    frame = pairs_frame([score], GatePolicy())
    assert frame[["baseline_ttfc_ms", "baseline_cache_hit", "candidate_cache_hit"]].iloc[
        0
    ].tolist() == [pytest.approx(950.0), True, False]
    coverage = Coverage(captured=1, replayed=1, paired=1, errored=0, warmup=0, skipped=0, share=1)
    verdict = evaluate_gate(
        frame,
        GatePolicy(),
        run_id=RUN,
        coverage=coverage,
        decided_at=datetime(2026, 3, 2, tzinfo=UTC),
    )
    assert verdict.latency_cache_hits.model_dump() == {"pairs": 1, "baseline": 1, "candidate": 0}
    for check in verdict.checks:
        if check.metric.startswith("latency_"):
            assert "1 served from a cache (1 baseline, 0 candidate)" in check.reason, check.reason


async def test_the_baseline_cache_hit_is_the_repeats_when_the_repeat_gives_the_latency() -> None:
    live = live_exchange(cached=False)
    candidate = await candidate_outcome(live, {"x-cache": "HIT from edge"})
    repeat_result = await candidate_outcome(live, {"age": "9"})
    repeat = repeat_result.model_copy(
        update={
            "target": ReplayTarget.BASELINE_REPEAT,
            "timings": Timings(ttft_ms=5.0, ttfc_ms=6.0, e2e_ms=7.0, source=TimingSource.MEASURED),
        }
    )
    [score] = score_pairs(
        [PairInput(live, candidate, baseline_repeat=repeat)], HashingEncoder(), run_id=RUN
    )
    assert score.latency_baseline_source == "baseline_repeat"
    assert score.ttfc_ms.baseline == 6.0
    assert (score.baseline_cache_hit, score.candidate_cache_hit) == (True, True)


async def test_a_repeat_sent_together_with_the_candidate_is_a_co_timed_control() -> None:
    live = live_exchange(cached=False)
    candidate = await candidate_outcome(live, {})
    repeat = candidate.model_copy(update={"target": ReplayTarget.BASELINE_REPEAT})
    sources = {}
    for together in (False, True):
        [score] = score_pairs(
            [
                PairInput(
                    live,
                    candidate.model_copy(update={"co_timed": together, "sent_at": SENT_AT}),
                    baseline_repeat=repeat.model_copy(update={"co_timed": together}),
                )
            ],
            HashingEncoder(),
            run_id=RUN,
        )
        sources[together] = score.latency_baseline_source
        assert score.candidate_sent_at == SENT_AT  # the replay order, for the latency checks
    # Only a replica replay sent together with the candidate's was timed under the same
    # conditions (issue 29 item 2); one sent apart stays a plain baseline repeat.
    assert sources == {False: "baseline_repeat", True: "co_timed"}
