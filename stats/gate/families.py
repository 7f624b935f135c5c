"""The gate's check families, registered in :data:`GATE_FAMILIES` and run per analysis
unit (:class:`GateUnit`), and the judged checks of a look (:func:`_judge`).

Every family has the engine's one signature (:class:`~shadoweval.stats.engine.CheckFamily`):
a unit in, its entries out — paired tests still waiting for Holm's adjustment across
units (:class:`~shadoweval.stats.gate.harm_tests._Test`) or decided checks. A new gate
check is a module in :mod:`shadoweval.stats.checks` with its builder, a family function
here and one line in :data:`GATE_FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from shadoweval.records import Check
from shadoweval.stats.change import ChangeResult
from shadoweval.stats.checks import (
    BaselineRepeats,
    UnitChanges,
    binary_analyses,
    cost_check,
    harm_analyses,
    latency_checks,
    latency_gated,
    scoring_faults,
    similarity_check,
    tool_analysis,
)
from shadoweval.stats.engine import CheckFamily, Judged, run_families
from shadoweval.stats.gate.harm_tests import (
    _adjust,
    _decided,
    _net_harm_test,
    _paired_binary_test,
    _Test,
)
from shadoweval.stats.gate.units import _Group, _PooledStrata
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.net_harm import judgement_levels
from shadoweval.stats.policy import GatePolicy, TaskTypePolicy, effective

__all__ = ["GATE_FAMILIES", "GateEntry", "GateUnit", "UnitArgs"]

GateEntry = _Test | Judged[Check]
"""What a gate family returns: a paired test before Holm, or a decided check."""


class UnitArgs(TypedDict):
    """The keyword arguments every check builder of a unit takes."""

    task_type: str
    min_pairs: int
    levels: LookLevels
    alpha: float
    power: float


@dataclass(frozen=True)
class GateUnit:
    """One analysis unit of one look, as the gate's check families read it.

    Attributes:
        group: the unit's pairs (pooled or one task type), share and strata.
        view: the policy in effect for the unit (:func:`shadoweval.stats.policy.effective`).
        policy: the whole gate policy.
        levels: the look's levels; ``net_levels`` those of the look's judgement evaluation.
        pooled: the pooled rows' task-type codes (the pooled net-harm strata).
        repeats: the run's baseline repeats (``None``: none by design).
        changes: which pairs changed beyond the noise, and the thresholds used.
        load_note: the words every latency reason ends with when the replay ran below
            its asked rate.
    """

    group: _Group
    view: TaskTypePolicy
    policy: GatePolicy
    levels: LookLevels
    net_levels: LookLevels
    pooled: _PooledStrata
    repeats: BaselineRepeats | None
    changes: ChangeResult
    load_note: str

    @property
    def args(self) -> UnitArgs:
        """The unit's task type, minimum pairs, look levels, alpha and power."""
        return UnitArgs(
            task_type=self.group.task_type,
            min_pairs=self.view.min_pairs,
            levels=self.levels,
            alpha=self.policy.alpha,
            power=self.policy.power,
        )

    def judged(self, check: Check) -> Judged[Check]:
        """A check whose FAIL rolls back and that blocks PROMOTE in a blocking unit."""
        return Judged(check, False, self.group.blocking, not self.group.blocking, "rollback")


def binary_family(u: GateUnit) -> list[GateEntry]:
    """``infra_error_rate``, ``error_rate``, ``format_parse`` (paired binary tests)."""
    view = u.view
    analyses = binary_analyses(
        u.group.arrays,
        error_block=view.error_rate,
        infra_block=view.infra_error_rate,
        format_block=view.format_parse,
        **u.args,
    )
    return [_paired_binary_test(u.group, a, binary=a) for a in analyses]


def harm_family(u: GateUnit) -> list[GateEntry]:
    """``harm_<kind>``: one paired test per harm detector."""
    analyses = harm_analyses(u.group.arrays, block=u.view.harm, **u.args)
    return [_paired_binary_test(u.group, a, binary=a) for a in analyses]


def tool_family(u: GateUnit) -> list[GateEntry]:
    """``tool_text_answer`` where the unit's requests offered tools."""
    tool = tool_analysis(u.group.arrays, block=u.view.tool_calls, **u.args)
    return [] if tool is None else [_paired_binary_test(u.group, tool.binary, tool=tool)]


def net_harm_family(u: GateUnit) -> list[GateEntry]:
    """``net_harm`` of the judged changed pairs."""
    return [_net_harm_test(u.group, u.view, u.policy, u.net_levels, u.pooled)]


def similarity_family(u: GateUnit) -> list[GateEntry]:
    """``similarity``: report-only in judge mode unless its similarities cannot be read."""
    group, view, changes = u.group, u.view, u.changes
    usable = ~group.arrays.infra
    unit_changes = UnitChanges(
        changed=int(np.count_nonzero(group.changed)),
        pairs=int(np.count_nonzero(usable)),
        threshold=changes.noise_threshold.get(group.task_type, view.change.divergence_threshold),
        source=changes.threshold_source.get(group.task_type, "divergence_threshold"),
        quantile=view.change.noise_quantile,
        found=int(np.count_nonzero(group.found)),
        missed=int(np.count_nonzero(group.missed)),
    )
    judge_mode = view.change.mode == "judge"
    similarity = similarity_check(
        group.arrays,
        block=view.similarity,
        **u.args,
        noise_floor=u.repeats is not None,
        repeats=u.repeats,
        mode=view.change.mode,
        changes=unit_changes,
        degenerate=changes.degenerate.describe() if changes.degenerate is not None else None,
    )
    # In judge mode divergence only selects pairs, but unreadable similarities make
    # that selection wrong (a pair read as unchanged counts as a tie): they block.
    faulty = judge_mode and scoring_faults(group.arrays) > 0
    return [
        Judged(
            similarity,
            harm=False,
            blocking=group.blocking and (faulty or not judge_mode),
            minor=not group.blocking,
            on_fail="report" if judge_mode else "rollback",
        )
    ]


def latency_family(u: GateUnit) -> list[GateEntry]:
    """``latency_<metric>_p50/p95/p99``: gated on pairs co-timed with the baseline replica;
    a report-only check (:func:`~shadoweval.stats.checks.latency_gated` false: its control
    was not timed under the same conditions) never rolls back nor blocks PROMOTE."""
    checks = latency_checks(
        u.group.arrays,
        task_type=u.group.task_type,
        block=u.view.latency,
        min_pairs=u.view.min_pairs,
        levels=u.levels,
        load_note=u.load_note,
    )
    return [
        u.judged(c)
        if latency_gated(c)
        else Judged(c, harm=False, blocking=False, minor=not u.group.blocking, on_fail="report")
        for c in checks
    ]


def cost_family(u: GateUnit) -> list[GateEntry]:
    """``output_tokens`` when the policy enables it."""
    if not u.view.output_tokens.enabled:
        return []
    return [u.judged(cost_check(u.group.arrays, block=u.view.output_tokens, **u.args))]


GATE_FAMILIES: tuple[CheckFamily[GateUnit, GateEntry], ...] = (
    CheckFamily("binary", binary_family),
    CheckFamily("harms", harm_family),
    CheckFamily("tools", tool_family),
    CheckFamily("net_harm", net_harm_family),
    CheckFamily("similarity", similarity_family),
    CheckFamily("latency", latency_family),
    CheckFamily("cost", cost_family),
)
"""Every gate check family, in the order a unit's checks are listed."""


def _judge(
    groups: list[_Group],
    changes: ChangeResult,
    policy: GatePolicy,
    levels: LookLevels,
    n_total: int,
    repeats: BaselineRepeats | None,
    *,
    pooled: _PooledStrata,
    judgement_look: int,
    load_note: str = "",
) -> list[Judged[Check]]:
    """Every check of every unit, decided, in unit order and :data:`GATE_FAMILIES` order.

    The paired tests of all units are Holm-adjusted within their families first
    (:func:`~shadoweval.stats.gate.harm_tests._adjust`). The net-harm checks read the
    look's levels split over its judgement evaluations
    (:func:`shadoweval.stats.net_harm.judgement_levels`); a re-evaluation of a look with new
    judgements spends them on the net-harm tests only, so the harm family is adjusted at
    the net-harm level when it is the smaller.
    """
    net_levels = judgement_levels(levels, judgement_look)
    per_unit = [
        run_families(
            GATE_FAMILIES,
            GateUnit(
                group,
                effective(policy, group.task_type),
                policy,
                levels,
                net_levels,
                pooled,
                repeats,
                changes,
                load_note,
            ),
        )
        for group in groups
    ]
    tests = [e for entries in per_unit for e in entries if isinstance(e, _Test)]
    _adjust(tests, groups, n_total, levels.alpha_harm_k)
    return [
        _decided(e, levels, net_levels) if isinstance(e, _Test) else e
        for entries in per_unit
        for e in entries
    ]
