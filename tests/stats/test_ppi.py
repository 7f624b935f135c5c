"""Prediction-powered net harm (issue 31 item 1): the estimator and the gate's check.

The estimator is compared with an independent implementation of the PPI++ mean
(Angelopoulos, Duchi, Zrnic 2023) written here from the paper's formulas, on the edge
cases where cross-fitting does not apply (fewer than 4 labels: one λ) and where it does
(each fold's λ from the other fold); the gate is driven through :func:`evaluate_gate` on
simulated runs whose random-sample labels are the ``ppi_label`` column.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import CheckOutcome, Coverage, PairScore, QualityOutcome, Verdict
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.gate import evaluate_gate
from shadoweval.stats.judgements import ppi_columns
from shadoweval.stats.net_harm.ppi import ppi_net_harm, ppi_stratum
from shadoweval.stats.policy import GatePolicy

from .test_stats_gate_direction import CLEAN, DECIDED, check, judged


def reference_ppi(
    y: np.ndarray, f_lab: np.ndarray, f_unl: np.ndarray, lam: float
) -> tuple[float, float]:
    """PPI++ mean and variance at a given λ (paper §2, Example 1), disjoint L and U."""
    rect = y - lam * f_lab
    mean = rect.mean() + lam * f_unl.mean()
    f_all = np.concatenate([f_lab, f_unl])
    var_f = np.var(f_all, ddof=1)
    return float(mean), float(
        lam**2 * var_f / f_unl.size + guarded(rect, lam * f_all.mean()) / y.size
    )


def guarded(rect: np.ndarray, shift: float) -> float:
    """The sample variance, at least that with one pseudo-observation of each outcome."""
    pseudo = np.concatenate([rect, np.array([-1.0, 0.0, 1.0]) - shift])
    return float(max(np.var(rect, ddof=1), np.var(pseudo, ddof=1)))


def test_a_constant_predictor_gives_the_labels_alone() -> None:
    label = np.array([1.0, 0.0, -1.0, 1.0, np.nan, np.nan, np.nan, np.nan])
    pred = np.zeros(8)
    s = ppi_stratum("chat", label, pred)
    assert s.lam == 0.0
    assert s.mean == pytest.approx(np.nanmean(label))
    assert s.variance == pytest.approx(guarded(label[:4], 0.0) / 4)


def test_three_labels_match_the_reference_at_the_tuned_lambda() -> None:
    label = np.array([1.0, 0.0, -1.0, np.nan, np.nan, np.nan, np.nan])
    pred = np.array([1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 1.0])
    s = ppi_stratum("chat", label, pred)
    y, f_lab, f_unl = label[:3], pred[:3], pred[3:]
    var_f = np.var(pred, ddof=1)
    cov = np.cov(y, f_lab, ddof=1)[0, 1]
    lam = min(1.0, max(0.0, cov / ((1 + 3 / 4) * var_f)))
    mean, var = reference_ppi(y, f_lab, f_unl, lam)
    assert s.lam == pytest.approx(lam)
    assert s.mean == pytest.approx(mean)
    assert s.variance == pytest.approx(var)


def test_cross_fitting_uses_the_other_folds_lambda() -> None:
    rng = np.random.default_rng(3)
    y = rng.choice([-1.0, 0.0, 1.0], size=40)
    f = np.where(rng.random(40) < 0.7, y, 0.0)
    f_unl = rng.choice([-1.0, 0.0, 1.0], size=200)
    label = np.concatenate([y, np.full(200, np.nan)])
    pred = np.concatenate([f, f_unl])
    s = ppi_stratum("chat", label, pred)
    var_f = np.var(pred, ddof=1)
    folds = [np.arange(40) % 2 == j for j in (0, 1)]

    def lam_of(rows: np.ndarray) -> float:
        cov = np.cov(y[rows], f[rows], ddof=1)[0, 1]
        return float(min(1.0, max(0.0, cov / ((1 + 40 / 200) * var_f))))

    lams = [lam_of(~fold) for fold in folds]
    mean = sum(
        0.5 * ((y[k] - lam * f[k]).mean() + lam * f_unl.mean())
        for k, lam in zip(folds, lams, strict=False)
    )
    assert s.mean == pytest.approx(mean)
    assert s.lam == pytest.approx(sum(lams) / 2)


def test_identical_labels_never_give_a_zero_width_interval() -> None:
    label = np.concatenate([np.zeros(20), np.full(80, np.nan)])
    s = ppi_stratum("chat", label, np.zeros(100))
    assert s.mean == 0.0
    assert s.variance == pytest.approx(guarded(np.zeros(20), 0.0) / 20)
    assert s.variance > 0.0


def test_a_census_of_labels_is_exact_and_strata_combine_by_size() -> None:
    label = np.array([1.0, 1.0, 0.0, -1.0, 1.0, 0.0, np.nan, np.nan])
    pred = np.array([0.0, 1.0, 0.0, -1.0, 1.0, 1.0, 0.0, 0.0])
    changed = np.array([True] * 6 + [False] * 2)
    stratum = np.array(["a", "a", "a", "b", "b", "b", "a", "b"], dtype=object)
    e = ppi_net_harm(label, pred, changed, stratum)
    assert not isinstance(e, str)
    # Every changed pair labelled: the estimate is the labels' net harm over all 8 pairs.
    assert e.estimate == pytest.approx((3 - 1) / 8)
    assert e.labels_estimate == pytest.approx(e.estimate)
    assert {s.name: s.lam for s in e.strata} == {"a": 0.0, "b": 0.0}


def test_too_few_labels_in_a_stratum_says_why() -> None:
    label = np.array([1.0, 0.0, 1.0, np.nan, np.nan])
    changed = np.ones(5, dtype=bool)
    stratum = np.array(["a", "a", "b", "b", "b"], dtype=object)
    why = ppi_net_harm(label, np.zeros(5), changed, stratum)
    assert why == "'b' has 1 random label of 3 changed pairs"


def test_a_biased_judge_moves_the_width_not_the_centre() -> None:
    # 300 seeded units: the judge calls every tie "better" and misses half the worse
    # answers; PPI's mean error stays within 3 standard errors of the mean, the judge's
    # own estimate is far off.
    rng = np.random.default_rng(31)
    truth, errors, judge_errors, ses = 0.05, [], [], []
    for _ in range(300):
        y = rng.choice([-1.0, 0.0, 1.0], size=1000, p=[0.25, 0.45, 0.30])
        f = np.where(y == 0.0, -1.0, y)
        f = np.where((y == 1.0) & (rng.random(1000) < 0.5), 0.0, f)
        label = np.full(1000, np.nan)
        take = rng.choice(1000, size=100, replace=False)
        label[take] = y[take]
        e = ppi_net_harm(label, f, np.ones(1000, dtype=bool), np.full(1000, "t", dtype=object))
        assert not isinstance(e, str)
        errors.append(e.estimate - truth)
        judge_errors.append(e.predictor_estimate - truth)
        ses.append(e.se)
    assert abs(np.mean(errors)) < 3 * np.mean(ses) / math.sqrt(300)
    assert np.mean(judge_errors) < -0.2
    covered = np.mean([abs(err) <= 1.96 * se for err, se in zip(errors, ses, strict=False)])
    assert covered > 0.9


def test_label_values_are_checked() -> None:
    with pytest.raises(Exception, match="label values"):
        ppi_net_harm(np.array([2.0, 0.0]), np.zeros(2), np.ones(2, bool), np.array(["a", "a"]))


# --- the gate ------------------------------------------------------------------------


def gate_with_sample(
    scores: list[PairScore],
    coverage_for: Callable[[int], Coverage],
    judge_outcome: QualityOutcome,
    label_of: Callable[[int], float],
    every: int,
) -> tuple[Verdict, np.ndarray]:
    policy = GatePolicy()
    frame = pairs_frame(scores, policy, judged(scores, judge_outcome))
    changed = classify_changes(frame, policy).changed
    ids = frame["exchange_id"].tolist()
    ppi = {
        e: (frame["quality"][i], label_of(i) if changed[i] and i % every == 0 else math.nan)
        for i, e in enumerate(ids)
    }
    frame = pairs_frame(scores, policy, judged(scores, judge_outcome), ppi=ppi)
    verdict = evaluate_gate(
        frame, policy, run_id="run-ppi", coverage=coverage_for(len(frame)), decided_at=DECIDED
    )
    return verdict, changed


def test_random_labels_overrule_a_judge_that_calls_everything_better(
    simulate: Callable[..., list[PairScore]], coverage_for: Callable[[int], Coverage]
) -> None:
    # The judge says "better" on every pair; a random tenth is labelled, and a third of those
    # labels say worse: PPI's net harm is positive and the check cannot pass.
    scores = simulate({"chat": CLEAN})
    verdict, changed = gate_with_sample(
        scores,
        coverage_for,
        QualityOutcome.CANDIDATE_BETTER,
        lambda i: 1.0 if i % 3 == 0 else 0.0,
        10,
    )
    labels = sum(1 for i, c in enumerate(changed) if c and i % 10 == 0)
    net = check(verdict, "chat", "net_harm")
    assert "prediction-powered inference" in net.reason
    assert f"corrected by {labels} random labels of {int(changed.sum())} changed" in net.reason
    assert net.estimate is not None
    assert net.estimate > 0.2
    assert net.outcome == CheckOutcome.FAIL
    assert verdict.decision.value != "promote"


def test_labels_that_agree_with_the_judge_pass_and_name_the_method(
    simulate: Callable[..., list[PairScore]], coverage_for: Callable[[int], Coverage]
) -> None:
    scores = simulate({"chat": CLEAN})
    verdict, _ = gate_with_sample(
        scores, coverage_for, QualityOutcome.CANDIDATE_BETTER, lambda i: -1.0, 10
    )
    net = check(verdict, "chat", "net_harm")
    assert net.outcome == CheckOutcome.PASS, net.reason
    assert net.statistic.startswith("net harm P(worse) - P(better), prediction-powered")


def test_a_few_random_labels_keep_the_judged_estimator_and_say_so(
    simulate: Callable[..., list[PairScore]], coverage_for: Callable[[int], Coverage]
) -> None:
    scores = simulate({"chat": CLEAN})
    verdict, _ = gate_with_sample(
        scores, coverage_for, QualityOutcome.CANDIDATE_BETTER, lambda i: -1.0, 200
    )
    net = check(verdict, "chat", "net_harm")
    assert (
        "PPI not used: 7 random labels on changed pairs, fewer than net_harm.ppi_min_labels 20"
        in net.reason
    )
    assert "prediction-powered" not in net.statistic


def test_ppi_columns_never_predict_a_pair_from_its_own_sample_label() -> None:
    from datetime import UTC, datetime

    from shadoweval.records import HumanLabel, JudgementSource, LabelValue, PairJudgement

    at = datetime(2024, 1, 1, tzinfo=UTC)
    judge = PairJudgement(
        run_id="r", exchange_id="a", task_type="t", source=JudgementSource.JUDGE,
        outcome=QualityOutcome.CANDIDATE_BETTER, judged_at=at,
    )  # fmt: skip

    def label(exchange_id: str, value: LabelValue, sample: str | None) -> HumanLabel:
        made = HumanLabel(
            run_id="r", exchange_id=exchange_id, task_type="t", label=value,
            labeller="ann", labelled_at=at, source="import",
        )  # fmt: skip
        return made.model_copy(update={"sample": sample}) if sample else made

    assert ppi_columns([judge], [label("a", LabelValue.CANDIDATE_WORSE, None)]) == {}
    got = ppi_columns(
        [judge],
        [label("a", LabelValue.CANDIDATE_WORSE, "s1"), label("b", LabelValue.SAME, None)],
    )
    assert got["a"][0] == -1.0
    assert got["a"][1] == 1.0
    assert got["b"][0] == 0.0
    assert math.isnan(got["b"][1])


def test_a_stratum_whose_one_changed_pair_is_labelled_is_a_census() -> None:
    label = np.array([1.0, np.nan, np.nan, 0.0, -1.0, np.nan])
    changed = np.array([True, False, True, True, True, True])
    stratum = np.array(["a", "a", "b", "b", "b", "b"], dtype=object)
    e = ppi_net_harm(label, np.zeros(6), changed, stratum)
    assert not isinstance(e, str)
    assert {s.name: (s.labelled, s.size) for s in e.strata} == {"a": (1, 1), "b": (2, 4)}
    assert e.df >= 1


def test_the_judgements_fingerprint_reads_the_ppi_columns_only_where_they_are_set(
    simulate: Callable[..., list[PairScore]], coverage_for: Callable[[int], Coverage]
) -> None:
    from shadoweval.stats.checkpoints import evaluate_poll
    from shadoweval.stats.gate import judgements_sha256

    policy = GatePolicy()
    scores = simulate({"chat": CLEAN})
    judgements = judged(scores, QualityOutcome.TIE)
    plain = pairs_frame(scores, policy, judgements)
    # No PPI value: the fingerprint is the one verdicts stored before PPI carry.
    without = plain.drop(columns=["ppi_prediction", "ppi_label"])
    assert judgements_sha256(plain) == judgements_sha256(without)
    first_id = str(plain["exchange_id"][0])
    sampled = pairs_frame(scores, policy, judgements, ppi={first_id: (0.0, 1.0)})
    assert judgements_sha256(sampled) != judgements_sha256(plain)

    def poll(frame: pd.DataFrame, previous: Verdict | None, not_voting: dict[str, str]) -> Verdict:
        coverage = coverage_for(len(plain)).model_copy(update={"judge_not_voting": not_voting})
        return evaluate_poll(
            frame, policy, run_id="r", coverage=coverage, decided_at=DECIDED, previous=previous
        )

    first = poll(plain, None, {})
    assert poll(plain, first, {}) is first
    # A judge found below its floor since: the look is read again; the same judgements, so
    # no new test of the net-harm level (a floor only holds a PASS, never adds a FAIL).
    again = poll(plain, first, {"chat": "judge does not vote in 'chat': …"})
    assert again is not first
    assert again.judgement_look == first.judgement_look
    assert again.coverage.judge_not_voting == {"chat": "judge does not vote in 'chat': …"}
