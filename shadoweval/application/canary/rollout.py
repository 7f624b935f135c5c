"""Start a canary, and roll it back (the split first, then the database)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from shadoweval.capture.canary_split import Split, read_split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.errors import ConfigError, ShadowEvalError, StorageError
from shadoweval.records import Decision, new_exchange_id
from shadoweval.stats.canary.policy import (
    CanaryPolicy,
    canary_policy_hash,
    canary_policy_to_yaml,
)
from shadoweval.storage import (
    AuditNote,
    CanaryInfo,
    CanaryState,
    PolicyAuditAction,
    Repository,
)

__all__ = [
    "ROLLBACK_ATTEMPTS",
    "rollback_canary",
    "rollback_split",
    "rollback_without_database",
    "start_canary",
]


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
    require_promote: bool = True,
) -> CanaryInfo:
    """Start a canary of ``run_id``'s candidate: write the split for the policy's first
    step (a new revision in the Envoy front's split directory), then record the canary
    and its ``canary_started`` audit row. If recording fails, the split is set back to the
    share it had (another new revision) before the error is raised.

    A canary follows a shadow run the gate promoted: with ``require_promote`` (the
    default) the run's latest stored verdict must be PROMOTE. Without it the canary starts
    anyway and its audit row says which verdict (or none) it started from.

    Raises:
        ConfigError: no ``why``; the spec has no canary part, or the split file is
            unreadable; an unknown run, a run that already has a running canary, or (with
            ``require_promote``) a run whose latest verdict is not PROMOTE — all before the
            split is touched.
        StorageError: on database failure (a race with another start included).
    """
    if not why.strip():
        raise ConfigError("why = '': starting a canary must say why", field="why", value=why)
    split_dir = _split_dir(spec)
    if repo.get_run(run_id) is None:
        raise ConfigError(f"run_id = {run_id!r}: no such run", field="run_id", value=run_id)
    running = repo.list_canaries(run_id=run_id, state=CanaryState.RUNNING)
    if running:
        raise ConfigError(
            f"run {run_id!r} already has a running canary ({running[0].canary_id}); roll it "
            "back or let it finish first",
            field="run_id",
            value=run_id,
        )
    latest = repo.latest_verdict(run_id)
    shadow = latest.decision.value if latest is not None else None
    if require_promote and shadow != Decision.PROMOTE.value:
        raise ConfigError(
            f"run {run_id!r}: its latest gate verdict is {shadow or 'none (never gated)'}; a "
            "canary follows a shadow PROMOTE (shadow-eval gate); pass --without-promote to "
            "start anyway (the audit row records it)",
            field="run_id",
            value=run_id,
        )
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
                detail={
                    "why": why,
                    "step": 0,
                    "share": first,
                    "split_revision": revision,
                    "shadow_verdict": shadow,
                    "required_promote": require_promote,
                },
            ),
        )
    except ShadowEvalError:
        write_split(split_dir, spec, Split(candidate_share=previous_share, revision=revision + 1))
        raise


ROLLBACK_ATTEMPTS = 3
"""How often :func:`rollback_canary` re-reads and tries again when the canary moved under it."""


def rollback_split(spec: EnvoyConfigSpec) -> int:
    """Write a split revision with share 0 (everyone on the baseline) without the database:
    the rollback's first half, for when the database cannot be reached. Returns the
    revision written (nothing is written when the split is already at share 0: its
    revision is returned).

    Raises:
        ConfigError: no canary part in the spec, or the split file is unreadable.
    """
    split_dir = _split_dir(spec)
    revision, in_force = _next_revision(split_dir)
    if in_force == 0.0 and revision > 0:
        return revision - 1
    write_split(split_dir, spec, Split(candidate_share=0.0, revision=revision))
    return revision


def rollback_without_database(
    spec: EnvoyConfigSpec, canary_id: str, cause: StorageError
) -> StorageError:
    """The database cannot be reached: set the split to share 0 anyway
    (:func:`rollback_split`) and return the error to raise, which says the split moved and
    the canary's record did not.

    Raises:
        ConfigError: no canary part in the spec, or the split file is unreadable.
    """
    revision = rollback_split(spec)
    return StorageError(
        f"{cause}; the split was rolled back anyway (share 0, revision {revision}) but "
        f"canary {canary_id!r} and its audit row are not recorded: run the rollback again "
        "when the database is back"
    )


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
    """Roll a canary back at once: write a split revision with share 0 (every session,
    pinned ones included, goes to the baseline on its next request; streams in flight
    finish on their version), then end the canary ``rolled_back`` with a
    ``canary_rolled_back`` audit row naming who and why.

    Works on a running canary and on a completed one (the old version stays deployed, so
    a finished rollout can be undone). The split is written first: the rollback takes
    effect even when the database is unreachable (the error is raised after it; when the
    canary cannot even be read, :func:`rollback_split` sets share 0 first). If a
    controller moves the canary between the read and the write (an advance or its
    completion, having written its own split revision), the canary is re-read, the split
    written at share 0 again if it changed, and the move tried again, at most
    :data:`ROLLBACK_ATTEMPTS` times.

    Raises:
        ConfigError: unknown canary, no canary part in the spec, ``why`` is empty, or the
            canary is already rolled back.
        StorageError: the database failed, or the canary kept moving.
    """
    if not why.strip():
        raise ConfigError("why = '': a rollback must say why", field="why", value=why)
    split_dir = _split_dir(spec)
    written: tuple[int, float] | None = None
    for attempt in range(1, ROLLBACK_ATTEMPTS + 1):
        try:
            canary = repo.get_canary(canary_id)
        except StorageError as exc:
            if written is not None:
                raise
            raise rollback_without_database(spec, canary_id, exc) from exc
        if canary is None:
            raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
        if canary.state is CanaryState.ROLLED_BACK:
            raise ConfigError(f"canary {canary_id!r} is rolled_back; nothing to roll back")
        if written is None or _next_revision(split_dir) != (written[0] + 1, 0.0):
            # first attempt, or a controller wrote another split since ours: share 0 again
            revision, in_force = _next_revision(split_dir)
            write_split(split_dir, spec, Split(candidate_share=0.0, revision=revision))
            written = revision, in_force if written is None else written[1]
        revision, previous_share = written
        try:
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
                        "from_state": canary.state.value,
                        "from_share": previous_share,
                        "share": 0.0,
                        "split_revision": revision,
                        "reasons": list(reasons),
                    },
                ),
            )
        except StorageError:
            now = repo.get_canary(canary_id)
            moved = now is not None and (
                now.step_index != canary.step_index or now.state is not canary.state
            )
            if not moved or attempt == ROLLBACK_ATTEMPTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
