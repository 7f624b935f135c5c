"""The comparison of several candidates on one shadow sample (``stats/candidates.py``).

The verdicts are built as the gate writes them (a PROMOTE with passed blocking checks
carrying their non-inferiority p-values); the directions are per-request arrays. The
family-wise error of both families is checked by a seeded simulation under the null.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from shadoweval.records import Check, CheckOutcome, Coverage, Decision, Verdict
from shadoweval.stats.candidates import (
    CandidateEvidence,
    compare_candidates,
    noninferiority_p,
    request_direction,
)

N = 400


def verdict(decision: Decision, *p_values: float | None) -> Verdict:
    checks = tuple(
        Check(
            metric=f"m{i}",
            task_type="__pooled__",
            statistic="tango",
            p_value=p,
            outcome=CheckOutcome.PASS if decision is Decision.PROMOTE else CheckOutcome.FAIL,
            reason="",
        )
        for i, p in enumerate(p_values)
    )
    coverage = Coverage(captured=N, replayed=N, paired=N, errored=0, warmup=0, skipped=0, share=1.0)
    return Verdict(run_id="r", decision=decision, checks=checks, coverage=coverage, policy_hash="h")


def directions(worse: float, better: float, seed: int) -> pd.Series:
    rng = np.random.default_rng(seed)
    u = rng.random(N)
    values = np.where(u < worse, 1.0, np.where(u < worse + better, -1.0, 0.0))
    return pd.Series(values, index=[f"e{i}" for i in range(N)])


def test_the_intersection_union_p_is_the_largest_passed_blocking_p() -> None:
    assert noninferiority_p(verdict(Decision.PROMOTE, 0.001, 0.02, None)) == (
        0.02,
        ("m2/__pooled__",),
    )
    assert noninferiority_p(verdict(Decision.HOLD, 0.001)) == (1.0, ())


def test_a_clearly_better_candidate_is_picked_with_its_method() -> None:
    good = CandidateEvidence("good", verdict(Decision.PROMOTE, 0.001), directions(0.05, 0.30, 1))
    plain = CandidateEvidence("plain", verdict(Decision.PROMOTE, 0.002), directions(0.1, 0.1, 2))
    bad = CandidateEvidence("bad", verdict(Decision.ROLLBACK, 0.9), directions(0.4, 0.0, 3))
    result = compare_candidates([plain, good, bad], alpha=0.025)
    assert result.no_worse == ("plain", "good")
    assert result.best == "good"
    [test] = result.pairwise
    assert test.winner == "good"
    assert test.level == pytest.approx(0.025)
    assert "Holm" in result.method
    assert "Bonferroni" in result.method
    assert "good is best" in result.summary
    assert [r.decision for r in result.candidates] == [
        Decision.PROMOTE,
        Decision.PROMOTE,
        Decision.ROLLBACK,
    ]


def test_equal_candidates_are_tied_not_picked() -> None:
    a = CandidateEvidence("a", verdict(Decision.PROMOTE, 0.001), directions(0.1, 0.1, 4))
    b = CandidateEvidence("b", verdict(Decision.PROMOTE, 0.001), directions(0.1, 0.1, 5))
    result = compare_candidates([a, b], alpha=0.025)
    assert result.best is None
    assert result.tied == ("a", "b")
    assert "no significant best; tied: a, b" in result.summary


def test_holm_drops_a_promote_whose_p_does_not_survive_the_adjustment() -> None:
    # Alone, p 0.02 <= 0.025 is no worse; with a second candidate Holm asks p <= 0.0125
    # of the smaller one first: 0.02 fails, so neither is rejected.
    alone = compare_candidates(
        [CandidateEvidence("a", verdict(Decision.PROMOTE, 0.02), directions(0.1, 0.1, 6))],
        alpha=0.025,
    )
    assert alone.best == "a"
    two = compare_candidates(
        [
            CandidateEvidence("a", verdict(Decision.PROMOTE, 0.02), directions(0.1, 0.1, 6)),
            CandidateEvidence("b", verdict(Decision.PROMOTE, 0.021), directions(0.1, 0.1, 7)),
        ],
        alpha=0.025,
    )
    assert two.no_worse == ()
    assert two.best is None
    assert [round(r.adjusted_p, 3) for r in two.candidates] == [0.04, 0.04]


def test_as_dict_is_json_ready() -> None:
    a = CandidateEvidence("a", verdict(Decision.PROMOTE, 0.001), directions(0.1, 0.1, 4))
    b = CandidateEvidence("b", verdict(Decision.HOLD), pd.Series([], dtype=float))
    data: dict[str, Any] = compare_candidates([a, b], alpha=0.025).as_dict()
    assert data["best"] == "a"
    assert data["candidates"][1]["mean_direction"] is None
    assert data["candidates"][1]["decision"] == Decision.HOLD.value


def test_bad_input_is_refused_naming_it() -> None:
    a = CandidateEvidence("a", verdict(Decision.PROMOTE, 0.001), directions(0.1, 0.1, 4))
    with pytest.raises(ValueError, match="unique"):
        compare_candidates([a, a], alpha=0.025)
    with pytest.raises(ValueError, match="at least one"):
        compare_candidates([], alpha=0.025)
    with pytest.raises(ValueError, match="alpha"):
        compare_candidates([a], alpha=0.7)


def test_family_wise_errors_under_the_null_stay_near_alpha() -> None:
    """Seeded: three candidates equal to each other (no best exists) and, separately,
    three candidates exactly at the margin (p-values uniform: none is no worse). The
    counted rates of a false pick and of a false no-worse claim stay within alpha plus
    three binomial standard errors."""
    alpha, trials = 0.05, 400
    rng = np.random.default_rng(20240531)
    false_best = false_no_worse = 0
    for trial in range(trials):
        equal = [
            CandidateEvidence(
                name, verdict(Decision.PROMOTE, 0.0), directions(0.15, 0.15, 10_000 * trial + k)
            )
            for k, name in enumerate("abc")
        ]
        false_best += compare_candidates(equal, alpha=alpha).best is not None
        at_margin = [
            CandidateEvidence(
                name, verdict(Decision.PROMOTE, float(rng.random())), equal[0].direction
            )
            for name in "abc"
        ]
        false_no_worse += bool(compare_candidates(at_margin, alpha=alpha).no_worse)
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)
    assert false_best / trials <= bound
    assert false_no_worse / trials <= bound
    assert false_no_worse > 0  # the simulation does reach the null boundary


def test_request_direction_from_a_pairs_table() -> None:
    from shadoweval.stats.frame import BASELINE_HARM_COLUMNS, CANDIDATE_HARM_COLUMNS

    base = {
        "exchange_id": ["e1", "e2", "e3", "e4", "e5"],
        "candidate_fail": [True, False, False, False, True],
        "baseline_fail": [False, True, False, False, False],
        "format_expected": [False] * 5,
        "candidate_format_ok": [math.nan] * 5,
        "baseline_format_ok": [math.nan] * 5,
        "quality": [math.nan, math.nan, -1.0, math.nan, math.nan],
        "candidate_infra_error": [False, False, False, False, True],
        "baseline_infra_error": [False] * 5,
    }
    for column in (*CANDIDATE_HARM_COLUMNS, *BASELINE_HARM_COLUMNS):
        base[column] = [False] * 5
    out = request_direction(pd.DataFrame(base))
    assert out.index.tolist() == ["e1", "e2", "e3", "e4", "e5"]
    assert out.iloc[:4].tolist() == [1.0, -1.0, -1.0, 0.0]
    assert math.isnan(out.iloc[4])
