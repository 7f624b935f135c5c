"""Pair completeness: task-mix χ², sequential SRM, coverage by task type."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from stats.inputs import InsufficientDataError, InvalidDataError
from stats.validity import coverage_by_task_type, sequential_srm, task_mix_chi2


def test_mix_matches_scipy_chisquare() -> None:
    observed = {"chat": 480, "extraction": 300, "code": 120, "summary": 0}
    captured = {"chat": 5000, "extraction": 2500, "code": 2000, "summary": 500}
    check = task_mix_chi2(observed, captured, alpha=0.001)
    o = np.array([480, 300, 120, 0])
    e = o.sum() * np.array([5000, 2500, 2000, 500]) / 10_000
    reference = scipy_stats.chisquare(o, e)
    assert check.statistic == pytest.approx(float(reference.statistic), rel=1e-12)
    assert check.p_value == pytest.approx(float(reference.pvalue), rel=1e-10)
    assert check.dof == 3
    assert check.worst_task_type == "summary"  # 0 observed vs 45 expected: 45 > 60²/180
    assert not check.ok


def test_mix_ok_and_single_type() -> None:
    same = task_mix_chi2({"a": 50, "b": 50}, {"a": 1000, "b": 1000}, alpha=0.001)
    assert (same.statistic, same.p_value, same.worst_task_type, same.ok) == (0.0, 1.0, None, True)
    single = task_mix_chi2({"a": 7}, {"a": 9, "b": 0}, alpha=0.001)
    assert (single.dof, single.p_value, single.ok) == (0, 1.0, True)


def test_mix_validation() -> None:
    with pytest.raises(InvalidDataError, match="paired but never captured: new"):
        task_mix_chi2({"a": 5, "new": 1}, {"a": 10}, alpha=0.001)
    with pytest.raises(InsufficientDataError, match="no paired"):
        task_mix_chi2({"a": 0}, {"a": 10}, alpha=0.001)
    with pytest.raises(InvalidDataError, match=r"observed\['a'\] must be >= 0"):
        task_mix_chi2({"a": -1}, {"a": 10}, alpha=0.001)
    with pytest.raises(InvalidDataError, match="alpha"):
        task_mix_chi2({"a": 1}, {"a": 10}, alpha=0.0)
    with pytest.raises(InvalidDataError, match="no captured"):
        task_mix_chi2({}, {"a": 0}, alpha=0.001)


def test_sequential_srm_mapping_and_normalisation() -> None:
    by_list = sequential_srm([600, 400], [0.5, 0.5])
    by_map = sequential_srm({"a": 600, "b": 400}, {"b": 1000, "a": 1000})  # counts as weights
    assert by_map == pytest.approx(by_list, rel=1e-12)
    balanced = sequential_srm({"a": 500, "b": 500}, {"a": 0.5, "b": 0.5})
    assert balanced[0] < 1.0
    assert balanced[1] == 1.0


def test_sequential_srm_is_valid_under_repeated_looks() -> None:
    """Polled at every 100 units up to 10,000 under H0, it alarms in ≤ α of the runs."""
    rng = np.random.default_rng(9)
    theta = np.array([0.5, 0.3, 0.2])
    alarms = 0
    for _ in range(300):
        draws = rng.choice(3, size=10_000, p=theta)
        counts = np.cumsum(np.eye(3, dtype=np.int64)[draws], axis=0)
        for n in range(99, 10_000, 100):
            if sequential_srm([int(v) for v in counts[n]], list(theta))[1] <= 0.05:
                alarms += 1
                break
    assert alarms / 300 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)


def test_sequential_srm_overflow_and_validation() -> None:
    bf, p = sequential_srm([10**7, 0], [0.5, 0.5])
    assert (bf, p) == (math.inf, 0.0)
    with pytest.raises(InvalidDataError, match="without a probability"):
        sequential_srm({"a": 1, "c": 2}, {"a": 0.5, "b": 0.5})
    with pytest.raises(InvalidDataError, match="both be mappings"):
        sequential_srm({"a": 1}, [0.5, 0.5])
    with pytest.raises(InvalidDataError, match="2 counts for 3"):
        sequential_srm([1, 2], [0.2, 0.3, 0.5])
    with pytest.raises(InvalidDataError, match="> 0"):
        sequential_srm([1, 2], [0.0, 1.0])
    with pytest.raises(InvalidDataError, match="two categories"):
        sequential_srm([1], [1.0])
    with pytest.raises(InvalidDataError, match="concentration"):
        sequential_srm([1, 2], [0.5, 0.5], k=0)


def test_coverage_by_task_type() -> None:
    paired = {"chat": 950, "extraction": 400, "code": 0}
    captured = {"chat": 1000, "extraction": 1000, "code": 10, "empty": 0}
    assert coverage_by_task_type(paired, captured, 0.9) == [("code", 0.0), ("extraction", 0.4)]
    assert coverage_by_task_type(paired, captured, 0.0) == []
    with pytest.raises(InvalidDataError, match="more pairs than captured"):
        coverage_by_task_type({"chat": 11}, {"chat": 10}, 0.5)
    with pytest.raises(InvalidDataError, match="min_share"):
        coverage_by_task_type(paired, captured, 1.5)
