"""A canary's observations, read from the Envoy front's capture log or the capture topic."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from pydantic import JsonValue

from shadoweval.bus import BusConsumer, KafkaSource
from shadoweval.capture.canary_split import arm_of_cluster
from shadoweval.capture_log import (
    LogEntry,
    line_entry,
    read_capture_log,
    read_segment_from,
    segment_files,
)
from shadoweval.compare.live_side import live_side_facts
from shadoweval.errors import ConfigError
from shadoweval.records import LIVE_ANSWER_COLUMNS, Exchange, same_named
from shadoweval.storage import (
    CanaryInfo,
    CanaryObservation,
    CanaryStepInfo,
    RejectedRecord,
    Repository,
)
from shadoweval.storage.types import rejection_fingerprint

__all__ = [
    "CANARY_REJECT_STAGE",
    "IngestReport",
    "canary_group",
    "ingest_bus",
    "ingest_capture_log",
    "observation_of",
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
        **same_named(facts, LIVE_ANSWER_COLUMNS),
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


async def _caught_up(consumer: BusConsumer) -> bool:
    assigned = consumer.assignment()
    if not assigned:
        return False
    lag = await consumer.lag()
    return all(lag.get(tp) == 0 for tp in assigned)


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
