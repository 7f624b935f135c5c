"""The judge's floor: when an LLM judge's judgements count as a pair's quality (issue 31).

An LLM judge earns its vote where analysts or a reference checker judged the same pairs
and it agreed with them often enough: :func:`shadoweval.stats.judge_quality.judge_standings`
reads this block (frozen with the run like every threshold; left out of the policy hash at
its defaults, so runs frozen before it keep theirs).
"""

from __future__ import annotations

from pydantic import Field

from shadoweval.stats.policy.blocks import Count, Number
from shadoweval.stats.policy.judge_cost import JudgeCostPolicy

__all__ = ["JudgePolicy"]


class JudgePolicy(JudgeCostPolicy):
    """The floor on the judge's agreement with labels, below which it does not vote, and
    (inherited from :class:`JudgeCostPolicy`) what one judge run may spend.

    Attributes:
        min_agreement: the share of the labelled pairs (an analyst's label or a reference
            judgement, on pairs the judge also judged) where the judge gave the same
            outcome (better / tie / worse), read as the **point estimate**; below it the
            judge does not vote in that task type (its judgements are not the pairs'
            quality; labels and references still are) and the unit's net-harm check holds.
            Default 0.6: Zheng et al. (2023, MT-Bench, with ties) measured 66% agreement of
            GPT-4 with experts and 63% between two experts, so a judge below 60% agrees with
            the labels less than analysts agree with each other. ``0`` turns it off. In
            [0, 1].
        min_agreement_labels: labelled pairs the judge also judged that a task type needs
            before its own agreement is read; a task type with fewer is read on the pooled
            agreement (all task types), and with fewer pooled too the floor is not read
            (the judge votes, and the reasons do not mention it). Default 30. ≥ 1.
        max_flip_rate: the share of judged pairs whose verdict changes when the two answers
            are swapped (the judge's position-flip rate, read like the agreement: the task
            type's own from ``min_agreement_labels`` pairs with both orders parsed, else
            the pooled one) above which the judge does not vote there — labels or not: a
            judge whose verdict follows the order of the answers has no vote to give, and
            its flip-ties would even agree with "same" labels. Default 0.5 (Zheng et al.
            2023 measured 65% consistency for GPT-4 and far less for weaker judges). ``1``
            turns it off. In [0, 1].
    """

    min_agreement: Number = Field(default=0.6, ge=0, le=1)
    min_agreement_labels: Count = Field(default=30, ge=1)
    max_flip_rate: Number = Field(default=0.5, ge=0, le=1)
