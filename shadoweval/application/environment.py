"""The environment's failures of a run, named for the verdict (issue 29).

The compare stage marks a candidate failure that is the environment's, not the model's
(``PairScore.candidate_infra_error``: :mod:`shadoweval.records.environment`); the gate
leaves such pairs out of every quality check and holds on them (``infra_error_rate``).
:func:`environment_failures` groups those pairs by cause — HTTP status and message, or
timeout / connection failure — with a count, how many the baseline replica shares, and one
example with the URL requested and the first bytes of the body, so the verdict's reason
says exactly what to fix. The gate reads them on :attr:`Coverage.environment_failures`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from shadoweval.records import (
    EnvironmentFailure,
    PairScore,
    ReplayOutcome,
    ReplayTarget,
    url_hint,
)
from shadoweval.routes import normalize_route
from shadoweval.storage import Repository, RunInfo, rejection_key

__all__ = ["MAX_CAUSES", "environment_failures", "failure_cause"]

MAX_CAUSES = 5
"""Causes named in a verdict (the most frequent first)."""

DETAIL_CHARS = 200
"""Characters of a response body (or error detail) quoted in an example."""

_TEST_DOUBLE_HINT = (
    "prompt_not_recorded: the test double (mock-llm) has no recording of this prompt, so its "
    "table does not match the capture log; not the model's answer"
)


def failure_cause(outcome: ReplayOutcome) -> tuple[str, str]:
    """``(cause, detail)`` of a failed replay: ``("HTTP 404", first 200 characters of the
    body)`` for an HTTP failure, else its error kind and detail (``("connect", "connect:
    [Errno 111] Connection refused")``)."""
    response = outcome.response
    if response is not None and response.status_code >= 400:
        body = " ".join((response.body or response.error_message or "").split())
        return f"HTTP {response.status_code}", body[:DETAIL_CHARS]
    kind = outcome.error_kind.value if outcome.error_kind is not None else "error"
    return kind, " ".join((outcome.error_detail or "").split())[:DETAIL_CHARS]


def _hint(url: str, detail: str, repeated: bool) -> str:
    hint = url_hint(url)
    if not hint and "prompt_not_recorded" in detail:
        hint = _TEST_DOUBLE_HINT
    if not hint and repeated:
        hint = "the same rejection on most requests: a configuration problem, not an answer"
    return hint


def environment_failures(
    repo: Repository, run: RunInfo, scores: Sequence[PairScore]
) -> tuple[EnvironmentFailure, ...]:
    """The run's candidate pairs that failed for reasons of the environment, grouped by
    cause (status and body, or error kind), the most frequent first (at most
    :data:`MAX_CAUSES`), each with the replica's share and one example.

    Raises:
        StorageError: the database failed.
    """
    failed = [s.exchange_id for s in scores if s.candidate_error and s.candidate_infra_error]
    if not failed:
        return ()
    outcomes = repo.load_outcomes_of(run.run_id, ReplayTarget.CANDIDATE, failed)
    replica = repo.load_outcomes_of(run.run_id, ReplayTarget.BASELINE_REPEAT, failed)
    repeated = repo.repeated_rejections(run.run_id)
    counts: Counter[tuple[str, str]] = Counter()
    shared: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], ReplayOutcome] = {}
    for exchange_id in failed:
        outcome = outcomes.get(exchange_id)
        if outcome is None:
            continue
        key = failure_cause(outcome)
        counts[key] += 1
        example.setdefault(key, outcome)
        other = replica.get(exchange_id)
        if other is not None and (other.error_kind is not None or _http_failed(other)):
            shared[key] += 1
    base_url = (run.candidate_base_url or "").rstrip("/")
    found: list[EnvironmentFailure] = []
    for key, count in counts.most_common(MAX_CAUSES):
        outcome = example[key]
        exchange = repo.get_exchange(outcome.exchange_id)
        path = normalize_route(exchange.request.path or exchange.route) if exchange else ""
        path = outcome.translated_to or path  # the route the request was sent to
        url = f"{base_url}{path}" if base_url and path else base_url
        found.append(
            EnvironmentFailure(
                cause=key[0],
                count=count,
                shared=shared[key],
                example_exchange_id=outcome.exchange_id,
                example_url=url,
                example_detail=key[1],
                hint=_hint(url, key[1], rejection_key(outcome) in repeated),
            )
        )
    return tuple(found)


def _http_failed(outcome: ReplayOutcome) -> bool:
    return outcome.response is not None and outcome.response.status_code >= 400
