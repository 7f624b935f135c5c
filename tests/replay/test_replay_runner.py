"""ReplayRunner on SQLite and PostgreSQL: every line ends somewhere, resume, warm-up, sampling.

The capture logs are AlpacaEval Llama-3-8B answers (the baseline); the candidate is mock-llm
serving the Llama-3.1-8B answers to the same prompts.
"""

from __future__ import annotations

import base64
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shadoweval.body_redaction import BodyRedactor, RedactionHits
from shadoweval.capture.table_import import import_table, row_to_exchange
from shadoweval.capture_log import CaptureLogWriter, LogEntry, read_capture_log
from shadoweval.config import BodyRedactionSettings
from shadoweval.errors import StorageError
from shadoweval.records import (
    STORED,
    Exchange,
    ModelIdentity,
    ReplayErrorKind,
    ReplayOutcome,
    ReplayTarget,
)
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.runner import ReplayReport, ReplayRunner, TargetSpec, in_sample
from shadoweval.simulation.mock_llm import FaultConfig, FaultKind, FixedLatency, split_pieces
from shadoweval.simulation.mock_llm.faults import seeded_unit
from shadoweval.storage import Repository
from shadoweval.tables import RecordedRow, prompt_key
from tests.replay.conftest import (
    CountingApp,
    CountingTransport,
    ServeFn,
    chat_body,
    make_exchange,
    mock_app,
)

pytestmark = pytest.mark.anyio

BASELINE = ModelIdentity(name="Meta-Llama-3-8B-Instruct")
CANDIDATE = ModelIdentity(name="Meta-Llama-3.1-8B-Instruct-Turbo")
REPEAT = ModelIdentity(name="Meta-Llama-3-8B-Instruct", base_url="http://repeat")
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def exchanges_for(rows: list[RecordedRow], *, stream: bool = True) -> list[Exchange]:
    """Exchanges with fixed ids (``ex-00000``…) so sampling is the same in every session."""
    return [
        row_to_exchange(
            row,
            stream=stream,
            sampling={"temperature": 0.0} if i % 2 else None,
            baseline=BASELINE,
            captured_at=T0 + timedelta(milliseconds=i),
        ).model_copy(update={"exchange_id": f"ex-{i:05d}"})
        for i, row in enumerate(rows)
    ]


def write_log(directory: Path, exchanges: list[Exchange], extra_lines: Sequence[str] = ()) -> Path:
    with CaptureLogWriter(directory) as writer:
        for exchange in exchanges:
            writer.write(exchange)
        segment = writer.segments[-1]
    if extra_lines:
        with segment.open("a", encoding="utf-8") as fh:
            for line in extra_lines:
                fh.write(line + "\n")
    return directory


def predicted_fault(faults: FaultConfig, seed: int, messages: Any, attempt: int = 0) -> FaultKind:
    """The fault mock-llm draws for a prompt (documented in
    ``shadoweval.simulation.mock_llm.faults``)."""
    return faults.pick(seeded_unit(seed, "fault", prompt_key(messages), attempt))


def new_run(repo: Repository, name: str = "run") -> str:
    return repo.create_run(
        name=name,
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id


def asgi(app: Any, **kwargs: Any) -> CandidateClient:
    return CandidateClient("http://candidate", transport=httpx.ASGITransport(app=app), **kwargs)


def candidate(client: CandidateClient, **kwargs: Any) -> TargetSpec:
    return TargetSpec(
        ReplayTarget.CANDIDATE,
        client,
        CANDIDATE,
        model_name=CANDIDATE.name,
        api_key="shadow-key",
        **kwargs,
    )


def repeat(client: CandidateClient, share: float) -> TargetSpec:
    return TargetSpec(ReplayTarget.BASELINE_REPEAT, client, REPEAT, share=share)


async def replay(
    repo: Repository,
    run_id: str,
    targets: list[TargetSpec],
    entries: Any,
    **kwargs: Any,
) -> ReplayReport:
    clients = {id(t.client): t.client for t in targets}
    for client in clients.values():
        await client.start()
    try:
        runner = ReplayRunner(repo, run_id, targets, progress=False, **kwargs)
        return await runner.run(entries)
    finally:
        for client in clients.values():
            await client.stop()


def by_key(outcomes: list[ReplayOutcome]) -> Counter[tuple[str, ReplayTarget]]:
    return Counter((o.exchange_id, o.target) for o in outcomes)


@pytest.fixture(scope="module")
def some_rows(llama3_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama3_rows[:40]


@pytest.fixture(scope="module")
def candidate_app_rows(llama31_rows: list[RecordedRow]) -> list[RecordedRow]:
    return llama31_rows


# --------------------------------------------------------------- every line ends somewhere


async def test_bad_lines_are_rejected_with_reasons_the_rest_replayed(
    repo: Repository, tmp_path: Path, some_rows: list[RecordedRow], candidate_app_rows: Any
) -> None:
    exchanges = exchanges_for(some_rows[:12])
    future = exchanges[0].model_dump(mode="json") | {"schema_version": 2, "exchange_id": "ex-v2"}
    bad = [
        '{"schema_version": 1, "exchange_id": "ex-cut", "request": {"bo',
        orjson.dumps(future).decode(),
        orjson.dumps({"schema_version": 1, "request": "not an object"}).decode(),
    ]
    log = write_log(tmp_path / "cap", exchanges, bad)
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)

    report = await replay(repo, run_id, [candidate(asgi(app))], read_capture_log(log))

    assert report.lines_read == 15
    assert dict(report.rejected) == {"invalid_json": 1, "schema_version": 1, "schema": 1}
    assert report.exchanges == 12
    assert dict(report.sent) == {"candidate": 12}
    assert dict(report.ok) == {"candidate": 12}
    assert app.chat_requests == 12
    assert repo.count_rejected(run_id) == {"invalid_json": 1, "schema_version": 1, "schema": 1}
    stored = repo.list_rejected(run_id)
    assert [r.stage for r in stored] == ["capture_log"] * 3
    assert [r.raw for r in stored] == bad
    assert [r.location.rsplit(":", 1)[1] for r in stored if r.location] == ["13", "14", "15"]
    assert "schema_version=2 is not supported" in (stored[1].detail or "")
    outcomes = repo.load_outcomes(run_id)
    assert sorted(o.exchange_id for o in outcomes) == [e.exchange_id for e in exchanges]
    assert repo.get_exchange("ex-v2") is None
    coverage = repo.coverage_counts(run_id)
    assert (coverage.captured, coverage.rejected, coverage.replayed, coverage.errored) == (
        15,
        3,
        12,
        0,
    )


async def test_outcomes_carry_the_replayed_answer_and_pinned_params(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    rows = some_rows[:6]
    exchanges = exchanges_for(rows)
    run_id = new_run(repo)
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    await replay(repo, run_id, [candidate(asgi(mock_app(candidate_app_rows)))], entries)

    expected = {r.prompt_key: r.output_text for r in candidate_app_rows}
    outcomes = {o.exchange_id: o for o in repo.load_outcomes(run_id)}
    for i, (row, exchange) in enumerate(zip(rows, exchanges, strict=True)):
        outcome = outcomes[exchange.exchange_id]
        assert outcome.error_kind is None
        assert outcome.response is not None
        assert outcome.response.text == expected[row.prompt_key]
        assert outcome.response.model == "candidate-v2"  # what the server says it is
        assert outcome.model == CANDIDATE
        assert outcome.attempt == 1
        assert outcome.timings.ttfb_ms is not None
        assert outcome.pinned_params == ({"temperature": 0.0} if i % 2 else {})
        assert "top_p" in outcome.missing_params


async def test_skipped_exchanges_are_stored_with_their_reason(repo: Repository) -> None:
    exchanges = [
        make_exchange(chat_body(), path="/v1/embeddings"),
        make_exchange("not json"),
    ]
    run_id = new_run(repo)
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    client = CandidateClient("http://c", transport=httpx.MockTransport(handler))
    report = await replay(repo, run_id, [candidate(client)], entries)
    assert sent == []
    assert dict(report.skipped) == {"candidate": 2}
    assert dict(report.sent) == {}
    assert dict(report.errors) == {}
    details = sorted((o.error_kind, o.error_detail) for o in repo.load_outcomes(run_id))
    assert details == [
        (ReplayErrorKind.SKIPPED, "request body is not a JSON object"),
        (ReplayErrorKind.SKIPPED, "route not replayable: /v1/embeddings"),
    ]
    coverage = repo.coverage_counts(run_id)
    assert (coverage.captured, coverage.replayed, coverage.skipped) == (2, 2, 2)


# ----------------------------------------------------------------------- resume


async def test_rerun_sends_nothing_new_and_keeps_one_outcome_each(
    repo: Repository, tmp_path: Path, some_rows: list[RecordedRow], candidate_app_rows: Any
) -> None:
    exchanges = exchanges_for(some_rows[:20])
    log = write_log(tmp_path / "cap", exchanges, ["{broken"])
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)
    share = 0.5
    targets = [candidate(asgi(app)), repeat(asgi(app), share)]
    first = await replay(repo, run_id, targets, read_capture_log(log), concurrency=4)
    sampled = sum(in_sample(e.exchange_id, share) for e in exchanges)
    assert sum(first.sent.values()) == 20 + sampled
    requests_after_first = app.chat_requests

    targets = [candidate(asgi(app)), repeat(asgi(app), share)]
    second = await replay(repo, run_id, targets, read_capture_log(log), concurrency=4)

    assert app.chat_requests == requests_after_first  # nothing new on the wire
    assert dict(second.sent) == {}
    assert second.already_done == 20 + sampled
    assert second.exchanges == 20
    assert dict(second.rejected) == {"invalid_json": 1}
    counts = by_key(repo.load_outcomes(run_id))
    assert set(counts.values()) == {1}
    assert len(counts) == 20 + sampled


async def test_interrupted_run_resumes_where_it_stopped(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    exchanges = exchanges_for(some_rows[:20])
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)
    await replay(repo, run_id, [candidate(asgi(app))], entries[:8])
    report = await replay(repo, run_id, [candidate(asgi(app))], entries)
    assert report.already_done == 8
    assert dict(report.sent) == {"candidate": 12}
    assert app.chat_requests == 20
    counts = by_key(repo.load_outcomes(run_id))
    assert len(counts) == 20
    assert set(counts.values()) == {1}


async def test_duplicate_lines_in_the_log_are_sent_once_and_kept_as_rejected(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    """A line repeating an earlier one (same id, same content) is counted and kept, not
    sent again; the same id with other content is a conflicting duplicate (first kept)."""
    exchanges = exchanges_for(some_rows[:5])
    edited = exchanges[3].model_copy(update={"task_type": "edited"})
    twice = [*exchanges, *exchanges[:2], edited]
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(twice)]
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)
    report = await replay(repo, run_id, [candidate(asgi(app))], entries, batch_size=3)
    assert app.chat_requests == 5
    assert dict(report.sent) == {"candidate": 5}
    assert report.duplicates == 0
    assert dict(report.rejected) == {"duplicate_exchange_id": 2, "conflicting_duplicate": 1}
    assert report.lines_read == report.exchanges + sum(report.rejected.values()) == 8
    counts = by_key(repo.load_outcomes(run_id))
    assert len(counts) == 5
    assert set(counts.values()) == {1}
    stored = {r.location: (r.stage, r.reason) for r in repo.list_rejected(run_id)}
    assert stored == {
        "mem:5": ("replay", "duplicate_exchange_id"),
        "mem:6": ("replay", "duplicate_exchange_id"),
        "mem:7": ("capture_log", "conflicting_duplicate"),
    }
    assert repo.get_exchange(exchanges[3].exchange_id) == exchanges[3]
    # the repeated lines count once; the conflicting one is a captured line not compared,
    # named as a conflicting duplicate, not as an unreadable line (issue 29 item 11)
    coverage = repo.coverage_counts(run_id)
    assert coverage.captured == 6
    assert (coverage.rejected, coverage.conflicting_duplicates) == (1, 1)


# ------------------------------------------------------------------------ warm-up


async def test_warmup_flags_exactly_the_first_n_sends_per_target(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    exchanges = exchanges_for(some_rows[:15])
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)
    targets = [candidate(asgi(app)), repeat(asgi(app), 1.0)]
    report = await replay(repo, run_id, targets, entries, concurrency=6, warmup_requests=3)
    assert report.warmup == 6
    first_three = {e.exchange_id for e in exchanges[:3]}
    for target in ReplayTarget:
        flagged = {o.exchange_id for o in repo.load_outcomes(run_id, target) if o.warmup}
        assert flagged == first_three, target
    assert repo.coverage_counts(run_id).warmup == 3  # candidate outcomes only


async def test_skips_do_not_use_up_the_warmup(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    skipped = [make_exchange(chat_body(), path="/v1/files") for _ in range(2)]
    sent = exchanges_for(some_rows[:6])
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(skipped + sent)]
    run_id = new_run(repo)
    report = await replay(
        repo,
        run_id,
        [candidate(asgi(mock_app(candidate_app_rows)))],
        entries,
        concurrency=1,
        warmup_requests=2,
    )
    outcomes = {o.exchange_id: o for o in repo.load_outcomes(run_id)}
    assert [outcomes[e.exchange_id].warmup for e in skipped] == [False, False]
    assert [outcomes[e.exchange_id].warmup for e in sent] == [True, True] + [False] * 4
    assert report.warmup == 2


# -------------------------------------------------------------- baseline-repeat share


async def test_baseline_repeat_share_is_about_half_and_deterministic(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    exchanges = exchanges_for(some_rows[:40])
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    expected = {e.exchange_id for e in exchanges if in_sample(e.exchange_id, 0.5)}
    assert 0.3 * 40 <= len(expected) <= 0.7 * 40
    chosen = []
    for name in ("first", "second"):
        run_id = new_run(repo, name)
        app = mock_app(candidate_app_rows)
        targets = [candidate(asgi(app)), repeat(asgi(app), 0.5)]
        report = await replay(repo, run_id, targets, list(entries), concurrency=8)
        assert dict(report.sent) == {"candidate": 40, "baseline_repeat": len(expected)}
        repeats = repo.load_outcomes(run_id, ReplayTarget.BASELINE_REPEAT)
        chosen.append({o.exchange_id for o in repeats})
        assert all(o.model == REPEAT for o in repeats)
        assert len(repo.load_outcomes(run_id, ReplayTarget.CANDIDATE)) == 40
    assert chosen[0] == chosen[1] == expected


def test_in_sample_is_a_stable_bernoulli() -> None:
    ids = [f"01J{i:023d}" for i in range(4000)]
    assert all(in_sample(i, 1.0) for i in ids)
    assert not any(in_sample(i, 0.0) for i in ids)
    for share in (0.1, 0.5, 0.9):
        got = sum(in_sample(i, share) for i in ids) / len(ids)
        assert abs(got - share) < 0.03, (share, got)
    # Nested: whatever is in at 0.1 is in at 0.5 (one threshold on one hash).
    assert {i for i in ids if in_sample(i, 0.1)} <= {i for i in ids if in_sample(i, 0.5)}


# ------------------------------------------------------------------ hanging target


async def test_hanging_candidate_fills_at_most_the_slots_and_times_out(
    repo: Repository,
    llama3_rows: list[RecordedRow],
    candidate_app_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    """GoReplay #420: hung requests time out and are counted; nothing else is affected."""
    # Prompts whose candidate answer is short, so only the injected hangs can time out.
    short = {
        r.prompt_key for r in candidate_app_rows if len(split_pieces(r.output_text or "")) < 60
    }
    rows = [r for r in llama3_rows if r.prompt_key in short][:24]
    exchanges = exchanges_for(rows)
    entries = [LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate(exchanges)]
    faults = FaultConfig(hang_rate=0.3, hang_limit_s=45)
    seed = 11
    hangs = {
        e.exchange_id
        for e, row in zip(exchanges, rows, strict=True)
        if predicted_fault(faults, seed, row.messages) is FaultKind.HANG
    }
    assert 3 <= len(hangs) <= 15
    # well above a short answer even on a machine at load 15 on 2 cores (1.5 s was not)
    concurrency, timeout_s = 4, 4.0
    app: CountingApp = mock_app(
        candidate_app_rows, faults=faults, seed=seed, latency=FixedLatency(5, 0.1)
    )
    run_id = new_run(repo)
    with serve(app) as server:
        transport = CountingTransport()
        client = CandidateClient(server.url, timeout_s=timeout_s, transport=transport)
        started = time.perf_counter()
        report = await replay(repo, run_id, [candidate(client)], entries, concurrency=concurrency)
        wall = time.perf_counter() - started

    assert transport.max_in_flight == concurrency  # every slot was used, never more
    assert transport.in_flight == 0
    assert dict(report.errors) == {"timeout": len(hangs)}
    assert report.ok["candidate"] == len(rows) - len(hangs)
    outcomes = repo.load_outcomes(run_id)
    assert len(outcomes) == len(rows)
    timed_out = {o.exchange_id for o in outcomes if o.error_kind is ReplayErrorKind.TIMEOUT}
    assert timed_out == hangs
    assert all(
        o.response is None and o.timings.e2e_ms is None for o in outcomes if o.exchange_id in hangs
    )
    assert all(o.error_kind is None for o in outcomes if o.exchange_id not in hangs)
    # Hung requests occupy slots for timeout_s each; the rest flows around them. A bound on
    # a hang, not a speed check: a request not cut at timeout_s would hold for 30 s.
    assert wall < faults.hang_limit_s


# ---------------------------------------------------------------------- failures


async def test_storage_failure_propagates_as_storage_error(
    repo: Repository, some_rows: list[RecordedRow], candidate_app_rows: list[RecordedRow]
) -> None:
    """Not a candidate failure: the caller must see the project's own exception type."""
    entries = [LogEntry("mem:0", "", exchange=e) for e in exchanges_for(some_rows[:3])]
    with pytest.raises(StorageError):
        await replay(repo, "no-such-run", [candidate(asgi(mock_app(candidate_app_rows)))], entries)


def test_runner_needs_a_target(repo: Repository) -> None:
    with pytest.raises(ValueError, match="at least one replay target"):
        ReplayRunner(repo, "r", [])


# ----------------------------------------------------------------- AlpacaEval, all 805


async def replay_whole_alpaca_eval(
    repo: Repository,
    tmp_path: Path,
    llama3_path: Path,
    candidate_rows: list[RecordedRow],
    serve: ServeFn,
    *,
    stream: bool,
) -> None:
    """Import all 805 Llama-3 answers as a capture log; replay them to mock Llama-3.1."""
    imported = import_table(llama3_path, out=tmp_path / "cap", preset="alpaca_eval", stream=stream)
    assert imported.written == 805
    assert not imported.rejected
    exchanges = {
        e.exchange.exchange_id: e.exchange for e in read_capture_log(tmp_path / "cap") if e.exchange
    }
    assert len(exchanges) == 805
    run_id = new_run(repo)
    app = mock_app(
        candidate_rows,
        latency=FixedLatency(ttft_ms=200, itl_ms=20),
        time_scale=0.0005,
        model_name=CANDIDATE.name,
    )
    with serve(app) as server:
        client = CandidateClient(server.url, timeout_s=60, max_connections=16)
        report = await replay(
            repo,
            run_id,
            [candidate(client)],
            read_capture_log(tmp_path / "cap"),
            concurrency=16,
            warmup_requests=5,
        )
    assert report.lines_read == 805
    assert report.exchanges == 805
    assert dict(report.ok) == {"candidate": 805}, dict(report.errors)
    assert report.warmup == 5
    assert app.chat_requests == 805
    outcomes = repo.load_outcomes(run_id)
    assert sorted(o.exchange_id for o in outcomes) == sorted(exchanges)
    # stored as the live side stores its answers: through the body rules (issue 30; a few
    # AlpacaEval answers hold an e-mail address or a phone number)
    rules = BodyRedactor(BodyRedactionSettings())
    answers = {
        r.prompt_key: rules.redact_text(r.output_text or "", "response.text", RedactionHits())
        for r in candidate_rows
    }
    wrong = []
    for outcome in outcomes:
        assert outcome.response is not None
        assert outcome.response.streamed is stream
        assert (outcome.timings.ttft_ms is not None) is stream
        body = exchanges[outcome.exchange_id].request.json_body() or {}
        if outcome.response.text != answers[prompt_key(body["messages"])]:
            wrong.append(outcome.exchange_id)
    assert wrong == []
    coverage = repo.coverage_counts(run_id)
    assert (coverage.captured, coverage.replayed, coverage.errored) == (805, 805, 0)


async def test_whole_alpaca_eval_import_replayed_one_outcome_each(
    repo: Repository,
    tmp_path: Path,
    llama3_path: Path,
    candidate_app_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    await replay_whole_alpaca_eval(
        repo, tmp_path, llama3_path, candidate_app_rows, serve, stream=False
    )


@pytest.mark.slow
async def test_whole_alpaca_eval_import_replayed_streamed(
    sqlite_repo: Repository,
    tmp_path: Path,
    llama3_path: Path,
    candidate_app_rows: list[RecordedRow],
    serve: ServeFn,
) -> None:
    """The same, streamed: ~280k SSE events through the assembler (about 20 s)."""
    await replay_whole_alpaca_eval(
        sqlite_repo, tmp_path, llama3_path, candidate_app_rows, serve, stream=True
    )


async def test_a_reused_exchange_id_with_other_content_is_rejected_not_replaced(
    repo: Repository,
) -> None:
    original = make_exchange(chat_body())
    edited = original.model_copy(update={"task_type": "edited"})
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    first = new_run(repo, "first")
    client = CandidateClient("http://c", transport=httpx.MockTransport(handler))
    await replay(repo, first, [candidate(client)], [LogEntry("a:1", "", exchange=original)])
    second = new_run(repo, "second")
    client = CandidateClient("http://c", transport=httpx.MockTransport(handler))
    report = await replay(repo, second, [candidate(client)], [LogEntry("b:1", "", exchange=edited)])
    assert dict(report.rejected) == {"conflicting_duplicate": 1}
    assert dict(report.sent) == {}
    assert repo.get_exchange(original.exchange_id) == original
    assert repo.count_rejected(second) == {"conflicting_duplicate": 1}
    coverage = repo.coverage_counts(second)
    assert (coverage.captured, coverage.rejected, coverage.paired) == (1, 1, 0)


# ---------------------------------------------------- issue 13: nothing lost, nothing stuck


def with_base64_body(exchange: Exchange, body: str) -> dict[str, Any]:
    """``exchange``'s line with ``body`` as a base64 request body (valid or not)."""
    payload = exchange.model_dump(mode="json")
    payload["request"] = payload["request"] | {"body": body, "body_encoding": "base64"}
    return payload


async def test_a_base64_body_that_does_not_decode_is_rejected_and_the_run_goes_on(
    repo: Repository, tmp_path: Path, some_rows: list[RecordedRow], candidate_app_rows: Any
) -> None:
    """Issue 13: such a line passed validation and crashed the run after 41 outcomes."""
    exchanges = exchanges_for(some_rows[:40])
    broken = exchanges[0].model_copy(update={"exchange_id": "ex-b64"})
    bad = orjson.dumps(with_base64_body(broken, "eyJtb2RlbCI")).decode()  # cut: 11 chars
    good_b64 = with_base64_body(
        exchanges[1].model_copy(update={"exchange_id": "ex-b64-ok"}),
        base64.b64encode(exchanges[1].request.body_bytes()).decode(),
    )
    log = write_log(tmp_path / "cap", exchanges[:30], [bad, orjson.dumps(good_b64).decode()])
    with CaptureLogWriter(log) as writer:  # and more after it, in a later segment
        for exchange in exchanges[30:]:
            writer.write(exchange)
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)

    report = await replay(repo, run_id, [candidate(asgi(app))], read_capture_log(log))

    assert dict(report.rejected) == {"schema": 1}
    assert dict(report.ok) == {"candidate": 41}
    assert app.chat_requests == 41
    (stored,) = repo.list_rejected(run_id)
    assert stored.raw == bad
    assert "request.body is not valid base64" in (stored.detail or "")
    assert repo.get_exchange("ex-b64") is None
    assert repo.coverage_counts(run_id).captured == 42


async def test_a_replay_that_raises_is_kept_as_a_rejected_record_and_the_run_goes_on(
    repo: Repository, some_rows: list[RecordedRow]
) -> None:
    """Defence in depth: an exception while building or sending a request is a rejected
    record with its reason (never a crash), and a resumed run stores it no second time."""
    exchanges = exchanges_for(some_rows[:6])
    # read back from storage without the value rules: its body cannot be decoded
    unbuildable = Exchange.model_validate(
        with_base64_body(exchanges[0].model_copy(update={"exchange_id": "ex-cut"}), "abc"),
        context=STORED,
    )
    doomed = exchanges[1].exchange_id

    def handler(request: httpx.Request) -> httpx.Response:
        if request.headers["x-shadow-eval-exchange-id"] == doomed:
            raise RuntimeError("a bug in a transport")
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    entries = [
        LogEntry(f"mem:{i}", "", exchange=e) for i, e in enumerate([unbuildable, *exchanges])
    ]
    run_id = new_run(repo)
    first = None
    for _ in range(2):
        client = CandidateClient("http://c", transport=httpx.MockTransport(handler))
        report = await replay(repo, run_id, [candidate(client)], entries)
        first = first or report
        assert dict(report.rejected) == {"unreplayable": 1}
        assert dict(report.replay_failed) == {"send_failed": 1}
    assert first is not None
    assert dict(first.ok) == {"candidate": 5}
    assert report.rejected_already_stored == 2  # the second pass stored nothing new
    stored = {r.location: r for r in repo.list_rejected(run_id)}
    assert set(stored) == {"mem:0", "mem:2 [candidate]"}
    assert stored["mem:0"].stage == "capture_log"
    assert "the replay request cannot be built" in (stored["mem:0"].detail or "")
    failed = stored["mem:2 [candidate]"]
    assert (failed.stage, failed.reason) == ("replay", "send_failed")
    assert "RuntimeError: a bug in a transport" in (failed.detail or "")
    assert repo.get_exchange("ex-cut") is None
    coverage = repo.coverage_counts(run_id)
    assert (coverage.captured, coverage.rejected, coverage.replayed) == (7, 1, 5)


async def test_a_resumed_run_replays_no_line_twice_and_stores_no_rejection_twice(
    repo: Repository, tmp_path: Path, some_rows: list[RecordedRow], candidate_app_rows: Any
) -> None:
    """Issue 13: lines without exchange_id were replayed again on a resume (921 → 925
    exchanges) and rejected lines were stored again on every read (69 → 140)."""
    exchanges = exchanges_for(some_rows[:12])
    without_id = [
        orjson.dumps(
            {k: v for k, v in e.model_dump(mode="json").items() if k != "exchange_id"}
        ).decode()
        for e in exchanges[8:]
    ]
    bad = ["{broken", "[1, 2]", "   ", "", orjson.dumps({"schema_version": 7}).decode()]
    log = write_log(tmp_path / "cap", exchanges[:8], [*without_id, *bad])
    run_id = new_run(repo)
    app = mock_app(candidate_app_rows)
    first = await replay(repo, run_id, [candidate(asgi(app))], read_capture_log(log))
    sent = app.chat_requests
    rejected = repo.count_rejected(run_id)
    coverage = repo.coverage_counts(run_id)

    second = await replay(repo, run_id, [candidate(asgi(app))], read_capture_log(log))

    assert sent == 12
    assert app.chat_requests == sent  # nothing replayed again
    assert first.exchanges == second.exchanges == 12
    assert second.already_done == 12
    assert rejected == {"invalid_json": 1, "schema": 1, "blank_line": 2, "schema_version": 1}
    assert repo.count_rejected(run_id) == rejected  # nothing stored twice
    assert second.rejected_already_stored == 5
    assert repo.coverage_counts(run_id) == coverage
    assert (coverage.captured, coverage.rejected) == (17, 5)
