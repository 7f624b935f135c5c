"""The Judged pairs page's views: a table of judgements, vote cells, the filters' choices.

A judgement (:class:`~shadoweval.records.PairJudgement`) says which answer of a pair is
better — from the LLM judge (two votes: each presentation order once; orders that
disagree make a tie), an analyst's label, or a reference checker's per-side pass/fail.
The page lists one page of them (:func:`shadoweval.application.run_views.judged_pairs_view`) as a
table (:func:`judged_table`) and then pair by pair with both answers; everything a model,
a judge or an analyst wrote is redacted before it gets here and shown as text, never as
Markdown.
"""

from __future__ import annotations

import pandas as pd

from shadoweval.application.run_views import FAILED, JudgedPair, JudgedPairsPage
from shadoweval.records import JudgementSource, JudgeVote, QualityOutcome

__all__ = [
    "ALL",
    "JUDGED_COLUMNS",
    "OUTCOME_CHOICES",
    "OUTCOME_NAMES",
    "SOURCE_CHOICES",
    "judged_table",
    "outcome_name",
    "reference_cell",
    "stratum_cell",
    "vote_cell",
]

ALL = "all"
"""The filter choice that keeps everything."""

OUTCOME_NAMES: dict[str, str] = {
    QualityOutcome.CANDIDATE_WORSE.value: "candidate worse",
    QualityOutcome.CANDIDATE_BETTER.value: "candidate better",
    QualityOutcome.TIE.value: "tie",
    FAILED: "failed",
}
"""Outcome value → how it is shown (listing order: worse, better, tie, failed)."""

OUTCOME_CHOICES: tuple[str, ...] = (ALL, *OUTCOME_NAMES)
"""The outcome filter's choices."""

SOURCE_CHOICES: tuple[str, ...] = (ALL, *(s.value for s in JudgementSource))
"""The source filter's choices."""

JUDGED_COLUMNS: tuple[str, ...] = (
    "exchange id",
    "task type",
    "source",
    "outcome",
    "used",
    "changed",
    "stratum",
    "similarity",
    "baseline first",
    "candidate first",
    "reference",
    "rationale",
)
"""Columns of :func:`judged_table`."""

_ORDERS = ("baseline_first", "candidate_first")


def outcome_name(value: str) -> str:
    """An outcome value (or ``failed``) as shown."""
    return OUTCOME_NAMES.get(value, value)


def vote_cell(vote: JudgeVote | None) -> str:
    """One vote of the judge: the side it preferred (``candidate``, ``baseline``, ``tie``),
    ``failed: <error>`` when the call failed or did not parse, ``–`` without a vote."""
    if vote is None:
        return "–"
    if vote.preferred is None:
        return f"failed: {vote.error}" if vote.error else "failed"
    return vote.preferred


def stratum_cell(item: JudgedPair) -> str:
    """The pair's change class now: ``unchanged``, ``stratum <h>``, or ``–`` (no score)."""
    if item.changed is None or item.stratum is None:
        return "–"
    if not item.changed:
        return "unchanged"
    return f"stratum {item.stratum}"


def reference_cell(item: JudgedPair) -> str:
    """A reference judgement's per-side pass/fail (``baseline pass · candidate fail``)
    with its checker; ``""`` for other sources."""
    judgement = item.judgement
    if judgement.source is not JudgementSource.REFERENCE:
        return ""

    def side(value: bool | None) -> str:
        return "?" if value is None else ("pass" if value else "fail")

    text = f"baseline {side(judgement.baseline_pass)} · candidate {side(judgement.candidate_pass)}"
    return f"{text} ({judgement.checker})" if judgement.checker else text


def _rationale(item: JudgedPair) -> str:
    judgement = item.judgement
    if judgement.outcome is None:
        return f"failed: {judgement.error}" if judgement.error else "failed"
    if judgement.rationale:
        return judgement.rationale
    if judgement.source is JudgementSource.HUMAN and judgement.labeller:
        return f"(labelled by {judgement.labeller}, no note)"
    return ""


def judged_table(page: JudgedPairsPage) -> pd.DataFrame:
    """One row per judgement on the page, :data:`JUDGED_COLUMNS`.

    ``outcome`` as :data:`OUTCOME_NAMES` shows it; ``used`` is true for the judgement the
    estimator reads (the pair's resolved one); ``changed`` / ``stratum`` the pair's
    change class under the frozen policy (:func:`stratum_cell`); ``similarity`` the pair's
    cosine similarity (NaN without one); ``baseline first`` / ``candidate first`` the
    judge's vote in each presentation order (:func:`vote_cell`; ``–`` for other
    sources); ``reference`` :func:`reference_cell`; ``rationale`` the judgement's
    rationale (the analyst's note for a label; ``failed: <error>`` for a failure).
    """
    rows = []
    for item in page.pairs:
        judgement = item.judgement
        votes: dict[str, JudgeVote] = {vote.order: vote for vote in judgement.votes}
        similarity = None if item.sample is None else item.sample.similarity
        rows.append(
            {
                "exchange id": judgement.exchange_id,
                "task type": judgement.task_type,
                "source": judgement.source.value,
                "outcome": outcome_name(item.outcome),
                "used": item.used,
                "changed": item.changed,
                "stratum": stratum_cell(item),
                "similarity": similarity,
                "baseline first": vote_cell(votes.get(_ORDERS[0])),
                "candidate first": vote_cell(votes.get(_ORDERS[1])),
                "reference": reference_cell(item),
                "rationale": _rationale(item),
            }
        )
    frame = pd.DataFrame(rows, columns=list(JUDGED_COLUMNS))
    frame["similarity"] = pd.to_numeric(frame["similarity"], errors="coerce").astype("float64")
    return frame
