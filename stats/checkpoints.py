"""Polling the gate: checkpoints on a fixed prefix of pairs, and each look's levels.

A CI job polls the verdict many times while traffic accumulates and acts on it, so a
verdict must mean the same whatever the number of polls (gate-statistics.md §2.1, §2.4):

* **Checkpoints.** Pairs are ordered by capture time (ties by exchange id). A poll with
  n pairs evaluates the first ``n_k`` of them, ``n_k`` the latest checkpoint of the
  geometric schedule ``first_checkpoint · factor^(k−1) ≤ n`` (capped at ``n_max``;
  :func:`stats.sequential.latest_checkpoint`). The verdict's ``look`` is ``k``. A poll
  between two checkpoints evaluates the same prefix and returns the same verdict, so
  polling is deterministic; a caller may cache the verdict per (look, coverage). Fewer
  pairs than the first checkpoint give HOLD ("waiting for the first checkpoint") with
  ``look = 0``.
* **Levels per look** (:func:`look_levels`). Mean-type metrics (paired binary
  differences, noise-floor differences, token linearisation) use confidence sequences
  (valid at every n at once) tuned at ``N*`` = the design sample size; with a sample cap
  ``n_max`` they use group-sequential α spending instead. Quantile ratios, Tango's and
  McNemar's tests and the task-mix χ² test are tested at look ``k`` at the spent level
  ``α_k`` (:func:`stats.sequential.look_alpha`): ``Σ_k α_k ≤ α``, so by the union bound
  the family of all looks keeps its level under any dependence between them.
* **Sample cap.** At ``n ≥ n_max`` the last look is final: a gate still undecided there
  is a final HOLD ("inconclusive at the sample cap"), never an implicit PROMOTE.
* **Terminal verdicts.** PROMOTE and ROLLBACK end a run: :func:`evaluate_poll` returns a
  terminal ``previous`` verdict unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import pandas as pd

from shadoweval.records import POOLED, Coverage, Decision, Verdict, utc_now
from stats.policy import GatePolicy, effective, policy_hash
from stats.power import design_min_pairs, guardrail_power, paired_binary_min_pairs
from stats.sequential import checkpoint_schedule, latest_checkpoint, look_alpha

__all__ = [
    "WAITING",
    "LookLevels",
    "design_sample_size",
    "evaluate_poll",
    "look_levels",
    "ordered_by_capture",
]

WAITING = "waiting for the first checkpoint"
"""Start of the reason of a verdict given before the first checkpoint (look 0)."""

_PLANNED_DISCORDANCE = 0.02
"""Discordance ψ assumed for the design sample size: 2% of pairs fail on one side only."""
_GUARDRAILS = 9
"""Guardrails per task type the design splits β over: infrastructure, error, format,
similarity, output tokens and four latency quantile ratios."""


def design_sample_size(policy: GatePolicy) -> int:
    """The design sample size per analysis unit (pairs), from the policy's margins.

    Paired binary non-inferiority is the check that needs the most pairs. With a
    planned discordance ψ = 2% (:data:`_PLANNED_DISCORDANCE`), a true difference of 0,
    the policy's smallest binary margin, one-sided ``alpha`` and the power split over
    :data:`_GUARDRAILS` guardrails (:func:`stats.power.guardrail_power`, Spotify's
    β-correction), Nam's score formula (:func:`stats.power.paired_binary_min_pairs`)
    gives n; the result is ``max(200, n)`` (:func:`stats.power.design_min_pairs`). Per
    task-type overrides of the margins count too. Default policy (1-point margins): 3,454
    pairs; with 2-point margins 1,004.

    It tunes the confidence sequences (``N*``, unless ``sequential.n_star`` is set) and
    is the "design sample size" at which the A/A simulation checks PROMOTE ≥ 80%
    (benchmarks/gate_simulation.py). It depends on the policy only, never on the data.
    """
    views = [effective(policy, POOLED), *(effective(policy, t) for t in policy.task_types)]
    margin = min(
        min(v.error_rate.margin, v.format_parse.margin, v.infra_error_rate.margin) for v in views
    )
    n = paired_binary_min_pairs(
        _PLANNED_DISCORDANCE,
        0.0,
        margin,
        alpha=policy.alpha,
        power=guardrail_power(policy.power, _GUARDRAILS),
        method="score",
    )
    return design_min_pairs(n, floor=200)


MeanMethod = Literal["cs", "spending"]

_MIN_LEVEL = 1e-12
"""Floor on a look's spent level. O'Brien–Fleming spending gives early looks levels such
as 1e-17, at which no test can pass anyway; flooring them keeps every critical value
finite (z ≤ 7.03) and adds at most 1e-12 per look to the total level."""


@dataclass(frozen=True)
class LookLevels:
    """The levels of one look (gate-statistics.md §2.4).

    Attributes:
        look: the look number k ≥ 1 (checkpoint index).
        n_k: the checkpoint's size (pairs); the evaluated pairs may differ when the
            gate is called directly.
        final: the look is at the sample cap ``n_max``.
        mean_method: ``cs`` (confidence sequences, no cap) or ``spending`` (cap set).
        alpha: the policy's one-sided non-inferiority level (of a confidence sequence).
        alpha_k: the one-sided level spent at this look by the non-inferiority tests
            (Tango), the quantile ratios and, with a cap, the mean-type metrics.
        alpha_harm_k: the family-wise level spent at this look by the harm (rollback)
            family, compared with Holm-adjusted McNemar mid-p values.
        alpha_mix_k: the level spent at this look by the task-mix χ² test.
        n_star: the n where the confidence sequences are tightest.
    """

    look: int
    n_k: int
    final: bool
    mean_method: MeanMethod
    alpha: float
    alpha_k: float
    alpha_harm_k: float
    alpha_mix_k: float
    n_star: int

    def describe(self) -> str:
        """``look k: α_k …, α_RB,k …`` for a check's ``statistic`` text."""
        return f"look {self.look}: alpha_k {self.alpha_k:.3g}, alpha_RB_k {self.alpha_harm_k:.3g}"


def look_levels(policy: GatePolicy, look: int, *, final: bool | None = None) -> LookLevels:
    """The levels of look ``look`` under ``policy.sequential``.

    Without ``n_max``: ``α_k = α·6/(π²k²)`` for the spending tests (sums to α over
    unboundedly many looks) and confidence sequences for the mean-type metrics. With
    ``n_max``: Lan–DeMets spending over the schedule up to ``n_max`` — ``spending`` for
    the non-inferiority side, quantiles, task mix and mean-type metrics,
    ``harm_spending`` for the harm family (:func:`stats.sequential.look_alpha`).

    Args:
        policy: the gate policy.
        look: the look number, ≥ 1 (beyond the capped schedule's last look: the last).
        final: whether the look is at the sample cap; by default, whether it is the
            capped schedule's last look.

    Raises:
        ValueError: look < 1.
    """
    if look < 1:
        raise ValueError(f"look must be >= 1, got {look}")
    seq = policy.sequential
    n_star = seq.n_star if seq.n_star is not None else design_sample_size(policy)
    if seq.n_max is None:
        schedule = checkpoint_schedule(seq.first_checkpoint, seq.factor, None, limit=look)
        k = look
        is_final = False
    else:
        schedule = checkpoint_schedule(seq.first_checkpoint, seq.factor, seq.n_max)
        k = min(look, len(schedule))
        is_final = k == len(schedule)

    def spent(alpha: float, kind: Literal["obf", "pocock"]) -> float:
        level = look_alpha(k, schedule, alpha=alpha, n_max=seq.n_max, kind=kind)
        return max(level, _MIN_LEVEL)

    return LookLevels(
        look=look,
        n_k=schedule[k - 1],
        final=is_final if final is None else final,
        mean_method="cs" if seq.n_max is None else "spending",
        alpha=policy.alpha,
        alpha_k=spent(policy.alpha, seq.spending),
        alpha_harm_k=spent(policy.alpha_harm, seq.harm_spending),
        alpha_mix_k=spent(policy.validity.mix_alpha, seq.spending),
        n_star=n_star,
    )


def ordered_by_capture(pairs: pd.DataFrame) -> pd.DataFrame:
    """``pairs`` ordered by ``captured_at`` then ``exchange_id``, index 0..n−1.

    A frame from :func:`stats.frame.pairs_frame` is already in this order and is
    returned as is (checked in O(n)); any other frame is sorted (stable).
    """
    captured = pairs["captured_at"]
    if captured.is_monotonic_increasing and not bool(captured.duplicated().any()):
        return pairs if isinstance(pairs.index, pd.RangeIndex) else pairs.reset_index(drop=True)
    ordered = pairs.sort_values(["captured_at", "exchange_id"], kind="mergesort")
    return ordered.reset_index(drop=True)


def _waiting(
    n: int, policy: GatePolicy, run_id: str, coverage: Coverage, decided_at: datetime
) -> Verdict:
    first = policy.sequential.first_checkpoint
    reason = (
        f"{WAITING}: {n} of {first} pairs (sequential.first_checkpoint); the gate decides "
        "only at checkpoints, so that repeated polls stay valid"
    )
    if n == 0:
        reason = "no data: no scored pairs for this run; nothing can be promoted"
    return Verdict(
        run_id=run_id,
        decided_at=decided_at,
        decision=Decision.HOLD,
        reasons=(reason,),
        checks=(),
        coverage=coverage,
        policy_hash=policy_hash(policy),
        look=0,
    )


def evaluate_poll(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    *,
    run_id: str,
    coverage: Coverage,
    decided_at: datetime | None = None,
    previous: Verdict | None = None,
) -> Verdict:
    """Evaluate one poll of a run: the gate on the prefix of its latest checkpoint.

    Args:
        pairs: all pairs of the run so far (columns of :data:`stats.frame.PAIRS_COLUMNS`,
            any order; ordered here by capture time).
        policy: the run's frozen policy (its ``sequential`` block sets the schedule).
        run_id: the run.
        coverage: the run's replay coverage now (validity is judged on it and on the
            task mix of *all* pairs so far, not only the prefix).
        decided_at: time of the decision, default now (UTC).
        previous: the run's latest verdict, if any: a PROMOTE or ROLLBACK is terminal
            and returned unchanged; a verdict of the same look ``k ≥ 1`` under the same
            policy is returned unchanged too, so each checkpoint is evaluated once. Pairs
            scored out of capture order (concurrent replays, Kafka) would otherwise change
            the prefix between two polls of one look and test new data at the same
            ``α_k`` — a quiet form of peeking.

    Returns:
        The verdict, with ``look`` = the checkpoint index (0 before the first
        checkpoint, when the verdict is HOLD without checks).

    Raises:
        InvalidDataError: ``pairs`` lacks a required column.
    """
    from stats.gate import evaluate_gate  # gate imports this module

    if previous is not None and previous.decision in (Decision.PROMOTE, Decision.ROLLBACK):
        return previous
    decided = decided_at if decided_at is not None else utc_now()
    seq = policy.sequential
    n = len(pairs)
    checkpoint = latest_checkpoint(
        n, first=seq.first_checkpoint, factor=seq.factor, n_max=seq.n_max
    )
    if checkpoint is None:
        if "captured_at" not in pairs.columns:
            from stats.inputs import InvalidDataError

            raise InvalidDataError("pairs table lacks columns: captured_at")
        return _waiting(n, policy, run_id, coverage, decided)
    look, n_k = checkpoint
    if (
        previous is not None
        and previous.look == look
        and previous.policy_hash == policy_hash(policy)
    ):
        return previous
    ordered = ordered_by_capture(pairs)
    paired_counts: Mapping[str, int] = {
        str(t): int(c) for t, c in ordered["task_type"].astype(str).value_counts().items()
    }
    final = seq.n_max is not None and n >= seq.n_max
    return evaluate_gate(
        ordered.iloc[:n_k],
        policy,
        run_id=run_id,
        coverage=coverage,
        look=look,
        decided_at=decided,
        final=final,
        paired_per_task_type=paired_counts,
    )
