"""The gate's entry point: :func:`evaluate_gate`."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import partial

import pandas as pd

from shadoweval.records import (
    RATE_SHORTFALL_SHARE,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    LatencyCacheHits,
    Verdict,
    translation_note,
    utc_now,
)
from shadoweval.stats.engine import Judged
from shadoweval.stats.frame import OPTIONAL_PAIRS_COLUMNS, PAIRS_COLUMNS
from shadoweval.stats.gate.attribution import attribute_causes
from shadoweval.stats.gate.causes import failure_cause_lines
from shadoweval.stats.gate.decide import _decide
from shadoweval.stats.gate.families import _judge
from shadoweval.stats.gate.units import _baseline_repeats, _groups
from shadoweval.stats.gate.validity import (
    _coverage_line,
    _coverage_problem,
    _duplicates_problem,
    _load_note,
    _policy_problems,
    _route_problems,
    _script_notes,
    _task_type_problems,
    _trailer,
    _window_problem,
    baseline_model_problems,
    infra_sha256,
    judgements_sha256,
    latency_cache_hits,
    unevaluated_reasons,
)
from shadoweval.stats.inputs import InvalidDataError
from shadoweval.stats.looks import LookLevels, look_levels
from shadoweval.stats.policy import (
    GatePolicy,
    policy_hash,
)

INCONCLUSIVE_AT_CAP = "inconclusive at the sample cap"
"""Start of the leading reason of a final HOLD at ``sequential.n_max`` (after the reasons
of an invalid run or a failing infrastructure, when there are such)."""


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
    looks_taken: tuple[int, ...] | None = None,
) -> Verdict:
    """Evaluate the gate on the given pairs as look ``look`` and return the verdict.

    To poll a growing run, call :func:`shadoweval.stats.checkpoints.evaluate_poll` (it picks
    the checkpoint's prefix); this judges exactly ``pairs`` at the levels of look ``look``.

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
            first; :func:`shadoweval.stats.checkpoints.evaluate_poll` counts re-evaluations):
            the net-harm checks spend the look's levels over them. Stored in the verdict
            with :func:`judgements_sha256` and :func:`infra_sha256` of ``pairs``.
        looks_taken: the run's looks taken, ending with ``look`` (default: every
            checkpoint); this look spends the α since the one before (stored).

    Returns:
        A :class:`~shadoweval.records.Verdict`: one check per analysis unit × metric
        (pooled: ``task_type == POOLED``), the deciding reasons first, the policy's hash.

    Raises:
        InvalidDataError: missing columns, a look below 1, or bad ``looks_taken``.
    """
    _check_arguments(pairs, look, judgement_look)
    taken = _check_looks_taken(look, looks_taken)
    levels = look_levels(policy, look, final=final, previous_look=([0, *taken])[-2])
    verdict, cache_hits = _verdict_fields(
        pairs, policy, coverage, run_id, look, judgement_look, taken, decided_at
    )
    if len(pairs) == 0:
        reasons = _no_data_reasons(pairs, policy, coverage)
        return verdict(decision=Decision.HOLD, reasons=tuple(reasons), checks=())
    if paired_per_task_type is None:
        paired_per_task_type = _paired_counts(pairs)
    validity, extra_notes, load_note = _validity(
        pairs, policy, coverage, paired_per_task_type, levels
    )
    groups, changes, pooled = _groups(pairs, policy, coverage)
    judged = _judge(
        groups,
        changes,
        policy,
        levels,
        len(pairs),
        _baseline_repeats(coverage, groups[0].arrays),
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
        environment=coverage.environment_failures,
        failure_causes=failure_cause_lines(pairs, policy, coverage),
        causes=attribute_causes([(g.task_type, g.arrays) for g in groups], policy.causes),
    )
    if decision == Decision.HOLD and levels.final:
        reasons.insert(blocked, _at_cap(judged, policy))
    reasons.append(_coverage_line(coverage, paired_per_task_type))
    reasons.append(_trailer(levels, len(pairs), coverage, cache_hits))
    checks = tuple(
        j.check if j.blocking else j.check.model_copy(update={"blocking": False}) for j in judged
    )
    return verdict(decision=decision, reasons=tuple(reasons), checks=checks)


def _verdict_fields(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    coverage: Coverage,
    run_id: str,
    look: int,
    judgement_look: int,
    looks_taken: tuple[int, ...],
    decided_at: datetime | None,
) -> tuple[partial[Verdict], LatencyCacheHits]:
    """The verdict with every field but its decision, reasons and checks filled in (the
    hashes of ``pairs``' judgements and infrastructure flags, the policy's hash), and the
    pairs' latency cache hits."""
    cache_hits = latency_cache_hits(pairs)
    verdict = partial(
        Verdict,
        run_id=run_id,
        decided_at=decided_at if decided_at is not None else utc_now(),
        coverage=coverage,
        policy_hash=policy_hash(policy),
        look=look,
        judgement_look=judgement_look,
        judgements_sha256=judgements_sha256(pairs),
        infra_sha256=infra_sha256(pairs),
        latency_cache_hits=cache_hits,
        looks_taken=looks_taken,
    )
    return verdict, cache_hits


def _paired_counts(pairs: pd.DataFrame) -> dict[str, int]:
    """Pairs per task type."""
    return {str(t): int(c) for t, c in pairs["task_type"].astype(str).value_counts().items()}


def _no_data_reasons(pairs: pd.DataFrame, policy: GatePolicy, coverage: Coverage) -> list[str]:
    """A verdict without pairs: no data, the coverage problem, what was not evaluated."""
    reasons = ["no data: no scored pairs for this run; nothing can be promoted"]
    coverage_problem = _coverage_problem(coverage, policy)
    reasons += [coverage_problem] if coverage_problem else []
    reasons += unevaluated_reasons(pairs, policy, coverage)
    return reasons


def _check_arguments(pairs: pd.DataFrame, look: int, judgement_look: int) -> None:
    """Raise :class:`InvalidDataError` for missing pair columns or a look below 1."""
    missing = [
        c for c in PAIRS_COLUMNS if c not in pairs.columns and c not in OPTIONAL_PAIRS_COLUMNS
    ]
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


def _check_looks_taken(look: int, looks_taken: tuple[int, ...] | None) -> tuple[int, ...]:
    """``looks_taken``, or ``(1, …, look)`` when ``None``.

    Raises:
        InvalidDataError: not strictly increasing positive integers ending with ``look``.
    """
    if looks_taken is None:
        return tuple(range(1, look + 1))
    taken = tuple(looks_taken)
    if (
        not taken
        or taken[-1] != look
        or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in taken)
        or any(b <= a for a, b in itertools.pairwise(taken))
    ):
        raise InvalidDataError(
            f"looks_taken must be increasing checkpoint indices ending with look {look}, "
            f"got {looks_taken!r}"
        )
    return taken


def _validity(
    pairs: pd.DataFrame,
    policy: GatePolicy,
    coverage: Coverage,
    paired_per_task_type: Mapping[str, int],
    levels: LookLevels,
) -> tuple[list[str], list[str], str]:
    """The run's validity problems (HOLD reasons), its notes, and the latency load note.

    Routes and policy names first (they name what was not evaluated), then per-task-type
    problems (they name the task type), then the run's coverage and duplicates.
    """
    route_blocking, route_notes = _route_problems(coverage, policy)
    policy_blocking, policy_notes = _policy_problems(policy, coverage, pairs)
    baseline_blocking, baseline_notes = baseline_model_problems(coverage, policy)
    policy_blocking += baseline_blocking
    policy_notes += baseline_notes
    validity = route_blocking + policy_blocking
    validity += _task_type_problems(paired_per_task_type, coverage, policy, levels)
    coverage_problem = _coverage_problem(coverage, policy)
    validity += [p for p in (coverage_problem, _duplicates_problem(pairs)) if p]
    load_note = _load_note(coverage)
    extra_notes = route_notes + policy_notes + _script_notes(pairs)
    if translated := translation_note(coverage.replay_passes):
        extra_notes.append(translated)
    if load_note:
        extra_notes.append(
            f"latency checks: {load_note}: the replay started its measured requests below "
            f"{100 * RATE_SHORTFALL_SHARE:g}% of the asked rate, so latency was compared at "
            "that load, not the asked one"
        )
    return validity, extra_notes, load_note


def _at_cap(judged: Sequence[Judged[Check]], policy: GatePolicy) -> str:
    """The final HOLD's line at the sample cap.

    An invalid run, a failing infrastructure or a failed report-and-block check is not
    "inconclusive": those reasons stay first, the cap follows them. More pairs cannot
    clear a failed check, so the advice then is to fix it, not a larger cap.
    """
    failed = any(j.check.outcome == CheckOutcome.FAIL for j in judged)
    advice = (
        "the failed checks above need a fixed candidate, not more pairs"
        if failed
        else "start a new run (with a larger n_max) to go on"
    )
    return (
        f"{INCONCLUSIVE_AT_CAP}: the sample cap n_max {policy.sequential.n_max} is reached "
        f"and the gate is still undecided: final HOLD, never an implicit promote; {advice}"
    )
