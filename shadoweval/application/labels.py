"""Human labels of pairs: one given on a page, or a labelled export read back; summarized.

An analyst reads a pair and says how the candidate's answer compares with the live
baseline's (:class:`~shadoweval.records.LabelValue`), with an optional note.
:func:`save_label` checks it (:func:`make_label`) and stores it with the analyst's name
(one label per pair and labeller; labelling again replaces it) through
:meth:`Repository.save_labels`. :func:`import_labelled_export` stores the labels an analyst
wrote into an export file (``shadow-eval labels import``), marking the labels of the
pairs of a random label sample (the export's manifest's ``ppi_sample``:
:mod:`shadoweval.export.ppi`) with the sample's id. :func:`label_rates` is the
win/loss table shown next to the verdict (:func:`shadoweval.stats.labels.label_summary`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from shadoweval.application.choices import enum_choice
from shadoweval.errors import ConfigError
from shadoweval.export import LabelImport, read_labelled
from shadoweval.export.labels_import import LABEL_STAGE, MAX_NOTE_CHARS, RejectedRow
from shadoweval.export.ppi import (
    LabelManifest,
    manifest_beside,
    read_label_manifest,
    unpack_export_zip,
)
from shadoweval.records import PAIR_KEY_FIELDS, HumanLabel, LabelValue, same_named
from shadoweval.stats.labels import label_summary
from shadoweval.storage import RejectedRecord, Repository, rejection_fingerprint
from shadoweval.storage.samples import Sample, SampleFilter

__all__ = [
    "MAX_NOTE_CHARS",
    "LabelImport",
    "LabelImportResult",
    "import_labelled_export",
    "label_rates",
    "make_label",
    "save_label",
]


def make_label(
    sample: Sample, value: LabelValue | str | None, note: str, labeller: str
) -> HumanLabel:
    """The label of ``sample`` by ``labeller`` (source ``dashboard``, labelled now).

    Raises:
        ConfigError: no label picked (field ``label``), an unknown label value, an empty
            labeller name (field ``labeller``: it is entered in the sidebar) or a note
            longer than :data:`MAX_NOTE_CHARS` (field ``note``).
    """
    name = labeller.strip()
    if not name:
        raise ConfigError(
            "labeller is empty: enter your name in the sidebar before labelling",
            field="labeller",
            value=labeller,
        )
    if value is None:
        raise ConfigError("label: pick one of the four labels", field="label", value=None)
    label = enum_choice(LabelValue, value, field="label")
    text = note.strip()
    if len(text) > MAX_NOTE_CHARS:
        raise ConfigError(
            f"note has {len(text)} characters; at most {MAX_NOTE_CHARS}",
            field="note",
            value=len(text),
        )
    return HumanLabel(
        **same_named(sample, PAIR_KEY_FIELDS),
        label=label,
        note=text,
        labeller=name,
        source="dashboard",
    )


def save_label(
    repo: Repository, sample: Sample, value: LabelValue | str | None, note: str, labeller: str
) -> HumanLabel:
    """Build (:func:`make_label`) and store one label; returns it.

    Raises:
        ConfigError: as :func:`make_label`.
        StorageError: the database refused it.
    """
    label = make_label(sample, value, note, labeller)
    repo.save_labels([label])
    return label


def label_rates(labels: Sequence[HumanLabel]) -> pd.DataFrame:
    """Win and loss rates per task type and pooled, each with a 95% Wilson interval.

    :func:`shadoweval.stats.labels.label_summary`: labelled *pairs* (a pair labelled by several
    people counts once, with its latest label), the win rate (``candidate_better``
    share) and the loss rate (``candidate_worse`` share); one row per task type, then
    the pooled row.
    """
    return label_summary(labels)


@dataclass(frozen=True, slots=True)
class LabelImportResult:
    """What an import of a labelled export did.

    Attributes:
        imported: the file as read: its labels, rejected rows and unlabelled count.
        stored: labels stored.
        skipped: rejected rows not stored again (an identical one was already stored,
            as when the same file is imported twice).
        manifest: the export's manifest as read (``None``: none was found or given, and
            every label counts as chosen by hand).
        kept_sample: labels imported without a sample whose pair was drawn in a random
            sample before (a stored label carries its id): they stay in that sample
            (:meth:`shadoweval.storage.Repository.save_labels`).
    """

    imported: LabelImport
    stored: int
    skipped: int
    manifest: LabelManifest | None = None
    kept_sample: int = 0

    @property
    def in_sample(self) -> int:
        """Labels of pairs of the random label sample (``sample`` set)."""
        return sum(label.sample is not None for label in self.imported.labels)

    @property
    def by_hand(self) -> int:
        """Labels chosen by hand (``sample`` ``None``)."""
        return len(self.imported.labels) - self.in_sample


def run_pairs(repo: Repository, run_id: str) -> dict[str, str]:
    """Every scored pair of ``run_id``: exchange id → task type."""
    pairs: dict[str, str] = {}
    everything = SampleFilter()
    for task_type in repo.task_types(run_id):
        for exchange_id, _ in repo.sample_ids(run_id, everything, task_type):
            pairs[exchange_id] = task_type
    return pairs


def store_import(repo: Repository, run_id: str, imported: LabelImport) -> tuple[int, int]:
    """Store the labels and keep the rejected rows.

    A rejected row already stored for the run at stage ``label_import`` under the same
    fingerprint (:func:`~shadoweval.storage.rejection_fingerprint` of its location and row:
    the same file imported again) is not stored again. Returns how many labels were
    stored and how many rejected rows were skipped as already stored.
    """
    stored = repo.save_labels(imported.labels) if imported.labels else 0
    return stored, keep_rejected_rows(repo, imported.rejected, stage=LABEL_STAGE, run_id=run_id)


_REJECTED_ROW_FIELDS = ("location", "reason", "detail", "raw")
"""What a :class:`RejectedRecord` keeps of a refused row under the same name."""


def keep_rejected_rows(
    repo: Repository, rows: Sequence[RejectedRow], *, stage: str, run_id: str
) -> int:
    """Store the rows an import refused as ``rejected_record`` rows of ``run_id`` at
    ``stage``, each once (a row already kept under the same fingerprint — the same file
    imported again — is not stored again). Returns how many were skipped as already kept.
    """
    records = [
        RejectedRecord(
            stage=stage,
            **same_named(row, _REJECTED_ROW_FIELDS),
            run_id=run_id,
            fingerprint=rejection_fingerprint(row.location, row.raw),
        )
        for row in rows
    ]
    kept = repo.save_rejected_many(records) if records else 0
    return len(records) - kept


def _manifest(path: Path, given: Path | None, in_zip: bytes | None) -> LabelManifest | None:
    """The export manifest of a labelled file: ``given``, else the zip's, else the one
    beside the file; ``None`` when there is none."""
    if given is not None:
        try:
            data = given.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"--manifest {str(given)!r} cannot be read: {exc}", field="manifest", value=given
            ) from None
        return read_label_manifest(data, where=str(given))
    if in_zip is not None:
        return read_label_manifest(in_zip, where=f"{path}:manifest.json")
    beside = manifest_beside(path)
    return None if beside is None else read_label_manifest(beside.read_bytes(), where=str(beside))


def import_labelled_export(
    repo: Repository,
    path: Path,
    *,
    run_id: str,
    labeller: str,
    manifest: Path | None = None,
) -> LabelImportResult:
    """Store the labels an analyst wrote into an export of ``run_id``
    (:func:`export.read_labelled`: the ``label`` / ``label_note`` columns).

    A pair's label by this labeller is replaced by a new non-empty one; a row left blank
    leaves a stored label alone. A row that cannot become a label (a bad label value, an
    exchange id that is not a scored pair of the run …) is stored as a rejected record
    (stage ``label_import``) with its reason, once (:func:`store_import`).

    ``path`` may be the export's zip (the dashboard's or the API's download): its samples
    file is read. The export's manifest — ``manifest``, else the zip's, else
    ``manifest.json`` beside ``path`` — decides which labels belong to a random label
    sample: when it has ``ppi_sample``, the label of each pair it lists gets the sample's
    id (:attr:`shadoweval.records.HumanLabel.sample`); a pair it does not list (a row the
    analyst added) is a label chosen by hand, as is every label without a manifest.

    Raises:
        ConfigError: an unknown extension, a bad labeller name, a file without an
            ``exchange_id`` or ``label`` column, a zip without one samples file, a
            manifest that cannot be read, or one of a random label sample of another run.
        RecordDecodeError: the file cannot be read in its format.
        StorageError: the database failed.
    """
    with tempfile.TemporaryDirectory(prefix="shadow-eval-labels-") as scratch:
        samples, in_zip = path, None
        if path.suffix.lower() == ".zip":
            samples, in_zip = unpack_export_zip(path, Path(scratch))
        read = _manifest(path, manifest, in_zip)
        if read is not None and read.sample is not None and read.run_id != run_id:
            raise ConfigError(
                f"manifest {read.where} is of a random label sample of run {read.run_id!r}, "
                f"not of run {run_id!r}: give the manifest of this run's export "
                "(--manifest PATH)",
                field="manifest",
                value=read.run_id,
            )
        imported = read_labelled(
            samples,
            run_id=run_id,
            labeller=labeller,
            known=run_pairs(repo, run_id),
            sample=None if read is None else read.sample,
        )
    stored, skipped = store_import(repo, run_id, imported)
    by_hand = {label.exchange_id for label in imported.labels if label.sample is None}
    kept = {
        label.exchange_id
        for label in repo.load_labels(run_id)
        if label.sample is not None and label.exchange_id in by_hand
    }
    return LabelImportResult(
        imported=imported, stored=stored, skipped=skipped, manifest=read, kept_sample=len(kept)
    )
