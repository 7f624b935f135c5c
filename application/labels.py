"""Human labels of pairs: one given on a page, stored; a run's labels summarized.

An analyst reads a pair and says how the candidate's answer compares with the live
baseline's (:class:`~shadoweval.records.LabelValue`), with an optional note.
:func:`save_label` checks it (:func:`make_label`) and stores it with the analyst's name
(one label per pair and labeller; labelling again replaces it) through
:meth:`Repository.save_labels`. :func:`label_rates` is the win/loss table shown next to the
verdict (:func:`stats.labels.label_summary`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from shadoweval.errors import ConfigError
from shadoweval.records import HumanLabel, LabelValue
from shadoweval.storage import Repository
from shadoweval.storage.samples import Sample
from stats.labels import label_summary

__all__ = ["MAX_NOTE_CHARS", "label_rates", "make_label", "save_label"]

MAX_NOTE_CHARS = 2000
"""Longest note a label given in the dashboard may carry (characters, after stripping)."""


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
    try:
        label = LabelValue(value)
    except ValueError:
        known = ", ".join(v.value for v in LabelValue)
        raise ConfigError(
            f"label {value!r} is not one of {known}", field="label", value=value
        ) from None
    text = note.strip()
    if len(text) > MAX_NOTE_CHARS:
        raise ConfigError(
            f"note has {len(text)} characters; at most {MAX_NOTE_CHARS}",
            field="note",
            value=len(text),
        )
    return HumanLabel(
        run_id=sample.run_id,
        exchange_id=sample.exchange_id,
        task_type=sample.task_type,
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

    :func:`stats.labels.label_summary`: labelled *pairs* (a pair labelled by several
    people counts once, with its latest label), the win rate (``candidate_better``
    share) and the loss rate (``candidate_worse`` share); one row per task type, then
    the pooled row.
    """
    return label_summary(labels)
