"""The tool-behaviour check: ``tool_text_answer``, where the request offered tools.

Per side, "answered in text" (``*_tool_text``, :mod:`shadoweval.stats.frame`): the request offered
tools, the side answered, and it made no tool call. The check is the paired binary
machinery of :mod:`shadoweval.stats.checks.binary` on that flag: δ = P(candidate answers in text) −
P(baseline answers in text), non-inferiority against ``tool_calls.margin``, harm by the
one-sided McNemar mid-p with b = *text instead of a call* (the baseline called, the
candidate answered in text) and c = *a call instead of text*.

Pairs used: tools offered and both sides answered (neither an infrastructure error, which
is counted and gated by ``infra_error_rate``, nor a failed or empty side, counted too).
The reason adds the counts of the other tool changes on those pairs — a different
function chosen, an argument-level difference after JSON normalisation, and a different
call order (reported only where ``tool_calls.order_free`` is false) — from
``PairScore.tool_changes`` (:func:`shadoweval.compare.harms.tool_changes`).

Whether text is right depends on the request (BFCL's ``relevance`` category wants no call),
so the check is not critical by default (``tool_calls.critical``): its FAIL holds the run
and never rolls it back by itself; reference labels or a judge give the direction through
``net_harm``. With ``critical: true`` its harm p-value joins the rollback Holm family.
Where ground truth (reference correctness or an analyst's label, never the LLM judge)
covers a pair, it settles the candidate's text answer there
(:mod:`shadoweval.stats.checks.truth`): not worse, the flag is overruled; worse, the flag is
confirmed and counted once, by ``net_harm`` (the check's direction comes from there, and a
text answer the reference already calls wrong is not a second, separate harm). Either way
the pair counts as concordant here and the reason says how many flags were overruled and
confirmed; the tool-change counts stay what happened. BFCL's gpt-4o pair is the case in
point: in ``java`` 9 text answers the reference calls wrong failed this check while the
category's accuracy difference (5 better, 10 worse, exact p 0.3) is not significant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from shadoweval.records import Check, ToolChange
from shadoweval.stats.checks.binary import BinaryAnalysis, analyse_binary, binary_check
from shadoweval.stats.checks.pair_arrays import PairArrays
from shadoweval.stats.checks.truth import overrule_candidate_flags, truth_not_worse, truth_worse
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.policy import BinaryMetricPolicy, ToolBehaviourPolicy

__all__ = ["TOOL_METRIC", "ToolAnalysis", "tool_analysis", "tool_check"]

TOOL_METRIC = "tool_text_answer"
"""Metric name of the tool-behaviour check."""

_CHANGES = list(ToolChange)


@dataclass(frozen=True)
class ToolAnalysis:
    """The paired analysis of ``tool_text_answer`` and the tool-change counts.

    Attributes:
        binary: the paired binary analysis ("answered in text" per side).
        text_instead_of_call: pairs where the baseline called and the candidate answered
            in text (the analysis's b plus those ground truth overruled or confirmed).
        call_instead_of_text: the reverse (its c).
        function_changed, arguments_changed, order_changed: pairs used with that tool
            change (:class:`~shadoweval.records.ToolChange`); ``order_changed`` is
            ``None`` where the policy is order-free.
    """

    binary: BinaryAnalysis
    text_instead_of_call: int
    call_instead_of_text: int
    function_changed: int
    arguments_changed: int
    order_changed: int | None

    def describe(self) -> str:
        """``tool changes: 28 text instead of a call, 3 a call instead of text, …``."""
        parts = [
            f"{self.text_instead_of_call} text instead of a call",
            f"{self.call_instead_of_text} a call instead of text",
            f"{self.function_changed} a different function",
            f"{self.arguments_changed} different arguments",
        ]
        if self.order_changed is not None:
            parts.append(f"{self.order_changed} a different call order")
        return "tool changes on the pairs used: " + ", ".join(parts)


def tool_analysis(
    arrays: PairArrays,
    *,
    task_type: str,
    block: ToolBehaviourPolicy,
    min_pairs: int,
    levels: LookLevels,
    alpha: float,
    power: float,
) -> ToolAnalysis | None:
    """The ``tool_text_answer`` analysis of a unit, or ``None`` when no request offered tools.

    A unit's request offered tools when a side of some pair has tool flags
    (``*_tool_text`` not NaN) or some pair has a tool change.

    Args:
        arrays: the unit's pairs.
        task_type: task type or ``POOLED``.
        block: the unit's ``tool_calls`` policy (margin, critical, order_free).
        min_pairs: the unit's floor on the pairs needed to pass.
        levels: the look's levels.
        alpha: the policy's one-sided NI level (power calculation).
        power: the policy's design power (power calculation).
    """
    base_text, cand_text = arrays.base_tool_text, arrays.cand_tool_text
    offered = ~np.isnan(base_text) | ~np.isnan(cand_text) | np.any(arrays.tool_change, axis=1)
    if not np.any(offered):
        return None
    infra = arrays.infra & offered
    used = offered & ~arrays.infra & ~arrays.model_failed
    used &= ~np.isnan(base_text) & ~np.isnan(cand_text)
    unused = int(np.count_nonzero(offered & ~arrays.infra & ~used))
    policy = BinaryMetricPolicy(margin=block.margin, critical=block.critical)
    base_used = base_text[used]
    sources = arrays.quality_source[used]
    cand_used, overruled = overrule_candidate_flags(
        base_used, cand_text[used], truth_not_worse(arrays)[used], sources
    )
    cand_used, confirmed = overrule_candidate_flags(
        base_used, cand_used, truth_worse(arrays)[used], sources, worse=True
    )
    binary = analyse_binary(
        base_used,
        cand_used,
        metric=TOOL_METRIC,
        task_type=task_type,
        label="text-answer (no tool call)",
        block=policy,
        min_pairs=min_pairs,
        levels=levels,
        alpha=alpha,
        power=power,
        excluded=unused,
        infra_excluded=int(np.count_nonzero(infra)),
        event="answer in text",
        excluded_what="pairs with tools offered where a side failed or gave no answer",
    )
    settled = "; ".join(d for d in (overruled.describe(), confirmed.describe()) if d)
    binary = dataclasses.replace(binary, overruled=settled)

    def count(change: ToolChange) -> int:
        return int(np.count_nonzero(arrays.tool_change[used, _CHANGES.index(change)]))

    return ToolAnalysis(
        binary=binary,
        text_instead_of_call=binary.b + overruled.total + confirmed.total,
        call_instead_of_text=binary.c,
        function_changed=count(ToolChange.FUNCTION_CHANGED),
        arguments_changed=count(ToolChange.ARGUMENTS_CHANGED),
        order_changed=None if block.order_free else count(ToolChange.ORDER_CHANGED),
    )


def tool_check(analysis: ToolAnalysis, *, harm_adjusted: float | None) -> Check:
    """Decide ``tool_text_answer`` (:func:`shadoweval.stats.checks.binary.binary_check`) and add the
    tool-change counts to its reason.

    ``harm_adjusted`` is the Holm-adjusted harm p-value of the family the gate put it in
    (rollback when ``tool_calls.critical``, else the hold family).
    """
    check = binary_check(analysis.binary, harm_adjusted=harm_adjusted)
    return check.model_copy(update={"reason": f"{check.reason}; {analysis.describe()}"})
