"""Human labels: analysts' judgements of pairs, written from the dashboard or an import.

A label belongs to one scored pair (``pair_score (run_id, exchange_id)``, enforced by a
foreign key) and one labeller; labelling the same pair again replaces that labeller's
label (upsert on ``(run_id, exchange_id, labeller)``). Other labellers' labels of the
pair are kept. Use it through :class:`~shadoweval.storage.repository.Repository`.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shadoweval.records import HumanLabel
from shadoweval.storage import rows as rows_
from shadoweval.storage.database import Database
from shadoweval.storage.models import HumanLabelRow
from shadoweval.storage.queries import check_scored_pairs
from shadoweval.storage.statements import upsert

__all__ = ["LabelStore"]


class LabelStore:
    """Write and read human labels (a mixin of ``Repository``)."""

    _db: Database

    def save_labels(self, labels: Iterable[HumanLabel]) -> int:
        """Store labels, one per ``(run_id, exchange_id, labeller)``: a repeat replaces.

        All labels are written in one transaction, or none. Within ``labels`` a key given
        twice keeps its last occurrence. Returns the number of labels written (inserted
        or replaced).

        A pair drawn in a random label sample stays in it: a label without ``sample`` (a
        relabel on the dashboard, a re-import without the export's manifest) of a pair
        whose stored label has one keeps that sample id — membership is a property of the
        pair's draw, not of the file its label came from.

        Raises:
            StorageError: a label names an exchange that has no pair score in its run
                (the message names run and exchange id), or a task type other than the
                pair's (names both); on database failure.
        """
        given = list(labels)
        if not given:
            return 0
        ordered = sorted(given, key=lambda label: label.run_id)
        with self._db.session() as session:
            for run_id, group in groupby(ordered, key=lambda label: label.run_id):
                _check_pairs(session, run_id, list(group))
            rows = [rows_.label_row(label) for label in given]
            _keep_sample(session, rows)
            return upsert(session, HumanLabelRow, rows, ["run_id", "exchange_id", "labeller"])

    def load_labels(self, run_id: str) -> list[HumanLabel]:
        """Return every label of ``run_id`` (all labellers), oldest first.

        Ordered by ``labelled_at``, then by when the label row was first written.
        """
        stmt = (
            select(HumanLabelRow)
            .where(HumanLabelRow.run_id == run_id)
            .order_by(HumanLabelRow.labelled_at, HumanLabelRow.id)
        )
        with self._db.session() as session:
            return [rows_.human_label(row) for row in session.scalars(stmt)]


def _keep_sample(session: Session, rows: list[dict[str, Any]]) -> None:
    """Give rows without ``sample`` the sample id a stored label of their pair carries."""
    missing = [row for row in rows if row.get("sample") is None]
    if not missing:
        return
    keys = {(row["run_id"], row["exchange_id"]) for row in missing}
    found: dict[tuple[str, str], str] = {}
    for run_id in {run for run, _ in keys}:
        ids = sorted(e for run, e in keys if run == run_id)
        for start in range(0, len(ids), 500):
            stmt = select(HumanLabelRow.exchange_id, HumanLabelRow.sample).where(
                HumanLabelRow.run_id == run_id,
                HumanLabelRow.exchange_id.in_(ids[start : start + 500]),
                HumanLabelRow.sample.is_not(None),
            )
            for exchange_id, sample in session.execute(stmt):
                if sample is not None:
                    found[(run_id, exchange_id)] = sample
    for row in missing:
        row["sample"] = found.get((row["run_id"], row["exchange_id"]))


def _check_pairs(session: Session, run_id: str, labels: list[HumanLabel]) -> None:
    """Raise unless every label's exchange is a scored pair of ``run_id`` of its task type."""
    if labels:
        check_scored_pairs(
            session, run_id, [(x.exchange_id, x.task_type) for x in labels], "a label"
        )
