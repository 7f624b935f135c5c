"""The gate: per-task-type and pooled checks combined into PROMOTE / HOLD / ROLLBACK.

Decision rule (gate-statistics.md §2.3; Spotify's risk-aware rule without a success
metric, Kayenta's ``critical`` semantics):

1. No pairs ⇒ HOLD ("no data").
2. Replay coverage (paired / captured) below ``min_coverage`` ⇒ HOLD (invalid); only a
   significant critical harm may still roll back.
3. Infrastructure errors are not quality regressions (reference failure case 11). A pair
   with an infrastructure error on either side (timeout, connection failure, HTTP
   408/429/5xx, undecodable body, cancelled live request) is left out of every quality
   check (``error_rate``, ``format_parse``, ``similarity``, latency) and counted in their
   reasons; the paired binary check ``infra_error_rate`` gates those errors instead (Tango
   NI against its own margin; harm by McNemar mid-p, Holm-adjusted among the
   ``infra_error_rate`` checks at ``alpha_harm``; never critical). When it FAILs (harm,
   or the interval wholly above the margin) anywhere, the candidate's serving
   infrastructure failed and quality could not be judged: the verdict is **HOLD, never
   ROLLBACK** because of it, and — as for low coverage — only a significant critical harm
   on the pairs both sides did answer may still roll back (other FAILs, e.g. latency
   measured on a failing server, are reported, not acted on).
4. ROLLBACK if any critical check shows significant harm (one-sided McNemar mid-p,
   Holm-adjusted across task types × critical metrics at ``alpha_harm``) or any quality
   check's interval lies wholly beyond its margin on the harmful side — pooled or in any
   task type, whatever its traffic share.
5. PROMOTE only if every check (``infra_error_rate`` included) passes in the pooled
   analysis and in every task type with at least ``min_traffic_share`` of the pairs, each
   on at least its ``min_pairs`` pairs.
6. Otherwise HOLD, with the reasons.

The tests are fixed-sample tests: ``look`` is recorded on the verdict, but repeated
polling of a growing sample is not corrected for here (gate-statistics.md §2.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pandas as pd

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
    BinaryAnalysis,
    analyse_binary,
    binary_check,
    infra_pairs,
    latency_checks,
    similarity_check,
)
from stats.frame import PAIRS_COLUMNS
from stats.inputs import InvalidDataError
from stats.multiplicity import holm
from stats.policy import GatePolicy, effective, policy_hash

__all__ = ["evaluate_gate"]


@dataclass(frozen=True)
class _Group:
    """One analysis unit: the pooled rows or one task type's rows."""

    task_type: str
    rows: pd.DataFrame
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
    """The pooled group, each task type in the pairs, and captured types with no pairs."""
    total = len(pairs)
    groups = [_Group(POOLED, pairs, 1.0, True)]
    counts = pairs["task_type"].astype(str).value_counts()
    for task_type in sorted(counts.index):
        share = float(counts[task_type]) / total
        rows = pairs[pairs["task_type"].astype(str) == task_type]
        groups.append(_Group(task_type, rows, share, share >= policy.min_traffic_share))
    captured = sum(coverage.per_task_type.values())
    for task_type in sorted(set(coverage.per_task_type) - set(counts.index)):
        share = coverage.per_task_type[task_type] / captured if captured else 0.0
        if coverage.per_task_type[task_type] > 0:
            groups.append(
                _Group(task_type, pairs.iloc[0:0], share, share >= policy.min_traffic_share)
            )
    return groups


def _harm_p(analysis: BinaryAnalysis) -> float:
    return 1.0 if analysis.harm_p is None else analysis.harm_p


def _binary_analyses(group: _Group, policy: GatePolicy) -> list[BinaryAnalysis]:
    view = effective(policy, group.task_type)
    min_pairs = view.min_pairs
    infra = infra_pairs(group.rows)
    n_infra = int(infra.sum())
    rows = group.rows[~infra]
    analyses = [
        analyse_binary(
            group.rows["baseline_infra_error"],
            group.rows["candidate_infra_error"],
            metric=INFRA_METRIC,
            task_type=group.task_type,
            label="infrastructure error",
            block=view.infra_error_rate,
            min_pairs=min_pairs,
            alpha=policy.alpha,
        ),
        analyse_binary(
            rows["baseline_fail"],
            rows["candidate_fail"],
            metric="error_rate",
            task_type=group.task_type,
            label="error/empty",
            block=view.error_rate,
            min_pairs=min_pairs,
            alpha=policy.alpha,
            infra_excluded=n_infra,
        ),
    ]
    expected = rows[rows["format_expected"].eq(True)]
    n_infra_expected = int(group.rows.loc[infra, "format_expected"].eq(True).sum())
    if len(expected):
        base_ok = expected["baseline_format_ok"].astype(float)
        cand_ok = expected["candidate_format_ok"].astype(float)
        scored = base_ok.notna() & cand_ok.notna()
        analyses.append(
            analyse_binary(
                base_ok[scored] == 0.0,
                cand_ok[scored] == 0.0,
                metric="format_parse",
                task_type=group.task_type,
                label="format-parse failure",
                block=view.format_parse,
                min_pairs=min_pairs,
                alpha=policy.alpha,
                excluded=int((~scored).sum()),
                infra_excluded=n_infra_expected,
            )
        )
    return analyses


def _family(analysis: BinaryAnalysis) -> str | None:
    """The Holm family a harm test belongs to: rollback, infrastructure, or none."""
    if analysis.harm_p is None:
        return None
    if analysis.metric == INFRA_METRIC:
        return "infra"
    return "rollback" if analysis.critical else None


def _judge(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[_Judged]:
    groups = _groups(pairs, policy, coverage)
    binary: list[tuple[_Group, BinaryAnalysis]] = []
    for group in groups:
        binary += [(group, a) for a in _binary_analyses(group, policy)]

    # Two Holm families: the rollback family (critical quality metrics) and the
    # infrastructure family (infra_error_rate, whose harm only ever holds).
    family_of = [_family(a) for _, a in binary]
    # With a single task type the pooled rows are that task type's rows: the pooled harm
    # test is the same hypothesis, so it shares the task type's adjusted p-value instead
    # of entering the family twice (which would halve Holm's power for nothing).
    twin: dict[int, int] = {}
    with_rows = [g for g in groups if g.task_type != POOLED and len(g.rows)]
    if len(with_rows) == 1 and len(with_rows[0].rows) == len(pairs):
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

    judged: list[_Judged] = []
    for group in groups:
        view = effective(policy, group.task_type)
        for i, (owner, a) in enumerate(binary):
            if owner is not group:
                continue
            adjusted_p = harm_adjusted.get(i)
            check = binary_check(a, harm_adjusted=adjusted_p, alpha_harm=policy.alpha_harm)
            harm = (
                a.metric != INFRA_METRIC
                and adjusted_p is not None
                and adjusted_p <= policy.alpha_harm
            )
            judged.append(_Judged(check, harm, group.blocking))
        others = [
            similarity_check(
                group.rows,
                task_type=group.task_type,
                block=view.similarity,
                min_pairs=view.min_pairs,
                alpha=policy.alpha,
            ),
            *latency_checks(
                group.rows, task_type=group.task_type, block=view.latency, min_pairs=view.min_pairs
            ),
        ]
        judged += [_Judged(c, False, group.blocking) for c in others]
    return judged


def _coverage_problem(coverage: Coverage, policy: GatePolicy) -> str | None:
    share = coverage.share
    if share != share or share < policy.min_coverage:  # NaN or too low
        return (
            f"invalid run: replay coverage {share:.1%} ({coverage.paired} paired of "
            f"{coverage.captured} captured) is below min_coverage {100 * policy.min_coverage:g}%; "
            "promotion is blocked"
        )
    return None


def _duplicates_problem(pairs: pd.DataFrame) -> str | None:
    duplicated = int(pairs["exchange_id"].duplicated().sum())
    if duplicated:
        return f"invalid data: {duplicated} exchanges appear more than once in the pairs"
    return None


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


def _decide(
    judged: list[_Judged], validity: list[str], policy: GatePolicy
) -> tuple[Decision, list[str]]:
    harms = [_line(j.check) for j in judged if j.harm]
    infra = [_line(j.check) for j in judged if j.infra_fail]
    fails = [
        _line(j.check)
        for j in judged
        if j.check.outcome == CheckOutcome.FAIL and not j.harm and not j.infra_fail
    ]
    blocking_open = [
        _line(j.check) for j in judged if j.blocking and j.check.outcome != CheckOutcome.PASS
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
            return Decision.ROLLBACK, _unique(harms + validity + fails)
        return Decision.HOLD, _unique(validity + fails + blocking_open + notes)
    if harms or fails:
        return Decision.ROLLBACK, harms + fails + notes
    if not blocking_open:
        task_types = sorted({j.check.task_type for j in judged if j.blocking} - {POOLED})
        passed = sum(1 for j in judged if j.blocking)
        summary = (
            f"all {passed} blocking checks passed (pooled and task types "
            f"{', '.join(task_types) or 'none'})"
        )
        return Decision.PROMOTE, [summary, *notes]
    return Decision.HOLD, blocking_open + notes


def evaluate_gate(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    *,
    run_id: str,
    coverage: Coverage,
    look: int = 1,
    decided_at: datetime | None = None,
) -> Verdict:
    """Evaluate the gate on one run's pairs and return the verdict.

    Args:
        pairs: one row per pair with the columns of :data:`stats.frame.PAIRS_COLUMNS`
            (build it with :func:`stats.frame.pairs_frame`).
        policy: the frozen gate policy of the run.
        run_id: the run being judged.
        coverage: replay coverage of the run; ``coverage.share`` is paired / captured.
            Task types in ``coverage.per_task_type`` with no pairs at all are judged as
            empty task types (their share of that mapping decides whether they block).
        look: the number of this evaluation of the run (1 for the first), recorded only.
        decided_at: timezone-aware time of the decision; now (UTC) by default.

    Returns:
        A :class:`~shadoweval.records.Verdict` with one check per task type × metric
        (pooled checks have ``task_type == POOLED``), ``reasons`` listing the deciding
        reasons first, and the policy's hash.

    Raises:
        InvalidDataError: ``pairs`` lacks a required column, or ``look`` < 1.
    """
    missing = [c for c in PAIRS_COLUMNS if c not in pairs.columns]
    if missing:
        raise InvalidDataError(f"pairs table lacks columns: {', '.join(missing)}")
    if isinstance(look, bool) or not isinstance(look, int) or look < 1:
        raise InvalidDataError(f"look must be an integer >= 1, got {look!r}")
    decided = decided_at if decided_at is not None else utc_now()

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
    validity = [p for p in (coverage_problem, _duplicates_problem(pairs)) if p]
    judged = _judge(pairs, policy, coverage)
    decision, reasons = _decide(judged, validity, policy)
    return verdict(decision, reasons, tuple(j.check for j in judged))
