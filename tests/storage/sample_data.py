"""A seeded run for the sample and label tests: ties, missing similarities, varied flags.

:func:`seed_run` stores exchanges, candidate outcomes and pair scores of ``n`` pairs over
three task types. Similarities take 13 values (many ties), every 11th pair has none (an
error on one side), and flags vary (errors, leaks, finish reasons, format regressions,
the noise floor), so every filter and both paging phases have something to find.
:func:`reference_order` is the page order written out in Python.
"""

from __future__ import annotations

from datetime import timedelta

from shadoweval.records import (
    Exchange,
    FinishReason,
    FormatFlags,
    PairScore,
    ReplayErrorKind,
    ReplayOutcome,
)
from shadoweval.storage import Repository

from .factories import BASELINE, CANDIDATE, T0, make_exchange, make_outcome

TASK_TYPES = ("chat", "code", "summarize")
PARSES = FormatFlags(strict=True, fence_stripped=True, extracted=True)
FAILS = FormatFlags(strict=False, fence_stripped=False, extracted=False)


def similarity_of(n: int) -> float | None:
    """Similarity of pair ``n``: None every 11th pair, else one of 13 tied values."""
    if n % 11 == 0:
        return None
    return (n * 7 % 13) / 10 - 0.2


def make_score(run_id: str, exchange: Exchange, n: int) -> PairScore:
    """The pair score of pair ``n`` (flags vary with ``n``)."""
    similarity = similarity_of(n)
    candidate_error = similarity is None and n % 2 == 0
    baseline_error = similarity is None and not candidate_error
    format_expected = n % 3 == 1
    return PairScore(
        run_id=run_id,
        exchange_id=exchange.exchange_id,
        task_type=exchange.task_type,
        captured_at=exchange.captured_at,
        similarity=similarity,
        noise_similarity=0.6 if n % 2 else None,
        format_expected=format_expected,
        baseline_format=PARSES if format_expected else None,
        candidate_format=(FAILS if n % 6 == 1 else PARSES) if format_expected else None,
        candidate_error=candidate_error,
        candidate_infra_error=candidate_error and n % 4 == 0,
        candidate_error_kind=ReplayErrorKind.TIMEOUT if candidate_error else None,
        baseline_error=baseline_error,
        baseline_finish_reason=FinishReason.STOP,
        candidate_finish_reason=FinishReason.LENGTH if n % 4 == 0 else FinishReason.STOP,
        template_leaks=("<|im_start|>",) if n % 5 == 0 else (),
        scored_at=T0 + timedelta(hours=1),
    )


def make_candidate(run_id: str, n: int, score: PairScore) -> ReplayOutcome:
    """The candidate outcome of pair ``n`` (an error when the score says so)."""
    if score.candidate_error:
        return make_outcome(run_id, score.exchange_id, error_kind=ReplayErrorKind.TIMEOUT)
    return make_outcome(run_id, score.exchange_id, text=f"Kandidat {n} ✅")


def seed_run(repo: Repository, run_id: str, n: int, *, first: int = 1) -> list[PairScore]:
    """Create ``run_id`` with pairs ``first .. first + n - 1``; return their scores."""
    if repo.get_run(run_id) is None:
        repo.create_run(
            run_id=run_id,
            name=run_id,
            baseline=BASELINE,
            candidate=CANDIDATE,
            policy_hash="sha256:policy",
            policy_yaml="alpha: 0.05\n",
        )
    numbers = range(first, first + n)
    exchanges = [make_exchange(i, task_type=TASK_TYPES[i % 3]) for i in numbers]
    scores = [make_score(run_id, ex, i) for ex, i in zip(exchanges, numbers, strict=True)]
    repo.save_exchanges(run_id, exchanges)
    repo.save_outcomes(make_candidate(run_id, i, s) for i, s in zip(numbers, scores, strict=True))
    repo.save_pair_scores(scores)
    return scores


def reference_order(scores: list[PairScore]) -> list[PairScore]:
    """Page order: no similarity first by exchange id, then by (similarity, exchange id)."""
    return sorted(
        scores,
        key=lambda s: (
            (0, 0.0, s.exchange_id) if s.similarity is None else (1, s.similarity, s.exchange_id)
        ),
    )
