"""The gate: per-task-type and pooled checks combined into PROMOTE / HOLD / ROLLBACK.

Decision rule (gate-statistics.md §2.3; Spotify's risk-aware rule without a success
metric, Kayenta's ``critical`` semantics, Diffy's noise floor):

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
4. ROLLBACK if any critical check shows significant harm (one-sided McNemar mid-p,
   Holm-adjusted across task types × critical metrics, at the look's spent
   ``alpha_harm``) or any quality check's sequential interval lies wholly beyond its
   margin on the harmful side — pooled or in any task type, whatever its share.
5. PROMOTE only if every check (``infra_error_rate`` included) passes in the pooled
   analysis and in every task type with at least ``min_traffic_share`` of the pairs,
   each on at least its minimum pairs (floor or power calculation, reported).
6. Otherwise HOLD, with the reason of every blocking check that did not pass. At the
   sample cap (the final look) this is a final HOLD, "inconclusive at the sample cap",
   never an implicit promote.

The run's design, not the data, picks the similarity method: a run that sent baseline
repeats (``Coverage.baseline_repeat_replayed``) is judged against the noise floor in
every unit, and a unit without a usable repeat (all failed, or none sampled) is
INCONCLUSIVE with the counts of repeats sent and failed — never judged by the looser
absolute limit, which only a run without any baseline repeat uses.

Validity under repeated polling (gate-statistics.md §2.4) comes from the look's levels
(:func:`stats.looks.look_levels`): confidence sequences for the mean-type metrics
(or α spending with a sample cap), union-bound α spending for quantile ratios and exact
tests. :func:`stats.checkpoints.evaluate_poll` chooses the look and the prefix of pairs;
this module judges the pairs it is given as that look.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd

from shadoweval.errors import ShadowEvalError
from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    Verdict,
    utc_now,
)
from stats.checks import (
    INFRA_FAILED,
    INFRA_METRIC,
    UNEQUAL_LOAD,
    BaselineRepeats,
    BinaryAnalysis,
    PairArrays,
    binary_analyses,
    binary_check,
    cost_check,
    latency_checks,
    similarity_check,
)
from stats.frame import PAIRS_COLUMNS
from stats.inputs import InvalidDataError
from stats.looks import LookLevels, look_levels
from stats.multiplicity import holm
from stats.policy import GatePolicy, effective, policy_hash
from stats.validity import coverage_by_task_type, task_mix_chi2

__all__ = ["INCONCLUSIVE_AT_CAP", "evaluate_gate"]

INCONCLUSIVE_AT_CAP = "inconclusive at the sample cap"
"""Start of the leading reason of a final HOLD at ``sequential.n_max`` (after the reasons
of an invalid run or a failing infrastructure, when there are such)."""


@dataclass(frozen=True)
class _Group:
    """One analysis unit: the pooled rows or one task type's rows."""

    task_type: str
    arrays: PairArrays
    share: float
    blocking: bool


@dataclass(frozen=True)
class _Judged:
    check: Check
    harm: bool
    blocking: bool

    @property
    def infra_fail(self) -> bool:
        """An ``infra_error_rate`` FAIL: HOLD, never ROLLBACK."""
        return self.check.metric == INFRA_METRIC and self.check.outcome == CheckOutcome.FAIL


def _label(task_type: str) -> str:
    return "pooled" if task_type == POOLED else f"task type {task_type!r}"


def _line(check: Check) -> str:
    return f"{_label(check.task_type)}, {check.metric}: {check.reason}"


def _groups(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[_Group]:
    """The pooled unit, each task type in the pairs, and captured types with no pairs.

    The columns are converted once and ordered by task type, so that each task type is
    a contiguous slice of the pooled arrays (no per-type copies or masks).
    """
    total = len(pairs)
    codes, names = pd.factorize(pairs["task_type"].astype(str), sort=True)
    order = np.argsort(codes, kind="stable")
    arrays = PairArrays.from_frame(pairs).take(order)
    counts = np.bincount(codes, minlength=len(names))
    bounds = np.concatenate([[0], np.cumsum(counts)])
    groups = [_Group(POOLED, arrays, 1.0, True)]
    for i, task_type in enumerate(names):
        share = float(counts[i]) / total
        groups.append(
            _Group(
                str(task_type),
                arrays.slice(int(bounds[i]), int(bounds[i + 1])),
                share,
                share >= policy.min_traffic_share,
            )
        )
    captured = sum(coverage.per_task_type.values())
    present = {str(t) for t in names}
    for task_type in sorted(set(coverage.per_task_type) - present):
        share = coverage.per_task_type[task_type] / captured if captured else 0.0
        if coverage.per_task_type[task_type] > 0:
            groups.append(
                _Group(task_type, arrays.slice(0, 0), share, share >= policy.min_traffic_share)
            )
    return groups


def _harm_p(analysis: BinaryAnalysis) -> float:
    return 1.0 if analysis.harm_p is None else analysis.harm_p


def _family(analysis: BinaryAnalysis) -> str | None:
    """The Holm family a harm test belongs to: rollback, infrastructure, or none."""
    if analysis.harm_p is None:
        return None
    if analysis.metric == INFRA_METRIC:
        return "infra"
    return "rollback" if analysis.critical else None


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


def _judge(
    groups: list[_Group],
    policy: GatePolicy,
    levels: LookLevels,
    n_total: int,
    repeats: BaselineRepeats | None,
) -> list[_Judged]:
    binary: list[tuple[_Group, BinaryAnalysis]] = []
    for group in groups:
        view = effective(policy, group.task_type)
        binary += [
            (group, a)
            for a in binary_analyses(
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
        ]

    # Two Holm families: the rollback family (critical quality metrics) and the
    # infrastructure family (infra_error_rate, whose harm only ever holds).
    family_of = [_family(a) for _, a in binary]
    # With a single task type the pooled rows are that task type's rows: the pooled harm
    # test is the same hypothesis, so it shares the task type's adjusted p-value instead
    # of entering the family twice (which would halve Holm's power for nothing).
    twin: dict[int, int] = {}
    with_rows = [g for g in groups if g.task_type != POOLED and g.arrays.n]
    if len(with_rows) == 1 and with_rows[0].arrays.n == n_total:
        metric_index = {a.metric: j for j, (g, a) in enumerate(binary) if g is with_rows[0]}
        for i, (owner, a) in enumerate(binary):
            j = metric_index.get(a.metric)
            if (
                owner.task_type == POOLED
                and j is not None
                and family_of[i] is not None
                and family_of[i] == family_of[j]
            ):
                twin[i], family_of[i] = j, None
    harm_adjusted: dict[int, float] = {}
    for name in ("rollback", "infra"):
        family = [i for i, member in enumerate(family_of) if member == name]
        adjusted = holm([_harm_p(binary[i][1]) for i in family])
        harm_adjusted.update({i: float(p) for i, p in zip(family, adjusted, strict=True)})
    harm_adjusted.update({i: harm_adjusted[j] for i, j in twin.items()})

    noise_floor = repeats is not None
    judged: list[_Judged] = []
    for group in groups:
        view = effective(policy, group.task_type)
        for i, (owner, a) in enumerate(binary):
            if owner is not group:
                continue
            adjusted_p = harm_adjusted.get(i)
            check = binary_check(a, harm_adjusted=adjusted_p)
            harm = (
                a.metric != INFRA_METRIC
                and adjusted_p is not None
                and adjusted_p <= levels.alpha_harm_k
            )
            judged.append(_Judged(check, harm, group.blocking))
        others = [
            similarity_check(
                group.arrays,
                task_type=group.task_type,
                block=view.similarity,
                min_pairs=view.min_pairs,
                levels=levels,
                alpha=policy.alpha,
                power=policy.power,
                noise_floor=noise_floor,
                repeats=repeats,
            ),
            *latency_checks(
                group.arrays,
                task_type=group.task_type,
                block=view.latency,
                min_pairs=view.min_pairs,
                levels=levels,
            ),
        ]
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
        judged += [_Judged(c, False, group.blocking) for c in others]
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
    """Order of an open check's reason: data problems first, then unmet margins, then
    too few pairs (the one that only needs more traffic)."""
    reason = check.reason
    if any(marker in reason for marker in _DATA_PROBLEMS):
        return 0
    if reason.startswith("too few"):
        return 2
    return 1


def _trailer(levels: LookLevels, n: int, coverage: Coverage) -> str:
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
        f"replays, {coverage.skipped} skipped, {coverage.rejected} unreadable capture lines"
        f"{repeats}"
    )


def _decide(
    judged: list[_Judged], validity: list[str], policy: GatePolicy
) -> tuple[Decision, list[str], int]:
    """The decision, its reasons, and how many leading reasons say why the run is blocked
    (invalid run, failing infrastructure; 0 when it is not)."""
    harms = [_line(j.check) for j in judged if j.harm]
    infra = [_line(j.check) for j in judged if j.infra_fail]
    fails = [
        _line(j.check)
        for j in judged
        if j.check.outcome == CheckOutcome.FAIL and not j.harm and not j.infra_fail
    ]
    blocking_open = [
        _line(j.check)
        for j in sorted(judged, key=lambda j: _rank(j.check))  # stable: unit, metric order
        if j.blocking and j.check.outcome != CheckOutcome.PASS
    ]
    minor_open = sorted(
        {
            j.check.task_type
            for j in judged
            if not j.blocking and j.check.outcome == CheckOutcome.INCONCLUSIVE
        }
    )
    notes = [
        f"{_label(t)} has less than min_traffic_share {100 * policy.min_traffic_share:g}% of the "
        "pairs: reported, not blocking promotion"
        for t in minor_open
    ]
    if any(UNEQUAL_LOAD in j.check.reason for j in judged):
        notes.append(f"latency checks: {UNEQUAL_LOAD}; treat the latency comparison with care")
    if infra:
        # An infrastructure failure makes the run unjudgeable, like low coverage: HOLD;
        # only a significant critical harm on the pairs both sides answered rolls back.
        validity = [*validity, _infra_headline(judged), *infra]
    if validity:
        if harms:
            return Decision.ROLLBACK, _unique(harms + validity + fails), 0
        blocked = _unique(validity)
        return Decision.HOLD, _unique(blocked + fails + blocking_open + notes), len(blocked)
    if harms or fails:
        return Decision.ROLLBACK, harms + fails + notes, 0
    if not blocking_open:
        task_types = sorted({j.check.task_type for j in judged if j.blocking} - {POOLED})
        passed = sum(1 for j in judged if j.blocking)
        summary = (
            f"all {passed} blocking checks passed (pooled and task types "
            f"{', '.join(task_types) or 'none'})"
        )
        return Decision.PROMOTE, [summary, *notes], 0
    return Decision.HOLD, blocking_open + notes, 0


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
) -> Verdict:
    """Evaluate the gate on the given pairs as look ``look`` and return the verdict.

    To poll a growing run, call :func:`stats.checkpoints.evaluate_poll`, which picks the
    latest checkpoint and passes its prefix of pairs here; calling this directly judges
    exactly ``pairs`` at the levels of look ``look``.

    Args:
        pairs: one row per pair with the columns of :data:`stats.frame.PAIRS_COLUMNS`
            (build it with :func:`stats.frame.pairs_frame`).
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

    Returns:
        A :class:`~shadoweval.records.Verdict` with one check per analysis unit × metric
        (pooled checks have ``task_type == POOLED``), ``reasons`` listing the deciding
        reasons first and the sequential context last, and the policy's hash.

    Raises:
        InvalidDataError: ``pairs`` lacks a required column, or ``look`` < 1.
    """
    missing = [c for c in PAIRS_COLUMNS if c not in pairs.columns]
    if missing:
        raise InvalidDataError(f"pairs table lacks columns: {', '.join(missing)}")
    if isinstance(look, bool) or not isinstance(look, int) or look < 1:
        raise InvalidDataError(f"look must be an integer >= 1, got {look!r}")
    decided = decided_at if decided_at is not None else utc_now()
    levels = look_levels(policy, look, final=final)

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
        )

    coverage_problem = _coverage_problem(coverage, policy)
    if len(pairs) == 0:
        reasons = ["no data: no scored pairs for this run; nothing can be promoted"]
        return verdict(
            Decision.HOLD, reasons + ([coverage_problem] if coverage_problem else []), ()
        )
    if paired_per_task_type is None:
        paired_per_task_type = {
            str(t): int(c) for t, c in pairs["task_type"].astype(str).value_counts().items()
        }
    # Per-task-type problems first: they name the task type.
    validity = _task_type_problems(paired_per_task_type, coverage, policy, levels)
    validity += [p for p in (coverage_problem, _duplicates_problem(pairs)) if p]
    groups = _groups(pairs, policy, coverage)
    repeats = _baseline_repeats(coverage, groups[0].arrays)
    judged = _judge(groups, policy, levels, len(pairs), repeats)
    decision, reasons, blocked = _decide(judged, validity, policy)
    if decision == Decision.HOLD and levels.final:
        # An invalid run or a failing infrastructure is not "inconclusive": those reasons
        # stay first, the cap follows them.
        reasons.insert(
            blocked,
            f"{INCONCLUSIVE_AT_CAP}: the sample cap n_max {policy.sequential.n_max} is reached "
            "and the gate is still undecided: final HOLD, never an implicit promote; start "
            "a new run (with a larger n_max) to go on",
        )
    reasons.append(_trailer(levels, len(pairs), coverage))
    return verdict(decision, reasons, tuple(j.check for j in judged))
