"""Nothing lost, nothing stuck in the file replay (issue 13): malformed capture logs.

Hypothesis draws batches of mutations (:mod:`tests.malformed`), each applied to many unique
base lines; every batch is written as a capture log and replayed by
:class:`~shadoweval.replay.runner.ReplayRunner` into one run (SQLite and PostgreSQL), twice. The
first
pass must not raise, and account for every line: stored as an exchange of the run (and
replayed, or skipped with a reason) or kept as a rejected record with its reason. The
second pass (a resumed run) must send nothing, store no new exchange and no new rejected
record. The candidate is an ``httpx.MockTransport`` seam answering every request.

The defect this replaces: a line with ``body_encoding: base64`` and a body that does not
decode passed validation and crashed ``replay run`` (exit 3, a traceback) mid-run.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadoweval.capture_log import read_capture_log
from shadoweval.records import ModelIdentity, ReplayTarget
from shadoweval.replay.client import CandidateClient
from shadoweval.replay.runner import ReplayReport, ReplayRunner, TargetSpec
from shadoweval.storage import Repository
from tests.malformed import malformed, mutations, one_line

pytestmark = pytest.mark.slow

EXAMPLES = 20
MUTATIONS_PER_EXAMPLE = 50
LINES_PER_MUTATION = 10
"""20 examples × 50 mutations × 10 lines = 10,000 lines per database."""

CANDIDATE = ModelIdentity(name="candidate-v2")


def answer(request: httpx.Request) -> httpx.Response:
    """The candidate: a chat completion for every request."""
    return httpx.Response(
        200,
        json={
            "id": "c",
            "object": "chat.completion",
            "model": CANDIDATE.name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}
            ],
        },
    )  # fmt: skip


async def replay(repo: Repository, run_id: str, log: Path) -> tuple[ReplayReport, int]:
    """Replay ``log`` into ``run_id``; return the report and the requests sent."""
    sent = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal sent
        sent += 1
        return answer(request)

    async with CandidateClient("http://c", transport=httpx.MockTransport(handler)) as client:
        runner = ReplayRunner(
            repo,
            run_id,
            [TargetSpec(ReplayTarget.CANDIDATE, client, CANDIDATE)],
            concurrency=16,
            batch_size=128,
            progress=False,
        )
        report = await runner.run(read_capture_log(log))
    return report, sent


def counts(repo: Repository, run_id: str) -> tuple[int, int, int]:
    """(exchanges in the run, rejected capture_log records, rejected replay records)."""
    coverage = repo.coverage_counts(run_id)
    replay_stage = sum(repo.count_rejected(run_id, stage="replay").values())
    return coverage.captured - coverage.rejected, coverage.rejected, replay_stage


def test_the_file_replay_keeps_or_rejects_every_malformed_line_and_resumes_cleanly(
    repo: Repository, tmp_path: Path
) -> None:
    run_id = repo.create_run(
        name="malformed",
        baseline=ModelIdentity(name="baseline-v1"),
        candidate=CANDIDATE,
        policy_hash="0" * 64,
        policy_yaml="version: 1\n",
    ).run_id
    totals = {"lines": 0, "stored": 0, "rejected": 0}
    reasons: dict[str, int] = {}
    example = 0

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        batch=st.lists(mutations, min_size=MUTATIONS_PER_EXAMPLE, max_size=MUTATIONS_PER_EXAMPLE),
        compress=st.booleans(),
    )
    def throw(batch: list[Any], compress: bool) -> None:
        nonlocal example
        example += 1
        base = example * MUTATIONS_PER_EXAMPLE * LINES_PER_MUTATION
        lines = [
            one_line(malformed(mutation, base + i * LINES_PER_MUTATION + k, prefix="file"))
            for i, mutation in enumerate(batch)
            for k in range(LINES_PER_MUTATION)
        ]
        data = b"\n".join(lines) + b"\n"
        log = tmp_path / f"log-{example:03d}.jsonl"
        log.write_bytes(gzip.compress(data) if compress else data)
        before = counts(repo, run_id)

        report, sent = anyio.run(replay, repo, run_id, log)  # a crash fails here

        after = counts(repo, run_id)
        stored, rejected_log, rejected_replay = (a - b for a, b in zip(after, before, strict=True))
        assert report.lines_read == len(lines)
        assert report.exchanges + sum(report.rejected.values()) == len(lines)
        assert stored + rejected_log + rejected_replay == len(lines)  # nothing lost
        assert report.exchanges == stored
        assert dict(report.replay_failed) == {}
        assert sent == sum(report.sent.values())
        new = repo.list_rejected(run_id, limit=10**6)[before[1] + before[2] :]
        assert len(new) == rejected_log + rejected_replay
        for record in new:
            assert record.reason, record
            assert record.location, record
            assert record.detail, record
            assert record.location in record.detail, record

        again, resent = anyio.run(replay, repo, run_id, log)  # a resumed run

        assert resent == 0
        assert counts(repo, run_id) == after  # no new exchange, no new rejected record
        assert again.rejected == report.rejected
        assert again.rejected_already_stored == sum(again.rejected.values())
        totals["lines"] += len(lines)
        totals["stored"] += stored
        totals["rejected"] += rejected_log + rejected_replay
        for reason, n in report.rejected.items():
            reasons[reason] = reasons.get(reason, 0) + n

    throw()
    assert totals["lines"] >= 10_000
    assert totals["stored"] + totals["rejected"] == totals["lines"]
    assert len(repo.load_outcomes(run_id)) == totals["stored"]
    print(f"file replay: {totals} {reasons}")  # the numbers of docs/reliability.md
