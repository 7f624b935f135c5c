"""Human labels of pairs: one given on a page, or a labelled export read back; summarized.

An analyst reads a pair and says how the candidate's answer compares with the live
baseline's (:class:`~shadoweval.records.LabelValue`), with an optional note.
:func:`save_label` checks it (:func:`make_label`) and stores it with the analyst's name
(one label per pair and labeller; labelling again replaces it) through
:meth:`Repository.save_labels`. :func:`import_labelled_export` stores the labels an analyst
wrote into an export file (``shadow-eval labels import``). :func:`label_rates` is the
win/loss table shown next to the verdict (:func:`shadoweval.stats.labels.label_summary`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from shadoweval.application.choices import enum_choice
from shadoweval.errors import ConfigError
from shadoweval.export import LabelImport, read_labelled
from shadoweval.export.labels_import import LABEL_STAGE, MAX_NOTE_CHARS, RejectedRow
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
    """

    imported: LabelImport
    stored: int
    skipped: int


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


def import_labelled_export(
    repo: Repository, path: Path, *, run_id: str, labeller: str
) -> LabelImportResult:
    """Store the labels an analyst wrote into an export of ``run_id``
    (:func:`export.read_labelled`: the ``label`` / ``label_note`` columns).

    A pair's label by this labeller is replaced by a new non-empty one; a row left blank
    leaves a stored label alone. A row that cannot become a label (a bad label value, an
    exchange id that is not a scored pair of the run …) is stored as a rejected record
    (stage ``label_import``) with its reason, once (:func:`store_import`).

    Raises:
        ConfigError: an unknown extension, a bad labeller name, a file without an
            ``exchange_id`` or ``label`` column.
        RecordDecodeError: the file cannot be read in its format.
        StorageError: the database failed.
    """
    imported = read_labelled(path, run_id=run_id, labeller=labeller, known=run_pairs(repo, run_id))
    stored, skipped = store_import(repo, run_id, imported)
    return LabelImportResult(imported=imported, stored=stored, skipped=skipped)
