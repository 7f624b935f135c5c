"""Pair judgements: one per pair by source priority; judge–human agreement (Cohen's κ)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa

from shadoweval.records import (
    HumanLabel,
    JudgementSource,
    LabelValue,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.judgements import (
    AGREEMENT_METHOD,
    FAILED,
    OUTCOME_ORDER,
    judge_human_agreement,
    label_judgement,
    label_outcome,
    resolve_judgements,
    source_counts,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
BETTER, WORSE, TIE = (
    QualityOutcome.CANDIDATE_BETTER,
    QualityOutcome.CANDIDATE_WORSE,
    QualityOutcome.TIE,
)
JUDGE, HUMAN, REFERENCE = JudgementSource.JUDGE, JudgementSource.HUMAN, JudgementSource.REFERENCE


def judgement(
    exchange: str,
    source: JudgementSource,
    outcome: QualityOutcome | None,
    *,
    at: datetime = T0,
    run: str = "run-1",
) -> PairJudgement:
    return PairJudgement(
        run_id=run,
        exchange_id=exchange,
        task_type="qa",
        source=source,
        outcome=outcome,
        error=None if outcome is not None else "judge answer did not parse",
        judged_at=at,
    )


def label(
    exchange: str,
    value: LabelValue,
    *,
    labeller: str = "ana",
    at: datetime = T0,
    run: str = "run-1",
) -> HumanLabel:
    return HumanLabel(
        run_id=run,
        exchange_id=exchange,
        task_type="qa",
        label=value,
        note=f"{labeller} says {value}",
        labeller=labeller,
        labelled_at=at,
        source="dashboard",
    )


# --------------------------------------------------------------------------- resolve


def test_label_outcomes() -> None:
    assert label_outcome(LabelValue.CANDIDATE_BETTER) is BETTER
    assert label_outcome(LabelValue.CANDIDATE_WORSE) is WORSE
    assert label_outcome(LabelValue.SAME) is TIE
    assert label_outcome("both_bad") is TIE
    with pytest.raises(ValueError, match="nonsense"):
        label_outcome("nonsense")
    j = label_judgement(label("x", LabelValue.BOTH_BAD, labeller="bo"))
    assert (j.source, j.outcome, j.labeller, j.judged_at) == (HUMAN, TIE, "bo", T0)
    assert j.rationale == "bo says both_bad"
    assert (j.run_id, j.exchange_id, j.task_type) == ("run-1", "x", "qa")


def test_priority_human_over_reference_over_judge() -> None:
    judgements = [
        judgement("a", JUDGE, BETTER),
        judgement("a", REFERENCE, WORSE),
        judgement("b", JUDGE, BETTER),
        judgement("b", REFERENCE, TIE),
        judgement("c", JUDGE, WORSE),
        judgement("d", REFERENCE, BETTER),
    ]
    labels = [label("a", LabelValue.SAME), label("e", LabelValue.CANDIDATE_WORSE)]
    resolved = resolve_judgements(judgements, labels)
    assert {k: (v.source, v.outcome) for k, v in resolved.items()} == {
        "a": (HUMAN, TIE),
        "b": (REFERENCE, TIE),
        "c": (JUDGE, WORSE),
        "d": (REFERENCE, BETTER),
        "e": (HUMAN, WORSE),
    }
    assert list(resolved) == ["a", "b", "c", "d", "e"]
    assert source_counts(resolved) == {"judge": 1, "human": 2, "reference": 2, FAILED: 0}


def test_a_failed_judgement_never_wins_over_a_successful_one() -> None:
    judgements = [
        judgement("a", REFERENCE, None),  # failed, higher priority
        judgement("a", JUDGE, BETTER),
        judgement("b", JUDGE, None),  # only failed ones: kept so the counts show it
        judgement("b", REFERENCE, None, at=T0 + timedelta(minutes=1)),
        judgement("c", JUDGE, None),
        judgement("c", JUDGE, TIE, at=T0 - timedelta(hours=1)),  # a retry that succeeded
    ]
    resolved = resolve_judgements(judgements, [])
    assert (resolved["a"].source, resolved["a"].outcome) == (JUDGE, BETTER)
    assert resolved["b"].outcome is None
    assert resolved["b"].source == REFERENCE
    assert resolved["c"].outcome is TIE
    assert source_counts(resolved) == {"judge": 2, "human": 0, "reference": 0, FAILED: 1}


def test_latest_label_per_pair_wins() -> None:
    labels = [
        label("a", LabelValue.CANDIDATE_BETTER, labeller="ana", at=T0),
        label("a", LabelValue.CANDIDATE_WORSE, labeller="bo", at=T0 + timedelta(hours=2)),
        label("a", LabelValue.SAME, labeller="cy", at=T0 + timedelta(hours=1)),
    ]
    resolved = resolve_judgements([judgement("a", JUDGE, BETTER)], labels)
    assert (resolved["a"].outcome, resolved["a"].labeller) == (WORSE, "bo")


def test_latest_of_one_source_wins_deterministically() -> None:
    judgements = [
        judgement("a", JUDGE, BETTER, at=T0),
        judgement("a", JUDGE, WORSE, at=T0 + timedelta(seconds=5)),
    ]
    assert resolve_judgements(judgements, [])["a"].outcome is WORSE
    assert resolve_judgements(reversed(judgements), [])["a"].outcome is WORSE


def test_one_run_only() -> None:
    with pytest.raises(ValueError, match=r"one run, got run_id values \['run-1', 'run-2'\]"):
        resolve_judgements(
            [judgement("a", JUDGE, BETTER)], [label("a", LabelValue.SAME, run="run-2")]
        )
    assert resolve_judgements([], []) == {}
    assert source_counts({}) == {"judge": 0, "human": 0, "reference": 0, FAILED: 0}


# --------------------------------------------------------------------------- agreement

# Gwet's irrCAC package, dataset cont3x3abstractors: 100 abstracts classified by two
# abstractors (Ectopic / AIU / NIU). irrCAC's kappa2.table reports Cohen's kappa
# 0.7964094 with standard error 0.05891072.
ABSTRACTORS = [[13, 0, 0], [0, 20, 7], [0, 4, 56]]


def pairs_from_table(table: list[list[int]]) -> tuple[list[PairJudgement], list[HumanLabel]]:
    """Judge outcomes (rows) and human labels (columns) in :data:`OUTCOME_ORDER`."""
    to_label = {
        BETTER: LabelValue.CANDIDATE_BETTER,
        TIE: LabelValue.SAME,
        WORSE: LabelValue.CANDIDATE_WORSE,
    }
    judgements: list[PairJudgement] = []
    labels: list[HumanLabel] = []
    i = 0
    for r, row in enumerate(table):
        for col, count in enumerate(row):
            for _ in range(count):
                judgements.append(judgement(f"p{i}", JUDGE, OUTCOME_ORDER[r]))
                labels.append(label(f"p{i}", to_label[OUTCOME_ORDER[col]]))
                i += 1
    return judgements, labels


def test_kappa_matches_the_published_table() -> None:
    judgements, labels = pairs_from_table(ABSTRACTORS)
    a = judge_human_agreement(judgements, labels)
    # By hand: p_o = (13 + 20 + 56)/100 = 0.89; margins rows (13, 27, 60), columns
    # (13, 24, 63): p_e = 0.13·0.13 + 0.27·0.24 + 0.60·0.63 = 0.0169 + 0.0648 + 0.378
    # = 0.4597; κ = (0.89 − 0.4597)/(1 − 0.4597) = 0.4303/0.5403 = 0.796409.
    assert a.kappa == pytest.approx(0.7964094, abs=1e-7)
    assert a.se == pytest.approx(0.05891072, abs=1e-8)  # irrCAC's standard error
    assert a.observed_agreement == pytest.approx(0.89)
    assert a.n == 100
    assert a.table == tuple(tuple(row) for row in ABSTRACTORS)
    z = 1.959963984540054
    assert (a.low, a.high) == pytest.approx(
        (0.7964094 - z * 0.05891072, 0.7964094 + z * 0.05891072)
    )
    assert a.method == AGREEMENT_METHOD
    assert a.confidence == 0.95
    ref = cohens_kappa(np.array(ABSTRACTORS, dtype=float))
    assert (a.low, a.high) == pytest.approx((ref.kappa_low, ref.kappa_upp), abs=1e-12)
    assert a.describe() == (
        "judge-human agreement on 100 pairs: κ 0.80 (95% CI 0.68 to 0.91), same outcome on 89%"
    )


def test_kappa_standard_error_by_hand_on_a_two_by_two_table() -> None:
    # Fleiss, Cohen & Everitt (1969) on [[31, 12], [4, 58]] (n 105; statpsych's ci.kappa
    # example reports Cohen's kappa 0.6756757, SE 0.07344761): the three-outcome table
    # with an empty "worse" row and column gives the same κ and SE.
    table = [[31, 12, 0], [4, 58, 0], [0, 0, 0]]
    a = judge_human_agreement(*pairs_from_table(table))
    assert a.kappa == pytest.approx(0.6756757, abs=1e-7)
    assert a.se == pytest.approx(0.07344761, abs=1e-8)


def test_agreement_only_on_pairs_with_both() -> None:
    judgements = [
        judgement("a", JUDGE, BETTER),
        judgement("b", JUDGE, None),  # failed: not read
        judgement("c", REFERENCE, WORSE),  # not the judge
        judgement("d", JUDGE, WORSE),  # no human label
        judgement("e", JUDGE, TIE),
    ]
    labels = [
        label("a", LabelValue.CANDIDATE_BETTER),
        label("b", LabelValue.CANDIDATE_WORSE),
        label("c", LabelValue.CANDIDATE_WORSE),
        label("e", LabelValue.BOTH_BAD, at=T0),
        label("e", LabelValue.CANDIDATE_WORSE, labeller="bo", at=T0 - timedelta(days=1)),
    ]
    a = judge_human_agreement(judgements, labels)
    assert a.n == 2  # a and e (e's latest label: both_bad → tie)
    assert a.table == ((1, 0, 0), (0, 1, 0), (0, 0, 0))
    assert a.kappa == pytest.approx(1.0)
    assert a.observed_agreement == 1.0


def test_no_common_pair_gives_nan() -> None:
    a = judge_human_agreement([judgement("a", JUDGE, BETTER)], [label("b", LabelValue.SAME)])
    assert a.n == 0
    assert all(math.isnan(x) for x in (a.kappa, a.se, a.low, a.high, a.observed_agreement))
    assert a.describe() == (
        "judge-human agreement: no pair has both a judge outcome and a human label"
    )


def test_kappa_undefined_when_both_always_give_one_outcome() -> None:
    a = judge_human_agreement(*pairs_from_table([[0, 0, 0], [0, 7, 0], [0, 0, 0]]))
    assert a.n == 7
    assert a.observed_agreement == 1.0
    assert math.isnan(a.kappa)
    assert math.isnan(a.low)
    assert "κ undefined" in a.describe()


def test_complete_disagreement_with_one_sided_raters_has_no_zero_width_interval() -> None:
    # Found by the trial: the judge said "worse" and the analyst "better" on all 20 pairs;
    # the large-sample SE is 0 there, and "κ 0.00 (95% CI 0.00 to 0.00)" claimed certainty.
    a = judge_human_agreement(*pairs_from_table([[0, 0, 20], [0, 0, 0], [0, 0, 0]]))
    assert a.n == 20
    assert a.observed_agreement == 0.0
    assert a.kappa == 0.0
    assert math.isnan(a.low)
    assert math.isnan(a.high)
    assert "no interval" in a.describe()
    assert "CI" not in a.describe()


def test_kappa_interval_is_clipped() -> None:
    # Perfect disagreement on a few pairs: κ −1 region, the interval stays in [−1, 1].
    a = judge_human_agreement(*pairs_from_table([[0, 0, 3], [0, 0, 0], [3, 0, 0]]))
    assert a.kappa == pytest.approx(-1.0)
    assert -1.0 <= a.low <= a.high <= 1.0
