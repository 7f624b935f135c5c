"""Quality judgements of pairs: one per pair by source priority, and judge–human agreement.

A pair can be judged by three sources (:class:`~shadoweval.records.JudgementSource`): an
analyst's label (``human``), a ground-truth checker's per-side pass/fail (``reference``)
and an LLM judge (``judge``). The gate's net-harm estimator (:mod:`shadoweval.stats.net_harm`) reads
one judgement per pair; :func:`resolve_judgements` picks it, **human > reference > judge**:
an analyst overrides everything, a ground truth overrides a model's opinion. A failed
judgement (``outcome is None``: the judge call failed or did not parse) is kept as data but
never wins over a successful judgement of any source; a pair with only failed judgements
resolves to a failed one, so the counts can say so (:func:`source_counts`).

Human labels (:class:`~shadoweval.records.HumanLabel`) become judgements of source
``human``: ``candidate_better`` → better, ``candidate_worse`` → worse, ``same`` and
``both_bad`` → tie (two bad answers are no direction); a pair labelled several times
counts once, with its latest label (:func:`shadoweval.stats.labels.latest_per_pair`).

:func:`judge_human_agreement` measures how far the judge can be trusted where analysts
looked too: **Cohen's κ** (Cohen 1960, "A coefficient of agreement for nominal scales",
Educational and Psychological Measurement 20:37–46) over the pairs that have both a
successful judge outcome and a human label, on the three outcomes, with the large-sample
standard error of Fleiss, Cohen & Everitt (1969, "Large sample standard errors of kappa
and weighted kappa", Psychological Bulletin 72:323–327) as computed by
``statsmodels.stats.inter_rater.cohens_kappa`` (``std_kappa``) and the normal interval
κ ± z·se. On the published 3×3 table of Gwet's irrCAC package (``cont3x3abstractors``)
this gives κ = 0.7964 with se 0.0589, the values irrCAC reports (tests/stats/test_judgements.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as scipy_stats
from statsmodels.stats.inter_rater import cohens_kappa

from shadoweval.records import (
    PAIR_KEY_FIELDS,
    HumanLabel,
    JudgementSource,
    LabelValue,
    PairJudgement,
    QualityOutcome,
    same_named,
)
from shadoweval.stats.frame import QUALITY_VALUES
from shadoweval.stats.labels import latest_per_pair

__all__ = [
    "AGREEMENT_CONFIDENCE",
    "AGREEMENT_METHOD",
    "FAILED",
    "OUTCOME_ORDER",
    "SOURCE_PRIORITY",
    "Agreement",
    "agreement_from_table",
    "judge_human_agreement",
    "label_judgement",
    "label_outcome",
    "ppi_columns",
    "resolve_judgements",
    "source_counts",
]

SOURCE_PRIORITY: tuple[JudgementSource, ...] = (
    JudgementSource.HUMAN,
    JudgementSource.REFERENCE,
    JudgementSource.JUDGE,
)
"""The sources in the order a pair's judgement is chosen: the first successful one wins."""

FAILED = "failed"
"""The :func:`source_counts` key of pairs whose only judgements failed."""

OUTCOME_ORDER: tuple[QualityOutcome, ...] = (
    QualityOutcome.CANDIDATE_BETTER,
    QualityOutcome.TIE,
    QualityOutcome.CANDIDATE_WORSE,
)
"""Row and column order of the agreement table (:attr:`Agreement.table`)."""

AGREEMENT_CONFIDENCE = 0.95
"""Two-sided confidence level of the κ interval."""

AGREEMENT_METHOD = "cohen_kappa_fce1969"
"""Cohen's κ with the Fleiss–Cohen–Everitt (1969) large-sample standard error."""

_LABEL_OUTCOMES: Mapping[LabelValue, QualityOutcome] = {
    LabelValue.CANDIDATE_BETTER: QualityOutcome.CANDIDATE_BETTER,
    LabelValue.CANDIDATE_WORSE: QualityOutcome.CANDIDATE_WORSE,
    LabelValue.SAME: QualityOutcome.TIE,
    LabelValue.BOTH_BAD: QualityOutcome.TIE,
}


def label_outcome(label: LabelValue | str) -> QualityOutcome:
    """The quality outcome of an analyst's label.

    ``candidate_better`` → ``candidate_better``, ``candidate_worse`` → ``candidate_worse``,
    ``same`` and ``both_bad`` → ``tie``.

    Raises:
        ValueError: ``label`` is not a :class:`~shadoweval.records.LabelValue`.
    """
    return _LABEL_OUTCOMES[LabelValue(label)]


def label_judgement(label: HumanLabel) -> PairJudgement:
    """An analyst's label as a :class:`PairJudgement` of source ``human``.

    The outcome is :func:`label_outcome` of the label, ``rationale`` its note,
    ``labeller`` and ``judged_at`` (``labelled_at``) are kept.
    """
    return PairJudgement(
        **same_named(label, PAIR_KEY_FIELDS),
        source=JudgementSource.HUMAN,
        outcome=label_outcome(label.label),
        rationale=label.note,
        labeller=label.labeller,
        judged_at=label.labelled_at,
    )


def _rank(judgement: PairJudgement) -> tuple[int, int, float]:
    """Sort key, smallest wins: successful first, then source priority, then the latest."""
    failed = 1 if judgement.outcome is None else 0
    return (
        failed,
        SOURCE_PRIORITY.index(JudgementSource(judgement.source)),
        -judgement.judged_at.timestamp(),
    )


def _one_run(run_ids: set[str]) -> None:
    if len(run_ids) > 1:
        raise ValueError(
            f"judgements and labels must come from one run, got run_id values {sorted(run_ids)}"
        )


def resolve_judgements(
    judgements: Iterable[PairJudgement], labels: Iterable[HumanLabel]
) -> dict[str, PairJudgement]:
    """One judgement per pair of one run: human > reference > judge, successful first.

    Human labels are reduced to the latest per pair
    (:func:`shadoweval.stats.labels.latest_per_pair`)
    and converted with :func:`label_judgement`. For each pair the chosen judgement is the
    first by: a successful outcome before a failed one (``outcome is None``, whatever its
    source), then :data:`SOURCE_PRIORITY`, then the latest ``judged_at`` (several
    judgements of one source for one pair do not happen in storage, which keeps one per run
    × exchange × source; the rule only makes the choice deterministic). A pair whose
    judgements all failed resolves to a failed one, so it is counted (:func:`source_counts`)
    and read as not judged.

    Args:
        judgements: the run's stored judgements (any sources, any order).
        labels: the run's human labels (any labellers, any order).

    Returns:
        ``exchange_id`` → the chosen judgement, in the order the pairs first appear
        (judgements first, then labelled pairs without one).

    Raises:
        ValueError: the judgements and labels carry more than one ``run_id`` (keys would
            collide across runs).
    """
    candidates = list(judgements) + [label_judgement(x) for x in latest_per_pair(labels)]
    _one_run({j.run_id for j in candidates})
    chosen: dict[str, PairJudgement] = {}
    for judgement in candidates:
        current = chosen.get(judgement.exchange_id)
        if current is None or _rank(judgement) < _rank(current):
            chosen[judgement.exchange_id] = judgement
    return chosen


def ppi_columns(
    judgements: Iterable[PairJudgement], labels: Iterable[HumanLabel]
) -> dict[str, tuple[float, float]]:
    """The prediction-powered net harm's columns: exchange id → ``(prediction, label)``.

    ``label`` is the quality (+1 worse, 0 tie, −1 better; :func:`label_outcome`) of a pair
    whose latest label was given in a random sample (``HumanLabel.sample`` set: the export's
    ``--ppi-sample``), NaN otherwise. ``prediction`` is the quality of the pair's judgement
    resolved *without* its random-sample label (:func:`resolve_judgements` of the other
    labels — chosen by hand — and the stored judgements: hand label > reference > judge),
    NaN when it has none (the gate then predicts from the detectors). A random-sample label
    is never its own pair's prediction, or the correction would be 0 by construction.

    Returns:
        ``{}`` when no latest label belongs to a random sample (the gate's columns stay
        NaN: the stratified estimator decides as before); else an entry for every pair
        with a prediction or a sample label.
    """
    latest = latest_per_pair(labels)
    sampled = {x.exchange_id: x for x in latest if x.sample}
    if not sampled:
        return {}
    hand = [x for x in latest if x.exchange_id not in sampled]
    predicted = resolve_judgements(judgements, hand)
    out: dict[str, tuple[float, float]] = {}
    for exchange_id, judgement in predicted.items():
        if judgement.outcome is not None:
            out[exchange_id] = (QUALITY_VALUES[judgement.outcome], math.nan)
    for exchange_id, label in sampled.items():
        prediction = out.get(exchange_id, (math.nan, math.nan))[0]
        out[exchange_id] = (prediction, QUALITY_VALUES[label_outcome(label.label)])
    return out


def source_counts(resolved: Mapping[str, PairJudgement]) -> dict[str, int]:
    """Pairs per source of their resolved judgement, failed ones apart.

    Returns:
        ``{"judge": …, "human": …, "reference": …, "failed": …}``: successful judgements
        by source (every source present, 0 when none) and, under :data:`FAILED`, the
        pairs whose only judgements failed.
    """
    counts = {source.value: 0 for source in JudgementSource}
    counts[FAILED] = 0
    for judgement in resolved.values():
        key = FAILED if judgement.outcome is None else JudgementSource(judgement.source).value
        counts[key] += 1
    return counts


@dataclass(frozen=True)
class Agreement:
    """Agreement between the LLM judge and the analysts on the pairs both judged.

    Attributes:
        n: pairs with a successful judge outcome and a human label.
        kappa: Cohen's κ over the three outcomes (NaN when ``n == 0`` or when chance
            agreement is 1: both raters used one and the same outcome throughout).
        se: the Fleiss–Cohen–Everitt (1969) large-sample standard error of κ (NaN where
            κ is).
        low, high: the two-sided :data:`AGREEMENT_CONFIDENCE` normal interval κ ± z·se,
            clipped to [−1, 1] (NaN where κ is).
        observed_agreement: the share of the ``n`` pairs where judge and human gave the
            same outcome (NaN when ``n == 0``).
        table: 3×3 counts, rows the judge's outcome and columns the human's, both in
            :data:`OUTCOME_ORDER` (better, tie, worse).
        confidence: the interval's two-sided level.
        method: :data:`AGREEMENT_METHOD`.
    """

    n: int
    kappa: float
    se: float
    low: float
    high: float
    observed_agreement: float
    table: tuple[tuple[int, ...], ...]
    confidence: float = AGREEMENT_CONFIDENCE
    method: str = AGREEMENT_METHOD

    def describe(self) -> str:
        """One sentence: ``judge–human agreement on 40 pairs: κ 0.62 (95% CI 0.42 to 0.82),
        same outcome on 78%``; or that no pair has both."""
        if self.n == 0:
            return "judge-human agreement: no pair has both a judge outcome and a human label"
        level = f"{100 * self.confidence:g}%"
        if math.isnan(self.kappa):
            kappa = "κ undefined (both gave one and the same outcome on every pair)"
        elif math.isnan(self.low) or math.isnan(self.high):
            kappa = (
                f"κ {self.kappa:.2f} (no interval: too few pairs, or a rater gave one "
                "outcome throughout)"
            )
        else:
            kappa = f"κ {self.kappa:.2f} ({level} CI {self.low:.2f} to {self.high:.2f})"
        return (
            f"judge-human agreement on {self.n} pairs: {kappa}, same outcome on "
            f"{100 * self.observed_agreement:.0f}%"
        )


def _kappa(table: npt.NDArray[np.int64]) -> tuple[float, float]:
    """κ and its FCE (1969) standard error from a square table, NaN when undefined."""
    n = int(table.sum())
    rows = table.sum(axis=1) / n
    cols = table.sum(axis=0) / n
    chance = float(np.dot(rows, cols))
    if chance >= 1.0 - 1e-12:
        return math.nan, math.nan
    # statsmodels also computes the standard error under H0 (κ = 0), which divides by zero
    # on tables with an empty margin; only std_kappa is read, so those warnings are noise.
    with np.errstate(divide="ignore", invalid="ignore"):
        result = cohens_kappa(table.astype(np.float64))
    kappa, se = float(result.kappa), float(result.std_kappa)
    one_sided = int(np.count_nonzero(rows)) < 2 or int(np.count_nonzero(cols)) < 2
    if n < 2 or one_sided or not math.isfinite(se):
        # One shared pair, or a rater who gave one outcome throughout: the large-sample
        # standard error is 0 or undefined there, so κ is shown without an interval.
        se = math.nan
    return kappa, se


def judge_human_agreement(
    judgements: Iterable[PairJudgement], labels: Iterable[HumanLabel]
) -> Agreement:
    """Cohen's κ between the judge's and the analysts' outcomes on the pairs both judged.

    The judge's outcome of a pair is its successful judgement of source ``judge`` (the
    latest by ``judged_at`` if there were several); the human's the latest label
    (:func:`shadoweval.stats.labels.latest_per_pair`) mapped by :func:`label_outcome`. Pairs are
    matched by ``(run_id, exchange_id)``. κ = (p_o − p_e)/(1 − p_e) over the three outcomes
    (Cohen 1960), its standard error the large-sample one of Fleiss, Cohen & Everitt (1969)
    (``statsmodels.stats.inter_rater.cohens_kappa``, ``std_kappa``), the interval
    κ ± z_{0.975}·se clipped to [−1, 1].

    Args:
        judgements: stored judgements of any sources (only successful judge ones are read).
        labels: human labels (any labellers).

    Returns:
        The :class:`Agreement`; with no pair judged by both, ``n == 0`` and NaN numbers.
    """
    judged: dict[tuple[str, str], PairJudgement] = {}
    for j in judgements:
        if j.source != JudgementSource.JUDGE or j.outcome is None:
            continue
        key = (j.run_id, j.exchange_id)
        current = judged.get(key)
        if current is None or j.judged_at > current.judged_at:
            judged[key] = j
    index = {outcome: i for i, outcome in enumerate(OUTCOME_ORDER)}
    table = np.zeros((3, 3), dtype=np.int64)
    for label in latest_per_pair(labels):
        judge = judged.get((label.run_id, label.exchange_id))
        if judge is None or judge.outcome is None:
            continue
        table[index[QualityOutcome(judge.outcome)], index[label_outcome(label.label)]] += 1
    return agreement_from_table(table)


def agreement_from_table(table: npt.NDArray[np.int64]) -> Agreement:
    """The :class:`Agreement` of a 3×3 count table (rows one rater's outcome, columns the
    other's, both in :data:`OUTCOME_ORDER`): Cohen's κ with its FCE (1969) standard error
    and normal interval, and the observed agreement, as :func:`judge_human_agreement`
    computes them; ``n == 0`` and NaN numbers for an empty table.

    Raises:
        ValueError: ``table`` is not 3×3.
    """
    if table.shape != (3, 3):
        raise ValueError(f"the agreement table must be 3x3, got shape {table.shape}")
    rows3 = tuple(tuple(int(x) for x in row) for row in table)
    n = int(table.sum())
    if n == 0:
        return Agreement(0, math.nan, math.nan, math.nan, math.nan, math.nan, rows3)
    kappa, se = _kappa(table)
    z = float(scipy_stats.norm.isf((1.0 - AGREEMENT_CONFIDENCE) / 2.0))
    low = high = math.nan
    if not math.isnan(kappa) and math.isfinite(se):
        low = max(-1.0, kappa - z * se)
        high = min(1.0, kappa + z * se)
    observed = float(np.trace(table)) / n
    return Agreement(n, kappa, se, low, high, observed, rows3)
