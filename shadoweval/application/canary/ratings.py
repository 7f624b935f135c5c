"""Spot checks: the sheet of answers to rate, and the import of the ratings."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from shadoweval.application.labels import keep_rejected_rows
from shadoweval.capture_log import (
    read_capture_log,
    segment_files,
)
from shadoweval.errors import ConfigError
from shadoweval.export.canary_ratings import (
    RATING_STAGE,
    RatingImport,
    read_canary_ratings,
)
from shadoweval.storage import (
    Repository,
)
from shadoweval.storage.samples import request_parts

__all__ = [
    "RatingImportResult",
    "SpotCheckSheet",
    "import_canary_ratings",
    "spot_check_sheet",
]


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
