"""The levels of one look of the gate: spent α per look, the mean-type method, ``N*``.

A CI job polls the gate many times, so each checkpoint ``k`` (:mod:`shadoweval.stats.checkpoints`)
is tested at levels that keep the family of all looks valid (gate-statistics.md §2.4):

* Mean-type metrics (paired binary differences, noise-floor differences, token
  linearisation) use confidence sequences (valid at every n at once) tuned at ``N*`` =
  the design sample size (:func:`design_sample_size`); with a sample cap ``n_max`` they
  use group-sequential α spending instead.
* Quantile ratios, Tango's and McNemar's tests and the task-mix χ² test are tested at
  look ``k`` at the spent level ``α_k`` (:func:`shadoweval.stats.sequential.look_alpha`):
  ``Σ_k α_k ≤ α``, so by the union bound the family of all looks keeps its level under
  any dependence between them.
* **Alpha is spent at the looks actually taken**, not at every checkpoint the pair count
  passed: a look at checkpoint ``k`` whose previous look was at checkpoint ``j < k``
  spends ``α(n_k) − α(n_j)`` of a cumulative spending function ``α(n)`` of the pairs
  (Lan & DeMets, "Discrete sequential boundaries for clinical trials", Biometrika
  70:659–663, 1983: the spending function fixes how much α is used by information
  fraction ``t``, so the number and times of the looks need not be planned; Jennison &
  Turnbull, *Group Sequential Methods with Applications to Clinical Trials*, 2000, ch. 7,
  "error spending"). With a cap ``α(n)`` is the Lan–DeMets function at ``t = n / n_max``;
  without one it is ``α·(6/π²)·Σ_{i ≤ k(n)} 1/i²``, ``k(n)`` the latest checkpoint at or
  below n — the same level as before for a run polled at every checkpoint, and the levels
  of the checkpoints skipped are carried to the next look taken. A batch of 1,700 pairs
  gated once is one look at checkpoint 4 (1,600 pairs) and gets ``α(1600) = 0.855·α``
  instead of the ``0.038·α`` of "look 4"; with ``n_max`` at the batch it gets all of α.
  The sum over the looks taken telescopes to ``α(n_last) ≤ α``, so the union bound holds
  whatever looks are taken, provided when to look does not depend on the statistics
  (polls are the CI's, never the data's).

:func:`look_levels` gives a look's :class:`LookLevels`; the checks
(:mod:`shadoweval.stats.checks`) read them and the gate (:mod:`shadoweval.stats.gate`) computes
them. Both
depend on this module, which depends on neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shadoweval.records import POOLED
from shadoweval.stats.policy import GatePolicy, effective
from shadoweval.stats.power import design_min_pairs, guardrail_power, paired_binary_min_pairs
from shadoweval.stats.sequential import checkpoint_schedule, look_alpha

__all__ = ["LookLevels", "MeanMethod", "design_sample_size", "look_levels"]

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
    :data:`_GUARDRAILS` guardrails (:func:`shadoweval.stats.power.guardrail_power`, Spotify's
    β-correction), Nam's score formula (:func:`shadoweval.stats.power.paired_binary_min_pairs`)
    gives n; the result is ``max(200, n)`` (:func:`shadoweval.stats.power.design_min_pairs`). Per
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
"""How a look tests the mean-type metrics: confidence sequences (no cap) or α spending."""

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
        previous_look: the checkpoint index of the look taken before this one (0: this
            is the run's first look); the levels are those spent since it.
        previous_n: that look's checkpoint size in pairs (0 for none).
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
    previous_look: int = 0
    previous_n: int = 0

    @property
    def skipped(self) -> bool:
        """Checkpoints between the previous look taken and this one were not looked at
        (their levels are carried to this look)."""
        return self.previous_look < self.look - 1

    def describe(self) -> str:
        """``look k: α_k …, α_RB,k …`` for a check's ``statistic`` text."""
        return f"look {self.look}: alpha_k {self.alpha_k:.3g}, alpha_RB_k {self.alpha_harm_k:.3g}"


def look_levels(
    policy: GatePolicy,
    look: int,
    *,
    final: bool | None = None,
    previous_look: int | None = None,
) -> LookLevels:
    """The levels of look ``look`` under ``policy.sequential``, spent since the previous
    look actually taken.

    Without ``n_max``: the spending tests' cumulative level at checkpoint ``i`` is
    ``α·(6/π²)·Σ_{j ≤ i} 1/j²`` (it tends to α over unboundedly many checkpoints), and the
    mean-type metrics use confidence sequences. With ``n_max``: Lan–DeMets spending at
    ``t = n_i / n_max`` over the schedule up to ``n_max`` — ``spending`` for the
    non-inferiority side, quantiles, task mix and mean-type metrics, ``harm_spending`` for
    the harm family (:func:`shadoweval.stats.sequential.lan_demets_spent`; Lan & DeMets
    1983). A look at checkpoint ``k`` after a look at checkpoint ``j`` spends the
    cumulative level at ``k`` minus that at ``j`` — the sum of
    :func:`shadoweval.stats.sequential.look_alpha` over checkpoints ``j+1 … k`` — so the
    levels of checkpoints no one looked at are not lost (Jennison & Turnbull 2000, §7.2:
    error spending with unplanned look times).

    Args:
        policy: the gate policy.
        look: the look's checkpoint index, ≥ 1 (beyond the capped schedule's last look:
            the last).
        final: whether the look is at the sample cap; by default, whether it is the
            capped schedule's last look.
        previous_look: the checkpoint index of the look taken before this one, 0 when
            this is the first look of the run; ``None`` (default) assumes every earlier
            checkpoint was looked at (``look − 1``: the smallest level, always valid).

    Raises:
        ValueError: look < 1, or previous_look not in [0, look).
    """
    if look < 1:
        raise ValueError(f"look must be >= 1, got {look}")
    before = look - 1 if previous_look is None else previous_look
    if not 0 <= before < look:
        raise ValueError(f"previous_look must be in [0, {look}), got {previous_look}")
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
    j = min(before, k - 1)

    def spent(alpha: float, kind: Literal["obf", "pocock"]) -> float:
        level = sum(
            look_alpha(i, schedule, alpha=alpha, n_max=seq.n_max, kind=kind)
            for i in range(j + 1, k + 1)
        )
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
        previous_look=before,
        previous_n=schedule[j - 1] if j >= 1 else 0,
    )
