"""The gate's paired harm tests before their decision, Holm's adjustment within each
family, and the decision of each test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
)
from shadoweval.stats.change import GROUND_TRUTH_SOURCES
from shadoweval.stats.checks import (
    HARM_METRIC_PREFIX,
    INFRA_METRIC,
    TOOL_METRIC,
    BinaryAnalysis,
    ToolAnalysis,
    binary_check,
    tool_check,
)
from shadoweval.stats.checks.pair_arrays import BoolArray, PairArrays
from shadoweval.stats.checks.reasons import fmt_g, fmt_p, infra_note
from shadoweval.stats.engine import Judged, OnFail
from shadoweval.stats.gate.ppi_net_harm import ppi_unit_check
from shadoweval.stats.gate.units import (
    _Group,
    _pooled_strata,
    _PooledStrata,
    _source_counts,
    _widest_edges,
)
from shadoweval.stats.judge_quality import held_by_judge_floor
from shadoweval.stats.looks import LookLevels
from shadoweval.stats.multiplicity import holm
from shadoweval.stats.net_harm import (
    NET_HARM_METRIC,
    estimate_net_harm,
    net_harm_check,
)
from shadoweval.stats.policy import (
    GatePolicy,
    TaskTypePolicy,
)

Family = Literal["rollback", "infra", "hold"]
"""The Holm families of harm tests: ``rollback`` (critical checks: significant harm rolls
back), ``infra`` (``infra_error_rate``: holds) and ``hold`` (non-critical harm detectors
and tool behaviour: significant harm holds, report-and-block)."""


@dataclass
class _Test:
    """One check of one unit before its decision: its harm test and Holm family.

    ``kind`` says which builder decides it: ``binary`` (error_rate, format_parse,
    infra_error_rate, harm_<kind>), ``tool`` (tool_text_answer) or ``net_harm``.
    ``discordant`` is b + c of a McNemar test (``None`` for a continuous test), read by
    the screen of :func:`_screened_holm`; ``blocking`` whether PROMOTE needs it to pass
    and ``on_fail`` what its FAIL does.
    """

    group: _Group
    metric: str
    kind: Literal["binary", "tool", "net_harm"]
    harm_p: float | None
    family: Family | None
    discordant: int | None
    blocking: bool
    on_fail: OnFail
    binary: BinaryAnalysis | None = None
    tool: ToolAnalysis | None = None
    net_check: Check | None = None
    adjusted: float | None = None


def _binary_family(a: BinaryAnalysis) -> Family | None:
    """The Holm family of a paired binary harm test, or none (a non-critical guardrail)."""
    if a.harm_p is None:
        return None
    if a.metric == INFRA_METRIC:
        return "infra"
    if a.critical:
        return "rollback"
    if a.metric.startswith(HARM_METRIC_PREFIX) or a.metric == TOOL_METRIC:
        return "hold"
    return None


def _min_attainable_midp(discordant: int) -> float:
    """The smallest one-sided McNemar mid-p that ``discordant`` = b + c pairs can give:
    all of them on the candidate's side, ``½·0.5^(b+c)`` (1 when b + c = 0)."""
    if discordant <= 0:
        return 1.0
    return 0.5 * 0.5**discordant


def _screened_holm(tests: list[_Test], level: float) -> dict[int, float]:
    """Holm-adjusted p-values of ``tests`` (indexes into it), after Tarone's screen.

    A McNemar test conditions on its discordant pairs b + c, and with few of them its
    smallest attainable mid-p (:func:`_min_attainable_midp`) exceeds ``level`` — the
    largest level any Holm step uses — so it can never reject (b + c ≤ 6 at alpha_RB_1
    0.00608; every detector that fired on no pair). Such a test is left out of the family
    and keeps its own p-value (which is above ``level``, so it is never significant);
    the others are Holm-adjusted among themselves. Leaving out hypotheses that cannot be
    rejected keeps the family-wise level (Tarone 1990, "A modified Bonferroni method for
    discrete data", Biometrics 46:515–522; Hommel & Krummenauer 1998, Biometrics
    54:673–681, for the step-down form) and stops seven harm detectors that fired on no
    pair from diluting the error-rate test.
    """
    screened = {
        i: t
        for i, t in enumerate(tests)
        if t.discordant is None or _min_attainable_midp(t.discordant) <= level
    }
    adjusted = holm([t.harm_p if t.harm_p is not None else 1.0 for t in screened.values()])
    out = {i: float(p) for i, p in zip(screened, adjusted, strict=True)}
    for i, t in enumerate(tests):
        if i not in out:
            out[i] = 1.0 if t.harm_p is None else float(t.harm_p)
    return out


def _adjust(tests: list[_Test], groups: list[_Group], n_total: int, level: float) -> None:
    """Set each test's Holm-adjusted harm p-value within its family (in place).

    With a single task type the pooled rows are that task type's rows: the pooled harm
    test is the same hypothesis, so it shares the task type's adjusted p-value instead of
    entering the family twice (which would halve Holm's power for nothing).
    """
    twin: dict[int, int] = {}
    with_rows = [g for g in groups if g.task_type != POOLED and g.arrays.n]
    if len(with_rows) == 1 and with_rows[0].arrays.n == n_total:
        index = {t.metric: j for j, t in enumerate(tests) if t.group is with_rows[0]}
        for i, t in enumerate(tests):
            j = index.get(t.metric)
            if (
                t.group.task_type == POOLED
                and j is not None
                and t.family is not None
                and t.family == tests[j].family
            ):
                twin[i] = j
    for name in ("rollback", "infra", "hold"):
        members = [i for i, t in enumerate(tests) if t.family == name and i not in twin]
        adjusted = _screened_holm([tests[i] for i in members], level)
        for k, i in enumerate(members):
            tests[i].adjusted = adjusted[k]
    for i, j in twin.items():
        tests[i].adjusted = tests[j].adjusted


def _net_harm_test(
    group: _Group,
    view: TaskTypePolicy,
    policy: GatePolicy,
    levels: LookLevels,
    pooled: _PooledStrata,
) -> _Test:
    """The unit's net-harm estimate and check (:mod:`shadoweval.stats.net_harm`) on its pairs
    without
    an infrastructure error (the model was not judged on those).

    ``levels`` are the look's levels for net harm
    (:func:`shadoweval.stats.net_harm.judgement_levels`
    of the look's judgement evaluation). The pooled unit is stratified by task type ×
    divergence stratum (:func:`_pooled_strata`, as :func:`shadoweval.stats.net_harm.pooled_strata`:
    the judge budget samples each task type separately). Where the judge does not vote
    (``group.judge_note``) the check holds
    (:func:`shadoweval.stats.judge_quality.held_by_judge_floor`).
    """
    keep = ~group.arrays.infra
    stratum = group.stratum[keep]
    names: dict[int, str] | None = None
    if group.task_type == POOLED:
        edges = _widest_edges(policy, pooled.names)
        stratum, names = _pooled_strata(
            _PooledStrata(pooled.codes[keep], pooled.names), stratum, edges
        )
    estimate = estimate_net_harm(
        group.arrays.quality[keep], group.changed[keep], stratum, names=names
    )
    check, p = net_harm_check(
        estimate,
        task_type=group.task_type,
        block=view.net_harm,
        levels=levels,
        alpha=policy.alpha,
        power=policy.power,
        sources=_source_counts(group.arrays, keep & group.changed),
        truth_ties=_truth_ties(group.arrays, keep & ~group.changed),
    )
    ppi = ppi_unit_check(
        group.task_type,
        group.arrays,
        keep,
        group.changed,
        _unit_task_types(group, pooled),
        view.net_harm,
        levels,
    )
    if isinstance(ppi, str):
        if ppi:
            check = check.model_copy(update={"reason": f"{check.reason}; {ppi}"})
    else:
        check, p = ppi
    check = held_by_judge_floor(check, group.judge_note, estimate.changed)
    n_infra = group.arrays.n - int(np.count_nonzero(keep))
    if n_infra:
        check = check.model_copy(update={"reason": check.reason + infra_note(n_infra)})
    critical = view.net_harm.critical
    family: Family | None = None
    if p is not None:
        family = "rollback" if critical else "hold"
    return _Test(
        group,
        NET_HARM_METRIC,
        "net_harm",
        p,
        family,
        None,
        # In no_change mode a change fails the similarity guardrail: net harm is reported.
        blocking=group.blocking and view.change.mode == "judge",
        on_fail="rollback" if critical else "hold",
        net_check=check,
    )


def _unit_task_types(group: _Group, pooled: _PooledStrata) -> npt.NDArray[np.object_]:
    """Each row's task type: the PPI strata (the random sample is drawn per task type)."""
    if group.task_type == POOLED:
        return np.asarray(pooled.names, dtype=object)[pooled.codes]
    return np.full(group.arrays.n, group.task_type, dtype=object)


def _truth_ties(arrays: PairArrays, rows: BoolArray) -> int:
    """Pairs among ``rows`` (the unchanged ones) whose ground truth is a tie."""
    truth = np.isin(arrays.quality_source.astype(str), GROUND_TRUTH_SOURCES)
    return int(np.count_nonzero(rows & truth & (arrays.quality == 0.0)))


def _paired_binary_test(
    group: _Group,
    a: BinaryAnalysis,
    *,
    binary: BinaryAnalysis | None = None,
    tool: ToolAnalysis | None = None,
) -> _Test:
    """The :class:`_Test` of a paired binary analysis ``a``: kind ``tool`` when ``tool``
    (whose ``binary`` is ``a``) is given, else ``binary``; McNemar discordant b + c."""
    return _Test(
        group,
        a.metric,
        "tool" if tool is not None else "binary",
        a.harm_p,
        _binary_family(a),
        a.b + a.c,
        blocking=group.blocking,
        on_fail=_on_fail(a),
        binary=binary,
        tool=tool,
    )


def _on_fail(a: BinaryAnalysis) -> OnFail:
    """A paired binary check's FAIL: ``infra_error_rate`` and the non-critical harm
    detectors and tool check hold; every other FAIL rolls back (as before issue 11)."""
    if a.metric == INFRA_METRIC:
        return "hold"
    if (a.metric.startswith(HARM_METRIC_PREFIX) or a.metric == TOOL_METRIC) and not a.critical:
        return "hold"
    return "rollback"


def _significant_net_harm(check: Check, p: float, adjusted: float, levels: LookLevels) -> Check:
    """A net-harm check whose Holm-adjusted harm p-value is significant, as a FAIL."""
    lead = (
        f"significant net harm: the candidate is worse (one-sided p {fmt_p(p)} of net harm "
        f"> 0, Holm-adjusted {fmt_p(adjusted)} <= alpha_RB_k {fmt_g(levels.alpha_harm_k)} "
        f"at look {levels.look})"
    )
    return check.model_copy(
        update={"outcome": CheckOutcome.FAIL, "reason": f"{lead}; {check.reason}"}
    )


def _decided(test: _Test, levels: LookLevels, net_levels: LookLevels) -> Judged[Check]:
    """Decide one test after Holm: its check, whether it is a rollback harm, its role.

    A net-harm test is significant at ``net_levels.alpha_harm_k`` (the look's level split
    over its judgement evaluations), every other test at ``levels.alpha_harm_k``.
    """
    adjusted = test.adjusted
    level = net_levels.alpha_harm_k if test.kind == "net_harm" else levels.alpha_harm_k
    significant = adjusted is not None and adjusted <= level
    if test.kind == "net_harm":
        assert test.net_check is not None
        check = test.net_check
        if significant and adjusted is not None and test.harm_p is not None:
            check = _significant_net_harm(check, test.harm_p, adjusted, net_levels)
    elif test.kind == "tool":
        assert test.tool is not None
        check = tool_check(test.tool, harm_adjusted=adjusted)
    else:
        assert test.binary is not None
        check = binary_check(test.binary, harm_adjusted=adjusted)
    return Judged(
        check,
        harm=significant and test.family == "rollback",
        blocking=test.blocking,
        minor=not test.group.blocking,
        on_fail=test.on_fail,
        blocks_run=check.metric == INFRA_METRIC,
    )
