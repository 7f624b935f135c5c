"""A scored run whose pairs a judge can be asked about, written through the Repository.

Two task types: ``chat`` (``CHAT_CHANGED`` changed pairs at similarity 0.3–0.85 spread
over the default strata, ``CHAT_SAME`` unchanged at 0.99) and ``code`` (``CODE_CHANGED``
changed, none unchanged). In a changed pair the candidate answers ``good …`` when its
index is even (it is better) and ``bad …`` otherwise; the baseline always answers
``fair …``. :data:`RULE` is the mock judge's rule that says so. Every user message
carries :data:`EMAIL`, which the configured body redaction must remove before a judge
sees it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson

from shadoweval.records import (
    Exchange,
    FinishReason,
    ModelIdentity,
    PairScore,
    ReplayOutcome,
    RequestRecord,
    ResponseRecord,
    Usage,
    UsageSource,
)
from shadoweval.simulation.mock_judge import prefer_higher
from shadoweval.stats.policy import (
    DEFAULT_POLICY_FILE,
    GatePolicy,
    load_policy,
    policy_hash,
    policy_to_yaml,
)
from shadoweval.storage import Repository, RunInfo

RUN_ID = "run-judge"
EMAIL = "ana.lyst@example.com"
CHAT_CHANGED = 12
CHAT_SAME = 6
CODE_CHANGED = 5
T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
BASELINE = ModelIdentity(name="baseline-7b")
CANDIDATE = ModelIdentity(name="candidate-7b")
USAGE_BASELINE = Usage(prompt_tokens=300, completion_tokens=40, usage_source=UsageSource.REPORTED)
"""The live response's usage with ``usage=True``: 300 request tokens, a 40-token answer."""
USAGE_CANDIDATE = Usage(prompt_tokens=310, completion_tokens=60, usage_source=UsageSource.REPORTED)
"""The replayed response's usage with ``usage=True``: a 60-token answer."""


def _quality(text: str) -> float:
    return {"good": 2.0, "fair": 1.0, "bad": 0.0}.get(text.split(" ", 1)[0], -1.0)


RULE = prefer_higher(_quality)
"""good > fair > bad, by the answer's first word."""


def expected_outcome(index: int) -> str:
    """The outcome a truthful judge gives changed pair ``index``."""
    return "candidate_better" if index % 2 == 0 else "candidate_worse"


def _pair(
    run_id: str, n: int, task_type: str, similarity: float, candidate: str, usage: bool = False
) -> tuple[Exchange, ReplayOutcome, PairScore]:
    at = T0 + timedelta(minutes=n)
    exchange_id = f"ex-{n:04d}"
    body = {
        "model": "baseline-7b",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": f"Question {n} from {EMAIL}: what is {n} + {n}?"},
        ],
        "temperature": 0.7,
    }
    exchange = Exchange(
        exchange_id=exchange_id,
        captured_at=at,
        task_type=task_type,
        request=RequestRecord(body=orjson.dumps(body).decode()),
        response=ResponseRecord(
            status_code=200,
            text=f"fair answer {n}",
            finish_reason=FinishReason.STOP,
            usage=USAGE_BASELINE if usage else Usage(),
        ),
        baseline_model=BASELINE,
        source=f"sidecar:test-{n}",
    )
    outcome = ReplayOutcome(
        run_id=run_id,
        exchange_id=exchange_id,
        model=CANDIDATE,
        response=ResponseRecord(
            status_code=200,
            text=candidate,
            finish_reason=FinishReason.STOP,
            usage=USAGE_CANDIDATE if usage else Usage(),
        ),
    )
    score = PairScore(
        run_id=run_id,
        exchange_id=exchange_id,
        task_type=task_type,
        captured_at=at,
        similarity=similarity,
        baseline_finish_reason=FinishReason.STOP,
        candidate_finish_reason=FinishReason.STOP,
        sampled=True,
    )
    return exchange, outcome, score


def seed_judge_run(
    repo: Repository,
    run_id: str = RUN_ID,
    policy: GatePolicy | None = None,
    *,
    candidate_base_url: str | None = None,
    usage: bool = False,
    baseline: ModelIdentity = BASELINE,
    candidate: ModelIdentity = CANDIDATE,
) -> RunInfo:
    """Create ``run_id`` under ``policy`` (the default policy when ``None``) with the pairs
    of the module docstring; the candidate served at ``candidate_base_url``; with ``usage``
    every live response carries :data:`USAGE_BASELINE` and every replayed one
    :data:`USAGE_CANDIDATE` (else no usage is stored); the arms named ``baseline`` and
    ``candidate``."""
    policy = policy if policy is not None else load_policy(DEFAULT_POLICY_FILE)
    run = repo.create_run(
        run_id=run_id,
        name="judged run",
        baseline=baseline,
        candidate=candidate,
        policy_hash=policy_hash(policy),
        policy_yaml=policy_to_yaml(policy),
        candidate_base_url=candidate_base_url,
    )
    rows = []
    n = 0
    similarities = [0.3, 0.5, 0.7, 0.85]  # D = 0.7, 0.5, 0.3, 0.15: strata 3, 3, 2, 1
    for i in range(CHAT_CHANGED):
        text = f"good answer {n}" if i % 2 == 0 else f"bad answer {n}"
        rows.append(_pair(run_id, n, "chat", similarities[i % 4], text, usage))
        n += 1
    for _ in range(CHAT_SAME):
        rows.append(_pair(run_id, n, "chat", 0.99, f"fair answer {n}", usage))
        n += 1
    for i in range(CODE_CHANGED):
        text = f"good answer {n}" if i % 2 == 0 else f"bad answer {n}"
        rows.append(_pair(run_id, n, "code", 0.4, text, usage))
        n += 1
    repo.save_exchanges(run_id, [r[0] for r in rows])
    repo.save_outcomes([r[1] for r in rows])
    repo.save_pair_scores([r[2] for r in rows])
    return run
