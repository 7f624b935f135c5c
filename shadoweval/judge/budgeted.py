"""Judging pairs within a budget: each pair is sent only when its estimated cost fits.

Pairs are taken in the order given (:func:`shadoweval.judge.selection.send_order`: every
stratum's first pair, then the rest interleaved in proportion, so a stop leaves a balanced
sample). Before pair *i* is sent, three amounts must together fit the budget
(:meth:`~shadoweval.judge.cost.JudgeBudget.fits`): the tokens counted so far
(:class:`~shadoweval.judge.cost.JudgeSpend`: the judge's ``usage`` of every answered call,
the preflight's included), the reservations of the pairs still in flight (their
estimates), and pair *i*'s estimate — both orders, each completion at ``max_tokens``
(:class:`~shadoweval.judge.cost.PairEstimate`). When they do not while pairs are in flight,
it waits for one to finish (its real usage replaces its reservation, usually less) and
asks again; when they do not with nothing in flight, the run stops there: pair *i* and
every later pair are not sent. A pair is never skipped for a cheaper later one (that would
bias the sample towards short pairs). Concurrency is the client's (its semaphore bounds
the calls).

The check is on estimates, the count on real usage: when the judge's real usage of the
pairs in flight is larger than their estimates (a judge tokenizer much less efficient than
chars/4, say), the run can end above the budget by that difference — never by more than
the estimation error of the pairs in flight. With completions counted at ``max_tokens`` the
estimate is usually well above the real use (tests/cli/test_judge_cost.py: the mock judge
uses about a quarter of it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from shadoweval.judge.client import JudgeClient
from shadoweval.judge.cost import JudgeBudget, JudgeSpend, PairEstimate
from shadoweval.judge.pairwise import judge_pair
from shadoweval.judge.prompt import PairText
from shadoweval.records import PairJudgement

__all__ = ["judge_within_budget"]


async def judge_within_budget(
    client: JudgeClient,
    pairs: Sequence[PairText],
    estimates: Sequence[PairEstimate],
    budget: JudgeBudget,
    spend: JudgeSpend,
    *,
    on_judged: Callable[[PairJudgement], None] | None = None,
) -> int | None:
    """Judge ``pairs`` in order while the budget admits them (module docstring).

    Args:
        client: a started judge client.
        pairs: what to judge, in sending order.
        estimates: one per pair, in the same order.
        budget: the caps (none set: every pair is sent).
        spend: what was counted before (e.g. the preflight); updated with every vote.
        on_judged: called with each judgement as it completes.

    Returns:
        The index of the first pair not sent because the budget did not admit it, or
        ``None`` when every pair was sent.

    Raises:
        ValueError: ``pairs`` and ``estimates`` differ in length.
    """
    if len(pairs) != len(estimates):
        raise ValueError(f"{len(pairs)} pairs but {len(estimates)} estimates")
    reserved = [0, 0]  # prompt, completion tokens of the pairs in flight
    in_flight: set[asyncio.Task[None]] = set()

    async def one(pair: PairText, estimate: PairEstimate) -> None:
        try:
            judgement = await judge_pair(client, pair)
        finally:
            reserved[0] -= 2 * estimate.prompt_tokens_per_call
            reserved[1] -= 2 * estimate.completion_tokens_per_call
        for vote in judgement.votes:
            spend.count(vote, estimate)
        if on_judged is not None:
            on_judged(judgement)

    def admits(estimate: PairEstimate) -> bool:
        return budget.fits(
            spend.prompt_tokens + reserved[0] + 2 * estimate.prompt_tokens_per_call,
            spend.completion_tokens + reserved[1] + 2 * estimate.completion_tokens_per_call,
        )

    try:
        for index, (pair, estimate) in enumerate(zip(pairs, estimates, strict=True)):
            while not admits(estimate):
                if not in_flight:
                    return index
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                in_flight.difference_update(done)
                for task in done:
                    task.result()  # a crash of a judging task is raised here
            reserved[0] += 2 * estimate.prompt_tokens_per_call
            reserved[1] += 2 * estimate.completion_tokens_per_call
            in_flight.add(asyncio.create_task(one(pair, estimate)))
        return None
    finally:
        if in_flight:
            await asyncio.gather(*in_flight)
