"""The Samples page's export download: the analysts' export of the current filter.

The same export as ``shadow-eval export`` (:func:`export.build_export`, N per
task type, lowest similarity first or a seeded random draw), redacted by the same
redactor (:func:`faces.cli.export_cmd.body_redaction`: the capture sidecar's body
rules as configured), delivered as one zip of ``samples.<ext>`` and ``manifest.json``
(:func:`export.export_archive`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from export import (
    ExportFormat,
    ExportOrder,
    ExportRedaction,
    ExportRequest,
    build_export,
    export_archive,
)
from shadoweval.storage import Repository
from shadoweval.storage.samples import SampleFilter

__all__ = ["ExportDownload", "build_download"]


@dataclass(frozen=True)
class ExportDownload:
    """A prepared download: the zip bytes, its file name and the export's manifest."""

    data: bytes
    file_name: str
    manifest: dict[str, Any]

    @property
    def exported(self) -> int:
        """Pairs in the export."""
        return int(self.manifest["total"]["exported"])

    @property
    def matching(self) -> int:
        """Pairs that matched the filter."""
        return int(self.manifest["total"]["matching"])


def build_download(
    repo: Repository,
    run_id: str,
    flt: SampleFilter,
    *,
    per_task_type: int,
    order: ExportOrder,
    seed: int | None,
    fmt: ExportFormat,
    redact: ExportRedaction | None = None,
) -> ExportDownload:
    """Build the export of ``flt`` and zip it.

    ``redact`` is the redactor to use (the dashboard's cached one); ``None`` builds it
    (:func:`~faces.cli.export_cmd.body_redaction`).

    Raises:
        ConfigError: a bad value (``per_task_type`` < 1, ``random`` without a seed, an
            invalid redaction setting); the message names it.
        StorageError: the database failed.
    """
    from application.redaction import body_redaction

    request = ExportRequest(
        run_id=run_id,
        per_task_type=per_task_type,
        order=order,
        seed=seed if order == "random" else None,
        flt=flt,
        fmt=fmt,
    )
    result = build_export(repo, request, redact=redact if redact is not None else body_redaction())
    return ExportDownload(
        data=export_archive(result),
        file_name=f"shadow-eval-export-{run_id}-{fmt}.zip",
        manifest=result.manifest,
    )
