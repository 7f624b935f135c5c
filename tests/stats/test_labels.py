"""label_summary: counts per task type and pooled, win/loss rates with Wilson intervals."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from shadoweval.records import POOLED, HumanLabel, LabelValue
from stats import LABEL_SUMMARY_COLUMNS, label_summary

B, W, S, X = (
    LabelValue.CANDIDATE_BETTER,
    LabelValue.CANDIDATE_WORSE,
    LabelValue.SAME,
    LabelValue.BOTH_BAD,
)


def labels_of(task_type: str, values: list[LabelValue], labeller: str = "ana") -> list[HumanLabel]:
    return [
        HumanLabel(
            run_id="r",
            exchange_id=f"{task_type}-{i}",
            task_type=task_type,
            label=value,
            labeller=labeller,
            labelled_at=datetime(2025, 1, 1, tzinfo=UTC),
            source="dashboard",
        )
        for i, value in enumerate(values)
    ]


def wilson(count: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson (1927) score interval written out: centre ± half-width."""
    p = count / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


def test_counts_rates_and_wilson_intervals() -> None:
    labels = (
        labels_of("code", [B, B, B, W, S, X, S])
        + labels_of("chat", [W, W, S])
        + labels_of("summarize", [B] * 12)
    )
    frame = label_summary(labels)
    assert list(frame.columns) == list(LABEL_SUMMARY_COLUMNS)
    assert frame.dtypes.astype(str).to_dict() == LABEL_SUMMARY_COLUMNS
    assert list(frame["task_type"]) == ["chat", "code", "summarize", POOLED]
    rows = frame.set_index("task_type")
    expected_counts = {
        "chat": (3, 0, 2, 1, 0),
        "code": (7, 3, 1, 2, 1),
        "summarize": (12, 12, 0, 0, 0),
        POOLED: (22, 15, 3, 3, 1),
    }
    for task_type, (n, better, worse, same, both_bad) in expected_counts.items():
        row = rows.loc[task_type]
        assert (row.n, row.candidate_better, row.candidate_worse) == (n, better, worse)
        assert (row.same, row.both_bad) == (same, both_bad)
        assert row.win_rate == pytest.approx(better / n)
        assert row.loss_rate == pytest.approx(worse / n)
        for prefix, count in (("win", better), ("loss", worse)):
            low, high = proportion_confint(count, n, alpha=0.05, method="wilson")
            assert row[f"{prefix}_low"] == pytest.approx(low, abs=1e-12)
            assert row[f"{prefix}_high"] == pytest.approx(high, abs=1e-12)
            mine_low, mine_high = wilson(count, n)
            assert row[f"{prefix}_low"] == pytest.approx(mine_low, abs=1e-9)
            assert row[f"{prefix}_high"] == pytest.approx(mine_high, abs=1e-9)
            assert 0.0 <= row[f"{prefix}_low"] <= row[f"{prefix}_high"] <= 1.0
    # All 12 "better": the interval stays inside [0, 1] and excludes 1 only just.
    assert rows.loc["summarize", "win_high"] == pytest.approx(1.0)
    assert rows.loc["summarize", "win_low"] == pytest.approx(wilson(12, 12)[0])


def test_no_labels_gives_a_pooled_row_of_nan() -> None:
    frame = label_summary([])
    assert list(frame["task_type"]) == [POOLED]
    row = frame.iloc[0]
    assert row.n == 0
    assert row.candidate_better == row.candidate_worse == row.same == row.both_bad == 0
    for column in ("win_rate", "win_low", "win_high", "loss_rate", "loss_low", "loss_high"):
        assert math.isnan(row[column]), column
    assert frame.dtypes.astype(str).to_dict() == LABEL_SUMMARY_COLUMNS


def test_each_label_counts_once_even_for_the_same_pair() -> None:
    """Two labellers of one pair are two labels (n counts labels, not pairs)."""
    ana = labels_of("code", [B], labeller="ana")
    bo = labels_of("code", [W], labeller="bo")  # same exchange id "code-0"
    assert ana[0].exchange_id == bo[0].exchange_id
    frame = label_summary(ana + bo).set_index("task_type")
    assert frame.loc["code", "n"] == 2
    assert frame.loc["code", "win_rate"] == 0.5
    assert frame.loc["code", "loss_rate"] == 0.5


def test_input_order_does_not_matter() -> None:
    labels = labels_of("b", [B, W, S]) + labels_of("a", [X, B])
    pd.testing.assert_frame_equal(label_summary(labels), label_summary(labels[::-1]))
