"""The canary controller: judge the current step on what is stored and act on it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import JsonValue

from shadoweval.application.canary.frames import observation_frame, rating_frame
from shadoweval.application.canary.ingest import IngestReport, ingest_bus, ingest_capture_log
from shadoweval.application.canary.rollout import _next_revision, _split_dir, rollback_canary
from shadoweval.bus import BusError, KafkaSource, parse_kafka_url
from shadoweval.bus.url import is_kafka_url
from shadoweval.capture.canary_split import Split, read_split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.errors import ConfigError, ShadowEvalError, StorageError
from shadoweval.records import Decision, StepVerdict, utc_now
from shadoweval.stats.canary.policy import (
    CanaryPolicy,
    parse_canary_policy_yaml,
)
from shadoweval.stats.canary.verdict import step_verdict
from shadoweval.storage import (
    AuditNote,
    CanaryInfo,
    CanaryState,
    PolicyAuditAction,
    Repository,
)

__all__ = [
    "TickAction",
    "TickReport",
    "evaluate_canary",
    "ingest_source",
    "run_canary",
    "tick_canary",
]


TickAction = Literal["held", "advanced", "completed", "rolled_back", "none"]


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one :func:`tick_canary` did.

    ``canary``: the canary after the tick; ``ingest``: what was read from the capture log
    (``None`` without one); ``verdict``: the step's verdict (``None`` when the canary was
    already final); ``decision`` / ``reasons``: what the controller acted on — the
    verdict's, plus a split changed by hand (which turns PROMOTE into HOLD);
    ``step_judged``: the step the verdict is of (before an advance); ``action``:
    ``advanced`` (to the next step), ``completed`` (the last step passed),
    ``rolled_back``, ``held``, or ``none`` (already final); ``from_share`` / ``to_share``:
    the candidate's share before and after.
    """

    canary: CanaryInfo
    ingest: IngestReport | None
    verdict: StepVerdict | None
    action: TickAction
    from_share: float
    to_share: float
    decision: str | None = None
    reasons: tuple[str, ...] = ()
    step_judged: int | None = None


def ingest_source(
    repo: Repository,
    canary_id: str,
    source: str | Path | KafkaSource,
    *,
    structured_task_types: Set[str] = frozenset(),
) -> IngestReport:
    """Ingest from a capture-log directory (:func:`ingest_capture_log`) or from the capture
    topic (:func:`ingest_bus`): a :class:`~shadoweval.bus.KafkaSource` or a
    ``kafka://HOST:PORT/TOPIC`` string. Synchronous (the topic is read in a fresh event
    loop), for the CLI and the controller.

    Raises:
        ConfigError, BusError, StorageError: as the function called.
    """
    if isinstance(source, str) and is_kafka_url(source):
        source = parse_kafka_url(source)
    if isinstance(source, KafkaSource):
        return asyncio.run(
            ingest_bus(repo, canary_id, source, structured_task_types=structured_task_types)
        )
    return ingest_capture_log(repo, canary_id, source, structured_task_types=structured_task_types)


def _frozen_policy(canary: CanaryInfo) -> CanaryPolicy:
    return parse_canary_policy_yaml(canary.policy_yaml, source=f"of canary {canary.canary_id}")


def evaluate_canary(
    repo: Repository, canary_id: str, *, now: datetime | None = None
) -> tuple[CanaryInfo, StepVerdict]:
    """The verdict of the canary's current step on what is stored now, under the policy
    frozen with the canary (nothing is written).

    Raises:
        ConfigError: unknown canary, or it is final (completed or rolled back).
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    if canary.state.terminal:
        raise ConfigError(
            f"canary {canary_id!r} is {canary.state.value}; there is no step to judge"
        )
    policy = _frozen_policy(canary)
    observations = repo.canary_observations(canary_id, step_index=canary.step_index)
    earlier = (
        repo.canary_sessions_before(canary_id, canary.step_index)
        if canary.step_index > 0
        else set()
    )
    verdict = step_verdict(
        observation_frame(observations, earlier_sessions=earlier),
        rating_frame(repo.canary_ratings(canary_id), observations),
        policy,
        step_index=canary.step_index,
        step_started_at=canary.step_started_at,
        now=now or utc_now(),
        error_breach_since=canary.error_breach_since,
    )
    return canary, verdict


def _split_drift(canary: CanaryInfo, split_dir: Path) -> str | None:
    """Why the split file no longer says what the canary wrote (``None``: it agrees)."""
    try:
        current = read_split(split_dir)
    except ConfigError as exc:
        return f"the split file cannot be read ({exc})"
    if current.candidate_share != canary.candidate_share:
        return (
            f"the split file holds revision {current.revision} at share "
            f"{current.candidate_share:g}, but the canary wrote revision "
            f"{canary.split_revision} at share {canary.candidate_share:g}: someone changed the "
            "split's share by hand; no step is promoted until it agrees"
        )
    return None


def _restore_split(repo: Repository, canary_id: str, spec: EnvoyConfigSpec) -> None:
    """After a failed move: make the split say what the stored canary says."""
    canary = repo.get_canary(canary_id)
    if canary is None:
        return
    share = 0.0 if canary.state is CanaryState.ROLLED_BACK else canary.candidate_share
    split_dir = _split_dir(spec)
    revision, in_force = _next_revision(split_dir)
    if in_force != share:
        write_split(split_dir, spec, Split(candidate_share=share, revision=revision))


def tick_canary(
    repo: Repository,
    canary_id: str,
    *,
    spec: EnvoyConfigSpec,
    capture_log: str | Path | KafkaSource | None = None,
    structured_task_types: Set[str] = frozenset(),
    now: datetime | None = None,
    actor: str | None = None,
    command: str = "shadow-eval canary run",
) -> TickReport:
    """One controller step: read new observations, judge the current step, act on it.

    1. Ingest what the capture log (a directory) or the capture topic (``kafka://``)
       gained (:func:`ingest_source`), when given.
    2. Judge the step (:func:`evaluate_canary`, the policy frozen with the canary) and store
       the verdict on the step (``canary_step.last_verdict``).
    3. Act: **ROLLBACK** → :func:`rollback_canary` at once (share 0 first, then the
       ``canary_rolled_back`` audit row with the verdict's reasons); **PROMOTE** at a step
       below 1.0 → write the next step's share (a new split revision), then move the canary
       (``canary_advanced``); PROMOTE at share 1.0 → the canary is ``completed``
       (``canary_completed``; the split stays at 1.0: the candidate is the live model now);
       **HOLD** → nothing moves; a ``canary_held`` audit row is written when the step's
       decision turns to HOLD from another (not at every poll).

    A split file someone changed by hand (revision or share not what the canary wrote)
    blocks promotion: the tick holds with that reason; rollback still acts. If storing a
    move fails (another controller or an operator moved the canary first: ``StorageError``),
    the split is set back to what the stored canary says before the error is raised.

    Raises:
        ConfigError: unknown canary, no canary part in ``spec``, unreadable capture log.
        StorageError: database failure, or the canary moved under this controller.
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    split_dir = _split_dir(spec)
    ingest = (
        ingest_source(repo, canary_id, capture_log, structured_task_types=structured_task_types)
        if capture_log is not None and not canary.state.terminal
        else None
    )
    if canary.state.terminal:
        share = canary.candidate_share
        return TickReport(canary, ingest, None, "none", share, share)
    at = now or utc_now()
    canary, verdict = evaluate_canary(repo, canary_id, now=at)
    acted = _acted_on(verdict, _split_drift(canary, split_dir))
    _record(repo, canary, acted, actor=actor, command=command, at=at)
    share = canary.candidate_share
    why = (acted.decision.value, acted.reasons, canary.step_index)
    if acted.decision is Decision.ROLLBACK:
        rolled = rollback_canary(
            repo,
            canary_id,
            spec=spec,
            why="automatic rollback: " + "; ".join(acted.reasons),
            actor=actor,
            command=command,
            reasons=list(acted.reasons),
        )
        return TickReport(rolled, ingest, verdict, "rolled_back", share, 0.0, *why)
    if acted.decision is Decision.HOLD:
        held = repo.get_canary(canary_id) or canary
        return TickReport(held, ingest, verdict, "held", share, share, *why)
    policy = _frozen_policy(canary)
    try:
        moved, action, following = _promote(
            repo, canary, policy, spec, acted.reasons, actor=actor, command=command, at=at
        )
    except ShadowEvalError:
        _restore_split(repo, canary_id, spec)
        raise
    return TickReport(moved, ingest, verdict, action, share, following, *why)


def _acted_on(verdict: StepVerdict, drift: str | None) -> StepVerdict:
    """The verdict the controller acts on: a split changed by hand (``drift``) adds its
    reason and turns PROMOTE into HOLD; rollback still acts."""
    if drift is None:
        return verdict
    decision = Decision.HOLD if verdict.decision is Decision.PROMOTE else verdict.decision
    return verdict.acted_on(decision, (*verdict.reasons, drift))


def _record(
    repo: Repository,
    canary: CanaryInfo,
    acted: StepVerdict,
    *,
    actor: str | None,
    command: str,
    at: datetime,
) -> None:
    """Store the step verdict acted on, with a ``canary_held`` audit row when the step's
    decision turns to HOLD from another."""
    reasons = list(acted.reasons)
    steps = repo.canary_steps(canary.canary_id)
    previous = next((s.last_decision for s in steps if s.step_index == canary.step_index), None)
    held_note = None
    if acted.decision is Decision.HOLD and previous != Decision.HOLD.value:
        held_note = AuditNote(
            PolicyAuditAction.CANARY_HELD,
            command,
            actor=actor,
            detail={
                "why": "; ".join(reasons),
                "step": canary.step_index,
                "share": canary.candidate_share,
                "reasons": list(reasons),
            },
        )
    repo.record_canary_evaluation(
        canary.canary_id,
        step_index=canary.step_index,
        decision=acted.decision.value,
        verdict=acted,
        error_breach_since=acted.error_breach_since,
        note=held_note,
        evaluated_at=at,
    )


def _promote(
    repo: Repository,
    canary: CanaryInfo,
    policy: CanaryPolicy,
    spec: EnvoyConfigSpec,
    reasons: tuple[str, ...],
    *,
    actor: str | None,
    command: str,
    at: datetime,
) -> tuple[CanaryInfo, TickAction, float]:
    """Act on PROMOTE: complete the canary at its last step, else write the next step's
    share (a new split revision) and move the canary. Returns the canary, the action and
    the share after."""
    share = canary.candidate_share
    detail: dict[str, JsonValue] = {
        "why": "; ".join(reasons),
        "step": canary.step_index,
        "from_share": share,
        "reasons": list(reasons),
    }
    if canary.step_index >= len(policy.steps) - 1:
        done = repo.move_canary(
            canary.canary_id,
            from_step=canary.step_index,
            state=CanaryState.COMPLETED,
            share=share,
            split_revision=canary.split_revision,
            step_outcome="promoted",
            note=AuditNote(
                PolicyAuditAction.CANARY_COMPLETED,
                command,
                actor=actor,
                detail={**detail, "share": share, "split_revision": canary.split_revision},
            ),
            at=at,
        )
        return done, "completed", share
    following = policy.steps[canary.step_index + 1].share
    split_dir = _split_dir(spec)
    revision = _next_revision(split_dir)[0]
    write_split(split_dir, spec, Split(candidate_share=following, revision=revision))
    moved = repo.move_canary(
        canary.canary_id,
        from_step=canary.step_index,
        to_step=canary.step_index + 1,
        state=CanaryState.RUNNING,
        share=following,
        split_revision=revision,
        step_outcome="promoted",
        note=AuditNote(
            PolicyAuditAction.CANARY_ADVANCED,
            command,
            actor=actor,
            detail={
                **detail,
                "to_step": canary.step_index + 1,
                "share": following,
                "split_revision": revision,
            },
        ),
        at=at,
    )
    return moved, "advanced", following


def run_canary(
    repo: Repository,
    canary_id: str,
    *,
    spec: EnvoyConfigSpec,
    capture_log: str | Path | KafkaSource | None,
    interval_s: float,
    stop: threading.Event | None = None,
    max_ticks: int | None = None,
    on_tick: Callable[[TickReport], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    structured_task_types: Set[str] = frozenset(),
    actor: str | None = None,
) -> CanaryInfo:
    """Drive a canary until it is final: :func:`tick_canary` every ``interval_s`` seconds.

    Stops when the canary is completed or rolled back, when ``stop`` is set (an operator's
    Ctrl-C, a test), or after ``max_ticks`` ticks. ``on_tick`` sees each report (the CLI
    prints it). With ``on_error``, a tick that fails on the broker or the database
    (``BusError``, ``StorageError``) is reported there and the loop goes on: a failed tick
    moves nothing (a step is never promoted on data it could not read), and the next tick
    tries again; without it the error is raised. The wait between ticks is
    ``stop.wait(interval_s)``, so setting ``stop`` ends the wait at once.

    Raises:
        ConfigError: ``interval_s`` not > 0, or what :func:`tick_canary` raises.
        StorageError: what :func:`tick_canary` raises.
    """
    if not interval_s > 0:
        raise ConfigError(
            f"interval_s = {interval_s}: must be > 0 seconds", field="interval_s", value=interval_s
        )
    halt = stop or threading.Event()
    ticks = 0
    while True:
        try:
            report = tick_canary(
                repo,
                canary_id,
                spec=spec,
                capture_log=capture_log,
                structured_task_types=structured_task_types,
                actor=actor,
            )
        except (BusError, StorageError) as exc:
            if on_error is None:
                raise
            on_error(exc)  # nothing moved on a failed tick; the next one tries again
            report = None
        ticks += 1
        if report is not None and on_tick is not None:
            on_tick(report)
        done = report is not None and report.canary.state.terminal
        if done or (max_ticks is not None and ticks >= max_ticks) or halt.wait(interval_s):
            return _current(repo, canary_id, report)


def _current(repo: Repository, canary_id: str, report: TickReport | None) -> CanaryInfo:
    if report is not None:
        return report.canary
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    return canary
