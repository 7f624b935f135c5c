"""Judging a pair in both orders, and combining the two votes into one outcome.

Each pair is shown twice: baseline as Answer A (``baseline_first``) and candidate as
Answer A (``candidate_first``). LLM judges prefer an answer for its position (Zheng et al.
2023, §3.3 "position bias"; Wang et al. 2023, "Large Language Models are not Fair
Evaluators"); MT-Bench's remedy, used here, is to call a pair a win only when the judge
prefers the same side in both orders, and a tie otherwise (their "conservative" rule):

=====================  =====================  =====================
baseline_first says    candidate_first says   outcome
=====================  =====================  =====================
candidate              candidate              ``candidate_better``
baseline               baseline               ``candidate_worse``
tie                    tie                    ``tie``
anything else          (orders disagree)      ``tie`` (position bias; both votes kept)
either failed                                 ``None`` (failed; ``error`` says which)
=====================  =====================  =====================

A judge that always answers "A" therefore produces only ties. Both votes, each with its
rationale, error and token counts, are kept on the :class:`~shadoweval.records.PairJudgement`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence

from shadoweval.judge.client import JudgeClient
from shadoweval.judge.prompt import PairText
from shadoweval.records import (
    JudgeIdentity,
    JudgementSource,
    JudgeVote,
    PairJudgement,
    QualityOutcome,
)

__all__ = ["combine_votes", "judge_pair", "judge_pairs", "judgement_of"]


def combine_votes(
    baseline_first: JudgeVote, candidate_first: JudgeVote
) -> tuple[QualityOutcome | None, str, str | None]:
    """The outcome of a pair from its two votes (table in the module docstring).

    Returns:
        ``(outcome, rationale, error)``: ``outcome`` ``None`` and ``error`` naming the
        failed order(s) when a vote failed; the rationale joins both votes' rationales
        and, when the orders disagree, says so first.

    Raises:
        ValueError: the votes are not one ``baseline_first`` and one ``candidate_first``.
    """
    if baseline_first.order != "baseline_first" or candidate_first.order != "candidate_first":
        raise ValueError(
            "combine_votes needs the baseline_first vote then the candidate_first vote, got "
            f"{baseline_first.order} and {candidate_first.order}"
        )
    rationale = (
        f"[baseline shown first] {baseline_first.rationale}\n"
        f"[candidate shown first] {candidate_first.rationale}"
    )
    failed = [vote for vote in (baseline_first, candidate_first) if vote.preferred is None]
    if failed:
        error = "; ".join(
            f"{vote.order} vote failed: {vote.error or 'no verdict'}" for vote in failed
        )
        return None, rationale, error
    first, second = baseline_first.preferred, candidate_first.preferred
    if first == second:
        outcome = {
            "candidate": QualityOutcome.CANDIDATE_BETTER,
            "baseline": QualityOutcome.CANDIDATE_WORSE,
            "tie": QualityOutcome.TIE,
        }[str(first)]
        return outcome, rationale, None
    note = (
        f"orders disagree (position bias): baseline shown first → {first}, "
        f"candidate shown first → {second}; counted as a tie\n"
    )
    return QualityOutcome.TIE, note + rationale, None


def judgement_of(
    pair: PairText, votes: Sequence[JudgeVote], identity: JudgeIdentity
) -> PairJudgement:
    """The :class:`PairJudgement` of ``pair`` from its two votes (source ``judge``)."""
    outcome, rationale, error = combine_votes(votes[0], votes[1])
    return PairJudgement(
        run_id=pair.run_id,
        exchange_id=pair.exchange_id,
        task_type=pair.task_type,
        source=JudgementSource.JUDGE,
        outcome=outcome,
        rationale=rationale,
        votes=tuple(votes),
        judge=identity,
        stratum=pair.stratum,
        error=error,
    )


async def judge_pair(client: JudgeClient, pair: PairText) -> PairJudgement:
    """Judge ``pair`` in both orders (two calls, concurrently, within the client's bound)."""
    votes = await asyncio.gather(
        client.vote(pair, "baseline_first"), client.vote(pair, "candidate_first")
    )
    return judgement_of(pair, votes, client.identity)


async def judge_pairs(
    client: JudgeClient,
    pairs: Iterable[PairText],
    *,
    on_judged: Callable[[PairJudgement], None] | None = None,
) -> list[PairJudgement]:
    """Judge every pair (both orders each); the client's semaphore bounds the calls.

    ``on_judged`` is called with each judgement as it completes (e.g. to store it at
    once). Returns the judgements in the order of ``pairs``; failed judge calls are
    judgements with ``outcome=None``, never exceptions.
    """

    async def one(pair: PairText) -> PairJudgement:
        judgement = await judge_pair(client, pair)
        if on_judged is not None:
            on_judged(judgement)
        return judgement

    return list(await asyncio.gather(*(one(pair) for pair in pairs)))
