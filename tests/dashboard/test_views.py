"""The dashboard's pure view functions: tables, cells, colours, banner, diff, paging."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from dashboard.banner import NO_VERDICT, verdict_banner
from dashboard.check_cells import OUTCOME_CSS, check_cell, checks_table
from dashboard.divergence_view import SERIES, similarity_histogram
from dashboard.formatting import md_escape
from dashboard.history_view import policy_integrity
from dashboard.labelling import make_label
from dashboard.latency_view import CURVE_QUANTILES, latency_table, quantile_curves
from dashboard.overview_table import overview_table, style_overview_table
from dashboard.paging import CursorStack, filter_key
from dashboard.word_diff import MAX_DIFF_TOKENS, word_diff
from shadoweval.errors import ConfigError
from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    LabelValue,
    Verdict,
)
from shadoweval.storage.samples import Sample, SampleCursor, SampleFilter
from stats.summary import task_type_summary
from tests.storage.factories import make_verdict

from .conftest import Seeded
from .expected import pairs_of, rows_by


def _check(metric: str, task_type: str, outcome: CheckOutcome, estimate: float | None) -> Check:
    return Check(
        metric=metric,
        task_type=task_type,
        statistic="test",
        estimate=estimate,
        ci_low=None if estimate is None else estimate - 0.01,
        ci_high=None if estimate is None else estimate + 0.02,
        n=100,
        outcome=outcome,
        reason="because",
    )


def _verdict(decision: Decision, checks: tuple[Check, ...] = ()) -> Verdict:
    return Verdict(
        run_id="r",
        decision=decision,
        reasons=("task type 'a*b', error_rate: harm <significant> $5",),
        checks=checks,
        coverage=Coverage(
            captured=1000, replayed=990, paired=980, errored=3, warmup=2, skipped=5, share=0.98
        ),
        policy_hash="0123456789abcdef" * 4,
        look=3,
    )


@pytest.mark.parametrize(
    ("decision", "kind"),
    [(Decision.PROMOTE, "success"), (Decision.HOLD, "warning"), (Decision.ROLLBACK, "error")],
)
def test_banner_colour_headline_and_escaped_reasons(decision: Decision, kind: str) -> None:
    banner = verdict_banner(_verdict(decision))
    assert banner.kind == kind
    assert banner.headline == (
        f"{decision.value.upper()} — look 3 · coverage 98.0% (980 paired of 1,000 captured)"
        " · policy 0123456789ab"
    )
    body = banner.markdown()
    assert "a\\*b" in body
    assert "\\<significant\\>" in body
    assert "\\$5" in body
    assert body.count("\n- ") == 1
    assert "more reasons" not in body
    many = verdict_banner(_verdict(decision).model_copy(update={"reasons": tuple("abcdefg")}))
    assert many.markdown().count("\n- ") == 5
    assert many.markdown().endswith("… and 2 more reasons (all listed below)")


def test_banner_without_a_verdict() -> None:
    banner = verdict_banner(None)
    assert (banner.kind, banner.headline, banner.reasons) == ("info", NO_VERDICT, ())


def test_md_escape_keeps_text_literal() -> None:
    assert md_escape("a_b *c* [x](y) `z` $1 <b> #h |t| ~s~ \\") == (
        "a\\_b \\*c\\* \\[x\\](y) \\`z\\` \\$1 \\<b\\> \\#h \\|t\\| \\~s\\~ \\\\"
    )


def test_check_cells_are_on_each_metric_scale() -> None:
    assert check_cell(None) == "–"
    err = _check("error_rate", "a", CheckOutcome.PASS, 0.0042)
    assert check_cell(err) == "+0.42 pp [-0.58, +2.42]"
    lat = _check("latency_e2e_ms_p95", "a", CheckOutcome.FAIL, 1.234)
    assert check_cell(lat) == "1.234× [1.224, 1.254]"
    sim = _check("similarity", "a", CheckOutcome.INCONCLUSIVE, 0.0125)
    assert check_cell(sim) == "0.0125 [0.0025, 0.0325]"
    empty = _check("format_parse", "a", CheckOutcome.INCONCLUSIVE, None)
    assert check_cell(empty) == "inconclusive"


def test_checks_table_sorts_units_with_pooled_last() -> None:
    checks = (
        _check("error_rate", POOLED, CheckOutcome.PASS, 0.0),
        _check("error_rate", "b", CheckOutcome.FAIL, 0.1),
        _check("similarity", "a", CheckOutcome.INCONCLUSIVE, None),
    )
    table = checks_table(checks)
    assert list(table["task type"]) == ["a", "b", "all (pooled)"]
    assert table["estimate"].isna().tolist() == [True, False, False]
    assert list(checks_table(checks, task_types=["b"])["metric"]) == ["error_rate"]


def _cell_styles(html: str) -> dict[tuple[int, int], str]:
    styles: dict[tuple[int, int], str] = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^}]*)\}", html):
        for row, col in re.findall(r"_row(\d+)_col(\d+)", selectors):
            styles[(int(row), int(col))] = " ".join(body.split())
    return styles


def test_overview_table_joins_summary_and_checks_and_colours_by_outcome(
    seeded: Seeded,
) -> None:
    verdict = seeded.repo.latest_verdict(seeded.run_id)
    assert verdict is not None
    summary = task_type_summary(pairs_of(seeded.repo, seeded.run_id), verdict)
    table = overview_table(summary, verdict)
    assert table.values.shape == table.outcomes.shape
    assert list(table.values["task type"])[-1] == "all (pooled)"
    for (task_type, metric), check in table.checks.items():
        assert check in verdict.checks
        assert (task_type, metric) == (check.task_type, check.metric)
    styles = _cell_styles(style_overview_table(table).to_html())
    coloured = 0
    for (row, col), outcome in np.ndenumerate(table.outcomes.to_numpy()):
        css = styles.get((row, col), "")
        if outcome:
            wanted = OUTCOME_CSS[outcome].split(";")[0].split(":")[1].strip()
            assert wanted in css, (row, col, outcome, css)
            coloured += 1
        else:
            assert "background-color" not in css
    assert coloured > 40
    assert set(table.outcomes["outcome"]) == {"inconclusive"}


def test_overview_table_without_verdict_has_no_check_cells(seeded: Seeded) -> None:
    summary = task_type_summary(pairs_of(seeded.repo, seeded.run_id))
    table = overview_table(summary, None)
    assert set(table.values["similarity check"]) == {"–"}
    assert (table.outcomes.drop(columns=["outcome"]) == "").all().all()


def test_latency_table_and_curves_follow_numpy_quantiles() -> None:
    pairs = pd.DataFrame(
        {
            "task_type": ["a"] * 6,
            "baseline_fail": [False, False, False, False, False, True],
            "candidate_fail": [False] * 6,
            "candidate_warmup": [False, False, False, False, True, False],
            "baseline_infra_error": [False] * 6,
            "candidate_infra_error": [False, False, False, True, False, False],
            "baseline_e2e_ms": [100.0, 200.0, 300.0, 400.0, 1.0, 1.0],
            "candidate_e2e_ms": [110.0, 220.0, 330.0, 9999.0, 1.0, 1.0],
            "baseline_ttft_ms": [np.nan] * 6,
            "candidate_ttft_ms": [np.nan] * 6,
        }
    )
    table = rows_by(latency_table(pairs, "a"), "metric", "quantile")
    kept_base, kept_cand = [100.0, 200.0, 300.0], [110.0, 220.0, 330.0]
    row = table[("e2e_ms", "p95")]
    assert row["baseline ms"] == pytest.approx(np.quantile(kept_base, 0.95))
    assert row["candidate ms"] == pytest.approx(np.quantile(kept_cand, 0.95))
    assert row["ratio"] == pytest.approx(1.1)
    assert row["baseline n"] == 3
    assert np.isnan(table[("ttft_ms", "p50")]["ratio"])
    curves = quantile_curves(pairs, POOLED, "e2e_ms")
    assert len(curves) == 2 * len(CURVE_QUANTILES)
    baseline = curves[curves["side"] == "baseline"]["latency_ms"].to_numpy()
    np.testing.assert_allclose(baseline, np.quantile(kept_base, CURVE_QUANTILES))
    assert quantile_curves(pairs, "a", "ttft_ms").empty


def test_similarity_histogram_shares_bins_and_sums_to_one() -> None:
    pairs = pd.DataFrame(
        {
            "task_type": ["a"] * 5,
            "similarity": [0.1, 0.5, 0.9, np.nan, 0.7],
            "noise_similarity": [0.8, np.nan, 0.95, np.nan, np.nan],
            "baseline_infra_error": [False, False, False, False, True],
            "candidate_infra_error": [False] * 5,
        }
    )
    histogram = similarity_histogram(pairs, "a", bins=8)
    assert set(histogram["series"]) == set(SERIES.values())
    by_series = dict(list(histogram.groupby("series")))
    candidate = by_series[SERIES["similarity"]]
    noise = by_series[SERIES["noise_similarity"]]
    np.testing.assert_array_equal(candidate["bin_start"], noise["bin_start"])
    assert candidate["count"].sum() == 3  # 0.7 had an infrastructure error, NaN is unknown
    assert candidate["share"].sum() == pytest.approx(1.0)
    assert noise["count"].sum() == 2
    assert candidate["bin_start"].min() == pytest.approx(0.1)
    assert candidate["bin_end"].max() == pytest.approx(0.95)


def test_word_diff_escapes_before_marking_up() -> None:
    diff = word_diff(
        "Total <b>5</b> EUR\nsee you", 'Total <script>alert("x")</script> EUR\nsee you'
    )
    assert "<script>" not in diff.html
    assert "<b>" not in diff.html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in diff.html
    assert '">&lt;b&gt;5&lt;/b&gt;</del>' in diff.html
    assert "EUR\nsee you" in diff.html
    assert (diff.removed, diff.added, diff.kept, diff.truncated) == (1, 1, 4, False)


def test_word_diff_of_equal_and_of_very_long_texts() -> None:
    same = word_diff("a b c", "a b c")
    assert (same.removed, same.added, same.kept) == (0, 0, 3)
    assert "<del" not in same.html
    assert "<ins" not in same.html
    long_a = " ".join(["w"] * MAX_DIFF_TOKENS)
    long_b = long_a + " tail"
    diff = word_diff(long_a, long_b)
    assert diff.truncated
    assert diff.added >= 1


def _sample() -> Sample:
    return Sample(
        run_id="r",
        exchange_id="e1",
        task_type="chat",
        captured_at=datetime(2025, 1, 1, tzinfo=UTC),
        similarity=0.5,
        noise_similarity=None,
        flags=(),
        request_messages=[],
        request_params={},
        baseline_text="a",
        candidate_text="b",
        baseline_tool_calls=[],
        candidate_tool_calls=[],
        candidate_error_kind=None,
    )


def test_make_label_checks_every_field() -> None:
    label = make_label(_sample(), "candidate_better", "  short  ", " ana ")
    assert (label.label, label.note, label.labeller, label.source, label.task_type) == (
        LabelValue.CANDIDATE_BETTER,
        "short",
        "ana",
        "dashboard",
        "chat",
    )
    for value, note, labeller, field in (
        (LabelValue.SAME, "", "  ", "labeller"),
        (None, "", "ana", "label"),
        ("great", "", "ana", "label"),
        (LabelValue.SAME, "x" * 2001, "ana", "note"),
    ):
        with pytest.raises(ConfigError) as caught:
            make_label(_sample(), value, note, labeller)
        assert caught.value.field == field


def test_cursor_stack_pages_forward_and_back() -> None:
    state: dict[str, object] = {}
    stack = CursorStack(state)
    stack.sync(filter_key("r", SampleFilter()))
    assert (stack.page_number, stack.current(), stack.has_next) == (1, None, False)
    first = SampleCursor(phase="similarity", exchange_id="e20", similarity=0.3)
    stack.shown(first)
    assert stack.has_next
    stack.forward()
    assert stack.page_number == 2
    assert stack.current() == first
    stack.shown(None)
    stack.forward()  # the last page: nothing happens
    assert stack.page_number == 2
    stack.back()
    assert (stack.page_number, stack.current()) == (1, None)
    stack.back()
    assert stack.page_number == 1
    stack.shown(first)
    stack.forward()
    stack.sync(filter_key("r", SampleFilter(task_types=("chat",))))  # a new filter: page 1
    assert stack.page_number == 1


def test_policy_integrity_rehashes_the_frozen_yaml(seeded: Seeded) -> None:
    integrity = policy_integrity(seeded.run)
    assert integrity.ok
    assert integrity.computed == seeded.run.policy_hash
    import dataclasses

    tampered = dataclasses.replace(seeded.run, policy_yaml="alpha: 0.3\n")
    assert not policy_integrity(tampered).ok
    broken = dataclasses.replace(seeded.run, policy_yaml="alpha: [")
    result = policy_integrity(broken)
    assert result.computed is None
    assert result.error
    assert "YAML" in result.error


def test_history_timeline_counts_outcomes() -> None:
    from dashboard.history_view import verdict_timeline
    from shadoweval.storage import VerdictEntry

    verdict = make_verdict("r", decided_at=datetime(2025, 1, 1, tzinfo=UTC))
    timeline = verdict_timeline([VerdictEntry(id=7, command="shadow-eval gate", verdict=verdict)])
    row = timeline.iloc[0]
    assert (row["verdict id"], row["decision"], row["checks inconclusive"]) == (7, "hold", 1)
    assert row["first reason"] == verdict.reasons[0]
