"""The gate's decision on its judged checks, through the verdict engine
(:mod:`shadoweval.stats.engine`): the gate's reason lines and its :data:`GATE_LAYOUT`."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from shadoweval.records import POOLED, Check, CheckOutcome, Decision, EnvironmentFailure
from shadoweval.stats.change import ChangeResult
from shadoweval.stats.checks import (
    HARM_METRIC_PREFIX,
    INFRA_FAILED,
    INFRA_METRIC,
    LATENCY_NOT_CO_TIMED,
    latency_gated,
)
from shadoweval.stats.engine import (
    Findings,
    Judged,
    ReasonLayout,
    cannot_judge,
    decide,
    findings,
    open_checks,
)
from shadoweval.stats.gate.attribution import UnitCauses
from shadoweval.stats.gate.reach import promote_reach
from shadoweval.stats.gate.trade_off import cost_trade_off
from shadoweval.stats.gate.validity import _hours
from shadoweval.stats.net_harm import NET_HARM_METRIC
from shadoweval.stats.policy import GatePolicy

GateJudged = Judged[Check]
"""A decided gate check."""

GATE_LAYOUT = ReasonLayout(
    rollback_blocked=("harms", "blocked", "fails"),
    hold_blocked=("blocked", "leading", "fails", "holds", "open", "waiting", "notes"),
    rollback=("harms", "fails", "holds", "notes", "leading"),
    hold=("leading", "holds", "open", "waiting", "notes"),
    hold_leading=("leading", "holds"),
)
"""The gate's reasons per decision: a ROLLBACK of an invalid run names the harm, then why
the run is invalid; a HOLD of an invalid run leads with why; a HOLD otherwise leads with
the degenerate noise floor and the failed report-and-block checks (gate-statistics.md §2.3)."""


def _label(task_type: str) -> str:
    return "pooled" if task_type == POOLED else f"task type {task_type!r}"


def _line(check: Check) -> str:
    return f"{_label(check.task_type)}, {check.metric}: {check.reason}"


_KAFKA_RERUN = (
    " (a Kafka run: start its worker with a new --group-id, or reset its group's offsets, "
    "so it reads the topic again and sends only those)"
)
"""How a Kafka run's records come again so its environment failures are replayed
(docs/replay.md)."""


def _infra_headline(
    judged: Sequence[GateJudged], environment: Sequence[EnvironmentFailure] = ()
) -> str:
    where = ", ".join(_label(j.check.task_type) for j in judged if j.run_blocked)
    if environment:
        causes = "; ".join(f.describe() for f in environment)
        return (
            f"infrastructure: the candidate's requests failed for reasons of the environment, "
            f"not the model ({INFRA_METRIC} FAIL in {where}): {causes}; model quality could "
            "not be judged on those pairs: HOLD, never ROLLBACK; fix the setup and run the "
            f"same run again (same --run-id): those requests are replayed again{_KAFKA_RERUN}"
        )
    return (
        f"infrastructure: {INFRA_FAILED} (timeouts, connection errors, HTTP 408/429/5xx, "
        f"interrupted streams or undecodable responses: {INFRA_METRIC} FAIL in {where}); "
        "model quality could not be judged on those pairs: HOLD, never ROLLBACK, for "
        "infrastructure errors; fix the candidate's serving and replay again"
    )


def _environment_note(environment: Sequence[EnvironmentFailure]) -> list[str]:
    """The note naming the environment's failures when they did not block the run."""
    if not environment:
        return []
    causes = "; ".join(f.describe() for f in environment)
    return [
        f"environment: {sum(f.count for f in environment)} candidate pairs failed for reasons "
        f"of the environment, not the model, and were left out of the quality checks: "
        f"{causes}; a re-run of the same run replays them again{_KAFKA_RERUN}"
    ]


def _deciding_failure(judged: Sequence[GateJudged]) -> GateJudged | None:
    """The failed check whose line leads the failures: the first harm, else the first FAIL
    that rolls back, else the first report-and-block FAIL (the engine's section order)."""
    failed = [
        j
        for j in judged
        if j.check.outcome == CheckOutcome.FAIL and not j.harm and not j.run_blocked
    ]
    ordered = [
        *(j for j in judged if j.harm),
        *(j for j in failed if j.on_fail == "rollback"),
        *(j for j in failed if j.on_fail == "hold"),
    ]
    return ordered[0] if ordered else None


def _attributed_line(
    judged: Sequence[GateJudged], causes: Mapping[str, UnitCauses]
) -> Callable[[GateJudged], str]:
    """The reason line of a judged check, the deciding failure's led by its likely cause
    (:mod:`shadoweval.stats.gate.attribution`: its unit's, else the pooled unit's)."""
    deciding = _deciding_failure(judged)
    found = None
    if deciding is not None:
        found = causes.get(deciding.check.task_type) or causes.get(POOLED)

    def line(j: GateJudged) -> str:
        if found is not None and j is deciding:
            return f"{found.likely()}: {_line(j.check)}"
        return _line(j.check)

    return line


def _open_lines(judged: Sequence[GateJudged]) -> list[str]:
    """The reason lines of the open blocking checks, in the engine's ranking
    (:func:`shadoweval.stats.engine.reason_rank`: quality signals first, the checks that
    cannot judge for want of pairs last).

    The harm detectors of one unit that are all open for the same want of pairs with no
    detector firing on either side (b + c = 0) share one line, and every check that
    :func:`~shadoweval.stats.engine.cannot_judge` shares one line naming its units
    (:func:`_cannot_judge_line`), so seven detectors that saw nothing or 28 task types
    without pairs do not bury the reason that decides.
    """
    ranked = [j.check for j in open_checks(judged)]
    quiet: dict[tuple[str, int], list[Check]] = {}
    for c in ranked:
        if (
            c.metric.startswith(HARM_METRIC_PREFIX)
            and c.outcome == CheckOutcome.INCONCLUSIVE
            and c.reason.startswith("too few")
            and c.estimate == 0.0
        ):
            quiet.setdefault((c.task_type, c.n), []).append(c)
    empty = [c for c in ranked if cannot_judge(c)]
    lines: list[str] = []
    for c in ranked:
        group = quiet.get((c.task_type, c.n))
        if len(empty) >= FOLD_CANNOT_JUDGE_AT and c in empty:
            if c is empty[0]:
                lines.append(_cannot_judge_line(empty))
        elif group is None or c not in group:
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


FOLD_CANNOT_JUDGE_AT = 4
"""From this many open checks that cannot judge for want of pairs, they share one line."""


def _units_text(task_types: Sequence[str]) -> str:
    """``task type 'code'``, ``pooled``, ``3 task types ('a', 'b', 'c')``, ``pooled and
    task type 'chat'``."""
    named = [t for t in task_types if t != POOLED]
    if len(named) == 1:
        text = _label(named[0])
    else:
        text = f"{len(named)} task types ({', '.join(repr(t) for t in named)})"
    if len(named) == len(task_types):
        return text
    return "pooled" if not named else f"pooled and {text}"


def _cannot_judge_line(checks: Sequence[Check]) -> str:
    """One line for the open checks that cannot judge for want of pairs: the units they
    belong to, the checks by the head of their reason, and the first in full."""
    units = list(dict.fromkeys(c.task_type for c in checks))
    by_head: dict[str, list[str]] = {}
    for c in checks:
        head = re.split(r" \(|;|:", c.reason, maxsplit=1)[0]
        metrics = by_head.setdefault(head, [])
        if c.metric not in metrics:
            metrics.append(c.metric)
    heads = "; ".join(f"{head}: {', '.join(metrics)}" for head, metrics in by_head.items())
    return (
        f"no pairs to judge in {_units_text(units)}: {len(checks)} checks cannot judge "
        f"({heads}; e.g. {_line(checks[0])})"
    )


def _latency_notes(judged: Sequence[GateJudged]) -> list[str]:
    """The report-only latency checks (issue 29 item 2): each one that would have failed,
    in full; else one line naming where latency was report only."""
    report_only = [
        j.check
        for j in judged
        if j.check.metric.startswith("latency_") and not latency_gated(j.check)
    ]
    slower = [_line(c) for c in report_only if "slower than allowed" in c.reason]
    if slower or not report_only:
        return slower
    where = ", ".join(dict.fromkeys(_label(c.task_type) for c in report_only))
    return [
        f"latency checks are report only in {where}: the baseline latencies were "
        f"{LATENCY_NOT_CO_TIMED} (see each check's reason)"
    ]


def _notes(judged: Sequence[GateJudged], policy: GatePolicy, extra: Sequence[str]) -> list[str]:
    """Minor task types left open, report-only latency, and the caller's notes."""
    minor_open = sorted(
        {
            j.check.task_type
            for j in judged
            if j.minor and j.check.outcome == CheckOutcome.INCONCLUSIVE
        }
    )
    share = f"{100 * policy.min_traffic_share:g}%"
    notes = (
        [
            f"{_units_text(minor_open)} {'has' if len(minor_open) == 1 else 'have'} less "
            f"than min_traffic_share {share} of the pairs: reported, not blocking promotion"
        ]
        if minor_open
        else []
    )
    return notes + _latency_notes(judged) + list(extra)


def _promote_reasons(
    judged: Sequence[GateJudged],
    policy: GatePolicy,
    span: float,
    changes: ChangeResult,
    tail: list[str],
) -> list[str]:
    """A PROMOTE's reasons: the blocking checks passed, what changed, the window, ``tail``."""
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
    return [summary, *window_line, *tail]


def _judging_first(judged: Sequence[GateJudged]) -> bool:
    """An open blocking net-harm check needs judgements, not pairs (no pair count)."""
    return any(
        j.blocking
        and j.check.metric == NET_HARM_METRIC
        and j.check.outcome == CheckOutcome.INCONCLUSIVE
        and j.check.pairs_needed is None
        for j in judged
    )


def _decide(
    judged: list[GateJudged],
    validity: list[str],
    policy: GatePolicy,
    *,
    window: tuple[float, str | None],
    changes: ChangeResult,
    extra_notes: list[str] | None = None,
    environment: Sequence[EnvironmentFailure] = (),
    failure_causes: list[str] | None = None,
    causes: Mapping[str, UnitCauses] | None = None,
) -> tuple[Decision, list[str], int]:
    """The decision, its reasons, and how many leading reasons say why the run is blocked
    (invalid run, failing infrastructure) or decided a HOLD.

    The first reason says what decided the verdict: a significant harm or a FAIL for a
    ROLLBACK; for a HOLD the validity or infrastructure problem, else the degenerate
    noise floor, else the failed report-and-block checks, then the open blocking checks
    (data problems, unmet margins, net harm to judge, too few pairs) and the observation
    window; for a PROMOTE the count of passed blocking checks. ``environment``: the
    candidate's failures of the environment by cause (issue 29), named in the
    infrastructure headline when ``infra_error_rate`` blocks the run, else in a note. A
    cost guardrail that fails where quality is significantly better holds instead of
    rolling back, its trade-off leading the HOLD
    (:func:`shadoweval.stats.gate.trade_off.cost_trade_off`). ``failure_causes``
    (interrupted streams, the candidate's context length:
    :mod:`shadoweval.stats.gate.causes`) follow the infrastructure headline when the
    infrastructure check failed, else lead the notes. ``causes``: the units where a cause
    other than the weights is at work
    (:func:`shadoweval.stats.gate.attribution.attribute_causes`), listed first among the
    notes; the deciding failure's line is led by its unit's likely cause.
    """
    judged, trade_off = cost_trade_off(judged, policy)
    causes = causes or {}
    found = findings(judged, _attributed_line(judged, causes))
    notes = [c.note() for c in causes.values()] + _notes(judged, policy, extra_notes or [])
    failure_causes = failure_causes or []
    if not found.blocked:
        notes = _environment_note(environment) + notes
    degenerate = [changes.degenerate.describe()] if changes.degenerate is not None else []
    span, window_problem = window
    blocked = list(validity)
    if found.blocked:
        # An infrastructure failure makes the run unjudgeable, like low coverage: HOLD;
        # only a significant critical harm on the pairs both sides answered rolls back.
        blocked += [_infra_headline(judged, environment), *failure_causes, *found.blocked]
    else:
        notes = [*failure_causes, *notes]
    reach = (
        []
        if blocked or found.harms or found.fails or found.holds or trade_off
        else promote_reach(judged)
    )
    open_lines = _open_lines(judged)
    if reach and _judging_first(judged):
        # Judging decides first: the pairs line follows the "judge K more" lines.
        at = next((i for i, line in enumerate(open_lines) if NET_HARM_METRIC not in line), 0)
        open_lines[at:at] = reach
        reach = []
    decided = decide(
        Findings(
            harms=found.harms,
            blocked=blocked,
            fails=found.fails,
            holds=found.holds,
            open=open_lines,
            waiting=[window_problem] if window_problem is not None else [],
            notes=notes,
            leading=[*trade_off, *degenerate, *reach],
        ),
        GATE_LAYOUT,
        promote=lambda: _promote_reasons(judged, policy, span, changes, [*notes, *degenerate]),
    )
    return decided.decision, decided.reasons, decided.leading
