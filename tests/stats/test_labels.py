"""label_summary: pairs per task type and pooled, win/loss rates with Wilson intervals."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from statsmodels.stats.proportion import proportion_confint

from shadoweval.records import POOLED, HumanLabel, LabelValue
from shadoweval.stats import LABEL_SUMMARY_COLUMNS, label_summary
from shadoweval.stats.labels import latest_per_pair

B, W, S, X = (
    LabelValue.CANDIDATE_BETTER,
    LabelValue.CANDIDATE_WORSE,
    LabelValue.SAME,
    LabelValue.BOTH_BAD,
)


T0 = datetime(2025, 1, 1, tzinfo=UTC)


def labels_of(
    task_type: str, values: list[LabelValue], labeller: str = "ana", at: datetime = T0
) -> list[HumanLabel]:
    return [
        HumanLabel(
            run_id="r",
            exchange_id=f"{task_type}-{i}",
            task_type=task_type,
            label=value,
            labeller=labeller,
            labelled_at=at,
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
        assert row.labels == n  # one label per pair here
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
    assert row.n == row.labels == 0
    assert row.candidate_better == row.candidate_worse == row.same == row.both_bad == 0
    for column in ("win_rate", "win_low", "win_high", "loss_rate", "loss_low", "loss_high"):
        assert math.isnan(row[column]), column
    assert frame.dtypes.astype(str).to_dict() == LABEL_SUMMARY_COLUMNS


def test_a_pair_counts_once_with_its_most_recent_label() -> None:
    """Two labellers of one pair: one pair (the later label), two labels."""
    ana = labels_of("code", [B], labeller="ana", at=T0 + timedelta(hours=1))
    bo = labels_of("code", [W], labeller="bo")  # same exchange id "code-0", earlier
    assert ana[0].exchange_id == bo[0].exchange_id
    frame = label_summary(ana + bo).set_index("task_type")
    for task_type in ("code", POOLED):
        row = frame.loc[task_type]
        assert (row.n, row.labels) == (1, 2)
        assert (row.candidate_better, row.candidate_worse) == (1, 0)
        assert (row.win_rate, row.loss_rate) == (1.0, 0.0)
        low, high = proportion_confint(1, 1, alpha=0.05, method="wilson")
        assert (row.win_low, row.win_high) == (pytest.approx(low), pytest.approx(high))
    later_bo = labels_of("code", [W], labeller="bo", at=T0 + timedelta(hours=2))
    assert frame.loc["code", "n"] == 1
    again = label_summary(ana + bo + later_bo).set_index("task_type")
    assert (again.loc["code", "n"], again.loc["code", "labels"]) == (1, 3)
    assert again.loc["code", "loss_rate"] == 1.0


def test_ties_in_time_go_to_the_labeller_name_that_sorts_first() -> None:
    zoe = labels_of("code", [W], labeller="zoe")
    ana = labels_of("code", [B], labeller="ana")
    assert [x.labeller for x in latest_per_pair(zoe + ana)] == ["ana"]
    assert [x.labeller for x in latest_per_pair(ana + zoe)] == ["ana"]
    assert label_summary(zoe + ana).set_index("task_type").loc["code", "win_rate"] == 1.0


def test_intervals_are_on_pairs_not_labels() -> None:
    """123 labels on 16 pairs: n = 16 and the interval is that of 16 observations."""
    pairs = 16
    labels: list[HumanLabel] = []
    for k in range(123):
        value = W if (k % pairs) < 4 else S  # pairs 0-3 worse, the rest same
        labels.append(
            labels_of("chat", [value] * pairs, labeller=f"an{k % 9}", at=T0 + timedelta(minutes=k))[
                k % pairs
            ]
        )
    frame = label_summary(labels).set_index("task_type")
    row = frame.loc["chat"]
    assert (row.n, row.labels) == (pairs, 123)
    assert (row.candidate_worse, row.same) == (4, 12)
    low, high = proportion_confint(4, pairs, alpha=0.05, method="wilson")
    assert row.loss_low == pytest.approx(low, abs=1e-12)
    assert row.loss_high == pytest.approx(high, abs=1e-12)
    wrong_low, _ = proportion_confint(32, 123, alpha=0.05, method="wilson")
    assert row.loss_low < wrong_low  # wider than 123 independent labels would give


def test_pairs_of_different_runs_are_different_pairs() -> None:
    a = labels_of("code", [B])
    b = [a[0].model_copy(update={"run_id": "r2"})]
    assert label_summary(a + b).set_index("task_type").loc["code", "n"] == 2


def test_input_order_does_not_matter() -> None:
    labels = labels_of("b", [B, W, S]) + labels_of("a", [X, B])
    pd.testing.assert_frame_equal(label_summary(labels), label_summary(labels[::-1]))
