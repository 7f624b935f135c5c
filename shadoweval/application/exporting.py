"""The analysts' export: a request built and checked, the export zipped or written.

The dashboard's Samples page and ``GET /v1/runs/{run_id}/export`` hand out the same
export as ``shadow-eval export`` (:func:`export.build_export`: N pairs per task type,
lowest similarity first or a seeded random draw, every text redacted), delivered as one
zip of ``samples.<ext>`` and ``manifest.json`` (:func:`export_zip`); the command line
writes the two files into a directory instead (:func:`export_to_directory`).

The request's value types and limits are those of :mod:`shadoweval.export.request`, named here so a
face builds a request without importing the export stage: :class:`ExportRequest`,
:func:`make_request` (from loose values, each bad one named as the caller spells it:
:func:`cli_option` for a command line), :data:`FORMATS`, :data:`ORDERS`,
:data:`DEFAULT_PER_TASK_TYPE`, :data:`MAX_SEED`. The redactor type is
:class:`ExportRedaction` (built by :func:`shadoweval.application.redaction.body_redaction`).

A request with ``changed_unjudged`` asks for the pairs that changed beyond the noise and
have no successful judgement of any source; the export stage cannot tell which those are
(it imports no statistics), so :func:`resolve_selection` computes their exchange ids here
(:func:`shadoweval.application.run_views.changed_unjudged_ids`) and attaches them to the request.
:func:`export_zip` and :func:`export_to_directory` call it, so a face only sets the flag.
A request for the random label sample (``ppi_sample``) gets every changed pair's id,
judged or not (:func:`shadoweval.application.run_views.changed_ids`), the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shadoweval.application.run_views import changed_ids, changed_unjudged_ids
from shadoweval.errors import ConfigError, ShadowEvalError
from shadoweval.export import (
    ExportResult,
    build_export,
    export_archive,
    stale_samples,
    write_export,
)
from shadoweval.export.redaction import ExportRedaction
from shadoweval.export.request import (
    DEFAULT_PER_TASK_TYPE,
    FORMATS,
    MAX_SEED,
    ORDERS,
    ExportFormat,
    ExportOrder,
    ExportRequest,
    FieldNames,
    cli_option,
    make_request,
)
from shadoweval.storage import Repository
from shadoweval.storage.samples import SampleFilter

__all__ = [
    "DEFAULT_PER_TASK_TYPE",
    "FORMATS",
    "MAX_SEED",
    "ORDERS",
    "ExportArchive",
    "ExportFormat",
    "ExportOrder",
    "ExportRedaction",
    "ExportRequest",
    "ExportResult",
    "WrittenExport",
    "cli_option",
    "export_to_directory",
    "export_zip",
    "filter_request",
    "make_request",
    "resolve_selection",
]


@dataclass(frozen=True)
class ExportArchive:
    """A built export as one zip: its bytes and the export's manifest.

    Attributes:
        data: the zip (deflated) of ``samples.<ext>`` and ``manifest.json``.
        manifest: the JSON-ready manifest (run, policy hash, filters, order, seed, counts
            per task type, redaction rules and hits).
    """

    data: bytes
    manifest: dict[str, Any]

    @property
    def exported(self) -> int:
        """Pairs in the export."""
        return int(self.manifest["total"]["exported"])

    @property
    def matching(self) -> int:
        """Pairs that matched the filter."""
        return int(self.manifest["total"]["matching"])


def filter_request(
    run_id: str,
    flt: SampleFilter,
    *,
    per_task_type: int,
    order: ExportOrder,
    seed: int | None,
    fmt: ExportFormat,
    changed_unjudged: bool = False,
) -> ExportRequest:
    """The export of the pairs ``flt`` selects; ``seed`` is kept only for ``random``;
    ``changed_unjudged`` keeps only the changed pairs not judged yet (resolved when the
    export is built: :func:`resolve_selection`).

    Raises:
        ConfigError: a bad value (``per_task_type`` out of range, ``random`` without a
            seed, a seed out of range); ``field`` and ``value`` name it.
    """
    return ExportRequest(
        run_id=run_id,
        per_task_type=per_task_type,
        order=order,
        seed=seed if order == "random" else None,
        flt=flt,
        fmt=fmt,
        changed_unjudged=changed_unjudged,
    )


def resolve_selection(
    repo: Repository, request: ExportRequest, *, names: FieldNames = cli_option
) -> ExportRequest:
    """``request`` with the exchange ids its ``changed_unjudged`` or ``ppi_sample``
    selection stands for.

    A request with neither, or whose ids are already attached, is returned as it is.
    Otherwise the ids are :func:`shadoweval.application.run_views.changed_unjudged_ids` of
    the run (changed under its frozen policy, no successful judgement of any source; a
    pair whose judgements all failed is still unjudged) for ``changed_unjudged``, and
    :func:`shadoweval.application.run_views.changed_ids` (every changed pair, judged or
    not) for ``ppi_sample``, set as ``exchange_ids``.

    Raises:
        ConfigError: the run does not exist (named ``names("run_id")``), or its frozen
            policy no longer parses.
        StorageError: the database failed.
    """
    wanted = request.changed_unjudged or request.ppi_sample
    if not wanted or request.exchange_ids is not None:
        return request
    run = repo.get_run(request.run_id)
    if run is None:
        raise ConfigError(
            f"{names('run_id')} {request.run_id!r}: run not found",
            field="run_id",
            value=request.run_id,
        )
    ids = changed_ids(repo, run) if request.ppi_sample else changed_unjudged_ids(repo, run)
    return dataclasses.replace(request, exchange_ids=ids)


def export_zip(
    repo: Repository, request: ExportRequest, *, redact: ExportRedaction
) -> ExportArchive:
    """Build the export ``request`` asks for (:func:`export.build_export`) and zip it.

    Args:
        repo: the results database.
        request: the export (run, N per task type, order, seed, filter, format, the
            changed-and-unjudged selection: :func:`resolve_selection`).
        redact: the text redactor and its rule names (listed in the manifest).

    Raises:
        ConfigError: the run does not exist, or a requested task type has no pairs in it.
        StorageError: the database failed.
    """
    result = build_export(repo, resolve_selection(repo, request, names=str), redact=redact)
    return ExportArchive(data=export_archive(result), manifest=result.manifest)


@dataclass(frozen=True)
class WrittenExport:
    """A built export written into a directory.

    Attributes:
        result: the export (rows and manifest).
        paths: the files written, ``samples.<ext>`` first, then ``manifest.json``.
        removed: ``samples.<other ext>`` files of an earlier export in another format,
            removed so the directory holds one export.
    """

    result: ExportResult
    paths: list[Path]
    removed: list[Path]


def export_to_directory(
    repo: Repository,
    request: ExportRequest,
    out: Path,
    *,
    redact: ExportRedaction,
    names: FieldNames = cli_option,
) -> WrittenExport:
    """Build the export ``request`` asks for and write it into ``out`` (created if needed).

    ``names`` spells request fields in messages (``--task-type`` by default). Only
    ``samples.<ext>``, ``manifest.json`` and stale ``samples.<other ext>`` files are
    touched (:func:`export.write_export`).

    Raises:
        ConfigError: the run does not exist, or a requested task type has no pairs in it.
        StorageError: the database failed.
        ShadowEvalError: the directory or a file cannot be written (named ``names("out")``).
    """
    resolved = resolve_selection(repo, request, names=names)
    result = build_export(repo, resolved, redact=redact, names=names)
    try:
        removed = stale_samples(out, request.fmt) if out.is_dir() else []
        paths = write_export(result, out)
    except OSError as exc:
        raise ShadowEvalError(
            f"{names('out')} {str(out)!r}: cannot write the export ({exc})"
        ) from None
    return WrittenExport(result=result, paths=paths, removed=removed)
