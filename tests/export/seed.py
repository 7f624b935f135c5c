"""A run with pairs worth exporting, written through the Repository with the storage factories.

Three task types with 12, 7 and 3 pairs: similarities spread over [-0.2, 1] with ties,
pairs without a similarity (a candidate error), varied flags, and texts that CSV finds
hard (line breaks, CRLF, quotes, commas, "NA", leading "=", unicode and emoji). With
``canary=True`` the request messages, both answers and the tool-call arguments also carry
:data:`CANARY` (a secret key) and :data:`EMAIL`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import orjson

from shadoweval.records import Exchange, FinishReason, PairScore, ReplayErrorKind, ToolCall
from shadoweval.storage import Repository, RunInfo
from tests.storage.factories import (
    BASELINE,
    CANDIDATE,
    T0,
    make_exchange,
    make_outcome,
    make_pair_score,
)

CANARY = "sk-live-CANARY0123456789abcdef"
EMAIL = "ana.lyst@example.com"
RUN_ID = "run-export"
POLICY_HASH = "sha256:" + "e" * 64
TRICKY = [
    'line one\nline "two", with, commas',
    "windows\r\nline end; semi;colon",
    "NA",
    "=SUM(A1:A2) starts like a formula",
    "  padded with blanks  ",
    "Grüße 👋🏽 — 你好, мир! ∑ x² «ok» \u200d👩‍💻",
    "",
]
TASK_TYPES = {"chat": 12, "extract": 7, "summarize": 3}


@dataclass(frozen=True)
class Seeded:
    """What :func:`seed_run` wrote."""

    run: RunInfo
    scores: list[PairScore]

    def ids(self, task_type: str) -> list[str]:
        return [s.exchange_id for s in self.scores if s.task_type == task_type]


def _similarity(task_type: str, i: int) -> float | None:
    if task_type == "chat":
        if i in (3, 8):
            return None  # a candidate error: no similarity
        return [0.95, 0.41, -0.2, 0.0, 0.77, 0.41, 0.999, 0.63, 0.0, 0.12, 0.88, 0.5][i]
    if task_type == "extract":
        return [0.3, 0.91, 0.05, 0.3, 1.0, None, 0.66][i]
    return [0.2, 0.8, 0.45][i]


def _messages(n: int, text: str, canary: bool) -> list[dict[str, object]]:
    secret = f" key {CANARY}, mail {EMAIL}" if canary else ""
    return [
        {"role": "system", "content": f"You are helpful.{secret}"},
        {"role": "user", "content": [{"type": "text", "text": f"Frage #{n}: {text}{secret}"}]},
    ]


def _exchange(n: int, task_type: str, text: str, canary: bool) -> Exchange:
    exchange = make_exchange(n, task_type=task_type, text=text)
    body = {
        "model": "m",
        "messages": _messages(n, text, canary),
        "temperature": 0.2,
    }
    secret = f" {CANARY} {EMAIL}" if canary else ""
    assert exchange.response is not None
    response = exchange.response.model_copy(
        update={
            "text": f"baseline {n}: {text}{secret}",
            "tool_calls": (
                ToolCall(
                    index=0,
                    id=f"call_{n}",
                    name="lookup",
                    arguments=orjson.dumps({"q": f"Zürich {n}{secret}"}).decode(),
                ),
            ),
        }
    )
    request = exchange.request.model_copy(update={"body": orjson.dumps(body).decode()})
    return exchange.model_copy(update={"request": request, "response": response})


def seed_run(
    repo: Repository,
    run_id: str = RUN_ID,
    *,
    canary: bool = False,
    first: int = 0,
) -> Seeded:
    """Create ``run_id`` and write its exchanges, candidate outcomes and pair scores."""
    run = repo.create_run(
        run_id=run_id,
        name="export test run 🚀",
        baseline=BASELINE,
        candidate=CANDIDATE,
        policy_hash=POLICY_HASH,
        policy_yaml="alpha: 0.05\n",
    )
    exchanges: list[Exchange] = []
    outcomes = []
    scores: list[PairScore] = []
    n = first
    for task_type, count in TASK_TYPES.items():
        for i in range(count):
            text = TRICKY[(n + i) % len(TRICKY)]
            exchange = _exchange(n, task_type, text, canary)
            similarity = _similarity(task_type, i)
            errored = similarity is None
            secret = f" {CANARY} {EMAIL}" if canary else ""
            outcome = make_outcome(
                run_id,
                exchange.exchange_id,
                error_kind=ReplayErrorKind.TIMEOUT if errored else None,
                text=f"{TRICKY[(n + 3) % len(TRICKY)]}{secret}",
                replayed_at=T0 + timedelta(hours=1, seconds=n),
            )
            if outcome.response is not None:
                outcome = outcome.model_copy(
                    update={
                        "response": outcome.response.model_copy(
                            update={
                                "tool_calls": (
                                    ToolCall(
                                        index=0,
                                        name="lookup",
                                        arguments=orjson.dumps({"q": f"Bern{secret}"}).decode(),
                                    ),
                                )
                                if n % 2
                                else ()
                            }
                        )
                    }
                )
            score = make_pair_score(
                run_id, exchange, similarity=similarity, candidate_error=errored
            )
            if n % 3 == 0:  # no leak, same finish reason: fewer flags
                score = score.model_copy(
                    update={"template_leaks": (), "candidate_finish_reason": FinishReason.STOP}
                )
            exchanges.append(exchange)
            outcomes.append(outcome)
            scores.append(score)
            n += 1
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes(outcomes)
    repo.save_pair_scores(scores)
    return Seeded(run=run, scores=scores)


def seed_database(url: str, run_id: str = RUN_ID, *, canary: bool = False) -> Seeded:
    """Upgrade the database at ``url`` and seed ``run_id`` in it."""
    from shadoweval.storage import Database

    with Database(url) as db:
        db.upgrade()
        return seed_run(Repository(db), run_id, canary=canary)
