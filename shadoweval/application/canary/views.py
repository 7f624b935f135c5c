"""What the faces read about canaries: the view, its JSON, the list, the share timeline."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pydantic import JsonValue

from shadoweval.application.canary.ingest import CANARY_REJECT_STAGE
from shadoweval.application.canary.rollout import _split_dir
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.config import Settings
from shadoweval.errors import ConfigError
from shadoweval.storage import (
    CanaryInfo,
    CanaryState,
    CanaryStepInfo,
    PolicyAuditEntry,
    Repository,
)

__all__ = [
    "CanaryView",
    "SharePoint",
    "SplitSpec",
    "canary_view",
    "list_canaries",
    "optional_split_spec",
    "share_timeline",
    "split_spec_from_settings",
    "view_json",
]


@dataclass(frozen=True, slots=True)
class CanaryView:
    """What the faces show of a canary: the canary, its steps, its audit trail (the run's
    ``canary_*`` rows), the requests observed per arm, and the capture-log lines of its run
    kept as rejected records (stage ``canary``), per reason."""

    canary: CanaryInfo
    steps: tuple[CanaryStepInfo, ...]
    audit: tuple[PolicyAuditEntry, ...]
    observed_per_arm: dict[str, int]
    rejected_lines: dict[str, int] = field(default_factory=dict)


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
        rejected_lines=repo.count_rejected(canary.run_id, stage=CANARY_REJECT_STAGE),
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
    """The JSON form of a :class:`CanaryView` (the CLI's ``--json`` and the API): the
    canary, each step with its latest stored verdict (``last_verdict``: ``decision``,
    ``reasons``, ``checks``; ``None`` before the first evaluation) and when it was made,
    the audit trail, the requests per arm and the rejected capture-log lines."""
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
        "rejected_lines": dict(view.rejected_lines),
        "steps": [
            {
                "step_index": s.step_index,
                "share": s.share,
                "started_at": s.started_at.isoformat(),
                "ended_at": None if s.ended_at is None else s.ended_at.isoformat(),
                "outcome": s.outcome,
                "evaluations": s.evaluations,
                "last_decision": s.last_decision,
                "last_verdict": None if s.last_verdict is None else s.last_verdict.to_json(),
                "last_evaluated_at": None
                if s.last_evaluated_at is None
                else s.last_evaluated_at.isoformat(),
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
    return repo.list_canaries(state=state, limit=limit)


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
