"""Human labels given in the dashboard: the dashboard's only write.

An analyst reads a pair on the Samples page and says how the candidate's answer compares
with the live baseline's (:class:`~shadoweval.records.LabelValue`), with an optional
note. The label is stored with the analyst's name (one label per pair and labeller;
labelling again replaces it) through :meth:`Repository.save_labels`.
"""

from __future__ import annotations

from shadoweval.errors import ConfigError
from shadoweval.records import HumanLabel, LabelValue
from shadoweval.storage import Repository
from shadoweval.storage.samples import Sample

__all__ = ["LABEL_NAMES", "MAX_NOTE_CHARS", "make_label", "save_label"]

LABEL_NAMES: dict[LabelValue, str] = {
    LabelValue.CANDIDATE_BETTER: "candidate better",
    LabelValue.CANDIDATE_WORSE: "candidate worse",
    LabelValue.SAME: "same",
    LabelValue.BOTH_BAD: "both bad",
}
"""How each label value is offered in the form."""

MAX_NOTE_CHARS = 2000


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
