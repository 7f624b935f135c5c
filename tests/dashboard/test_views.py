"""The dashboard's pure view functions: tables, cells, colours, banner, diff, paging."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest

from shadoweval.application.labels import make_label
from shadoweval.application.run_views import (
    DIRECTION_COLUMNS,
    JudgedPair,
    JudgedPairsPage,
    direction_table,
    judged_records,
    pair_quality,
    policy_integrity,
    redact_judgement,
)
from shadoweval.application.samples import redact_sample
from shadoweval.dashboard.banner import NO_VERDICT, verdict_banner
from shadoweval.dashboard.check_cells import OUTCOME_CSS, check_cell, checks_table
from shadoweval.dashboard.context import initial_run, run_label
from shadoweval.dashboard.divergence_view import (
    SERIES,
    SERIES_COLOURS,
    histogram_chart,
    histogram_edges,
    similarity_histogram,
)
from shadoweval.dashboard.formatting import count_noun, md_escape, plural
from shadoweval.dashboard.judged_view import JUDGED_COLUMNS, judged_table, vote_cell
from shadoweval.dashboard.latency_view import (
    CURVE_QUANTILES,
    default_task_type,
    latency_table,
    quantile_curves,
)
from shadoweval.dashboard.overview_table import (
    CHECK_COLUMNS,
    DIRECTION_VIEW_COLUMNS,
    checks_heading,
    direction_view,
    net_harm_cell,
    noise_floor_warning,
    overview_table,
    rate_cell,
    style_direction_view,
    style_overview_table,
)
from shadoweval.dashboard.paging import CursorStack, filter_key
from shadoweval.dashboard.redaction import redactor
from shadoweval.dashboard.word_diff import MAX_DIFF_TOKENS, word_diff
from shadoweval.errors import ConfigError
from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Coverage,
    Decision,
    HumanLabel,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
    Verdict,
)
from shadoweval.stats.net_harm import estimate_net_harm
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage.samples import Sample, SampleCursor, SampleFilter
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
    six = verdict_banner(_verdict(decision).model_copy(update={"reasons": tuple("abcdef")}))
    assert six.markdown().endswith("… and 1 more reason (all listed below)")


def test_plural_and_count_noun() -> None:
    assert count_noun(1, "pair") == "1 pair"
    assert count_noun(0, "pair") == "0 pairs"
    assert count_noun(1200, "message") == "1,200 messages"
    assert count_noun(2, "reply", "replies") == "2 replies"
    assert plural(1, "matches", "match") == "matches"
    assert plural(3, "matches", "match") == "match"
    assert [checks_heading(n) for n in (0, 1, 12)] == [
        "Checks with their reasons (the verdict has none)",
        "The 1 check with its reason",
        "All 12 checks with their reasons",
    ]


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
    tiny = _check("similarity", "a", CheckOutcome.PASS, 0.0266).model_copy(
        update={"ci_low": 0.0000912, "ci_high": 0.0531}
    )
    assert check_cell(tiny) == "0.0266 [0.0001, 0.0531]"  # never 9.12e-05
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
    columns = list(table.values.columns)
    assert columns[:3] == ["task type", "outcome", "n"]
    assert columns[3 : 3 + len(CHECK_COLUMNS)] == list(CHECK_COLUMNS)
    assert columns[3 + len(CHECK_COLUMNS) :] == [
        "similarity mean",
        "noise floor",
        "fail base",
        "fail cand",
        "infra base",
        "infra cand",
        "format n",
        "format ok base",
        "format ok cand",
    ]
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
            "baseline_ttfc_ms": [np.nan] * 6,
            "candidate_ttfc_ms": [np.nan] * 6,
            "baseline_cache_hit": [False] * 6,
            "candidate_cache_hit": [False] * 6,
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


def test_latency_table_leaves_out_answers_served_from_a_cache() -> None:
    pairs = pd.DataFrame(
        {
            "task_type": ["a"] * 4,
            "baseline_fail": [False] * 4,
            "candidate_fail": [False] * 4,
            "candidate_warmup": [False] * 4,
            "baseline_infra_error": [False] * 4,
            "candidate_infra_error": [False] * 4,
            "baseline_e2e_ms": [100.0, 200.0, 2.0, 300.0],
            "candidate_e2e_ms": [110.0, 220.0, 330.0, 1.0],
            "baseline_ttft_ms": [np.nan] * 4,
            "candidate_ttft_ms": [np.nan] * 4,
            "baseline_ttfc_ms": [50.0, 60.0, 1.0, 70.0],
            "candidate_ttfc_ms": [55.0, 66.0, 77.0, 1.0],
            "baseline_cache_hit": [False, False, True, False],
            "candidate_cache_hit": [False, False, False, True],
        }
    )
    table = rows_by(latency_table(pairs, "a"), "metric", "quantile")
    assert table[("e2e_ms", "p50")]["baseline n"] == 2
    assert table[("e2e_ms", "p50")]["baseline ms"] == pytest.approx(150.0)
    assert table[("ttfc_ms", "p50")]["ratio"] == pytest.approx(60.5 / 55.0)


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
    assert candidate["bin_start"].min() == pytest.approx(0.1)  # 0.1 floored to 0.05
    assert candidate["bin_end"].max() == pytest.approx(1.0)


def _similarities(similarity: list[float], noise: list[float]) -> pd.DataFrame:
    n = max(len(similarity), len(noise))
    return pd.DataFrame(
        {
            "task_type": ["a"] * n,
            "similarity": similarity + [np.nan] * (n - len(similarity)),
            "noise_similarity": noise + [np.nan] * (n - len(noise)),
            "baseline_infra_error": [False] * n,
            "candidate_infra_error": [False] * n,
        }
    )


def test_similarity_histogram_of_identical_answers_stays_within_the_cosine_range() -> None:
    histogram = similarity_histogram(_similarities([1.0] * 5, [1.0, 1.0]), "a", bins=10)
    assert histogram["bin_start"].min() == pytest.approx(0.95)
    assert histogram["bin_end"].max() == 1.0
    assert (histogram[["bin_start", "bin_end", "bar_start", "bar_end"]] <= 1.0).all().all()
    by_series = {name: rows for name, rows in histogram.groupby("series")}
    for rows in by_series.values():
        assert rows["count"].iloc[-1] == rows["count"].sum()  # 1.0 is in the last bin
        assert rows["share"].sum() == pytest.approx(1.0)
    spec = histogram_chart(histogram, "t").to_dict()
    assert spec["encoding"]["x"]["scale"]["domain"] == [pytest.approx(0.95), 1.0]
    colour = spec["encoding"]["color"]
    assert colour["scale"] == {"domain": list(SERIES.values()), "range": list(SERIES_COLOURS)}
    assert colour["title"] == "series"
    assert spec["encoding"]["y2"] == {"datum": 0}  # bars rise from 0


def test_similarity_histogram_draws_the_two_series_side_by_side() -> None:
    histogram = similarity_histogram(_similarities([0.2, 0.5, 0.9], [0.8, 0.95]), "a", bins=8)
    candidate = histogram[histogram["series"] == SERIES["similarity"]].reset_index()
    noise = histogram[histogram["series"] == SERIES["noise_similarity"]].reset_index()
    np.testing.assert_allclose(candidate["bar_start"], candidate["bin_start"])
    np.testing.assert_allclose(candidate["bar_end"], noise["bar_start"])
    np.testing.assert_allclose(noise["bar_end"], noise["bin_end"])
    assert (candidate["bar_end"] > candidate["bar_start"]).all()


@pytest.mark.parametrize(
    ("values", "low"),
    [
        ([0.123, 0.9], 0.1),
        ([0.15, 1.0], 0.15),
        ([-1.0, 0.3], -1.0),
        ([-1.0000001, 0.3], -1.0),
        ([1.0], 0.95),
        ([1.0000000002], 0.95),
        ([0.97], 0.95),
    ],
)
def test_histogram_edges_are_fixed_inside_the_cosine_range(values: list[float], low: float) -> None:
    edges = histogram_edges([np.array(values)], bins=4)
    assert edges[0] == pytest.approx(low)
    assert edges[-1] == 1.0
    assert len(edges) == 5
    assert edges[0] <= min(max(v, -1.0) for v in values)


def test_histogram_edges_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="bins=0"):
        histogram_edges([np.array([0.5])], bins=0)
    with pytest.raises(ValueError, match="no similarity values"):
        histogram_edges([np.array([])])


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
    from shadoweval.dashboard.history_view import verdict_timeline
    from shadoweval.storage import VerdictEntry

    verdict = make_verdict("r", decided_at=datetime(2025, 1, 1, tzinfo=UTC))
    timeline = verdict_timeline([VerdictEntry(id=7, command="shadow-eval gate", verdict=verdict)])
    row = timeline.iloc[0]
    assert (row["verdict id"], row["decision"], row["checks inconclusive"]) == (7, "hold", 1)
    assert row["first reason"] == verdict.reasons[0]


def test_default_latency_task_type_is_the_worst_latency_check() -> None:
    options = ["chat", "code", "summarize", POOLED]
    inconclusive = _check("latency_e2e_ms_p95", "code", CheckOutcome.INCONCLUSIVE, 1.1)
    failed = _check("latency_ttft_ms_p50", "summarize", CheckOutcome.FAIL, 1.3)
    passed = _check("latency_e2e_ms_p50", "chat", CheckOutcome.PASS, 1.0)
    other_fail = _check("error_rate", "chat", CheckOutcome.FAIL, 0.1)  # not a latency check
    assert default_task_type(options, [passed, inconclusive, failed, other_fail]) == "summarize"
    assert default_task_type(options, [passed, inconclusive, other_fail]) == "code"
    assert default_task_type(options, [passed, other_fail]) == "chat"
    assert default_task_type(options, []) == "chat"
    pooled_fail = _check("latency_e2e_ms_p99", POOLED, CheckOutcome.FAIL, 1.2)
    assert default_task_type(options, [inconclusive, pooled_fail]) == POOLED
    with pytest.raises(ValueError, match="options is empty"):
        default_task_type([], [])


def test_run_label_shows_the_whole_run_id_and_initial_run(seeded: Seeded) -> None:
    import dataclasses

    run = dataclasses.replace(
        seeded.run, run_id="noverdict", name="a → b", created_at=datetime(2025, 5, 1, 8, 0)
    )
    assert run_label(run) == f"2025-05-01 08:00 · a → b · {run.status.value} · noverdict"
    assert initial_run(["new", "old"], None) == "new"
    assert initial_run(["new", "old"], "old") == "old"
    assert initial_run(["new", "old"], "gone") is None
    assert initial_run([], None) is None


SECRET_TEXT = "key sk-live-CANARYxyz1234567890, mail jane.doe@example-corp.com"


def test_redact_sample_redacts_every_request_and_answer_text() -> None:
    import dataclasses

    sample = dataclasses.replace(
        _sample(),
        request_messages=[
            {"role": "user", "content": SECRET_TEXT},
            {"role": "user", "content": [{"type": "text", "text": SECRET_TEXT}]},
        ],
        request_params={"user": "jane.doe@example-corp.com", "temperature": 0.2},
        baseline_text=SECRET_TEXT,
        candidate_text="",
        baseline_tool_calls=[{"name": "lookup", "arguments": SECRET_TEXT}],
        candidate_tool_calls=[],
    )
    redacted = redact_sample(sample, redactor())
    shown = repr(dataclasses.asdict(redacted))
    assert "CANARY" not in shown
    assert "jane.doe" not in shown
    assert shown.count("[REDACTED:secret_key]") == 4  # 2 messages, baseline, tool call
    assert shown.count("[REDACTED:email]") == 5  # and the user parameter
    assert redacted.request_params["temperature"] == 0.2
    assert redacted.request_messages[0]["role"] == "user"
    assert (redacted.exchange_id, redacted.similarity, redacted.candidate_text) == ("e1", 0.5, "")
    assert redactor() is redactor()  # built once per process


# --- the direction of the change --------------------------------------------------------

Z95 = 1.959963984540054  # the standard normal's 0.975 quantile


def _wilson(count: int, n: int) -> tuple[float, float]:
    """Wilson (1927) score interval at 95%, written out."""
    p = count / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return centre - half, centre + half


NAN = float("nan")
# task type a: 10 pairs, 5 changed (strata 0, 0, 1, 1, 1); judged: better, better (stratum
# 0), worse, worse (stratum 1), one unjudged whose judgement failed; one unchanged pair
# carries a tie that is never read. Task type b: 5 pairs, one changed, judged a tie.
DIRECTION_ARRAYS = {
    "task_types": np.array(["a"] * 10 + ["b"] * 5, dtype=object),
    "changed": np.array([True] * 5 + [False] * 5 + [True] + [False] * 4),
    "stratum": np.array([0, 0, 1, 1, 1] + [-1] * 5 + [4] + [-1] * 4),
    "quality": np.array([-1.0, -1.0, 1.0, 1.0, NAN, NAN, 0.0, NAN, NAN, NAN, 0.0] + [NAN] * 4),
    "source": np.array(
        ["judge", "human", "reference", "judge", "", "", "judge", "", "", "", "judge"] + [""] * 4,
        dtype=object,
    ),
    "failed": np.array([False] * 4 + [True] + [False] * 10),
}


def test_direction_table_counts_rates_and_net_harm_by_hand() -> None:
    table = direction_table(**DIRECTION_ARRAYS, edges=(0.1, 0.2, 0.35))
    assert list(table.columns) == list(DIRECTION_COLUMNS)
    assert list(table["task_type"]) == ["a", "b", POOLED]
    rows = rows_by(table, "task_type")
    a, b, pooled = rows[("a",)], rows[("b",)], rows[(POOLED,)]
    assert {k: a[k] for k in DIRECTION_COLUMNS if not k.endswith(("rate", "low", "high"))} == {
        "task_type": "a",
        "pairs": 10,
        "changed": 5,
        "changed_share": 0.5,
        "judged": 4,
        "judged_judge": 2,
        "judged_human": 1,
        "judged_reference": 1,
        "failed": 1,
        "unjudged": 1,
        "better": 2,
        "tie": 0,
        "worse": 2,
        "net_harm": pytest.approx(0.1),  # 2/10 · (−1) + 3/10 · (+1)
        # set by direction_of from the change classification (none from arrays alone)
        "similarity_found": 0,
        "similarity_missed": 0,
    }
    assert (a["win_rate"], a["tie_rate"], a["loss_rate"]) == (0.5, 0.0, 0.5)
    assert (a["win_low"], a["win_high"]) == pytest.approx(_wilson(2, 4))
    assert (a["tie_low"], a["tie_high"]) == pytest.approx(_wilson(0, 4), abs=1e-12)
    assert (a["loss_low"], a["loss_high"]) == pytest.approx(_wilson(2, 4))
    assert a["net_harm_low"] < 0.1 < a["net_harm_high"]
    arrays = DIRECTION_ARRAYS
    wanted = estimate_net_harm(
        arrays["quality"][:10], arrays["changed"][:10], arrays["stratum"][:10]
    )
    assert (a["net_harm_low"], a["net_harm_high"]) == pytest.approx(wanted.interval(0.025))
    assert (b["pairs"], b["changed"], b["judged"], b["tie"], b["net_harm"]) == (5, 1, 1, 1, 0.0)
    assert (b["win_rate"], b["tie_rate"]) == (0.0, 1.0)
    # pooled: strata kept apart per task type; b's tie and unchanged pairs count as 0
    assert (pooled["pairs"], pooled["changed"], pooled["judged"]) == (15, 6, 5)
    assert pooled["changed_share"] == pytest.approx(0.4)
    assert (pooled["better"], pooled["tie"], pooled["worse"], pooled["unjudged"]) == (2, 1, 2, 1)
    assert pooled["net_harm"] == pytest.approx(1 / 15)  # (2·(−1) + 3·(+1) + 1·0) / 15
    assert pooled["win_rate"] == pytest.approx(0.4)
    assert (pooled["win_low"], pooled["win_high"]) == pytest.approx(_wilson(2, 5))


def test_direction_table_without_judgements_and_bad_arrays() -> None:
    n = 4
    table = direction_table(
        np.array(["a"] * n, dtype=object),
        np.array([True, True, False, False]),
        np.array([0, 2, -1, -1]),
        np.full(n, NAN),
        np.full(n, "", dtype=object),
        np.zeros(n, dtype=bool),
        edges=(0.1, 0.2, 0.35),
    )
    row = rows_by(table, "task_type")[("a",)]
    assert (row["changed"], row["judged"], row["unjudged"]) == (2, 0, 2)
    assert math.isnan(row["win_rate"])
    assert math.isnan(row["loss_low"])
    # nothing judged: the changed strata sit at the midpoint 0, bounds widened by their weight
    assert row["net_harm"] == 0.0
    assert row["net_harm_low"] <= -0.5
    assert row["net_harm_high"] >= 0.5
    with pytest.raises(ValueError, match="differ in length"):
        direction_table(
            np.array(["a"], dtype=object),
            np.array([True, False]),
            np.array([0]),
            np.array([NAN]),
            np.array([""], dtype=object),
            np.array([False]),
            edges=(),
        )


def _judgement(
    exchange_id: str,
    task_type: str,
    source: str,
    outcome: str | None,
    **fields: object,
) -> PairJudgement:
    return PairJudgement(
        run_id="r",
        exchange_id=exchange_id,
        task_type=task_type,
        source=JudgementSource(source),
        outcome=None if outcome is None else QualityOutcome(outcome),
        judged_at=datetime(2025, 5, 2, tzinfo=UTC),
        **fields,
    )


def _label(exchange_id: str, task_type: str, value: LabelValue, note: str = "") -> HumanLabel:
    return HumanLabel(
        run_id="r",
        exchange_id=exchange_id,
        task_type=task_type,
        label=value,
        note=note,
        labeller="ana",
        source="dashboard",
        labelled_at=datetime(2025, 5, 3, tzinfo=UTC),
    )


def test_pair_quality_reads_the_resolved_judgement() -> None:
    resolved = {
        "e1": _judgement("e1", "a", "judge", "candidate_worse"),
        "e2": _judgement("e2", "a", "human", "candidate_better"),
        "e3": _judgement("e3", "a", "reference", "tie"),
        "e4": _judgement("e4", "a", "judge", None, error="timeout"),
    }
    quality, source = pair_quality(["e1", "e2", "e3", "e4", "e5"], resolved)
    np.testing.assert_array_equal(quality, [1.0, -1.0, 0.0, NAN, NAN])
    assert list(source) == ["judge", "human", "reference", "", ""]


def _judged_fixture() -> tuple[list[PairJudgement], list[HumanLabel]]:
    votes = (
        JudgeVote(order="baseline_first", preferred="baseline", rationale="A is right"),
        JudgeVote(order="candidate_first", preferred="baseline", rationale="B is right"),
    )
    judgements = [
        _judgement("e1", "a", "judge", "candidate_worse", votes=votes, rationale="drops a date"),
        _judgement("e2", "a", "judge", None, error="connection refused"),
        _judgement(
            "e3", "b", "reference", "candidate_better", baseline_pass=False, candidate_pass=True,
            checker="bfcl",
        ),
        _judgement("e3", "b", "judge", "tie"),
    ]  # fmt: skip
    labels = [_label("e1", "a", LabelValue.CANDIDATE_BETTER, "the judge missed the unit")]
    return judgements, labels


def test_judged_records_list_every_source_worst_first_with_the_one_used() -> None:
    judgements, labels = _judged_fixture()
    records = judged_records(judgements, labels)
    shown = [(j.exchange_id, j.source.value, _outcome_of(j), used) for j, used in records]
    assert shown == [
        ("e1", "judge", "candidate_worse", False),  # the analyst's label overrides it
        ("e1", "human", "candidate_better", True),
        ("e3", "reference", "candidate_better", True),  # reference wins over the judge
        ("e3", "judge", "tie", False),
        ("e2", "judge", "failed", True),  # its only judgement: read as not judged
    ]
    human = records[1][0]
    assert human.rationale == "the judge missed the unit"
    assert [j.exchange_id for j, _ in judged_records(judgements, labels, source="human")] == ["e1"]
    assert [j.exchange_id for j, _ in judged_records(judgements, labels, outcome="failed")] == [
        "e2"
    ]
    by_b = judged_records(judgements, labels, task_type="b")
    assert [(j.exchange_id, j.source.value) for j, _ in by_b] == [
        ("e3", "reference"),
        ("e3", "judge"),
    ]
    with pytest.raises(ConfigError, match="outcome 'worse' is not one of candidate_worse"):
        judged_records(judgements, labels, outcome="worse")
    with pytest.raises(ConfigError, match="source 'llm' is not one of judge, human, reference"):
        judged_records(judgements, labels, source="llm")


def _outcome_of(judgement: PairJudgement) -> str:
    return "failed" if judgement.outcome is None else judgement.outcome.value


def test_judged_table_shows_both_votes_the_stratum_and_the_rationale() -> None:
    judgements, _ = _judged_fixture()
    worse, failed, reference, _ = judgements
    secret = worse.model_copy(update={"rationale": "mail jane.doe@example-corp.com"})
    items = (
        JudgedPair(redact_judgement(secret, redactor()), False, True, 2, _sample()),
        JudgedPair(reference, True, True, 4, None),
        JudgedPair(failed, True, False, -1, None),
    )
    page = JudgedPairsPage(items, total=23, page=2, page_size=3)
    assert page.pages == 8
    table = judged_table(page)
    assert list(table.columns) == list(JUDGED_COLUMNS)
    rows = table.to_dict(orient="records")
    assert rows[0] == {
        "exchange id": "e1",
        "task type": "a",
        "source": "judge",
        "outcome": "candidate worse",
        "used": False,
        "changed": True,
        "stratum": "stratum 2",
        "similarity": 0.5,
        "baseline first": "baseline",
        "candidate first": "baseline",
        "reference": "",
        "rationale": "mail [REDACTED:email]",
    }
    assert (rows[1]["reference"], rows[1]["outcome"]) == (
        "baseline fail · candidate pass (bfcl)",
        "candidate better",
    )
    assert (rows[1]["baseline first"], rows[1]["stratum"]) == ("–", "stratum 4")
    assert math.isnan(rows[1]["similarity"])
    assert (rows[2]["outcome"], rows[2]["stratum"]) == ("failed", "unchanged")
    assert rows[2]["rationale"] == "failed: connection refused"
    assert vote_cell(JudgeVote(order="candidate_first", error="unparsable")) == (
        "failed: unparsable"
    )
    assert vote_cell(JudgeVote(order="candidate_first", preferred="tie")) == "tie"


def test_direction_view_cells_and_the_net_harm_check() -> None:
    table = direction_table(**DIRECTION_ARRAYS, edges=(0.1, 0.2, 0.35))
    check = _check("net_harm", "a", CheckOutcome.FAIL, 0.1).model_copy(
        update={"ci_low": 0.02, "ci_high": 0.18}
    )
    view = direction_view(table, _verdict(Decision.ROLLBACK, (check,)))
    assert list(view.values.columns) == list(DIRECTION_VIEW_COLUMNS)
    first = view.values.iloc[0].to_dict()
    low, high = _wilson(2, 4)
    assert first["task type"] == "a"
    assert first["net harm check"] == "+10.00 pp [+2.00, +18.00]"
    assert first["win rate"] == f"50.0% [{100 * low:.1f}, {100 * high:.1f}]"
    assert first["tie rate"].startswith("0.0% [0.0, ")
    assert first["net harm"].startswith("+10.00 pp [")
    assert (first["changed share"], first["judged"], first["to judge"], first["failed"]) == (
        0.5,
        4,
        1,
        1,
    )
    assert (first["by judge"], first["by human"], first["by reference"]) == (2, 1, 1)
    assert list(view.values["task type"]) == ["a", "b", "all (pooled)"]
    assert list(view.outcomes["net harm check"]) == ["fail", "", ""]
    assert view.values.iloc[1]["net harm check"] == "–"
    styles = _cell_styles(style_direction_view(view).to_html())
    column = DIRECTION_VIEW_COLUMNS.index("net harm check")
    assert "#f8d7da" in styles[(0, column)]
    assert "background-color" not in styles.get((1, column), "")
    assert rate_cell(NAN, NAN, NAN) == "–"
    assert net_harm_cell(NAN, NAN, NAN) == "–"
    assert net_harm_cell(-0.0125, NAN, NAN) == "-1.25 pp"


def test_noise_floor_warning_and_harm_cells_in_points() -> None:
    assert noise_floor_warning(None) is None
    text = noise_floor_warning(
        "degenerate noise floor: the baseline repeat returned exactly the captured answer on "
        "805 of 805 sampled requests (100%)"
    )
    assert text is not None
    assert text.startswith("**The noise floor is degenerate.** Degenerate noise floor: ")
    assert "805 of 805" in text
    harm = _check("harm_degeneration", "a", CheckOutcome.FAIL, 0.05)
    assert check_cell(harm) == "+5.00 pp [+4.00, +7.00]"
    tools = _check("tool_text_answer", "a", CheckOutcome.PASS, -0.01)
    assert check_cell(tools) == "-1.00 pp [-2.00, +1.00]"
