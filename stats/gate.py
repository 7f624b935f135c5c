"""The gate: per-task-type and pooled checks combined into PROMOTE / HOLD / ROLLBACK.

The question is "is the candidate at least as good?" (issue 11), not "did the answers
change?": divergence beyond the noise floor marks a pair *changed* (:mod:`shadoweval.stats.change`),
which selects it for a quality judgement and never rolls back by itself unless the policy
says ``change.mode: no_change``; the direction comes from the harm detectors
(:mod:`shadoweval.stats.checks.harms`), tool behaviour (:mod:`shadoweval.stats.checks.tools`) and
the net harm
of the judged pairs (:mod:`shadoweval.stats.net_harm`).

Decision rule (gate-statistics.md §2.3; Spotify's risk-aware rule without a success
metric, Kayenta's ``critical`` semantics, Diffy's noise floor; docs/gate.md):

1. No pairs ⇒ HOLD ("no data").
2. Validity (pair completeness, gate-statistics.md §1.7): replay coverage (paired /
   captured) below ``min_coverage`` for the run or for any captured task type, a task
   mix that differs from the capture log's (Pearson χ² at the look's spent
   ``validity.mix_alpha``, naming the worst task type), or duplicated exchanges ⇒ HOLD
   (invalid); only a significant critical harm may still roll back.
3. Infrastructure errors are not quality regressions (reference failure case 11): pairs
   with an infrastructure error on either side are left out of every quality check and
   counted; ``infra_error_rate`` gates them. Its FAIL anywhere ⇒ **HOLD, never
   ROLLBACK**, and — as for invalid runs — only a significant critical harm on the pairs
   both sides did answer may still roll back.
4. ROLLBACK if any critical check shows significant harm (one-sided McNemar mid-p of a
   paired binary check or the net-harm p-value, Holm-adjusted across task types ×
   critical metrics, at the look's spent ``alpha_harm``) or any roll-back check's
   sequential interval lies wholly beyond its margin on the harmful side — pooled or in
   any task type, whatever its share. Non-critical harm detectors, the non-critical tool
   check and non-critical net harm are report-and-block: their FAIL holds.
5. PROMOTE only if every blocking check passes in the pooled analysis and in every task
   type with at least ``min_traffic_share`` of the pairs, each on at least its minimum
   pairs — the guardrails, the harm detectors, ``tool_text_answer`` and, where pairs
   changed, ``net_harm`` (``similarity`` blocks only in ``no_change`` mode, or when its
   similarities cannot be read) — and the pairs span ``observation.min_window_hours`` of
   capture time.
6. Otherwise HOLD, naming what would decide it ("judge 140 more changed pairs in
   `koala`", the observation window, too few pairs). At the sample cap (the final look)
   this is a final HOLD, "inconclusive at the sample cap", never an implicit promote.

The first reason of every verdict says what decided it (a degenerate noise floor leads a
HOLD that no validity or infrastructure problem decided).

The run's design, not the data, picks the similarity method: a run that sent baseline
repeats (``Coverage.baseline_repeat_replayed``) is judged against the noise floor in
every unit, and a unit without a usable repeat (all failed, or none sampled) is
INCONCLUSIVE with the counts of repeats sent and failed — never judged by the looser
absolute limit, which only a run without any baseline repeat uses.

Validity under repeated polling (gate-statistics.md §2.4) comes from the look's levels
(:func:`shadoweval.stats.looks.look_levels`): confidence sequences for the mean-type metrics
(or α spending with a sample cap), union-bound α spending for quantile ratios, exact
tests and net harm (split over the look's judgement evaluations:
:func:`shadoweval.stats.net_harm.judgement_levels`).
:func:`shadoweval.stats.checkpoints.evaluate_poll` chooses
the look and the prefix of pairs; this module judges the pairs it is given as that look.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
import pandas as pd

from shadoweval.errors import ShadowEvalError
from shadoweval.records import (
    POOLED,
    RATE_SHORTFALL_SHARE,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    LatencyCacheHits,
    RouteCoverage,
    Verdict,
    utc_now,
)
from shadoweval.stats.change import ChangeResult, classify_pair_arrays
from shadoweval.stats.checks import (
    HARM_METRIC_PREFIX,
    INFRA_FAILED,
    INFRA_METRIC,
    TOOL_METRIC,
    UNEQUAL_LOAD,
    BaselineRepeats,
    BinaryAnalysis,
    PairArrays,
    ToolAnalysis,
    UnitChanges,
    binary_analyses,
    binary_check,
    cost_check,
    harm_analyses,
    latency_checks,
    scoring_faults,
    similarity_check,
    tool_analysis,
    tool_check,
)
from shadoweval.stats.checks.pair_arrays import BoolArray, IntArray
from shadoweval.stats.checks.reasons import fmt_g, fmt_p, infra_note
from shadoweval.stats.frame import FAILED_QUALITY_SOURCE, PAIRS_COLUMNS
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.looks import LookLevels, look_levels
from shadoweval.stats.multiplicity import holm
from shadoweval.stats.net_harm import (
    NET_HARM_METRIC,
    estimate_net_harm,
    judgement_levels,
    net_harm_check,
    stratum_names,
)
from shadoweval.stats.policy import (
    GatePolicy,
    TaskTypePolicy,
    effective,
    policy_hash,
    policy_traffic_problems,
)
from shadoweval.stats.validity import coverage_by_task_type, task_mix_chi2

__all__ = [
    "INCONCLUSIVE_AT_CAP",
    "evaluate_gate",
    "judgements_sha256",
    "latency_cache_hits",
    "unevaluated_reasons",
]

INCONCLUSIVE_AT_CAP = "inconclusive at the sample cap"
"""Start of the leading reason of a final HOLD at ``sequential.n_max`` (after the reasons
of an invalid run or a failing infrastructure, when there are such)."""


@dataclass(frozen=True)
class _Group:
    """One analysis unit: the pooled rows or one task type's rows.

    ``changed`` and ``stratum`` are the unit's rows of
    :func:`shadoweval.stats.change.classify_changes`
    (aligned with ``arrays``); ``blocking`` is false for a task type below
    ``min_traffic_share``.
    """

    task_type: str
    arrays: PairArrays
    share: float
    blocking: bool
    changed: BoolArray
    stratum: IntArray


OnFail = Literal["rollback", "hold", "report"]
"""What a check's FAIL does: roll back, hold (report-and-block), or nothing (report only)."""


@dataclass(frozen=True)
class _Judged:
    """A decided check and its role in the decision.

    ``harm``: significant harm of a critical check (rolls back, even in an invalid run).
    ``blocking``: PROMOTE needs it to pass. ``minor``: its unit has less than
    ``min_traffic_share`` of the pairs. ``on_fail``: what its FAIL does.
    """

    check: Check
    harm: bool
    blocking: bool
    minor: bool
    on_fail: OnFail

    @property
    def infra_fail(self) -> bool:
        """An ``infra_error_rate`` FAIL: HOLD, never ROLLBACK."""
        return self.check.metric == INFRA_METRIC and self.check.outcome == CheckOutcome.FAIL


def _label(task_type: str) -> str:
    return "pooled" if task_type == POOLED else f"task type {task_type!r}"


def _line(check: Check) -> str:
    return f"{_label(check.task_type)}, {check.metric}: {check.reason}"


def _groups(
    pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage
) -> tuple[list[_Group], ChangeResult, _PooledStrata]:
    """The pooled unit, each task type in the pairs, and captured types with no pairs;
    and which pairs changed (:func:`shadoweval.stats.change.classify_pair_arrays`, in the units' row
    order).

    The columns are converted once and ordered by task type, so that each task type is
    a contiguous slice of the pooled arrays (no per-type copies or masks).
    """
    total = len(pairs)
    task_types = pairs["task_type"].astype(str)
    codes, names = pd.factorize(task_types, sort=True)
    order = np.argsort(codes, kind="stable")
    arrays = PairArrays.from_frame(pairs).take(order)
    pooled = _PooledStrata(codes[order].astype(np.int64), tuple(str(t) for t in names))
    changes = classify_pair_arrays(arrays, pooled.codes, policy, names=pooled.names)
    counts = np.bincount(codes, minlength=len(names))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    groups = [_Group(POOLED, arrays, 1.0, True, changes.changed, changes.stratum)]
    for i, task_type in enumerate(names):
        share = float(counts[i]) / total
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        groups.append(
            _Group(
                str(task_type),
                arrays.slice(lo, hi),
                share,
                share >= policy.min_traffic_share,
                changes.changed[lo:hi],
                changes.stratum[lo:hi],
            )
        )
    captured = sum(coverage.per_task_type.values())
    present = {str(t) for t in names}
    for task_type in sorted(set(coverage.per_task_type) - present):
        share = coverage.per_task_type[task_type] / captured if captured else 0.0
        if coverage.per_task_type[task_type] > 0:
            groups.append(
                _Group(
                    task_type,
                    arrays.slice(0, 0),
                    share,
                    share >= policy.min_traffic_share,
                    changes.changed[:0],
                    changes.stratum[:0],
                )
            )
    return groups, changes, pooled


def _baseline_repeats(coverage: Coverage, pooled: PairArrays) -> BaselineRepeats | None:
    """The run's baseline repeats, or ``None`` when its design has none.

    The run's design decides the similarity method, not the data: a run that sent
    baseline repeats (``coverage.baseline_repeat_replayed``) is judged against the noise
    floor even when every repeat failed. A coverage record without those counts (0)
    whose pairs nevertheless carry baseline-repeat similarities also had repeats.
    """
    if coverage.baseline_repeat_replayed > 0:
        return BaselineRepeats(coverage.baseline_repeat_replayed, coverage.baseline_repeat_errored)
    with_noise = int(np.count_nonzero(~np.isnan(pooled.noise_similarity)))
    if with_noise:
        return BaselineRepeats(with_noise, 0, from_coverage=False)
    return None


# ------------------------------------------------------------------ harm families

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


# ------------------------------------------------------------------ the checks


def _source_counts(arrays: PairArrays, rows: BoolArray) -> dict[str, int]:
    """Judged pairs among ``rows`` per ``quality_source`` (judge / human / reference), and
    under ``failed`` (when any) the pairs whose resolved judgement failed: the net-harm
    reason shows them (``sources judge 0, …, failed 10``), never counts them as judged."""
    judged = rows & ~np.isnan(arrays.quality)
    sources, counts = np.unique(arrays.quality_source[judged].astype(str), return_counts=True)
    found = {str(s): int(c) for s, c in zip(sources, counts, strict=True) if s}
    failed = int(np.count_nonzero(rows & (arrays.quality_source == FAILED_QUALITY_SOURCE)))
    if failed:
        found[FAILED_QUALITY_SOURCE] = failed
    return found


@dataclass(frozen=True)
class _PooledStrata:
    """The pooled rows' task types as codes (``names[code]``), for the pooled strata."""

    codes: IntArray
    names: tuple[str, ...]


def _pooled_strata(
    pooled: _PooledStrata, stratum: IntArray, edges: tuple[float, ...]
) -> tuple[IntArray, dict[int, str]]:
    """Strata of the pooled unit: task type × divergence stratum.

    The same codes and names as :func:`shadoweval.stats.net_harm.pooled_strata` (task type index ×
    ``len(edges) + 2`` + stratum, named ``"koala: D 0.1-0.2"``), computed from the task
    types' integer codes the gate already has instead of their strings (a million
    string comparisons otherwise).
    """
    width = len(edges) + 2
    codes = np.where(stratum >= 0, pooled.codes * width + stratum, -1).astype(np.int64)
    labels = stratum_names(edges)
    names = {
        int(code): f"{pooled.names[int(code) // width]}: {labels[int(code) % width]}"
        for code in np.unique(codes[codes >= 0])
    }
    return codes, names


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
    the judge budget samples each task type separately).
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
    )
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


def _widest_edges(policy: GatePolicy, task_types: tuple[str, ...]) -> tuple[float, ...]:
    """The pooled unit's strata edges: the pooled policy's, or a task type's longer ones
    (a per-task-type override with more edges; the codes must fit them)."""
    edges = tuple(policy.net_harm.strata_edges)
    for task_type in task_types:
        own = tuple(effective(policy, task_type).net_harm.strata_edges)
        if len(own) > len(edges):
            edges = own
    return edges


def _tests(
    groups: list[_Group],
    policy: GatePolicy,
    levels: LookLevels,
    net_levels: LookLevels,
    pooled: _PooledStrata,
) -> list[_Test]:
    """Every paired binary, tool and net-harm test of every unit, before Holm."""
    tests: list[_Test] = []
    for group in groups:
        view = effective(policy, group.task_type)
        analyses = binary_analyses(
            group.arrays,
            task_type=group.task_type,
            error_block=view.error_rate,
            infra_block=view.infra_error_rate,
            format_block=view.format_parse,
            min_pairs=view.min_pairs,
            levels=levels,
            alpha=policy.alpha,
            power=policy.power,
        )
        analyses += harm_analyses(
            group.arrays,
            task_type=group.task_type,
            block=view.harm,
            min_pairs=view.min_pairs,
            levels=levels,
            alpha=policy.alpha,
            power=policy.power,
        )
        tests += [_paired_binary_test(group, a, binary=a) for a in analyses]
        tool = tool_analysis(
            group.arrays,
            task_type=group.task_type,
            block=view.tool_calls,
            min_pairs=view.min_pairs,
            levels=levels,
            alpha=policy.alpha,
            power=policy.power,
        )
        if tool is not None:
            tests.append(_paired_binary_test(group, tool.binary, tool=tool))
        tests.append(_net_harm_test(group, view, policy, net_levels, pooled))
    return tests


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


def _decided(test: _Test, levels: LookLevels, net_levels: LookLevels) -> _Judged:
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
    return _Judged(
        check,
        harm=significant and test.family == "rollback",
        blocking=test.blocking,
        minor=not test.group.blocking,
        on_fail=test.on_fail,
    )


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
) -> list[_Judged]:
    """Every check of every unit, decided, in unit order (binary, harm, tool, net harm,
    similarity, latency, output tokens). ``load_note`` is added to every latency reason
    (the replay ran below its asked rate: :func:`_load_note`).

    The net-harm checks read the look's levels split over its judgement evaluations
    (:func:`shadoweval.stats.net_harm.judgement_levels`); a re-evaluation of a look with new
    judgements spends them on the net-harm tests only, so the harm family is adjusted
    at the net-harm level when it is the smaller.
    """
    net_levels = judgement_levels(levels, judgement_look)
    tests = _tests(groups, policy, levels, net_levels, pooled)
    _adjust(tests, groups, n_total, levels.alpha_harm_k)
    decided = [(t.group, _decided(t, levels, net_levels)) for t in tests]
    noise_floor = repeats is not None
    degenerate = changes.degenerate.describe() if changes.degenerate is not None else None
    judged: list[_Judged] = []
    for group in groups:
        view = effective(policy, group.task_type)
        judged += [j for owner, j in decided if owner is group]
        usable = ~group.arrays.infra
        unit_changes = UnitChanges(
            changed=int(np.count_nonzero(group.changed)),
            pairs=int(np.count_nonzero(usable)),
            threshold=changes.noise_threshold.get(
                group.task_type, view.change.divergence_threshold
            ),
            source=changes.threshold_source.get(group.task_type, "divergence_threshold"),
            quantile=view.change.noise_quantile,
        )
        judge_mode = view.change.mode == "judge"
        similarity = similarity_check(
            group.arrays,
            task_type=group.task_type,
            block=view.similarity,
            min_pairs=view.min_pairs,
            levels=levels,
            alpha=policy.alpha,
            power=policy.power,
            noise_floor=noise_floor,
            repeats=repeats,
            mode=view.change.mode,
            changes=unit_changes,
            degenerate=degenerate,
        )
        # In judge mode divergence only selects pairs, but unreadable similarities make
        # that selection wrong (a pair read as unchanged counts as a tie): they block.
        faulty = judge_mode and scoring_faults(group.arrays) > 0
        judged.append(
            _Judged(
                similarity,
                harm=False,
                blocking=group.blocking and (faulty or not judge_mode),
                minor=not group.blocking,
                on_fail="report" if judge_mode else "rollback",
            )
        )
        others = latency_checks(
            group.arrays,
            task_type=group.task_type,
            block=view.latency,
            min_pairs=view.min_pairs,
            levels=levels,
            load_note=load_note,
        )
        if view.output_tokens.enabled:
            others.append(
                cost_check(
                    group.arrays,
                    task_type=group.task_type,
                    block=view.output_tokens,
                    min_pairs=view.min_pairs,
                    levels=levels,
                    alpha=policy.alpha,
                    power=policy.power,
                )
            )
        judged += [
            _Judged(c, False, group.blocking, not group.blocking, "rollback") for c in others
        ]
    return judged


# ------------------------------------------------------------------ validity


def _coverage_problem(coverage: Coverage, policy: GatePolicy) -> str | None:
    share = coverage.share
    if share != share or share < policy.min_coverage:  # NaN or too low
        return (
            f"invalid run: replay coverage {share:.1%} ({coverage.paired} paired of "
            f"{coverage.captured} captured) is below min_coverage {100 * policy.min_coverage:g}%; "
            "promotion is blocked"
        )
    return None


def _skip_reasons(counts: RouteCoverage) -> str:
    """``reason: <detail>``, or ``reasons: <detail> (n), …`` (at most three, most frequent
    first); ``no skip reason recorded`` when none was."""
    reasons = list(counts.skip_reasons.items())
    if not reasons:
        return "no skip reason recorded"
    if len(reasons) == 1:
        return f"reason: {reasons[0][0]}"
    shown = ", ".join(f"{detail} ({n})" for detail, n in reasons[:3])
    more = f", and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return f"reasons: {shown}{more}"


def _route_shortfall(route: str, counts: RouteCoverage, policy: GatePolicy) -> str:
    """What was not evaluated on one route: never replayed, replayed but not scored, or
    replayed below ``min_coverage``."""
    n = counts.captured
    noun = "exchange" if n == 1 else "exchanges"
    if counts.paired == 0 and counts.replayed == 0:
        return f"{n} {noun} on {route} were captured but not replayed ({_skip_reasons(counts)})"
    if counts.paired == 0:
        return (
            f"{n} {noun} on {route} were captured and {counts.replayed} replayed, but none "
            "was scored (run shadow-eval compare)"
        )
    share = counts.paired / n
    skipped = f"; {counts.skipped} skipped, {_skip_reasons(counts)}" if counts.skipped else ""
    return (
        f"route {route} has replay coverage {share:.1%} ({counts.paired} paired of {n} "
        f"captured{skipped}), below min_coverage {100 * policy.min_coverage:g}%"
    )


def _route_problems(coverage: Coverage, policy: GatePolicy) -> tuple[list[str], list[str]]:
    """Routes whose captured traffic was not evaluated (paired / captured below
    ``min_coverage``; a route with no pair at all is the plain case): HOLD reasons for
    required routes, notes for those the policy exempts (``routes.<route>.required``)."""
    blocking: list[str] = []
    notes: list[str] = []
    for route, counts in sorted(coverage.per_route.items()):
        if counts.captured == 0 or counts.paired / counts.captured >= policy.min_coverage:
            continue
        what = _route_shortfall(route, counts, policy)
        if policy.route_required(route):
            blocking.append(
                f"{what}; unevaluated traffic is not a pass: promotion is blocked until the "
                f"route is replayed, or exempted in the policy (routes: {{{route}: "
                "{required: false}})"
            )
        else:
            notes.append(
                f"{what}; exempt by the policy (routes.{route}.required false): reported, "
                "not blocking; those exchanges still count in the coverage"
            )
    return blocking, notes


def _policy_problems(
    policy: GatePolicy, coverage: Coverage, pairs: pd.DataFrame
) -> tuple[list[str], list[str]]:
    """Policy keys that match no traffic (:func:`shadoweval.stats.policy.policy_traffic_problems`):
    a task type is a HOLD reason (its thresholds apply to nothing, so a typo would change
    the verdict silently); a route listed as required a HOLD reason too (nothing on it
    was evaluated); a route listed with ``required: false`` a note (an unmatched
    exemption exempts nothing)."""
    seen = {t for t, n in coverage.per_task_type.items() if n > 0}
    if len(pairs):
        seen |= set(pairs["task_type"].astype(str).unique())
    routes = set(coverage.per_route) if coverage.per_route else None
    blocking: list[str] = []
    notes: list[str] = []
    for problem in policy_traffic_problems(policy, task_types=seen, routes=routes):
        if problem.field.startswith("task_types."):
            blocking.append(
                f"policy: {problem.describe()}: its thresholds apply to no pair, so the "
                "verdict would not be the one the policy asks for; promotion is blocked "
                "(correct the name: a corrected policy is a new run)"
            )
        elif policy.route_required(problem.name):
            # Listed as required: the operator expects traffic there, and none came (a
            # typo, or traffic that goes elsewhere) — nothing on it was evaluated.
            blocking.append(
                f"policy: {problem.describe()}: the policy requires this route to be "
                "evaluated and no exchange on it was captured; promotion is blocked "
                "(correct the route, or list it with required: false)"
            )
        else:
            notes.append(f"policy: {problem.describe()}: the entry has no effect")
    return blocking, notes


def _script_notes(pairs: pd.DataFrame) -> list[str]:
    """A note when some pairs have an answer in a script the embedding model is not
    declared to cover (``uncovered_scripts``): their similarity may not measure change
    (an English-only model such as the default all-MiniLM-L6-v2 maps most Chinese text
    close together), so the similarity checks say less about those pairs. A warning,
    not a HOLD: the direction checks (harms, judged and labelled pairs) still apply."""
    if "uncovered_scripts" not in pairs.columns or not len(pairs):
        return []
    marked = pairs["uncovered_scripts"].fillna("").astype(str)
    affected = int((marked != "").sum())
    if not affected:
        return []
    per_script: dict[str, int] = {}
    for value in marked[marked != ""]:
        for script in value.split(","):
            per_script[script] = per_script.get(script, 0) + 1
    shown = ", ".join(
        f"{script} {n}" for script, n in sorted(per_script.items(), key=lambda i: (-i[1], i[0]))
    )
    share = 100.0 * affected / len(pairs)
    return [
        f"similarity: {affected} of {len(pairs)} pairs ({share:.1f}%) have an answer in a "
        f"script the embedding model is not declared to cover ({shown}; "
        "compare.model_scripts): their similarity may not measure how much changed; score "
        "with a model that covers them (compare.model_path) or read the direction checks"
    ]


def _load_note(coverage: Coverage) -> str:
    """The words every latency reason gets when a replay pass started its measured
    requests below :data:`~shadoweval.records.RATE_SHORTFALL_SHARE` of the asked rate
    (the worst pass); empty otherwise."""
    short = coverage.load_shortfalls()
    if not short:
        return ""
    more = (
        f" (and {len(short) - 1} more replay pass(es) below the asked rate)"
        if len(short) > 1
        else ""
    )
    return (
        f"measured under a different load than asked: measured at {short[0].describe_load()}{more}"
    )


def _coverage_line(coverage: Coverage, paired: Mapping[str, int]) -> str:
    """``coverage: 200 of 215 captured exchanges paired (93.0%); by route: …; by task
    type: …`` — every verdict says what it evaluated, per route and per task type."""
    line = (
        f"coverage: {coverage.paired} of {coverage.captured} captured exchanges paired "
        f"({coverage.share:.1%})"
    )
    if coverage.per_route:
        parts = []
        for route, counts in sorted(coverage.per_route.items()):
            part = f"{route} {counts.paired} of {counts.captured}"
            if counts.skipped:
                part += f" ({counts.skipped} skipped)"
            parts.append(part)
        line += "; by route: " + ", ".join(parts)
    captured = {t: n for t, n in coverage.per_task_type.items() if n > 0}
    if captured:
        line += "; by task type: " + ", ".join(
            f"{t} {paired.get(t, 0)} of {n}" for t, n in sorted(captured.items())
        )
    if coverage.rejected:
        line += f"; {coverage.rejected} unreadable capture lines"
    return line


def unevaluated_reasons(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[str]:
    """What a verdict without checks (no data, or before the first checkpoint) still says:
    routes not evaluated, policy names that match no traffic (blocking ones first, then
    notes), and the coverage by route and by task type."""
    route_blocking, route_notes = _route_problems(coverage, policy)
    policy_blocking, policy_notes = _policy_problems(policy, coverage, pairs)
    paired: Mapping[str, int] = coverage.paired_per_task_type
    if len(pairs):
        paired = {str(t): int(c) for t, c in pairs["task_type"].astype(str).value_counts().items()}
    return [
        *route_blocking,
        *policy_blocking,
        *route_notes,
        *policy_notes,
        _coverage_line(coverage, paired),
    ]


def _task_type_problems(
    paired: Mapping[str, int], coverage: Coverage, policy: GatePolicy, levels: LookLevels
) -> list[str]:
    """Per-task-type coverage and the task-mix χ² test against the capture log."""
    captured = {t: n for t, n in coverage.per_task_type.items() if n > 0}
    if not captured:
        return []
    problems: list[str] = []
    try:
        low = coverage_by_task_type(paired, captured, policy.min_coverage)
        mix = task_mix_chi2(paired, captured, alpha=levels.alpha_mix_k)
    except ShadowEvalError as exc:
        return [
            f"invalid run: the pairs do not match the capture log ({exc}); promotion is blocked"
        ]
    for task_type, share in low:
        problems.append(
            f"invalid run: task type {task_type!r} has replay coverage {share:.1%} "
            f"({paired.get(task_type, 0)} paired of {captured[task_type]} captured), below "
            f"min_coverage {100 * policy.min_coverage:g}%; promotion is blocked"
        )
    if not mix.ok:
        least = min(captured, key=lambda t: (paired.get(t, 0) / captured[t], t))
        problems.append(
            f"invalid run: the replayed task mix differs from the capture log's (chi-square "
            f"{mix.statistic:.1f}, {mix.dof} dof, p {mix.p_value:.2g} < alpha_k "
            f"{levels.alpha_mix_k:.3g} at look {levels.look}; largest deviation: task type "
            f"{mix.worst_task_type!r}; least replayed: task type {least!r}, "
            f"{paired.get(least, 0) / captured[least]:.1%} of its captures); promotion is "
            "blocked"
        )
    return problems


def _duplicates_problem(pairs: pd.DataFrame) -> str | None:
    duplicated = int(pairs["exchange_id"].duplicated().sum())
    if duplicated:
        return f"invalid data: {duplicated} exchanges appear more than once in the pairs"
    return None


# ------------------------------------------------------------------ decision


def _infra_headline(judged: list[_Judged]) -> str:
    where = ", ".join(_label(j.check.task_type) for j in judged if j.infra_fail)
    return (
        f"infrastructure: {INFRA_FAILED} (timeouts, connection errors, HTTP 408/429/5xx or "
        f"undecodable responses: {INFRA_METRIC} FAIL in {where}); model quality could not "
        "be judged on those pairs: HOLD, never ROLLBACK, for infrastructure errors; fix the "
        "candidate's serving and replay again"
    )


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


_DATA_PROBLEMS = ("(NaN)", "no pairs", "invalid", "outside [-1, 1]", "nothing to compare")


def _rank(check: Check) -> int:
    """Order of an open check's reason: data problems first, then net harm that needs
    judgements (what a reviewer can do now), then unmet margins, then too few pairs (the
    one that only needs more traffic)."""
    reason = check.reason
    if check.metric == NET_HARM_METRIC and reason.startswith("no pairs"):
        return 0
    if check.metric == NET_HARM_METRIC:
        return 1
    if any(marker in reason for marker in _DATA_PROBLEMS):
        return 0
    if reason.startswith("too few"):
        return 3
    return 2


def _open_lines(judged: list[_Judged]) -> list[str]:
    """The reason lines of the open blocking checks, in :func:`_rank` order.

    The harm detectors of one unit that are all open for the same want of pairs with no
    detector firing on either side (b + c = 0) share one line, so seven detectors that
    saw nothing do not bury the reason that decides.
    """
    open_checks = sorted(
        (j.check for j in judged if j.blocking and j.check.outcome != CheckOutcome.PASS),
        key=_rank,  # stable: unit, metric order
    )
    quiet: dict[tuple[str, int], list[Check]] = {}
    for c in open_checks:
        if (
            c.metric.startswith(HARM_METRIC_PREFIX)
            and c.outcome == CheckOutcome.INCONCLUSIVE
            and c.reason.startswith("too few")
            and c.estimate == 0.0
        ):
            quiet.setdefault((c.task_type, c.n), []).append(c)
    lines: list[str] = []
    for c in open_checks:
        group = quiet.get((c.task_type, c.n))
        if group is None or c not in group:
            lines.append(_line(c))
        elif c is group[0]:
            others = ", ".join(g.metric for g in group[1:])
            extra = (
                f" (so are {others}: no harm detector fired on either side of these pairs)"
                if others
                else ""
            )
            lines.append(_line(c) + extra)
    return lines


def latency_cache_hits(pairs: pd.DataFrame) -> LatencyCacheHits:
    """How many of ``pairs`` had an answer served from a cache (columns
    ``baseline_cache_hit`` / ``candidate_cache_hit``; a missing flag reads as false):
    pairs with either side cached, and the cached sides. Such pairs are left out of every
    latency check (:mod:`shadoweval.stats.checks.latency`)."""
    if len(pairs) == 0:
        return LatencyCacheHits()
    base = pairs["baseline_cache_hit"].fillna(False).astype(bool).to_numpy()
    cand = pairs["candidate_cache_hit"].fillna(False).astype(bool).to_numpy()
    return LatencyCacheHits(
        pairs=int(np.count_nonzero(base | cand)),
        baseline=int(np.count_nonzero(base)),
        candidate=int(np.count_nonzero(cand)),
    )


def _trailer(levels: LookLevels, n: int, coverage: Coverage, cache_hits: LatencyCacheHits) -> str:
    means = (
        f"mean-type metrics by {100 * (1 - 2 * levels.alpha):g}% confidence sequences "
        f"(N* {levels.n_star})"
        if levels.mean_method == "cs"
        else "mean-type metrics at alpha_k (spending over the capped schedule)"
    )
    repeats = (
        f"; baseline repeats: {coverage.baseline_repeat_replayed} sent, "
        f"{coverage.baseline_repeat_errored} failed"
        if coverage.baseline_repeat_replayed
        else ""
    )
    return (
        f"sequential: look {levels.look} on the first {n} pairs by capture time "
        f"(checkpoint {levels.n_k}); quantile ratios and Tango at alpha_k "
        f"{levels.alpha_k:.3g}, harm family at alpha_RB_k {levels.alpha_harm_k:.3g}, {means}; "
        f"counted, not dropped: {coverage.errored} errored and {coverage.warmup} warm-up "
        f"replays, {coverage.skipped} skipped{_skipped_by_route(coverage)}, "
        f"{coverage.rejected} unreadable capture lines"
        f"{repeats}{_cache_hit_note(cache_hits)}"
    )


def _skipped_by_route(coverage: Coverage) -> str:
    """`` (/v1/responses 15, /v1/chat/completions 1)``: where the skipped replays were."""
    routes = [(r, c.skipped) for r, c in sorted(coverage.per_route.items()) if c.skipped]
    if not coverage.skipped or not routes:
        return ""
    return " (" + ", ".join(f"{route} {n}" for route, n in routes) + ")"


def _cache_hit_note(cache_hits: LatencyCacheHits) -> str:
    """The trailer's words on pairs left out of latency because a cache served them."""
    if not cache_hits.pairs:
        return ""
    return (
        f"; {cache_hits.pairs} pairs left out of latency because an answer was served from a "
        f"cache ({cache_hits.baseline} baseline, {cache_hits.candidate} candidate; quality "
        "checks still use them)"
    )


def judgements_sha256(pairs: pd.DataFrame) -> str:
    """SHA-256 of the pairs' resolved judgements: ``exchange_id``, ``quality`` and
    ``quality_source`` of every judged row (``quality`` not NaN), in exchange-id order.

    Two evaluations of one look read the same judgements exactly when their fingerprints
    agree (:func:`shadoweval.stats.checkpoints.evaluate_poll` re-evaluates a look otherwise). The
    pairs table must have those three columns.
    """
    judged = pairs.loc[pairs["quality"].notna(), ["exchange_id", "quality", "quality_source"]]
    judged = judged.sort_values("exchange_id", kind="mergesort")
    digest = hashlib.sha256()
    for exchange_id, quality, source in judged.itertuples(index=False, name=None):
        digest.update(f"{exchange_id}\t{float(quality):+.0f}\t{source}\n".encode())
    return digest.hexdigest()


def _hours(hours: float) -> str:
    return f"{hours:.1f} h"


def _window_problem(pairs: pd.DataFrame, policy: GatePolicy) -> tuple[float, str | None]:
    """The capture-time span of the judged pairs (hours) and, when it is shorter than
    ``observation.min_window_hours``, the HOLD reason that says so."""
    need = policy.observation.min_window_hours
    captured = pd.to_datetime(pairs["captured_at"], utc=True).dropna()
    span = (captured.max() - captured.min()).total_seconds() / 3600.0 if len(captured) else 0.0
    if need <= 0 or span >= need:
        return span, None
    cycles = need / 24.0
    cycle = ""
    if cycles == 1:
        cycle = " (a full daily cycle)"
    elif cycles.is_integer():
        cycle = f" ({cycles:g} full daily cycles)"
    return span, (
        f"observation window: the pairs span {_hours(span)} of capture time; the policy asks "
        f"for {need:g} h{cycle} before a promote (observation.min_window_hours)"
    )


def _decide(
    judged: list[_Judged],
    validity: list[str],
    policy: GatePolicy,
    *,
    window: tuple[float, str | None],
    changes: ChangeResult,
    extra_notes: list[str] | None = None,
) -> tuple[Decision, list[str], int]:
    """The decision, its reasons, and how many leading reasons say why the run is blocked
    (invalid run, failing infrastructure; 0 when it is not).

    The first reason says what decided the verdict: a significant harm or a FAIL for a
    ROLLBACK; for a HOLD the validity or infrastructure problem, else the degenerate
    noise floor, else the failed report-and-block checks, then the open blocking checks
    (data problems, unmet margins, net harm to judge, too few pairs) and the observation
    window; for a PROMOTE the count of passed blocking checks.
    """
    harms = [_line(j.check) for j in judged if j.harm]
    infra = [_line(j.check) for j in judged if j.infra_fail]
    failed = [j for j in judged if j.check.outcome == CheckOutcome.FAIL and not j.harm]
    fails = [_line(j.check) for j in failed if j.on_fail == "rollback"]
    holds = [_line(j.check) for j in failed if j.on_fail == "hold" and not j.infra_fail]
    blocking_open = _open_lines(judged)
    minor_open = sorted(
        {
            j.check.task_type
            for j in judged
            if j.minor and j.check.outcome == CheckOutcome.INCONCLUSIVE
        }
    )
    notes = [
        f"{_label(t)} has less than min_traffic_share {100 * policy.min_traffic_share:g}% of the "
        "pairs: reported, not blocking promotion"
        for t in minor_open
    ]
    if any(UNEQUAL_LOAD in j.check.reason for j in judged):
        notes.append(f"latency checks: {UNEQUAL_LOAD}; treat the latency comparison with care")
    notes += extra_notes or []
    degenerate = [changes.degenerate.describe()] if changes.degenerate is not None else []
    span, window_problem = window
    if infra:
        # An infrastructure failure makes the run unjudgeable, like low coverage: HOLD;
        # only a significant critical harm on the pairs both sides answered rolls back.
        validity = [*validity, _infra_headline(judged), *infra]
    if validity:
        if harms:
            return Decision.ROLLBACK, _unique(harms + validity + fails), 0
        blocked = _unique(validity)
        waiting = [window_problem] if window_problem is not None else []
        lines = blocked + degenerate + fails + holds + blocking_open + waiting + notes
        return Decision.HOLD, _unique(lines), len(blocked)
    if harms or fails:
        return Decision.ROLLBACK, _unique(harms + fails + holds + notes + degenerate), 0
    if not blocking_open and not holds and window_problem is None:
        task_types = sorted({j.check.task_type for j in judged if j.blocking} - {POOLED})
        passed = sum(1 for j in judged if j.blocking)
        summary = (
            f"all {passed} blocking checks passed (pooled and task types "
            f"{', '.join(task_types) or 'none'})"
        )
        changed = int(np.count_nonzero(changes.changed))
        net_blocking = any(j.blocking and j.check.metric == NET_HARM_METRIC for j in judged)
        if changed and net_blocking:
            summary += (
                f"; {changed} pairs changed beyond the noise, and net harm passed in every "
                "blocking unit"
            )
        elif changed:
            summary += f"; {changed} pairs changed beyond the noise (change.mode no_change)"
        else:
            summary += "; no pair changed beyond the noise"
        window_line = (
            [
                f"observation window: the pairs span {_hours(span)} of capture time "
                f"(observation.min_window_hours {policy.observation.min_window_hours:g})"
            ]
            if policy.observation.min_window_hours > 0
            else []
        )
        return Decision.PROMOTE, [summary, *window_line, *notes, *degenerate], 0
    waiting = [window_problem] if window_problem is not None else []
    # A failed report-and-block check is a finding, not "undecided": it (and the
    # degenerate-floor sentence) stays ahead of the sample-cap line.
    leading = _unique(degenerate + holds)
    return Decision.HOLD, _unique(leading + blocking_open + waiting + notes), len(leading)


def evaluate_gate(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    *,
    run_id: str,
    coverage: Coverage,
    look: int = 1,
    decided_at: datetime | None = None,
    final: bool | None = None,
    paired_per_task_type: Mapping[str, int] | None = None,
    judgement_look: int = 1,
) -> Verdict:
    """Evaluate the gate on the given pairs as look ``look`` and return the verdict.

    To poll a growing run, call :func:`shadoweval.stats.checkpoints.evaluate_poll`, which picks the
    latest checkpoint and passes its prefix of pairs here; calling this directly judges
    exactly ``pairs`` at the levels of look ``look``.

    Args:
        pairs: one row per pair with the columns of :data:`shadoweval.stats.frame.PAIRS_COLUMNS`
            (build it with :func:`shadoweval.stats.frame.pairs_frame`).
        policy: the frozen gate policy of the run.
        run_id: the run being judged.
        coverage: replay coverage of the run; ``coverage.share`` is paired / captured.
            Task types in ``coverage.per_task_type`` with no pairs at all are judged as
            empty task types (their share of that mapping decides whether they block),
            and ``per_task_type`` is the capture log's mix for the validity checks.
            ``coverage.baseline_repeat_replayed > 0`` (the run sent baseline repeats)
            puts every unit's similarity check on the noise floor, even where no repeat
            answered (such a unit is INCONCLUSIVE, never judged by the absolute limit);
            so do baseline-repeat similarities in ``pairs``.
        look: the look number k ≥ 1 (checkpoint index): sets the spent levels.
        decided_at: timezone-aware time of the decision; now (UTC) by default.
        final: the look is at the sample cap (an undecided gate is a final HOLD); by
            default, whether ``look`` is the capped schedule's last look.
        paired_per_task_type: pairs per task type of the whole run so far, for the
            coverage and task-mix checks; by default counted from ``pairs``.
        judgement_look: the evaluation of this look with these judgements, ≥ 1 (1 the
            first; :func:`shadoweval.stats.checkpoints.evaluate_poll` counts re-evaluations of a
            look whose pairs' judgements changed): the net-harm checks spend the look's
            levels over them (:func:`shadoweval.stats.net_harm.judgement_levels`). Stored in the
            verdict with :func:`judgements_sha256` of ``pairs``.

    Returns:
        A :class:`~shadoweval.records.Verdict` with one check per analysis unit × metric
        (pooled checks have ``task_type == POOLED``), ``reasons`` listing the deciding
        reasons first and the sequential context last, and the policy's hash.

    Raises:
        InvalidDataError: ``pairs`` lacks a required column, or ``look`` or
            ``judgement_look`` < 1.
    """
    missing = [c for c in PAIRS_COLUMNS if c not in pairs.columns]
    if missing:
        raise InvalidDataError(f"pairs table lacks columns: {', '.join(missing)}")
    if isinstance(look, bool) or not isinstance(look, int) or look < 1:
        raise InvalidDataError(f"look must be an integer >= 1, got {look!r}")
    if (
        isinstance(judgement_look, bool)
        or not isinstance(judgement_look, int)
        or judgement_look < 1
    ):
        raise InvalidDataError(f"judgement_look must be an integer >= 1, got {judgement_look!r}")
    decided = decided_at if decided_at is not None else utc_now()
    levels = look_levels(policy, look, final=final)
    fingerprint = judgements_sha256(pairs)
    cache_hits = latency_cache_hits(pairs)

    def verdict(decision: Decision, reasons: list[str], checks: tuple[Check, ...]) -> Verdict:
        return Verdict(
            run_id=run_id,
            decided_at=decided,
            decision=decision,
            reasons=tuple(reasons),
            checks=checks,
            coverage=coverage,
            policy_hash=policy_hash(policy),
            look=look,
            judgement_look=judgement_look,
            judgements_sha256=fingerprint,
            latency_cache_hits=cache_hits,
        )

    coverage_problem = _coverage_problem(coverage, policy)
    route_blocking, route_notes = _route_problems(coverage, policy)
    policy_blocking, policy_notes = _policy_problems(policy, coverage, pairs)
    if len(pairs) == 0:
        reasons = ["no data: no scored pairs for this run; nothing can be promoted"]
        reasons += [coverage_problem] if coverage_problem else []
        reasons += unevaluated_reasons(pairs, policy, coverage)
        return verdict(Decision.HOLD, reasons, ())
    if paired_per_task_type is None:
        paired_per_task_type = {
            str(t): int(c) for t, c in pairs["task_type"].astype(str).value_counts().items()
        }
    # Routes and policy names first (they name what was not evaluated), then per-task-type
    # problems (they name the task type), then the run's coverage and duplicates.
    validity = route_blocking + policy_blocking
    validity += _task_type_problems(paired_per_task_type, coverage, policy, levels)
    validity += [p for p in (coverage_problem, _duplicates_problem(pairs)) if p]
    load_note = _load_note(coverage)
    extra_notes = route_notes + policy_notes + _script_notes(pairs)
    if load_note:
        extra_notes.append(
            f"latency checks: {load_note}: the replay started its measured requests below "
            f"{100 * RATE_SHORTFALL_SHARE:g}% of the asked rate, so latency was compared at "
            "that load, not the asked one"
        )
    groups, changes, pooled = _groups(pairs, policy, coverage)
    repeats = _baseline_repeats(coverage, groups[0].arrays)
    judged = _judge(
        groups,
        changes,
        policy,
        levels,
        len(pairs),
        repeats,
        pooled=pooled,
        judgement_look=judgement_look,
        load_note=load_note,
    )
    decision, reasons, blocked = _decide(
        judged,
        validity,
        policy,
        window=_window_problem(pairs, policy),
        changes=changes,
        extra_notes=extra_notes,
    )
    if decision == Decision.HOLD and levels.final:
        # An invalid run, a failing infrastructure or a failed report-and-block check is
        # not "inconclusive": those reasons stay first, the cap follows them. More pairs
        # cannot clear a failed check, so the advice then is to fix it, not a larger cap.
        failed = any(j.check.outcome == CheckOutcome.FAIL for j in judged)
        advice = (
            "the failed checks above need a fixed candidate, not more pairs"
            if failed
            else "start a new run (with a larger n_max) to go on"
        )
        reasons.insert(
            blocked,
            f"{INCONCLUSIVE_AT_CAP}: the sample cap n_max {policy.sequential.n_max} is reached "
            f"and the gate is still undecided: final HOLD, never an implicit promote; {advice}",
        )
    reasons.append(_coverage_line(coverage, paired_per_task_type))
    reasons.append(_trailer(levels, len(pairs), coverage, cache_hits))
    return verdict(decision, reasons, tuple(j.check for j in judged))
