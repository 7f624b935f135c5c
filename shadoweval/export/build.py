"""Build an export: choose the pairs of each task type, redact them, count them.

:func:`build_export` reads through the repository only (``task_types``, ``sample_ids``,
``samples_by_ids``) and returns the rows and the manifest; writing them is
:mod:`shadoweval.export.writer`'s job, so the command line, the dashboard's download and
the API produce the same bytes from the same request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pandas as pd

from shadoweval.errors import ConfigError
from shadoweval.export.manifest import build_manifest
from shadoweval.export.redaction import CountingRedactor, ExportRedaction, Redact
from shadoweval.export.request import ExportRequest, FieldNames
from shadoweval.export.rows import EXPORT_COLUMNS, rows_frame, sample_row
from shadoweval.export.selection import choose_ids, restrict_ids
from shadoweval.records import utc_now

if TYPE_CHECKING:
    from shadoweval.storage import Repository

FETCH_BATCH = 500
"""Pairs fetched per ``samples_by_ids`` call (bounds one query's size)."""


@dataclass(frozen=True, slots=True)
class ExportResult:
    """An export ready to write.

    Attributes:
        request: what was asked.
        rows: one row per exported pair, :data:`~shadoweval.export.rows.EXPORT_COLUMNS`
            (task types sorted, each in page order), every text redacted.
        manifest: the JSON-ready manifest (:mod:`shadoweval.export.manifest`).
    """

    request: ExportRequest
    rows: pd.DataFrame
    manifest: dict[str, Any]


def _same(field: str) -> str:
    return field


def _task_types(repo: Repository, request: ExportRequest, names: FieldNames) -> list[str]:
    known = repo.task_types(request.run_id)
    wanted = request.flt.task_types
    if not wanted:
        return known
    for task_type in wanted:
        if task_type not in known:
            raise ConfigError(
                f"{names('task_type')} {task_type!r} has no pairs in run {request.run_id!r}; "
                f"its task types: {', '.join(known) or '(none: nothing scored yet)'}",
                field="task_type",
                value=task_type,
            )
    return sorted(wanted)


def build_export(
    repo: Repository,
    request: ExportRequest,
    *,
    redact: Redact,
    redaction_rules: tuple[str, ...] = (),
    names: FieldNames = _same,
    clock: Callable[[], datetime] = utc_now,
) -> ExportResult:
    """Choose, fetch and redact the pairs ``request`` asks for.

    Per task type of the run (or of ``request.flt.task_types``): the ids of every
    matching pair (:meth:`Repository.sample_ids`), kept to ``request.exchange_ids`` when
    set (:func:`~shadoweval.export.selection.restrict_ids`), N of them chosen
    (:func:`~shadoweval.export.selection.choose_ids`; N is
    :meth:`ExportRequest.pairs_to_draw` of the pairs left), the pairs fetched and turned into
    rows (:func:`~shadoweval.export.rows.sample_row`), each text through ``redact``.

    Args:
        repo: the results database.
        request: the export.
        redact: text → text with every match of every rule replaced by
            ``[REDACTED:<rule>]`` (the composition root builds it from the body redactor);
            the markers it adds are counted per rule for the manifest.
        redaction_rules: names of the rules ``redact`` applies, listed in the manifest
            (default: ``redact.rules`` when ``redact`` is an
            :class:`~shadoweval.export.redaction.ExportRedaction`).
        names: how the caller names request fields in messages (``--task-type``).
        clock: the manifest's ``created_at``.

    Returns:
        The rows (a frame, possibly empty) and the manifest.

    Raises:
        ConfigError: the run does not exist, a requested task type has no pairs in it, or
            the request asks for ``changed_unjudged`` pairs or the ``ppi_sample`` without
            their exchange ids (:func:`shadoweval.application.exporting.resolve_selection`
            attaches them).
        StorageError: the database failed.
    """
    for flag, pairs in (
        ("changed_unjudged", "the changed, not yet judged pairs"),
        ("ppi_sample", "the changed pairs"),
    ):
        if getattr(request, flag) and request.exchange_ids is None:
            raise ConfigError(
                f"{names(flag)}: {pairs} were not resolved (the application layer computes "
                "them: shadoweval.application.exporting.resolve_selection)",
                field=flag,
                value=True,
            )
    run = repo.get_run(request.run_id)
    if run is None:
        raise ConfigError(f"run {request.run_id!r} not found", field="run_id", value=request.run_id)
    if not redaction_rules and isinstance(redact, ExportRedaction):
        redaction_rules = redact.rules
    counter = CountingRedactor(redact)
    counts: dict[str, tuple[int, int]] = {}
    drawn: list[str] = []
    rows: list[dict[str, Any]] = []
    for task_type in _task_types(repo, request, names):
        ids = restrict_ids(
            repo.sample_ids(request.run_id, request.flt, task_type), request.exchange_ids
        )
        n = request.pairs_to_draw(len(ids))
        chosen = choose_ids(ids, n=n, order=request.order, seed=request.seed) if n else []
        counts[task_type] = (len(ids), len(chosen))
        drawn.extend(chosen)
        for start in range(0, len(chosen), FETCH_BATCH):
            batch = chosen[start : start + FETCH_BATCH]
            rows.extend(
                sample_row(sample, counter) for sample in repo.samples_by_ids(request.run_id, batch)
            )
    manifest = build_manifest(
        request,
        policy_hash=run.policy_hash,
        baseline=run.baseline.name,
        candidate=run.candidate.name,
        created_at=clock(),
        counts=counts,
        redaction_rules=redaction_rules,
        redaction_counts=counter.counts(),
        columns=EXPORT_COLUMNS,
        drawn=drawn,
    )
    return ExportResult(request=request, rows=rows_frame(rows), manifest=manifest)
