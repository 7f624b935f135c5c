"""The analysts' export: a request built and checked, the export zipped or written.

The dashboard's Samples page and ``GET /v1/runs/{run_id}/export`` hand out the same
export as ``shadow-eval export`` (:func:`export.build_export`: N pairs per task type,
lowest similarity first or a seeded random draw, every text redacted), delivered as one
zip of ``samples.<ext>`` and ``manifest.json`` (:func:`export_zip`); the command line
writes the two files into a directory instead (:func:`export_to_directory`).

The request's value types and limits are those of :mod:`export.request`, named here so a
face builds a request without importing the export stage: :class:`ExportRequest`,
:func:`make_request` (from loose values, each bad one named as the caller spells it:
:func:`cli_option` for a command line), :data:`FORMATS`, :data:`ORDERS`,
:data:`DEFAULT_PER_TASK_TYPE`, :data:`MAX_SEED`. The redactor type is
:class:`ExportRedaction` (built by :func:`application.redaction.body_redaction`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from export import ExportResult, build_export, export_archive, stale_samples, write_export
from export.redaction import ExportRedaction
from export.request import (
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
from shadoweval.errors import ShadowEvalError
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
) -> ExportRequest:
    """The export of the pairs ``flt`` selects; ``seed`` is kept only for ``random``.

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
    )


def export_zip(
    repo: Repository, request: ExportRequest, *, redact: ExportRedaction
) -> ExportArchive:
    """Build the export ``request`` asks for (:func:`export.build_export`) and zip it.

    Args:
        repo: the results database.
        request: the export (run, N per task type, order, seed, filter, format).
        redact: the text redactor and its rule names (listed in the manifest).

    Raises:
        ConfigError: the run does not exist, or a requested task type has no pairs in it.
        StorageError: the database failed.
    """
    result = build_export(repo, request, redact=redact)
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
    result = build_export(repo, request, redact=redact, names=names)
    try:
        removed = stale_samples(out, request.fmt) if out.is_dir() else []
        paths = write_export(result, out)
    except OSError as exc:
        raise ShadowEvalError(
            f"{names('out')} {str(out)!r}: cannot write the export ({exc})"
        ) from None
    return WrittenExport(result=result, paths=paths, removed=removed)
