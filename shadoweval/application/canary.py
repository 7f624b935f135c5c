"""Canary rollouts (issue 16): what a canary observed, read from the Envoy front's capture log.

The Envoy front end records which cluster served each captured exchange
(``Exchange.served_by``, :mod:`shadoweval.capture.canary_split`). :func:`ingest_capture_log` reads
the
capture-log lines written since the last call (``canary.ingest_state``: per file, the
lines consumed and the byte offset reached, so a poll reads only what was appended),
judges each exchange alone (:func:`shadoweval.compare.live_side.live_side_facts`), assigns it to the
canary step whose window holds its ``captured_at``, and stores it as a
``canary_observation`` (insert-or-ignore per exchange, so a re-read stores nothing twice).
A line that does not decode is kept as a ``rejected_record`` (stage ``canary``) with its
reason and counted; the reader moves on. The last line of the newest segment is left for
the next call while it may still be being written (no trailing newline, or a gzip member
not yet closed).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

import orjson
import pandas as pd
from pydantic import JsonValue

from shadoweval.application.labels import keep_rejected_rows
from shadoweval.bus import BusConsumer, BusError, KafkaSource, parse_kafka_url
from shadoweval.bus.url import is_kafka_url
from shadoweval.capture.canary_split import Split, arm_of_cluster, read_split, write_split
from shadoweval.capture.envoy_config import EnvoyConfigSpec
from shadoweval.capture_log import (
    LogEntry,
    line_entry,
    read_capture_log,
    read_segment_from,
    segment_files,
)
from shadoweval.compare.live_side import live_side_facts
from shadoweval.config import Settings
from shadoweval.errors import ConfigError, ShadowEvalError, StorageError
from shadoweval.export.canary_ratings import (
    RATING_STAGE,
    RatingImport,
    rating_sheet_bytes,
    read_canary_ratings,
)
from shadoweval.records import Decision, Exchange, new_exchange_id, utc_now
from shadoweval.stats.canary.policy import (
    CanaryPolicy,
    canary_policy_hash,
    canary_policy_to_yaml,
    load_canary_policy,
    parse_canary_policy_yaml,
)
from shadoweval.stats.canary.verdict import OBSERVATION_COLUMNS as VERDICT_OBSERVATION_COLUMNS
from shadoweval.stats.canary.verdict import SESSION_NEW, CanaryDecision, StepVerdict, step_verdict
from shadoweval.storage import (
    AuditNote,
    CanaryInfo,
    CanaryObservation,
    CanaryRating,
    CanaryState,
    CanaryStepInfo,
    PolicyAuditAction,
    PolicyAuditEntry,
    RejectedRecord,
    Repository,
)
from shadoweval.storage.samples import request_parts
from shadoweval.storage.types import rejection_fingerprint

__all__ = [
    "CANARY_REJECT_STAGE",
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "RATING_STAGE",
    "ROLLBACK_ATTEMPTS",
    "CanaryDecision",
    "CanaryView",
    "IngestReport",
    "RatingImportResult",
    "SpotCheckSheet",
    "StepVerdict",
    "TickReport",
    "canary_group",
    "canary_view",
    "evaluate_canary",
    "import_canary_ratings",
    "ingest_bus",
    "ingest_capture_log",
    "ingest_source",
    "load_canary_policy",
    "observation_frame",
    "observation_of",
    "rating_frame",
    "rating_sheet_bytes",
    "rollback_canary",
    "rollback_split",
    "rollback_without_database",
    "run_canary",
    "split_spec_from_settings",
    "spot_check_sheet",
    "start_canary",
    "tick_canary",
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


def _cursor(value: JsonValue) -> tuple[int, int | None, bool]:
    """``(lines, bytes, complete)`` of a file's ingest cursor (an old bare line count
    has no byte offset)."""
    if isinstance(value, int):
        return value, None, False
    if isinstance(value, dict):
        lines, offset, complete = value.get("lines"), value.get("bytes"), value.get("complete")
        return (
            lines if isinstance(lines, int) else 0,
            offset if isinstance(offset, int) else None,
            complete is True,
        )
    return 0, None, False


def _new_entries(
    file: Path, cursor: JsonValue, *, newest: bool
) -> tuple[list[LogEntry], JsonValue]:
    """The entries of ``file`` past its cursor, and the cursor after them.

    An uncompressed segment is read from the byte offset where the last call stopped
    (:func:`shadoweval.capture_log.read_segment_from`), so a poll costs what was appended,
    not the file; a last line without its newline waits for the next call. A gzip segment
    cannot be resumed at an offset: it is decoded from its start and the lines already
    consumed skipped, until a call finds it no longer the newest segment (the writer has
    rotated past it), after which it is never opened again.
    """
    lines, offset, complete = _cursor(cursor)
    if complete:
        return [], cursor
    with file.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
    if not gzipped:
        if offset is None:  # an old cursor: find the byte offset of its line count once
            offset, skipped = 0, 0
            for _, end in read_segment_from(file):
                if skipped == lines:
                    break
                offset, skipped = end, skipped + 1
        fresh: list[LogEntry] = []
        for entry, end in read_segment_from(file, start_byte=offset, start_line=lines):
            fresh.append(entry)
            offset = end
        return fresh, {"lines": lines + len(fresh), "bytes": offset}
    entries = list(read_capture_log(file))
    if newest and entries and _still_written(file, entries[-1]):
        entries = entries[:-1]
    fresh = entries[lines:]
    whole = not newest  # the writer only appends to its newest segment
    return fresh, {"lines": max(lines, len(entries)), "complete": whole}


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
    state: dict[str, JsonValue] = dict(canary.ingest_state)
    entries: list[LogEntry] = []
    for index, file in enumerate(files):
        newest = index == len(files) - 1
        fresh, state[file.name] = _new_entries(file, state.get(file.name), newest=newest)
        entries.extend(fresh)
    return _store_entries(
        repo, canary, entries, ingest_state=state, structured_task_types=structured_task_types
    )


def _store_entries(
    repo: Repository,
    canary: CanaryInfo,
    entries: Sequence[LogEntry],
    *,
    ingest_state: Mapping[str, JsonValue] | None,
    structured_task_types: Set[str],
) -> IngestReport:
    """Judge and store what was read: observations (insert-or-ignore, with the cursor in
    the same transaction), rejected lines, and the counts."""
    steps = repo.canary_steps(canary.canary_id)
    observations: list[CanaryObservation] = []
    rejects: list[RejectedRecord] = []
    unassigned = outside = 0
    for entry in entries:
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
        observation = observation_of(exchange, steps, structured_task_types=structured_task_types)
        if observation is None:
            outside += 1
            continue
        observations.append(observation)
    if rejects:
        repo.save_rejected_many(rejects)
    stored = repo.save_canary_observations(
        canary.canary_id, observations, ingest_state=ingest_state
    )
    by_arm: dict[str, int] = {}
    for observation in observations:
        by_arm[observation.arm] = by_arm.get(observation.arm, 0) + 1
    return IngestReport(
        lines=len(entries),
        stored=stored,
        duplicates=len(observations) - stored,
        unassigned=unassigned,
        outside_steps=outside,
        rejected=len(rejects),
        by_arm=by_arm,
    )


def canary_group(canary_id: str) -> str:
    """The Kafka consumer group a canary reads the capture topic in (its own, so the
    replay workers' groups and other canaries read independently)."""
    return f"shadoweval-canary.{canary_id}"


async def ingest_bus(
    repo: Repository,
    canary_id: str,
    source: KafkaSource,
    *,
    structured_task_types: Set[str] = frozenset(),
    max_records: int = 50_000,
    catch_up_timeout_s: float = 30.0,
    session_timeout_ms: int = 10_000,
) -> IngestReport:
    """Read what the capture topic gained since the last call into the canary's observations.

    Joins the canary's own consumer group (:func:`canary_group`; a new group starts at the
    earliest stored record), fetches until every assigned partition is caught up (no lag
    at its high watermark), ``max_records`` were read, or ``catch_up_timeout_s`` passed,
    stores the observations and rejected records, and only then commits the offsets — so
    a crash between the two reads the same records again, and insert-or-ignore stores
    nothing twice (at-least-once, effectively once). A record's location is
    ``topic/partition@offset``.

    Raises:
        ConfigError: unknown canary.
        BusError: the broker is unreachable or a commit failed (the observations are
            stored; the next call reads those records again and ignores them).
        StorageError: on database failure (nothing is committed).
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    consumer = BusConsumer(
        source.bootstrap_servers,
        source.topic,
        canary_group(canary_id),
        client_id="shadow-eval-canary",
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=max(100, session_timeout_ms // 3),
    )
    entries: list[LogEntry] = []
    offsets: dict[tuple[str, int], int] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + catch_up_timeout_s
    async with consumer:
        while len(entries) < max_records and loop.time() < deadline:
            batch = await consumer.getmany(
                timeout_ms=200, max_records=min(1000, max_records - len(entries))
            )
            for record in batch:
                location = f"{record.topic}/{record.partition}@{record.offset}"
                text = (record.value or b"").decode("utf-8", "surrogateescape").rstrip("\n")
                entries.append(line_entry(text, location))
                offsets[record.tp] = max(offsets.get(record.tp, 0), record.offset + 1)
            if not batch and await _caught_up(consumer):
                break
        report = _store_entries(
            repo, canary, entries, ingest_state=None, structured_task_types=structured_task_types
        )
        await consumer.commit(offsets)
    return report


async def _caught_up(consumer: BusConsumer) -> bool:
    assigned = consumer.assignment()
    if not assigned:
        return False
    lag = await consumer.lag()
    return all(lag.get(tp) == 0 for tp in assigned)


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


# ------------------------------------------------------------------------ the controller

OBSERVATION_COLUMNS = ("exchange_id", *VERDICT_OBSERVATION_COLUMNS, SESSION_NEW)
"""Columns of :func:`observation_frame`: the step verdict's ``observations`` columns, the
exchange id, and :data:`~shadoweval.stats.canary.verdict.SESSION_NEW`."""

RATING_COLUMNS = ("exchange_id", "arm", "rating")
"""Columns of :func:`rating_frame` (the step verdict's ``ratings``)."""

TickAction = Literal["held", "advanced", "completed", "rolled_back", "none"]


def observation_frame(
    observations: Sequence[CanaryObservation], *, earlier_sessions: Set[str] = frozenset()
) -> pd.DataFrame:
    """The observations as the frame :func:`shadoweval.stats.canary.verdict.step_verdict` reads:
    one row
    a request, columns :data:`OBSERVATION_COLUMNS` (latencies float ms, NaN when unknown).

    ``session_new`` is false for a request whose session was already observed in an
    earlier step (``earlier_sessions``): such a session is pinned to the arm an earlier
    share gave it, so only sessions first seen in the step show the step's share (the
    sample-ratio check counts those).
    """
    frame = pd.DataFrame(
        [
            (
                o.exchange_id,
                o.arm,
                o.observed_at,
                o.session,
                o.error,
                o.format_expected,
                o.format_ok,
                o.harmed,
                o.cache_hit,
                math.nan if o.e2e_ms is None else float(o.e2e_ms),
                math.nan if o.ttft_ms is None else float(o.ttft_ms),
            )
            for o in observations
        ],
        columns=list(OBSERVATION_COLUMNS[:-1]),
    )
    frame[SESSION_NEW] = [
        o.session is None or o.session not in earlier_sessions for o in observations
    ]
    frame["observed_at"] = pd.to_datetime(frame["observed_at"], utc=True)
    for column in ("e2e_ms", "ttft_ms"):
        frame[column] = frame[column].astype(float)
    return frame


def rating_frame(
    ratings: Sequence[CanaryRating], observations: Sequence[CanaryObservation]
) -> pd.DataFrame:
    """The spot-check ratings of ``observations`` (one row a rating, columns
    :data:`RATING_COLUMNS`), each with the arm that served the rated exchange; ratings of
    exchanges outside ``observations`` (another step) are left out."""
    arm_of = {o.exchange_id: o.arm for o in observations}
    return pd.DataFrame(
        [
            (r.exchange_id, arm_of[r.exchange_id], float(r.rating))
            for r in ratings
            if r.exchange_id in arm_of
        ],
        columns=list(RATING_COLUMNS),
    )


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
    decision = verdict.decision
    reasons = list(verdict.reasons)
    drift = _split_drift(canary, split_dir)
    if drift is not None:
        reasons.append(drift)
        if decision is CanaryDecision.PROMOTE:
            decision = CanaryDecision.HOLD
    stored = dict(verdict.to_json())
    stored["decision"] = decision.value
    stored["reasons"] = list(reasons)
    steps = repo.canary_steps(canary_id)
    previous = next((s.last_decision for s in steps if s.step_index == canary.step_index), None)
    held_note = None
    if decision is CanaryDecision.HOLD and previous != CanaryDecision.HOLD.value:
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
        canary_id,
        step_index=canary.step_index,
        decision=decision.value,
        verdict=stored,
        error_breach_since=verdict.error_breach_since,
        note=held_note,
        evaluated_at=at,
    )
    share = canary.candidate_share
    acted = (decision.value, tuple(reasons), canary.step_index)
    if decision is CanaryDecision.ROLLBACK:
        rolled = rollback_canary(
            repo,
            canary_id,
            spec=spec,
            why="automatic rollback: " + "; ".join(reasons),
            actor=actor,
            command=command,
            reasons=reasons,
        )
        return TickReport(rolled, ingest, verdict, "rolled_back", share, 0.0, *acted)
    if decision is CanaryDecision.HOLD:
        held = repo.get_canary(canary_id) or canary
        return TickReport(held, ingest, verdict, "held", share, share, *acted)
    policy = _frozen_policy(canary)
    detail: dict[str, JsonValue] = {
        "why": "; ".join(reasons),
        "step": canary.step_index,
        "from_share": share,
        "reasons": list(reasons),
    }
    last = canary.step_index >= len(policy.steps) - 1
    try:
        if last:
            done = repo.move_canary(
                canary_id,
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
            return TickReport(done, ingest, verdict, "completed", share, share, *acted)
        following = policy.steps[canary.step_index + 1].share
        revision = _next_revision(split_dir)[0]
        write_split(split_dir, spec, Split(candidate_share=following, revision=revision))
        moved = repo.move_canary(
            canary_id,
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
    except ShadowEvalError:
        _restore_split(repo, canary_id, spec)
        raise
    return TickReport(moved, ingest, verdict, "advanced", share, following, *acted)


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


@dataclass(frozen=True, slots=True)
class RatingImportResult:
    """What :func:`import_canary_ratings` did: the file as read, the ratings stored, and
    the rejected rows not stored again (the same file imported twice)."""

    imported: RatingImport
    stored: int
    skipped: int


def import_canary_ratings(
    repo: Repository, canary_id: str, path: Path, *, rater: str
) -> RatingImportResult:
    """Store the spot-check ratings in ``path``
    (:func:`shadoweval.export.canary_ratings.read_canary_ratings`)
    for canary ``canary_id``; each rated exchange must be one the canary observed (its arm
    comes from the observation). A rejected row is kept once as a ``rejected_record`` (stage
    ``canary_rating``) of the canary's run, with its reason.

    Raises:
        ConfigError: unknown canary, an unknown extension, an empty ``rater``, a file
            without an ``exchange_id`` or ``rating`` column.
        RecordDecodeError: the file cannot be read in its format.
        StorageError: the database failed.
    """
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    observed = {o.exchange_id for o in repo.canary_observations(canary_id)}
    imported = read_canary_ratings(path, canary_id=canary_id, observed=observed, rater=rater)
    stored = repo.save_canary_ratings(imported.ratings)
    skipped = keep_rejected_rows(repo, imported.rejected, stage=RATING_STAGE, run_id=canary.run_id)
    return RatingImportResult(imported=imported, stored=stored, skipped=skipped)


@dataclass(frozen=True, slots=True)
class SpotCheckSheet:
    """What :func:`spot_check_sheet` picked: the sheet's rows (shuffled, no arm), how many
    were picked per arm, and how many picked exchanges the capture log no longer held."""

    rows: list[dict[str, str]]
    picked_per_arm: dict[str, int]
    missing: int


def spot_check_sheet(
    repo: Repository,
    canary_id: str,
    capture_log: str | Path,
    *,
    per_arm: int,
    seed: int = 0,
    step_index: int | None = None,
    redact: Callable[[str], str] = lambda text: text,
) -> SpotCheckSheet:
    """Pick answers for people to rate: up to ``per_arm`` answered requests of each arm
    (the canary's, or one step's), drawn with ``random.Random(seed)`` among those not rated
    yet, their request and answer text read back from the capture log and passed through
    ``redact`` (the exports' body redactor), the rows of both arms shuffled together so a
    rater cannot tell the arm (:data:`shadoweval.export.canary_ratings.RATING_SHEET_COLUMNS`). Write
    it with :func:`shadoweval.export.canary_ratings.rating_sheet_bytes`; the filled sheet is what
    :func:`import_canary_ratings` reads.

    Raises:
        ConfigError: unknown canary, ``per_arm`` < 1, or the capture log does not exist.
    """
    if per_arm < 1:
        raise ConfigError(
            f"per_arm = {per_arm}: pick at least one answer per arm", field="per_arm", value=per_arm
        )
    canary = repo.get_canary(canary_id)
    if canary is None:
        raise ConfigError(f"canary_id = {canary_id!r}: no such canary")
    rated = {r.exchange_id for r in repo.canary_ratings(canary_id)}
    candidates: dict[str, list[str]] = {}
    for o in repo.canary_observations(canary_id, step_index=step_index):
        if not o.error and o.exchange_id not in rated:
            candidates.setdefault(o.arm, []).append(o.exchange_id)
    rng = random.Random(seed)
    picked = {
        arm: rng.sample(ids, min(per_arm, len(ids))) for arm, ids in sorted(candidates.items())
    }
    wanted = {exchange_id for ids in picked.values() for exchange_id in ids}
    path = Path(capture_log)
    try:
        segment_files(path)
    except FileNotFoundError as exc:
        raise ConfigError(f"capture_log = {str(path)!r}: {exc}") from exc
    rows: list[dict[str, str]] = []
    for entry in read_capture_log(path):
        exchange = entry.exchange
        if exchange is None or exchange.exchange_id not in wanted:
            continue
        wanted.discard(exchange.exchange_id)
        messages, _ = request_parts(exchange)
        answer = exchange.response.text if exchange.response is not None else ""
        rows.append(
            {
                "exchange_id": exchange.exchange_id,
                "task_type": exchange.task_type or "",
                "request": redact(orjson.dumps(messages).decode("utf-8")),
                "answer": redact(answer or ""),
            }
        )
    rng.shuffle(rows)
    return SpotCheckSheet(
        rows=rows,
        picked_per_arm={arm: len(ids) for arm, ids in picked.items()},
        missing=len(wanted),
    )


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
                "last_verdict": None if s.last_verdict is None else dict(s.last_verdict),
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
