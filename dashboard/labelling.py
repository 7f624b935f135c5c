"""How the Samples page offers the human labels (the label itself is checked and stored
by :func:`shadoweval.application.labels.save_label`, the dashboard's only write)."""

from __future__ import annotations

from shadoweval.records import LabelValue

__all__ = ["LABEL_NAMES"]

LABEL_NAMES: dict[LabelValue, str] = {
    LabelValue.CANDIDATE_BETTER: "candidate better",
    LabelValue.CANDIDATE_WORSE: "candidate worse",
    LabelValue.SAME: "same",
    LabelValue.BOTH_BAD: "both bad",
}
"""How each label value is offered in the form."""
