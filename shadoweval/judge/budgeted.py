"""Judging pairs within a budget: each pair is sent only when its estimated cost fits.

Pairs are taken in the order given (:func:`shadoweval.judge.selection.send_order`: every
stratum's first pair, then the rest interleaved in proportion, so a stop leaves a balanced
sample). Before pair *i* is sent, three amounts must together fit the budget
(:meth:`~shadoweval.judge.cost.JudgeBudget.fits`): the tokens counted so far
(:class:`~shadoweval.judge.cost.JudgeSpend`: the judge's ``usage`` of every answered call,
the preflight's included), and — times the calibration — the reservations of the pairs
still in flight (their estimates) and pair *i*'s estimate, both orders, each completion at
``max_tokens`` (:class:`~shadoweval.judge.cost.PairEstimate`). The calibration
(:attr:`~shadoweval.judge.cost.JudgeSpend.calibration`) is ``max(1, reported / estimated)``
over every call that reported its usage so far: the preflight (sent first, so it calibrates
the first pair) and each completed pair. Estimates that undershoot the judge's real usage
(a judge tokenizer less efficient than chars/4, answers longer than the captured usage
counted) are so scaled up before they are admitted; estimates that overshoot are left as
they are (the completion bound ``max_tokens`` is an upper bound). When the amounts do not
fit while pairs are in flight, it waits for one to finish (its real usage replaces its
reservation) and asks again; it waits too while as many pairs are in flight as the client's
``concurrency`` can send (two calls each: ``ceil(concurrency / 2)`` pairs), so a pair is
admitted only when it can be sent, with what the pairs before it used counted. When they
do not fit with nothing in flight, the run stops there: pair *i* and every later pair are
not sent. A pair is never skipped for a cheaper later one (that would bias the sample
towards short pairs). Concurrency is the client's (its semaphore bounds the calls).

**Overrun.** The check is on calibrated estimates, the count on real usage, so a run can
still end above its cap: when the first pairs sent together (with concurrency, before any
of them calibrates the rest) or one pair far longer than its estimate use more than
admitted. It is never more than the estimation error of the pairs in flight, and the run
says so plainly ("budget of N tokens exceeded by X (…): estimates are approximate",
:meth:`shadoweval.application.judging.cost.BudgetOutcome.message`). One pair at a time
(``SHADOWEVAL_JUDGE__CONCURRENCY=1``) after a preflight keeps the cap unless a pair uses
more, relative to its estimate, than every call before it did
(tests/judge/test_judge_cost.py: estimates at about a third of the mock judge's usage).
"""

from __future__ import annotations

import asyncio
import math
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
        spend: what was counted before (e.g. the preflight, which also calibrates the
            first pair's estimate); updated with every vote.
        on_judged: called with each judgement as it completes.

    Returns:
        The index of the first pair not sent because the budget did not admit it, or
        ``None`` when every pair was sent.

    Raises:
        ValueError: ``pairs`` and ``estimates`` differ in length.
    """
    if len(pairs) != len(estimates):
        raise ValueError(f"{len(pairs)} pairs but {len(estimates)} estimates")
    reserved = [0, 0]  # prompt, completion tokens of the pairs in flight (estimates)
    in_flight: set[asyncio.Task[None]] = set()
    max_in_flight = max(1, math.ceil(client.concurrency / 2))

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
        scale = spend.calibration
        prompt = reserved[0] + 2 * estimate.prompt_tokens_per_call
        completion = reserved[1] + 2 * estimate.completion_tokens_per_call
        return budget.fits(
            spend.prompt_tokens + math.ceil(scale * prompt),
            spend.completion_tokens + math.ceil(scale * completion),
        )

    try:
        for index, (pair, estimate) in enumerate(zip(pairs, estimates, strict=True)):
            while len(in_flight) >= max_in_flight or not admits(estimate):
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
