"""One page of a run's judged pairs, every source and failures included, redacted."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from shadoweval.application.choices import enum_choice
from shadoweval.application.run_views.direction import with_judgements
from shadoweval.application.run_views.pairs import frozen_policy_pairs
from shadoweval.application.samples import redact_sample
from shadoweval.errors import ConfigError
from shadoweval.export.redaction import Redact
from shadoweval.records import (
    HumanLabel,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.judge_quality import apply_judge_floor
from shadoweval.stats.judgements import resolve_judgements
from shadoweval.storage import Repository, RunInfo
from shadoweval.storage.samples import Sample

FAILED = "failed"
"""The outcome filter value of failed judgements (``outcome = None``)."""

JUDGED_OUTCOMES: tuple[str, ...] = (
    QualityOutcome.CANDIDATE_WORSE.value,
    QualityOutcome.CANDIDATE_BETTER.value,
    QualityOutcome.TIE.value,
    FAILED,
)
"""Outcome filter values, in the order judged pairs are listed."""

MAX_JUDGED_PAGE_SIZE = 200
"""Most judged pairs on one page."""

_SOURCE_ORDER = {JudgementSource.HUMAN: 0, JudgementSource.REFERENCE: 1, JudgementSource.JUDGE: 2}


@dataclass(frozen=True)
class JudgedPair:
    """One judgement of one pair, as an analyst reads it.

    Attributes:
        judgement: the judgement (any source; ``outcome = None`` when it failed, with
            ``error``), its rationale and its votes' rationales redacted.
        used: it is the pair's resolved judgement — the one the estimator reads
            (:func:`shadoweval.stats.judgements.resolve_judgements`: human > reference > judge;
            never a judge's in a task type where it does not vote).
        changed: the pair changed (:func:`shadoweval.stats.change.classify_changes`); ``None`` when
            the pair has no stored score.
        stratum: its divergence stratum now (−1 unchanged; ``None`` without a score).
        sample: the pair (request, both answers, similarity) redacted
            (:func:`shadoweval.application.samples.redact_sample`); ``None`` without a score.
    """

    judgement: PairJudgement
    used: bool
    changed: bool | None
    stratum: int | None
    sample: Sample | None

    @property
    def outcome(self) -> str:
        """The outcome's value, or :data:`FAILED`."""
        outcome = self.judgement.outcome
        return FAILED if outcome is None else outcome.value


@dataclass(frozen=True)
class JudgedPairsPage:
    """One page of a run's judged pairs.

    Attributes:
        pairs: the page's judgements, in list order (:func:`judged_records`).
        total: judgements matching the filters.
        page: this page's number (1-based).
        page_size: judgements per page.
    """

    pairs: tuple[JudgedPair, ...]
    total: int
    page: int
    page_size: int

    @property
    def pages(self) -> int:
        """Number of pages (at least 1)."""
        return max(1, math.ceil(self.total / self.page_size))


def judged_records(
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
    *,
    task_type: str | None = None,
    outcome: str | None = None,
    source: JudgementSource | str | None = None,
    voting: Sequence[PairJudgement] | None = None,
) -> list[tuple[PairJudgement, bool]]:
    """Every judgement of a run with whether it is its pair's resolved one, filtered.

    The stored judgements (every source, failures included) and, for each labelled pair,
    the human judgement :func:`shadoweval.stats.judgements.resolve_judgements` makes of its latest
    label. Listed worst first: by outcome (:data:`JUDGED_OUTCOMES`: candidate worse,
    candidate better, tie, failed), then task type, exchange id and source (human,
    reference, judge).

    Args:
        judgements: the run's stored judgements.
        labels: the run's human labels.
        task_type: only this task type (``None``: all).
        outcome: only this outcome (a :data:`JUDGED_OUTCOMES` value; ``None``: all).
        source: only this source (``None``: all).
        voting: the judgements that may be used — without the judge's where it does not
            vote (:func:`shadoweval.stats.judge_quality.apply_judge_floor`); ``None``: all.

    Raises:
        ConfigError: an unknown outcome or source (``field`` names it).
    """
    if outcome is not None and outcome not in JUDGED_OUTCOMES:
        raise ConfigError(
            f"outcome {outcome!r} is not one of {', '.join(JUDGED_OUTCOMES)}",
            field="outcome",
            value=outcome,
        )
    wanted_source = None
    if source is not None:
        wanted_source = enum_choice(JudgementSource, source, field="source")
    resolved = resolve_judgements(judgements if voting is None else voting, labels)
    every = list(judgements)
    stored = {(j.exchange_id, j.source) for j in judgements}
    every += [
        j
        for j in resolved.values()
        if j.source is JudgementSource.HUMAN and (j.exchange_id, j.source) not in stored
    ]
    records = []
    for judgement in every:
        name = FAILED if judgement.outcome is None else judgement.outcome.value
        if task_type is not None and judgement.task_type != task_type:
            continue
        if outcome is not None and name != outcome:
            continue
        if wanted_source is not None and judgement.source is not wanted_source:
            continue
        chosen = resolved.get(judgement.exchange_id)
        used = chosen is not None and chosen.source is judgement.source
        records.append((judgement, used))
    records.sort(
        key=lambda r: (
            JUDGED_OUTCOMES.index(FAILED if r[0].outcome is None else r[0].outcome.value),
            r[0].task_type,
            r[0].exchange_id,
            _SOURCE_ORDER[r[0].source],
        )
    )
    return records


def redact_judgement(judgement: PairJudgement, redact: Redact) -> PairJudgement:
    """``judgement`` with its rationale, its votes' rationales and its error redacted."""
    return judgement.model_copy(
        update={
            "rationale": redact(judgement.rationale) if judgement.rationale else "",
            "error": redact(judgement.error) if judgement.error else judgement.error,
            "votes": tuple(
                vote.model_copy(
                    update={"rationale": redact(vote.rationale) if vote.rationale else ""}
                )
                for vote in judgement.votes
            ),
        }
    )


def judged_pairs_view(
    repo: Repository,
    run: RunInfo,
    *,
    redact: Redact,
    task_type: str | None = None,
    outcome: str | None = None,
    source: JudgementSource | str | None = None,
    page: int = 1,
    page_size: int = 20,
    pairs: pd.DataFrame | None = None,
    judgements: Sequence[PairJudgement] | None = None,
    labels: Sequence[HumanLabel] | None = None,
) -> JudgedPairsPage:
    """One page of the run's judged pairs (:func:`judged_records`), with their answers.

    Each judgement comes with whether the estimator uses it, the pair's change class and
    stratum under the frozen policy, and the pair itself (:meth:`Repository.samples_by_ids`)
    through :func:`shadoweval.application.samples.redact_sample`; rationales are redacted too.

    Args:
        repo: the results database.
        run: the run.
        redact: text → text with every rule's matches replaced (the dashboard's redactor).
        task_type, outcome, source: filters (see :func:`judged_records`).
        page: 1-based page number (a page past the last is empty).
        page_size: judgements per page, 1 to :data:`MAX_JUDGED_PAGE_SIZE`.
        pairs, judgements, labels: what the caller already read (a cached pairs table,
            the run's judgements and labels); read from storage when ``None``.

    Raises:
        ConfigError: a bad filter, page or page size (``field`` names it), or a frozen
            policy that no longer parses.
        StorageError: the database failed.
    """
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise ConfigError(f"page {page!r} must be an integer >= 1", field="page", value=page)
    if (
        isinstance(page_size, bool)
        or not isinstance(page_size, int)
        or not 1 <= page_size <= MAX_JUDGED_PAGE_SIZE
    ):
        raise ConfigError(
            f"page_size {page_size!r} must be an integer from 1 to {MAX_JUDGED_PAGE_SIZE}",
            field="page_size",
            value=page_size,
        )
    stored = repo.list_judgements(run.run_id) if judgements is None else judgements
    given = repo.load_labels(run.run_id) if labels is None else labels
    policy, frame = frozen_policy_pairs(repo, run, pairs)
    voting = apply_judge_floor(stored, given, policy.judge).voting
    records = judged_records(
        stored, given, task_type=task_type, outcome=outcome, source=source, voting=voting
    )
    shown = records[(page - 1) * page_size : page * page_size]
    classes: dict[str, tuple[bool, int]] = {}
    if not frame.empty and shown:
        resolved = resolve_judgements(stored, given)
        changes = classify_changes(with_judgements(frame, resolved), policy)
        classes = {
            str(e): (bool(c), int(h))
            for e, c, h in zip(frame["exchange_id"], changes.changed, changes.stratum, strict=True)
        }
    ids = list(dict.fromkeys(j.exchange_id for j, _ in shown if j.exchange_id in classes))
    samples = {
        s.exchange_id: redact_sample(s, redact) for s in repo.samples_by_ids(run.run_id, ids)
    }
    rows = []
    for judgement, used in shown:
        found = classes.get(judgement.exchange_id)
        rows.append(
            JudgedPair(
                judgement=redact_judgement(judgement, redact),
                used=used,
                changed=None if found is None else found[0],
                stratum=None if found is None else found[1],
                sample=samples.get(judgement.exchange_id),
            )
        )
    return JudgedPairsPage(tuple(rows), len(records), page, page_size)
