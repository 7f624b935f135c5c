"""Pair completeness: task-mix χ², coverage by task type."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError
from shadoweval.stats.validity import coverage_by_task_type, task_mix_chi2


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


def test_coverage_by_task_type() -> None:
    paired = {"chat": 950, "extraction": 400, "code": 0}
    captured = {"chat": 1000, "extraction": 1000, "code": 10, "empty": 0}
    assert coverage_by_task_type(paired, captured, 0.9) == [("code", 0.0), ("extraction", 0.4)]
    assert coverage_by_task_type(paired, captured, 0.0) == []
    with pytest.raises(InvalidDataError, match="more pairs than captured"):
        coverage_by_task_type({"chat": 11}, {"chat": 10}, 0.5)
    with pytest.raises(InvalidDataError, match="min_share"):
        coverage_by_task_type(paired, captured, 1.5)
