"""Canary rollouts (issue 16): what a canary observed, read from the Envoy front's capture log.

The Envoy front end records which cluster served each captured exchange
(``Exchange.served_by``, :mod:`capture.canary_split`). :func:`ingest_capture_log` reads the
capture-log files written since the last call (``canary.ingest_state``: lines consumed per
file), judges each exchange alone (:func:`compare.live_side.live_side_facts`), assigns it
to the canary step whose window holds its ``captured_at``, and stores it as a
``canary_observation`` (insert-or-ignore per exchange, so a re-read stores nothing twice).
A line that does not decode is kept as a ``rejected_record`` (stage ``canary``) with its
reason and counted; the reader moves on. The last line of the newest segment is left for
the next call while it may still be being written (no trailing newline, or a gzip member
not yet closed).
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import JsonValue

from capture.canary_split import Split, arm_of_cluster, read_split, write_split
from capture.envoy_config import EnvoyConfigSpec
from compare.live_side import live_side_facts
from shadoweval.capture_log import LogEntry, read_capture_log, segment_files
from shadoweval.config import Settings
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.records import Exchange, new_exchange_id
from shadoweval.storage import (
    AuditNote,
    CanaryInfo,
    CanaryObservation,
    CanaryState,
    CanaryStepInfo,
    PolicyAuditAction,
    PolicyAuditEntry,
    RejectedRecord,
    Repository,
)
from shadoweval.storage.types import rejection_fingerprint
from stats.canary.policy import (
    CanaryPolicy,
    canary_policy_hash,
    canary_policy_to_yaml,
    load_canary_policy,
)

__all__ = [
    "CANARY_REJECT_STAGE",
    "CanaryView",
    "IngestReport",
    "canary_view",
    "ingest_capture_log",
    "load_canary_policy",
    "observation_of",
    "rollback_canary",
    "split_spec_from_settings",
    "start_canary",
    "view_json",
]

CANARY_REJECT_STAGE = "canary"
"""``rejected_record.stage`` of capture-log lines a canary could not read."""


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one :func:`ingest_capture_log` call read.

    ``lines``: lines consumed; ``stored``: new observations; ``duplicates``: exchanges
    already observed; ``unassigned``: exchanges no canary cluster served (``served_by``
    missing or another cluster: traffic outside the split); ``outside_steps``: captured
    before the canary began (or after it ended); ``rejected``: lines kept as rejected
    records; ``by_arm``: the observations read per arm (new and duplicate).
    """

    lines: int = 0
    stored: int = 0
    duplicates: int = 0
    unassigned: int = 0
    outside_steps: int = 0
    rejected: int = 0
    by_arm: dict[str, int] = field(default_factory=dict)


def _step_at(steps: Sequence[CanaryStepInfo], at: datetime) -> int | None:
    for step in steps:
        if step.started_at <= at and (step.ended_at is None or at < step.ended_at):
            return step.step_index
    return None


def observation_of(
    exchange: Exchange,
    steps: Sequence[CanaryStepInfo],
    *,
    structured_task_types: Set[str] = frozenset(),
) -> CanaryObservation | None:
    """The canary observation of one captured exchange, or ``None`` when no canary arm
    served it or it was captured outside every step's window."""
    arm = arm_of_cluster(exchange.served_by)
    step = _step_at(steps, exchange.captured_at)
    if arm is None or step is None:
        return None
    facts = live_side_facts(exchange, structured_task_types=structured_task_types)
    detail: dict[str, JsonValue] = {
        "status_code": facts.status_code,
        "harms": [kind.value for kind in facts.harms],
        "infra_error": facts.infra_error,
        "task_type": exchange.task_type,
    }
    return CanaryObservation(
        exchange_id=exchange.exchange_id,
        step_index=step,
        arm=arm,
        observed_at=exchange.captured_at,
        session=exchange.session_key_hash,
        error=facts.error,
        format_expected=facts.format_expected,
        format_ok=facts.format_ok,
        harmed=facts.harmed,
        cache_hit=facts.cache_hit,
        e2e_ms=facts.e2e_ms,
        ttft_ms=facts.ttft_ms,
        detail=detail,
    )


def _still_written(path: Path, entry: LogEntry) -> bool:
    """The newest segment's last entry may be a line the writer has not finished."""
    if entry.error is not None and entry.error.reason == "truncated_segment":
        return True
    with path.open("rb") as fh:
        if fh.read(2) == b"\x1f\x8b":
            return False  # a gzip member that decoded whole is complete
        fh.seek(0, 2)
        size = fh.tell()
        if size == 0:
            return False
        fh.seek(size - 1)
        return fh.read(1) != b"\n"


def ingest_capture_log(
    repo: Repository,
    canary_id: str,
    capture_log: str | Path,
    *,
    structured_task_types: Set[str] = frozenset(),
) -> IngestReport:
    """Read what the capture log gained since the last call into the canary's observations.

    Args:
        repo: the store.
        canary_id: the canary.
        capture_log: the capture-log directory (or one segment file) the Envoy front's
            file sink writes.
        structured_task_types: task types whose answers must be JSON.

    Returns:
        The counts of this call (:class:`IngestReport`).

    Raises:
        ConfigError: unknown canary, or the capture log does not exist (names the path).
        StorageError: on database failure.
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    path = Path(capture_log)
    try:
        files = segment_files(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"capture_log = {str(path)!r}: {exc}") from exc
    steps = repo.canary_steps(canary_id)
    state: dict[str, JsonValue] = dict(canary.ingest_state)
    observations: list[CanaryObservation] = []
    rejects: list[RejectedRecord] = []
    lines = unassigned = outside = 0
    for index, file in enumerate(files):
        done = state.get(file.name, 0)
        consumed = done if isinstance(done, int) else 0
        entries = list(read_capture_log(file))
        if index == len(files) - 1 and entries and _still_written(file, entries[-1]):
            entries = entries[:-1]
        for entry in entries[consumed:]:
            lines += 1
            if entry.exchange is None:
                error = entry.error
                reason = error.reason if error is not None and error.reason else "invalid"
                rejects.append(
                    RejectedRecord(
                        stage=CANARY_REJECT_STAGE,
                        reason=reason,
                        location=entry.location,
                        detail=str(error) if error is not None else None,
                        raw=entry.raw,
                        run_id=canary.run_id,
                        fingerprint=rejection_fingerprint(entry.location, entry.raw),
                    )
                )
                continue
            exchange = entry.exchange
            if arm_of_cluster(exchange.served_by) is None:
                unassigned += 1
                continue
            observation = observation_of(
                exchange, steps, structured_task_types=structured_task_types
            )
            if observation is None:
                outside += 1
                continue
            observations.append(observation)
        state[file.name] = max(consumed, len(entries))
    if rejects:
        repo.save_rejected_many(rejects)
    stored = repo.save_canary_observations(canary_id, observations, ingest_state=state)
    by_arm: dict[str, int] = {}
    for observation in observations:
        by_arm[observation.arm] = by_arm.get(observation.arm, 0) + 1
    return IngestReport(
        lines=lines,
        stored=stored,
        duplicates=len(observations) - stored,
        unassigned=unassigned,
        outside_steps=outside,
        rejected=len(rejects),
        by_arm=by_arm,
    )


# ------------------------------------------------------------------- start, rollback, view


def _split_dir(spec: EnvoyConfigSpec) -> Path:
    if spec.canary is None:
        raise ConfigError(
            "envoy.canary is not set: the canary split needs the Envoy front's canary "
            "settings (SHADOWEVAL_ENVOY__CANARY__CANDIDATE_URL, ..._SPLIT_DIR)",
            field="envoy.canary",
            value=None,
        )
    return spec.canary.split_dir


def _next_revision(split_dir: Path) -> tuple[int, float]:
    """The revision to write next and the share now in force (0.0 without a split file)."""
    if not (split_dir / "split.yaml").exists():
        return 0, 0.0
    current = read_split(split_dir)
    return current.revision + 1, current.candidate_share


def start_canary(
    repo: Repository,
    *,
    run_id: str,
    policy: CanaryPolicy,
    spec: EnvoyConfigSpec,
    name: str = "",
    actor: str | None = None,
    why: str = "",
    command: str = "shadow-eval canary start",
) -> CanaryInfo:
    """Start a canary of ``run_id``'s candidate: write the split for the policy's first
    step (a new revision in the Envoy front's split directory), then record the canary
    and its ``canary_started`` audit row. If recording fails, the split is set back to the
    share it had (another new revision) before the error is raised.

    Raises:
        ConfigError: the spec has no canary part, or the split file is unreadable.
        StorageError: unknown run, or the run already has a running canary.
    """
    split_dir = _split_dir(spec)
    revision, previous_share = _next_revision(split_dir)
    first = policy.steps[0].share
    write_split(split_dir, spec, Split(candidate_share=first, revision=revision))
    canary_id = new_exchange_id()
    try:
        return repo.create_canary(
            canary_id=canary_id,
            run_id=run_id,
            name=name or f"canary of {run_id}",
            policy_hash=canary_policy_hash(policy),
            policy_yaml=canary_policy_to_yaml(policy),
            split_dir=str(split_dir),
            first_share=first,
            split_revision=revision,
            note=AuditNote(
                PolicyAuditAction.CANARY_STARTED,
                command,
                actor=actor,
                detail={"why": why, "step": 0, "share": first, "split_revision": revision},
            ),
        )
    except ShadowEvalError:
        write_split(split_dir, spec, Split(candidate_share=previous_share, revision=revision + 1))
        raise


def rollback_canary(
    repo: Repository,
    canary_id: str,
    *,
    spec: EnvoyConfigSpec,
    why: str,
    actor: str | None = None,
    command: str = "shadow-eval canary rollback",
    reasons: Sequence[str] = (),
) -> CanaryInfo:
    """Roll a running canary back at once: write a split revision with share 0 (every
    session, pinned ones included, goes to the baseline on its next request; streams in
    flight finish on their version), then end the canary ``rolled_back`` with a
    ``canary_rolled_back`` audit row naming who and why.

    The split is written first: the rollback takes effect even when the database is
    unreachable (the error is raised after it).

    Raises:
        ConfigError: unknown canary, no canary part in the spec, or ``why`` is empty.
        StorageError: the canary is already final.
    """
    if not why.strip():
        raise ConfigError("why = '': a rollback must say why", field="why", value=why)
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    if canary.state.terminal:
        raise ConfigError(f"canary {canary_id!r} is {canary.state.value}; nothing to roll back")
    split_dir = _split_dir(spec)
    revision, previous_share = _next_revision(split_dir)
    write_split(split_dir, spec, Split(candidate_share=0.0, revision=revision))
    return repo.move_canary(
        canary_id,
        from_step=canary.step_index,
        state=CanaryState.ROLLED_BACK,
        share=0.0,
        split_revision=revision,
        step_outcome="rolled_back",
        note=AuditNote(
            PolicyAuditAction.CANARY_ROLLED_BACK,
            command,
            actor=actor,
            detail={
                "why": why,
                "step": canary.step_index,
                "from_share": previous_share,
                "share": 0.0,
                "split_revision": revision,
                "reasons": list(reasons),
            },
        ),
    )


@dataclass(frozen=True, slots=True)
class CanaryView:
    """What the faces show of a canary: the canary, its steps, its audit trail (the run's
    ``canary_*`` rows) and the requests observed per arm."""

    canary: CanaryInfo
    steps: tuple[CanaryStepInfo, ...]
    audit: tuple[PolicyAuditEntry, ...]
    observed_per_arm: dict[str, int]


def canary_view(repo: Repository, canary_id: str) -> CanaryView:
    """The :class:`CanaryView` of ``canary_id``.

    Raises:
        ConfigError: unknown canary (names the id).
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    audit = tuple(
        entry
        for entry in repo.policy_audit(canary.run_id)
        if entry.action.value.startswith("canary_") and entry.detail.get("canary_id") == canary_id
    )
    return CanaryView(
        canary=canary,
        steps=tuple(repo.canary_steps(canary_id)),
        audit=audit,
        observed_per_arm=repo.count_canary_observations(canary_id),
    )


def split_spec_from_settings(settings: Settings | None = None) -> EnvoyConfigSpec:
    """The Envoy front's config spec from the settings (the environment by default): the
    split file must be rendered with the same routes, upstreams and session headers the
    front end runs with.

    Raises:
        ConfigError: ``envoy.canary`` is not set.
    """
    resolved = settings if settings is not None else Settings()
    spec = EnvoyConfigSpec.from_settings(resolved.capture, resolved.envoy)
    _split_dir(spec)
    return spec


def view_json(view: CanaryView) -> dict[str, JsonValue]:
    """The JSON form of a :class:`CanaryView` (the CLI's ``--json`` and the API)."""
    c = view.canary
    return {
        "canary_id": c.canary_id,
        "run_id": c.run_id,
        "name": c.name,
        "state": c.state.value,
        "step_index": c.step_index,
        "candidate_share": c.candidate_share,
        "split_revision": c.split_revision,
        "split_dir": c.split_dir,
        "policy_hash": c.policy_hash,
        "created_at": c.created_at.isoformat(),
        "step_started_at": c.step_started_at.isoformat(),
        "observed_per_arm": dict(view.observed_per_arm),
        "steps": [
            {
                "step_index": s.step_index,
                "share": s.share,
                "started_at": s.started_at.isoformat(),
                "ended_at": None if s.ended_at is None else s.ended_at.isoformat(),
                "outcome": s.outcome,
                "evaluations": s.evaluations,
                "last_decision": s.last_decision,
            }
            for s in view.steps
        ],
        "audit": [
            {
                "recorded_at": e.recorded_at.isoformat(),
                "action": e.action.value,
                "actor": e.actor,
                "command": e.command,
                "detail": dict(e.detail),
            }
            for e in view.audit
        ],
    }


# ------------------------------------------------------------- for the API and the dashboard

SplitSpec = EnvoyConfigSpec
"""The Envoy front's config spec the split file is rendered with (faces name it by this)."""


def optional_split_spec(settings: Settings | None = None) -> EnvoyConfigSpec | None:
    """:func:`split_spec_from_settings`, or ``None`` when ``envoy.canary`` is not set (a
    server that may run without the canary part: the API answers its rollback 503).

    Raises:
        ConfigError: the canary settings are present but invalid.
    """
    resolved = settings if settings is not None else Settings()
    if resolved.envoy.canary is None:
        return None
    return split_spec_from_settings(resolved)


def list_canaries(
    repo: Repository, *, state: CanaryState | None = None, limit: int | None = None
) -> list[CanaryInfo]:
    """Canaries, newest first (``created_at``), optionally in one ``state``, at most
    ``limit`` of them (``None``: all).

    Raises:
        ConfigError: ``limit`` below 1 (names the value).
        StorageError: on database failure.
    """
    if limit is not None and limit < 1:
        raise ConfigError(f"limit = {limit!r}: must be at least 1", field="limit", value=limit)
    found = repo.list_canaries(state=state)
    return found if limit is None else found[:limit]


def view_json_with_verdicts(view: CanaryView) -> dict[str, JsonValue]:
    """:func:`view_json` with, on each step, its latest step verdict (``last_verdict``:
    the stored verdict JSON — ``decision``, ``reasons``, ``checks`` — or ``None`` before
    the first evaluation) and when it was made (``last_evaluated_at``, ISO 8601 or
    ``None``)."""
    body = view_json(view)
    steps: list[JsonValue] = []
    raw_steps = body["steps"]
    assert isinstance(raw_steps, list)
    for step, shown in zip(view.steps, raw_steps, strict=True):
        assert isinstance(shown, dict)
        steps.append(
            {
                **shown,
                "last_verdict": None if step.last_verdict is None else dict(step.last_verdict),
                "last_evaluated_at": None
                if step.last_evaluated_at is None
                else step.last_evaluated_at.isoformat(),
            }
        )
    body["steps"] = steps
    return body


@dataclass(frozen=True, slots=True)
class SharePoint:
    """The share of sessions one version had at one time (a vertex of the share chart).

    ``version``: ``"baseline"`` or ``"candidate"``; ``share``: 0..1 (the baseline's is
    ``1 - candidate``); ``order``: the vertex's place along its version's line (times
    repeat where a step ends and the next begins).
    """

    at: datetime
    version: str
    share: float
    step_index: int
    order: int


def share_timeline(view: CanaryView, *, now: datetime) -> list[SharePoint]:
    """The share per version over time, built from the steps' windows: each step holds
    its share from ``started_at`` to ``ended_at`` (a running step to ``now``); a final
    canary ends at its last share (0 after a rollback, 1 when completed). Two points per
    step and version, oldest first.

    Raises:
        ConfigError: ``now`` is naive (names it).
    """
    if now.tzinfo is None:
        raise ConfigError(
            f"now = {now.isoformat()!r}: must be timezone-aware", field="now", value=str(now)
        )
    points: list[SharePoint] = []

    def add(at: datetime, candidate: float, step_index: int) -> None:
        order = len(points) // 2
        points.append(SharePoint(at, "candidate", candidate, step_index, order))
        points.append(SharePoint(at, "baseline", 1.0 - candidate, step_index, order))

    for step in view.steps:
        add(step.started_at, step.share, step.step_index)
        add(step.ended_at if step.ended_at is not None else now, step.share, step.step_index)
    if view.canary.state.terminal and view.steps:
        last = view.steps[-1]
        end = last.ended_at if last.ended_at is not None else now
        if view.canary.candidate_share != last.share:
            add(end, view.canary.candidate_share, last.step_index)
    return points
