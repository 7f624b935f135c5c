"""How far an LLM judge can be trusted, per task type and pooled, and whether it votes.

Three figures per task type and pooled (:func:`judge_quality`), each a count of ``n`` with
its 95% **Wilson score interval** (Wilson 1927, "Probable inference, the law of succession,
and statistical inference", JASA 22:209–212; ``statsmodels`` ``proportion_confint(method=
"wilson")``, as the run views' win / tie / loss rates):

* **agreement with labels** — of the pairs with both a successful judge outcome and a
  *label* (an analyst's latest label, :func:`shadoweval.stats.judgements.label_outcome`;
  else a successful reference judgement, the same priority as
  :func:`shadoweval.stats.judgements.resolve_judgements`), the share where the judge gave the
  same outcome (better / tie / worse). Cohen's κ of the same 3×3 table is kept beside it
  (:func:`shadoweval.stats.judgements.agreement_from_table`: Cohen 1960, standard error of
  Fleiss, Cohen & Everitt 1969), since raw agreement counts chance agreement too.
* **position-flip rate** — of the judged pairs whose two votes (one per presentation
  order, :class:`~shadoweval.records.JudgeVote`) both parsed, the share whose verdict
  *changes* when the answers are swapped: the two orders' outcomes, each already mapped
  back to candidate terms (``candidate`` / ``baseline`` / ``tie`` preferred), differ. A
  flip is what the judge stores as a tie ("orders that disagree make a tie"). The inverse
  of the *consistency* of Zheng et al. (2023, "Judging LLM-as-a-Judge with MT-Bench and
  Chatbot Arena", NeurIPS Datasets and Benchmarks, §3.3 position bias: GPT-4 consistent on
  65% of MT-Bench pairs).
* **first-position rate** — of the votes that preferred one answer (ties left out), the
  share preferring the answer shown first (Zheng et al. 2023's position bias). Every pair
  is asked in both orders, so a judge without position bias stays at 50% whatever the
  candidate's quality. The interval treats the votes as independent; the two votes of a
  consistent judge split one first and one second, so it is not narrower than the data.

:func:`judge_standings` reads the policy's floor (:class:`~shadoweval.stats.policy.JudgePolicy`)
on the agreement's **point estimate**: a task type with at least ``min_agreement_labels``
labelled judge pairs is read on its own agreement, one with fewer on the pooled agreement,
and with fewer pooled too the floor is not read (the judge votes, as before the floor).
Below ``min_agreement`` the judge does not vote there: :func:`voting_judgements` leaves its
judgements out of the pairs' quality (labels and references still count), and
:func:`held_by_judge_floor` holds the unit's net-harm check with the standing's sentence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    HumanLabel,
    JudgementSource,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.judgements import (
    OUTCOME_ORDER,
    Agreement,
    agreement_from_table,
    label_outcome,
)
from shadoweval.stats.labels import latest_per_pair
from shadoweval.stats.policy import JudgePolicy

__all__ = [
    "JUDGE_QUALITY_CONFIDENCE",
    "JUDGE_QUALITY_INTERVAL",
    "JudgeFloor",
    "JudgeQuality",
    "JudgeStanding",
    "Share",
    "apply_judge_floor",
    "held_by_judge_floor",
    "judge_quality",
    "judge_standings",
    "not_voting_notes",
    "voting_judgements",
    "wilson_share",
]

JUDGE_QUALITY_CONFIDENCE = 0.95
"""Two-sided level of the agreement, flip and first-position intervals."""
JUDGE_QUALITY_INTERVAL = "wilson"
"""The interval of the three shares: Wilson's score interval."""

Read = Literal["task_type", "pooled", "not_read"]
"""Which agreement a standing read: the task type's own, the pooled one, or none."""


@dataclass(frozen=True)
class Share:
    """``count`` of ``n`` with its two-sided Wilson interval (NaN share and bounds at n 0)."""

    count: int
    n: int
    share: float
    low: float
    high: float
    confidence: float = JUDGE_QUALITY_CONFIDENCE

    def describe(self, noun: str) -> str:
        """``52% (95% CI 38–66%, 40 labelled pairs)``; ``no labelled pairs`` at n 0."""
        if self.n == 0:
            return f"no {noun}"
        level = f"{100 * self.confidence:g}%"
        return (
            f"{100 * self.share:.0f}% ({level} CI {100 * self.low:.0f}–{100 * self.high:.0f}%, "
            f"{self.n:,} {noun})"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``count``, ``n``, ``share``, ``low``, ``high`` (NaN → ``None``)."""
        return {
            "count": self.count,
            "n": self.n,
            "share": _number(self.share),
            "low": _number(self.low),
            "high": _number(self.high),
        }


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def wilson_share(count: int, n: int, confidence: float = JUDGE_QUALITY_CONFIDENCE) -> Share:
    """``count / n`` with its two-sided Wilson score interval at ``confidence``.

    Raises:
        ValueError: ``count`` outside [0, n].
    """
    if not 0 <= count <= n:
        raise ValueError(f"count must be in [0, n], got count {count} of n {n}")
    if n == 0:
        return Share(0, 0, math.nan, math.nan, math.nan, confidence)
    low, high = proportion_confint(count, n, alpha=1 - confidence, method="wilson")
    return Share(count, n, count / n, float(low), float(high), confidence)


@dataclass(frozen=True)
class JudgeQuality:
    """The judge's figures in one unit (a task type or ``POOLED``).

    Attributes:
        task_type: the unit.
        agreement: pairs where judge and label agree, of the pairs with both.
        kappa: Cohen's κ of the same pairs (rows the judge, columns the label).
        labels_human, labels_reference: of ``agreement.n``, pairs whose label is an
            analyst's and a reference judgement's.
        flip: pairs whose two orders' outcomes differ, of the pairs with both votes parsed.
        first_position: votes preferring the answer shown first, of the non-tie votes.
        judged: pairs with a successful judge outcome.
    """

    task_type: str
    agreement: Share
    kappa: Agreement
    labels_human: int
    labels_reference: int
    flip: Share
    first_position: Share
    judged: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN → ``None``)."""
        return {
            "judged": self.judged,
            "agreement": self.agreement.as_dict(),
            "labels": {"human": self.labels_human, "reference": self.labels_reference},
            "kappa": {
                "kappa": _number(self.kappa.kappa),
                "low": _number(self.kappa.low),
                "high": _number(self.kappa.high),
            },
            "flip": self.flip.as_dict(),
            "first_position": self.first_position.as_dict(),
        }


@dataclass
class _Tally:
    """Running counts of one unit."""

    table: np.ndarray
    human: int = 0
    reference: int = 0
    flips: int = 0
    both_votes: int = 0
    first: int = 0
    preferring: int = 0
    judged: int = 0

    def quality(self, task_type: str, confidence: float) -> JudgeQuality:
        table = self.table.astype(np.int64)
        # statsmodels' κ divides by a zero null-hypothesis spread on tiny tables (a
        # RuntimeWarning of a figure it does not use)
        with np.errstate(invalid="ignore", divide="ignore"):
            kappa = agreement_from_table(table)
        agree = int(np.trace(table))
        return JudgeQuality(
            task_type=task_type,
            agreement=wilson_share(agree, int(table.sum()), confidence),
            kappa=kappa,
            labels_human=self.human,
            labels_reference=self.reference,
            flip=wilson_share(self.flips, self.both_votes, confidence),
            first_position=wilson_share(self.first, self.preferring, confidence),
            judged=self.judged,
        )


def _judge_per_pair(judgements: Iterable[PairJudgement]) -> dict[str, PairJudgement]:
    """Each pair's judge judgement: the latest successful one, else the latest."""
    chosen: dict[str, PairJudgement] = {}
    for j in judgements:
        if j.source != JudgementSource.JUDGE:
            continue
        current = chosen.get(j.exchange_id)
        rank = (j.outcome is not None, j.judged_at)
        if current is None or rank > (current.outcome is not None, current.judged_at):
            chosen[j.exchange_id] = j
    return chosen


def _label_per_pair(
    judgements: Iterable[PairJudgement], labels: Iterable[HumanLabel]
) -> dict[str, tuple[QualityOutcome, JudgementSource]]:
    """Each labelled pair's label: the latest analyst label, else the latest successful
    reference judgement."""
    out: dict[str, tuple[QualityOutcome, JudgementSource]] = {}
    references = sorted(
        (j for j in judgements if j.source == JudgementSource.REFERENCE and j.outcome),
        key=lambda j: j.judged_at,
    )
    for j in references:
        assert j.outcome is not None
        out[j.exchange_id] = (QualityOutcome(j.outcome), JudgementSource.REFERENCE)
    for label in latest_per_pair(labels):
        out[label.exchange_id] = (label_outcome(label.label), JudgementSource.HUMAN)
    return out


def _count(
    tally: _Tally, judge: PairJudgement, label: tuple[QualityOutcome, JudgementSource] | None
) -> None:
    index = {outcome: i for i, outcome in enumerate(OUTCOME_ORDER)}
    if judge.outcome is not None:
        tally.judged += 1
        if label is not None:
            tally.table[index[QualityOutcome(judge.outcome)], index[label[0]]] += 1
            if label[1] is JudgementSource.HUMAN:
                tally.human += 1
            else:
                tally.reference += 1
    by_order = {v.order: v.preferred for v in judge.votes if v.preferred is not None}
    if len(by_order) == 2:
        tally.both_votes += 1
        tally.flips += by_order["baseline_first"] != by_order["candidate_first"]
    for vote in judge.votes:
        if vote.preferred in ("candidate", "baseline"):
            tally.preferring += 1
            shown_first = "baseline" if vote.order == "baseline_first" else "candidate"
            tally.first += vote.preferred == shown_first


def judge_quality(
    judgements: Sequence[PairJudgement],
    labels: Sequence[HumanLabel],
    *,
    confidence: float = JUDGE_QUALITY_CONFIDENCE,
) -> dict[str, JudgeQuality]:
    """The judge's agreement with labels, flip rate and first-position rate (module doc).

    Args:
        judgements: one run's stored judgements (any sources, failures included; a pair's
            judge judgement is its latest successful one, else its latest).
        labels: the run's human labels (the latest per pair counts).
        confidence: the intervals' two-sided level.

    Returns:
        Task type → :class:`JudgeQuality` for every task type with a judge judgement
        (sorted), then ``POOLED``; empty when no pair has a judge judgement.

    Raises:
        ValueError: the judgements and labels carry more than one ``run_id``.
    """
    runs = {j.run_id for j in judgements} | {label.run_id for label in labels}
    if len(runs) > 1:
        raise ValueError(
            f"judgements and labels must come from one run, got run_id values {sorted(runs)}"
        )
    judge = _judge_per_pair(judgements)
    if not judge:
        return {}
    label = _label_per_pair(judgements, labels)
    tallies: dict[str, _Tally] = {}
    pooled = _Tally(np.zeros((3, 3), dtype=np.int64))
    for exchange_id, judgement in judge.items():
        unit = tallies.setdefault(judgement.task_type, _Tally(np.zeros((3, 3), dtype=np.int64)))
        for tally in (unit, pooled):
            _count(tally, judgement, label.get(exchange_id))
    out = {t: tallies[t].quality(t, confidence) for t in sorted(tallies)}
    out[POOLED] = pooled.quality(POOLED, confidence)
    return out


@dataclass(frozen=True)
class JudgeStanding:
    """Whether the judge votes in one task type, and on what agreement.

    Attributes:
        task_type: the task type.
        votes: its judgements count as the pairs' quality.
        read: the agreement read — the task type's own (``task_type``), the pooled one
            (``pooled``: the task type has fewer than ``min_agreement_labels`` labelled
            judge pairs) or none (``not_read``: pooled has fewer too; the judge votes).
        agreement: the agreement read (the task type's own when ``not_read``).
        own_labels: the task type's own labelled judge pairs.
        floor: the policy's judge block (``min_agreement``, ``min_agreement_labels``,
            ``max_flip_rate``).
        flip: the position-flip rate read (the task type's own from
            ``min_agreement_labels`` pairs with both orders, else pooled), ``None`` when
            neither has that many.
    """

    task_type: str
    votes: bool
    read: Read
    agreement: Share
    own_labels: int
    floor: JudgePolicy
    flip: Share | None = None

    @property
    def flips_too_often(self) -> bool:
        """The flip rate read is above ``max_flip_rate``."""
        return self.flip is not None and self.flip.share > self.floor.max_flip_rate

    def describe(self) -> str:
        """``judge does not vote in 'extraction': agreement with labels 52% (95% CI 38–66%,
        40 labelled pairs) below the floor 60%`` (or that it votes, and on what); a judge
        that flips too often is named for that first."""
        where = f"judge {'votes' if self.votes else 'does not vote'} in {self.task_type!r}"
        agreement = self._agreement_text()
        if not self.flips_too_often or self.flip is None:
            return f"{where}: {agreement}"
        flip = self.flip.describe("pairs judged in both orders")
        return (
            f"{where}: its verdict changes when the two answers are swapped on {flip}, above "
            f"judge.max_flip_rate {100 * self.floor.max_flip_rate:.0f}%: the answers' order, not "
            f"their content, decides it; {agreement}"
        )

    def _agreement_text(self) -> str:
        floor = f"{100 * self.floor.min_agreement:.0f}%"
        labels = self.floor.min_agreement_labels
        if self.read == "not_read":
            return (
                f"agreement with labels not read ({self.own_labels:,} labelled pairs "
                f"here, fewer than judge.min_agreement_labels {labels:,} "
                "here and pooled)"
            )
        figure = self.agreement.describe("labelled pairs")
        if self.read == "pooled":
            figure = (
                f"pooled {figure.replace(' labelled pairs)', ' labelled pairs')}; "
                f"{self.own_labels:,} here, fewer than judge.min_agreement_labels "
                f"{labels:,})"
            )
        side = "at or above" if self.agreement.share >= self.floor.min_agreement else "below"
        return f"agreement with labels {figure} {side} the floor {floor}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``votes``, ``read``, ``agreement``, ``flip`` (``None``: not read),
        ``text``."""
        return {
            "votes": self.votes,
            "read": self.read,
            "agreement": self.agreement.as_dict(),
            "flip": None if self.flip is None else self.flip.as_dict(),
            "text": self.describe(),
        }


def judge_standings(
    quality: Mapping[str, JudgeQuality], block: JudgePolicy
) -> dict[str, JudgeStanding]:
    """Whether the judge votes in each task type of ``quality`` (``POOLED`` left out).

    A task type with at least ``block.min_agreement_labels`` labelled judge pairs reads its
    own agreement; one with fewer reads the pooled agreement when that has enough; else
    the floor is not read and the judge votes. The judge votes when the read agreement's
    point estimate is at least ``block.min_agreement`` and its flip rate (read the same way,
    on pairs with both orders parsed) is at most ``block.max_flip_rate``.
    """
    pooled = quality.get(POOLED)
    out: dict[str, JudgeStanding] = {}
    for task_type, unit in quality.items():
        if task_type == POOLED:
            continue
        read: Read = "not_read"
        agreement = unit.agreement
        if agreement.n >= block.min_agreement_labels:
            read = "task_type"
        elif pooled is not None and pooled.agreement.n >= block.min_agreement_labels:
            read, agreement = "pooled", pooled.agreement
        flip: Share | None = None
        if unit.flip.n >= block.min_agreement_labels:
            flip = unit.flip
        elif pooled is not None and pooled.flip.n >= block.min_agreement_labels:
            flip = pooled.flip
        standing = JudgeStanding(
            task_type,
            read == "not_read" or agreement.share >= block.min_agreement,
            read,
            agreement,
            unit.agreement.n,
            block,
            flip,
        )
        if standing.flips_too_often:
            standing = dataclasses.replace(standing, votes=False)
        out[task_type] = standing
    return out


def voting_judgements(
    judgements: Iterable[PairJudgement], standings: Mapping[str, JudgeStanding]
) -> list[PairJudgement]:
    """``judgements`` without the judge's in the task types where it does not vote."""
    silent = {t for t, s in standings.items() if not s.votes}
    return [
        j for j in judgements if not (j.source == JudgementSource.JUDGE and j.task_type in silent)
    ]


def not_voting_notes(standings: Mapping[str, JudgeStanding]) -> dict[str, str]:
    """Task type → :meth:`JudgeStanding.describe` where the judge does not vote."""
    return {t: s.describe() for t, s in sorted(standings.items()) if not s.votes}


def held_by_judge_floor(check: Check, note: str, changed: int) -> Check:
    """A unit's net-harm check where the judge does not vote (``note``, its sentence).

    With changed pairs the judge would have judged, a PASS becomes INCONCLUSIVE (the
    judged pairs left cannot show non-inferiority while the judge is below its floor);
    every outcome's reason starts with ``note``. A unit without ``note``, or without a
    changed pair (nothing to judge), is returned as it is.
    """
    if not note or changed == 0:
        return check
    if check.outcome != CheckOutcome.PASS:
        return check.model_copy(update={"reason": f"{note}; {check.reason}"})
    lead = (
        f"{note}: net harm holds (label more pairs or judge again with a better judge); "
        "on the labels and references alone: "
    )
    return check.model_copy(
        update={"outcome": CheckOutcome.INCONCLUSIVE, "reason": f"{lead}{check.reason}"}
    )


@dataclass(frozen=True)
class JudgeFloor:
    """The judge's figures, its standings under a policy's floor, and the judgements that
    count (:func:`apply_judge_floor`).

    Attributes:
        quality: :func:`judge_quality` of the run.
        standings: :func:`judge_standings` of it under the floor.
        voting: the judgements without the judge's where it does not vote
            (:func:`voting_judgements`), for :func:`shadoweval.stats.judgements.resolve_judgements`.
        block: the floor read.
    """

    quality: dict[str, JudgeQuality]
    standings: dict[str, JudgeStanding]
    voting: list[PairJudgement]
    block: JudgePolicy

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``confidence``, ``interval``, ``floor``, ``per_task_type`` (each
        with its ``standing``) and ``pooled`` (``None`` without a judge judgement)."""
        pooled = self.quality.get(POOLED)
        return {
            "confidence": JUDGE_QUALITY_CONFIDENCE,
            "interval": JUDGE_QUALITY_INTERVAL,
            "floor": {
                "min_agreement": self.block.min_agreement,
                "min_agreement_labels": self.block.min_agreement_labels,
                "max_flip_rate": self.block.max_flip_rate,
                "read_on": "point estimate",
            },
            "per_task_type": {
                t: q.as_dict() | {"standing": self.standings[t].as_dict()}
                for t, q in self.quality.items()
                if t != POOLED
            },
            "pooled": None if pooled is None else pooled.as_dict(),
        }


def apply_judge_floor(
    judgements: Sequence[PairJudgement], labels: Sequence[HumanLabel], block: JudgePolicy
) -> JudgeFloor:
    """:func:`judge_quality`, :func:`judge_standings` under ``block`` and
    :func:`voting_judgements`, in one.

    Raises:
        ValueError: the judgements and labels carry more than one ``run_id``.
    """
    quality = judge_quality(judgements, labels)
    standings = judge_standings(quality, block)
    return JudgeFloor(quality, standings, voting_judgements(judgements, standings), block)
