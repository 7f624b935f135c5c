"""The judge run's plan and budget, and the judge's distance from the two arms.

* :func:`judge_budget` — the budget of one judge run: the run's frozen policy
  (``judge.budget_tokens``, ``judge.budget_usd``, the prices) with the command line's
  ``--budget-tokens`` / ``--budget-usd`` over it.
* :func:`cost_plan` — what the run will send, before it sends anything: pairs, calls (two
  per pair, both orders, and the preflight's one), estimated prompt tokens
  (:func:`shadoweval.judge.cost.estimate_pair`: captured usage where stored, else chars/4),
  the completion bound, money where priced, and how many pairs the estimate fits in the
  budget.
* :func:`run_arms`, :func:`request_arms`, :func:`check_judge_arms` — a judge that is one of
  the arms (same model name, same base URL) is refused; one of the same family is reported
  (:mod:`shadoweval.judge.arms`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shadoweval.errors import ConfigError
from shadoweval.judge.arms import Arm, arm_conflicts, self_preference_risks
from shadoweval.judge.cost import JudgeBudget, JudgeSpend, PairEstimate
from shadoweval.stats.policy import GatePolicy
from shadoweval.storage import RunInfo

__all__ = [
    "BudgetOutcome",
    "JudgeCostPlan",
    "check_judge_arms",
    "cost_plan",
    "judge_budget",
    "request_arms",
    "run_arms",
]

_FIELDS = {"model": "SHADOWEVAL_JUDGE__MODEL", "url": "SHADOWEVAL_JUDGE__URL"}


def run_arms(run: RunInfo) -> list[Arm]:
    """The arms of a stored run: the baseline (its name and, when known, its URL), the
    candidate (name, URL) and the baseline replica (its URL from the run's settings)."""
    replica = run.settings.get("baseline_repeat_url")
    arms = [
        Arm("baseline", run.baseline.name, run.baseline.base_url),
        Arm("candidate", run.candidate.name, run.candidate_base_url or run.candidate.base_url),
    ]
    if isinstance(replica, str) and replica:
        arms.append(Arm("baseline replica", run.baseline.name, replica))
    return arms


def request_arms(
    candidate_url: str,
    candidate_model: str | None,
    replica_url: str | None,
    replica_model: str | None,
) -> list[Arm]:
    """The arms an evaluation names before it has a run (the baseline's name comes from
    the capture log later)."""
    arms = [Arm("candidate", candidate_model, candidate_url)]
    if replica_url:
        arms.append(Arm("baseline replica", replica_model, replica_url))
    return arms


def check_judge_arms(judge_model: str, judge_url: str | None, arms: Sequence[Arm]) -> list[str]:
    """Refuse a judge that is one of the arms; return the self-preference risks.

    Returns:
        One line per arm of the judge's family
        (:func:`shadoweval.judge.arms.self_preference_risks`).

    Raises:
        ConfigError: the judge's model name is an arm's, or its URL is an arm's; the
            message names the setting (``SHADOWEVAL_JUDGE__MODEL`` / ``__URL``), its value
            and the arm.
    """
    conflicts = arm_conflicts(judge_model, judge_url, arms)
    if conflicts:
        name, value, _ = conflicts[0]
        reasons = "; ".join(f"{_FIELDS[f]}={v!r} is {reason}" for f, v, reason in conflicts)
        raise ConfigError(
            f"the judge is one of the arms it would judge: {reasons}. A model judging its "
            "own answers favours them (self-enhancement bias, Zheng et al. 2023); configure "
            "a judge that is neither the baseline nor the candidate",
            field=_FIELDS[name],
            value=value,
        )
    return self_preference_risks(judge_model, arms)


def judge_budget(
    policy: GatePolicy, *, budget_tokens: int | None = None, budget_usd: float | None = None
) -> JudgeBudget:
    """The budget of one judge run: the policy's ``judge`` block, the options over it.

    Raises:
        ConfigError: ``--budget-tokens`` < 1, ``--budget-usd`` ≤ 0, or ``--budget-usd``
            while the run's frozen policy gives no price (names ``judge.price_per_million_…``
            and says ``--budget-tokens`` works: prices cannot be added to a run).
    """
    cost = policy.judge
    if budget_tokens is not None and budget_tokens < 1:
        raise ConfigError(
            f"--budget-tokens {budget_tokens} must be >= 1",
            field="--budget-tokens",
            value=budget_tokens,
        )
    if budget_usd is not None and not budget_usd > 0:
        raise ConfigError(
            f"--budget-usd {budget_usd:g} must be > 0", field="--budget-usd", value=budget_usd
        )
    usd = budget_usd if budget_usd is not None else cost.budget_usd
    if usd is not None:
        for name in ("price_per_million_input_tokens", "price_per_million_output_tokens"):
            if getattr(cost, name) is None:
                raise ConfigError(
                    f"--budget-usd {usd:g} needs the judge's prices, and they live in the "
                    f"run's frozen policy, which has no judge.{name}: "
                    "judge.price_per_million_input_tokens / _output_tokens (USD per million "
                    "tokens) are set in the policy before the run starts, so this run cannot "
                    "use --budget-usd; --budget-tokens works",
                    field=f"judge.{name}",
                    value=None,
                )
    return JudgeBudget(
        tokens=budget_tokens if budget_tokens is not None else cost.budget_tokens,
        usd=usd,
        price_per_million_input_tokens=cost.price_per_million_input_tokens,
        price_per_million_output_tokens=cost.price_per_million_output_tokens,
    )


@dataclass(frozen=True)
class JudgeCostPlan:
    """What a judge run will send, and what it is estimated to cost, before it sends.

    Attributes:
        pairs: pairs to judge; calls: judge calls for them (two per pair, both orders).
        preflight_calls: 1 when the preflight sends the first pair once more, else 0.
        max_tokens: the judge's completion bound per call.
        prompt_tokens: estimated prompt tokens of every call (preflight included).
        completion_tokens_max: the completion bound of every call (``max_tokens`` each).
        sources: pairs per estimate source (``captured usage``, ``mixed``, ``chars/4``).
        budget: the budget applied.
        usd: the estimate's price (prompt + completion bound), ``None`` when not priced.
        pairs_within_budget: pairs, in sending order, whose estimates fit the budget one
            after the other (``None`` when nothing is capped).
        estimates: one per pair, in sending order.
    """

    pairs: int
    calls: int
    preflight_calls: int
    max_tokens: int
    prompt_tokens: int
    completion_tokens_max: int
    sources: dict[str, int]
    budget: JudgeBudget
    usd: float | None
    pairs_within_budget: int | None
    estimates: tuple[PairEstimate, ...] = field(repr=False, default=())

    @property
    def tokens(self) -> int:
        """Estimated prompt tokens + the completion bound."""
        return self.prompt_tokens + self.completion_tokens_max

    @property
    def exceeds_budget(self) -> bool:
        """The estimate of every pair does not fit the budget."""
        return self.pairs_within_budget is not None and self.pairs_within_budget < self.pairs

    def lines(self) -> list[str]:
        """The plan in words, one line each (printed before anything is sent)."""
        preflight = " + 1 preflight call" if self.preflight_calls else ""
        sources = _sources_text(self.sources)
        money = "" if self.usd is None else f" ≈ ${self.usd:.4f}"
        lines = [
            f"plan: {self.pairs} pairs, {self.calls} judge calls (both orders){preflight}; "
            f"estimated {self.prompt_tokens} prompt tokens ({sources}) + at most "
            f"{self.completion_tokens_max} completion tokens (max_tokens {self.max_tokens} per "
            f"call) = {self.tokens} tokens{money}"
        ]
        if not self.budget.capped:
            lines.append("budget: none (judge.budget_tokens / --budget-tokens to set one)")
        elif self.exceeds_budget:
            lines.append(
                f"budget: {self.budget.describe()} — the estimate exceeds it: about "
                f"{self.pairs_within_budget} of {self.pairs} pairs fit; judging stops when the "
                "next pair's two calls would exceed it (the rest stay unjudged)"
            )
        else:
            lines.append(f"budget: {self.budget.describe()} — the estimate fits")
        return lines

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (the report's ``plan``)."""
        return {
            "pairs": self.pairs,
            "calls": self.calls,
            "preflight_calls": self.preflight_calls,
            "max_tokens_per_call": self.max_tokens,
            "prompt_tokens_estimate": self.prompt_tokens,
            "completion_tokens_max": self.completion_tokens_max,
            "tokens_estimate": self.tokens,
            "estimate_sources": self.sources,
            "usd_estimate": self.usd,
            "budget": {
                "tokens": self.budget.tokens,
                "usd": self.budget.usd,
                "price_per_million_input_tokens": self.budget.price_per_million_input_tokens,
                "price_per_million_output_tokens": self.budget.price_per_million_output_tokens,
            },
            "pairs_within_budget_estimate": self.pairs_within_budget,
            "exceeds_budget": self.exceeds_budget,
            "lines": self.lines(),
        }


def _sources_text(sources: dict[str, int]) -> str:
    """Where the plan's estimate came from, in words: ``from captured usage: 17 pairs``,
    ``chars/4: 17 pairs (no captured usage stored)``, or ``from captured usage where stored,
    chars/4 for the rest: 27 pairs mixed`` (each source's pairs listed)."""
    counts = {k: v for k, v in sources.items() if v}
    if not counts:
        return "no pairs"
    if set(counts) == {"captured usage"}:
        return f"from captured usage: {counts['captured usage']} pairs"
    if set(counts) == {"chars/4"}:
        return f"chars/4: {counts['chars/4']} pairs (no captured usage stored)"
    named = {"captured usage": "all from captured usage", "mixed": "mixed",
             "chars/4": "all chars/4"}  # fmt: skip
    parts = ", ".join(f"{v} pairs {named.get(k, k)}" for k, v in counts.items())
    return f"from captured usage where stored, chars/4 for the rest: {parts}"


def cost_plan(
    estimates: Sequence[PairEstimate], budget: JudgeBudget, *, max_tokens: int, preflight: bool
) -> JudgeCostPlan:
    """The :class:`JudgeCostPlan` of pairs with these estimates (in sending order)."""
    first = estimates[0] if estimates else None
    preflight_calls = 1 if preflight and first is not None else 0
    prompt = sum(2 * e.prompt_tokens_per_call for e in estimates)
    completion = sum(2 * e.completion_tokens_per_call for e in estimates)
    if preflight_calls and first is not None:
        prompt += first.prompt_tokens_per_call
        completion += first.completion_tokens_per_call
    fitting: int | None = None
    if budget.capped:
        spent = [0, 0]
        if preflight_calls and first is not None:
            spent = [first.prompt_tokens_per_call, first.completion_tokens_per_call]
        fitting = 0
        for e in estimates:
            spent = [
                spent[0] + 2 * e.prompt_tokens_per_call,
                spent[1] + 2 * e.completion_tokens_per_call,
            ]
            if not budget.fits(spent[0], spent[1]):
                break
            fitting += 1
    counts = Counter(e.source for e in estimates)
    return JudgeCostPlan(
        pairs=len(estimates),
        calls=2 * len(estimates),
        preflight_calls=preflight_calls,
        max_tokens=max_tokens,
        prompt_tokens=prompt,
        completion_tokens_max=completion,
        sources={k: counts.get(k, 0) for k in ("captured usage", "mixed", "chars/4")},
        budget=budget,
        usd=budget.usd_of(prompt, completion),
        pairs_within_budget=fitting,
        estimates=tuple(estimates),
    )


@dataclass
class BudgetOutcome:
    """How a judge run ended against its budget.

    Attributes:
        status: ``complete`` (every planned pair sent) or ``budget_reached`` (the next
            pair's estimate did not fit: it and the rest were not sent). Either may end
            above the cap (:meth:`over_budget`; :mod:`shadoweval.judge.budgeted`, "Overrun").
        sent: pairs sent; planned: pairs planned.
        spend: what was counted (:class:`~shadoweval.judge.cost.JudgeSpend`).
        next_pair_tokens: the estimate of the first pair not sent (both calls), or
            ``None``.
    """

    status: str = "complete"
    sent: int = 0
    planned: int = 0
    spend: JudgeSpend = field(default_factory=JudgeSpend)
    next_pair_tokens: int | None = None

    def over_budget(self, budget: JudgeBudget) -> str:
        """By how much the counted spend passed each cap: ``71`` (tokens), ``$0.0003``,
        both joined by `` and ``; ``""`` within every cap."""
        over: list[str] = []
        if budget.tokens is not None and self.spend.tokens > budget.tokens:
            over.append(str(self.spend.tokens - budget.tokens))
        usd = budget.usd_of(self.spend.prompt_tokens, self.spend.completion_tokens)
        if budget.usd is not None and usd is not None and usd > budget.usd + 1e-12:
            over.append(f"${usd - budget.usd:.4f}")
        return " and ".join(over)

    def used_text(self, budget: JudgeBudget) -> str:
        """What was used, the preflight apart (so the pairs' tokens match the run's table
        and ``judge summary``): ``4127 tokens used (+944 preflight = 5071)``, with the
        money first when the budget is in USD."""
        spend = self.spend
        used = f"{spend.pair_tokens} tokens used"
        if spend.preflight_tokens:
            used += f" (+{spend.preflight_tokens} preflight = {spend.tokens})"
        usd = budget.usd_of(spend.prompt_tokens, spend.completion_tokens)
        if budget.usd is not None and usd is not None:
            used = f"${usd:.4f} used, preflight included; {used}"
        return used

    def message(self, budget: JudgeBudget) -> str:
        """``budget of 20000 tokens reached after 7 of 17 pairs (19480 tokens used (+620
        preflight = 20100))…``; ``budget of 5000 tokens exceeded by 71 (… = 5071):
        estimates are approximate…`` when the run ended above a cap (stopped or not);
        ``""`` when the run was neither stopped nor over."""
        over = self.over_budget(budget)
        stopped = self.status == "budget_reached"
        if not stopped and not over:
            return ""
        used = self.used_text(budget)
        progress = f"after {self.sent} of {self.planned} pairs"
        if over:
            head = (
                f"budget of {budget.describe()} exceeded by {over} ({used}): estimates are "
                "approximate; "
                + (f"stopped {progress}" if stopped else f"all {self.planned} pairs sent")
            )
        else:
            head = f"budget of {budget.describe()} reached {progress} ({used})"
        if not stopped:
            return head
        scale = self.spend.calibration
        calibrated = ""
        if scale > 1 and self.next_pair_tokens is not None:
            calibrated = (
                f" (×{scale:.2f} from the judge's usage so far: "
                f"{math.ceil(scale * self.next_pair_tokens)})"
            )
        return (
            f"{head}; the next pair's two calls were estimated at {self.next_pair_tokens} "
            f"tokens{calibrated}; the pairs not sent stay unjudged (a later judge run with a "
            "larger budget judges them)"
        )

    def as_dict(self, budget: JudgeBudget) -> dict[str, Any]:
        """A JSON-ready form (the report's ``budget_outcome``): ``tokens`` is every token
        counted against the budget, ``pair_tokens`` + ``preflight_tokens``."""
        over = self.over_budget(budget)
        return {
            "status": self.status,
            "sent": self.sent,
            "planned": self.planned,
            "calls": self.spend.calls,
            "prompt_tokens": self.spend.prompt_tokens,
            "completion_tokens": self.spend.completion_tokens,
            "tokens": self.spend.tokens,
            "pair_tokens": self.spend.pair_tokens,
            "preflight_tokens": self.spend.preflight_tokens,
            "calls_without_usage": self.spend.calls_without_usage,
            "calibration": self.spend.calibration,
            "usd": budget.usd_of(self.spend.prompt_tokens, self.spend.completion_tokens),
            "next_pair_tokens_estimate": self.next_pair_tokens,
            "over_budget": bool(over),
            "over_budget_by": over or None,
            "message": self.message(budget),
        }
