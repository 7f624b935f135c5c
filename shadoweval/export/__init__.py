"""The analysts' export: a stratified, redacted sample of a run's pairs, and labels back.

Public API::

    from shadoweval.export import ExportRequest, build_export, write_export, export_archive

    request = make_request("run-1", per_task_type=20, order="random", seed=7, fmt="parquet",
                           max_similarity=0.8)
    result = build_export(repo, request, redact=redaction)   # rows (DataFrame) + manifest
    write_export(result, Path("out"))                        # out/samples.parquet, manifest.json
    export_archive(result)                                   # the same two files as zip bytes

    imported = read_labelled(Path("out/samples.csv"), run_id="run-1", labeller="ana",
                             known=exchange_task_types)     # labels + rejected rows

Modules: ``request`` (what is asked, checked), ``selection`` (lowest N / seeded random
N per task type), ``redaction`` (counting redactor; the rules come from the composition
root, since the core does not import ``capture``), ``rows`` (columns and types),
``manifest``, ``build`` (:func:`build_export`), ``writer`` (CSV, JSONL, Parquet, zip),
``labels_import`` (:func:`read_labelled`).
"""

from __future__ import annotations

from shadoweval.export.build import ExportResult, build_export
from shadoweval.export.labels_import import LabelImport, RejectedRow, read_labelled
from shadoweval.export.manifest import MANIFEST_SCHEMA_VERSION
from shadoweval.export.redaction import CountingRedactor, ExportRedaction, Redact
from shadoweval.export.request import (
    DEFAULT_PER_TASK_TYPE,
    FORMATS,
    ORDERS,
    ExportFormat,
    ExportOrder,
    ExportRequest,
    cli_option,
    make_request,
    parse_flags,
)
from shadoweval.export.rows import EXPORT_COLUMNS
from shadoweval.export.writer import (
    MANIFEST_FILE,
    export_archive,
    export_files,
    stale_samples,
    write_export,
)

__all__ = [
    "DEFAULT_PER_TASK_TYPE",
    "EXPORT_COLUMNS",
    "FORMATS",
    "MANIFEST_FILE",
    "MANIFEST_SCHEMA_VERSION",
    "ORDERS",
    "CountingRedactor",
    "ExportFormat",
    "ExportOrder",
    "ExportRedaction",
    "ExportRequest",
    "ExportResult",
    "LabelImport",
    "Redact",
    "RejectedRow",
    "build_export",
    "cli_option",
    "export_archive",
    "export_files",
    "make_request",
    "parse_flags",
    "read_labelled",
    "stale_samples",
    "write_export",
]
