"""Every dashboard page under Streamlit's AppTest, against a seeded and gated database.

Each test opens the real entrypoint (``dashboard/app.py``, the database URL in
``SHADOWEVAL_DATABASE__URL`` as ``shadow-eval dashboard`` passes it), switches to a page
and checks that it ran without an exception and that the numbers shown are the ones the
stats module and storage give for that run (computed independently in
:mod:`tests.dashboard.expected`).
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable
from datetime import timedelta

import numpy as np
import orjson
import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from shadoweval.dashboard.banner import NO_VERDICT
from shadoweval.dashboard.coverage_view import TASK_TYPE_COLUMNS, route_table, task_type_table
from shadoweval.pair_flags import PairFlag, pair_flags
from shadoweval.records import (
    POOLED,
    Check,
    CheckOutcome,
    Decision,
    JudgementSource,
    JudgeVote,
    LabelValue,
    PairJudgement,
    QualityOutcome,
    ReplayPace,
    ReplayPass,
    RouteCoverage,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.labels import label_summary
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.stats.summary import task_type_summary
from shadoweval.storage.samples import SampleFilter
from shadoweval.testing.pair_seeding import SECRET_EMAIL, SECRET_KEY, TASK_MIX

from .conftest import APP_TIMEOUT_S, Seeded, page_path, seed_database
from .expected import (
    NUMBER,
    direction_expected,
    frame_with,
    page_order,
    pairs_of,
    quantile,
    rows_by,
    shown_exchange_ids,
    summary_latency_rows,
    unescape,
)

OpenApp = Callable[[str], AppTest]

SUMMARY_SHOWN = {
    "n": "n",
    "similarity mean": "similarity_mean",
    "noise floor": "noise_similarity_mean",
    "fail base": "baseline_fail_rate",
    "fail cand": "candidate_fail_rate",
    "infra base": "baseline_infra_error_rate",
    "infra cand": "candidate_infra_error_rate",
    "format n": "format_n",
    "format ok base": "baseline_format_ok_rate",
    "format ok cand": "candidate_format_ok_rate",
}
CHECKS_SHOWN = {
    "similarity check": "similarity",
    "error check": "error_rate",
    "infra check": "infra_error_rate",
    "format check": "format_parse",
    "e2e p50 ×": "latency_e2e_ms_p50",
    "e2e p95 ×": "latency_e2e_ms_p95",
    "TTFT p50 ×": "latency_ttft_ms_p50",
    "tokens check": "output_tokens",
}
ALL_CHECK_COLUMNS = [
    "net harm check",
    "similarity check",
    "error check",
    "infra check",
    "format check",
    "e2e p50 ×",
    "e2e p95 ×",
    "e2e p99 ×",
    "TTFT p50 ×",
    "TTFT p95 ×",
    "TTFT p99 ×",
    "TTFC p50 ×",
    "TTFC p95 ×",
    "TTFC p99 ×",
    "tokens check",
]
LABEL_SHOWN = {
    "pairs": "n",
    "labels": "labels",
    "better": "candidate_better",
    "worse": "candidate_worse",
    "same": "same",
    "both bad": "both_bad",
    "win rate": "win_rate",
    "win low": "win_low",
    "win high": "win_high",
    "loss rate": "loss_rate",
    "loss low": "loss_low",
    "loss high": "loss_high",
}


def _shown_unit(task_type: str) -> str:
    return "all (pooled)" if task_type == POOLED else task_type


def _assert_cell_matches(cell: str, check: Check) -> None:
    """The cell's numbers are the check's estimate and interval, as rounded for display."""
    numbers = [float(x) for x in NUMBER.findall(cell)]
    expected = [check.estimate, check.ci_low, check.ci_high]
    scale = 100.0 if check.metric in ("error_rate", "infra_error_rate", "format_parse") else 1.0
    assert len(numbers) == 3, cell
    for shown, value in zip(numbers, expected, strict=True):
        assert value is not None
        assert shown == pytest.approx(value * scale, rel=2e-3, abs=6e-3), (cell, check)


def assert_overview_matches(app: AppTest, seeded: Seeded) -> None:
    """Banner, metrics, per-task-type table and label table equal storage + stats."""
    repo, run_id = seeded.repo, seeded.run_id
    assert not app.exception
    verdict = repo.latest_verdict(run_id)
    assert verdict is not None
    assert verdict.decision is Decision.HOLD
    banner = unescape(app.warning[0].value)
    assert banner.startswith(f"**HOLD — look {verdict.look} · coverage 100.0%")
    assert f"{verdict.coverage.paired} paired of {verdict.coverage.captured} captured" in banner
    assert verdict.policy_hash[:12] in banner
    for reason in verdict.reasons[:5]:
        assert f"- {reason}" in banner
    assert f"and {len(verdict.reasons) - 5} more reasons" in banner
    listed = next(unescape(m.value) for m in app.markdown if m.value.startswith("- "))
    assert listed == "\n".join(f"- {reason}" for reason in verdict.reasons)
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Decision"] == "HOLD"
    assert metrics["Look"] == str(verdict.look)
    routes = frame_with(app, "skip reasons")
    pd.testing.assert_frame_equal(
        routes.reset_index(drop=True), route_table(verdict), check_dtype=False
    )
    assert list(routes["evaluated"]) == ["yes"]  # every seeded pair is on the chat route
    [task_types] = [d.value for d in app.dataframe if tuple(d.value.columns) == TASK_TYPE_COLUMNS]
    pd.testing.assert_frame_equal(
        task_types.reset_index(drop=True), task_type_table(verdict), check_dtype=False
    )

    pairs = pairs_of(repo, run_id)
    summary = task_type_summary(pairs, verdict)
    table = frame_with(app, "similarity check")
    # the coloured checks come right after task type, outcome and n
    assert list(table.columns[:3]) == ["task type", "outcome", "n"]
    assert list(table.columns[3 : 3 + len(ALL_CHECK_COLUMNS)]) == ALL_CHECK_COLUMNS
    assert list(table["task type"]) == [_shown_unit(t) for t in summary["task_type"]]
    assert list(table["outcome"]) == list(summary["outcome"])
    for shown, column in SUMMARY_SHOWN.items():
        np.testing.assert_allclose(
            table[shown].to_numpy(dtype=float),
            summary[column].to_numpy(dtype=float),
            rtol=1e-12,
            equal_nan=True,
            err_msg=shown,
        )
    checks = {(c.task_type, c.metric): c for c in verdict.checks}
    compared = 0
    for row, task_type in zip(table.to_dict(orient="records"), summary["task_type"], strict=True):
        for shown, metric in CHECKS_SHOWN.items():
            check = checks.get((str(task_type), metric))
            if check is None:
                assert row[shown] == "–"
            elif check.estimate is None:
                assert row[shown] == check.outcome.value
            else:
                _assert_cell_matches(str(row[shown]), check)
                compared += 1
    assert compared > 20
    assert not any("e-" in str(v) or "e+" in str(v) for v in table["similarity check"])

    all_checks = frame_with(app, "reason")
    assert len(all_checks) == len(verdict.checks)
    assert set(all_checks["reason"]) == {c.reason for c in verdict.checks}

    assert_direction_matches(app, seeded)

    labels = label_summary(repo.load_labels(run_id))
    shown_labels = frame_with(app, "win low")
    assert list(shown_labels["task type"]) == [_shown_unit(t) for t in labels["task_type"]]
    for shown, column in LABEL_SHOWN.items():
        np.testing.assert_allclose(
            shown_labels[shown].to_numpy(dtype=float),
            labels[column].to_numpy(dtype=float),
            rtol=1e-12,
            equal_nan=True,
            err_msg=shown,
        )


DIRECTION_COUNTS = (
    "pairs", "changed", "judged", "by judge", "by human", "by reference", "to judge", "failed",
    "better", "tie", "worse",
)  # fmt: skip


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(cell)]


def assert_direction_matches(app: AppTest, seeded: Seeded) -> None:
    """The direction table: counts, rates and net harm as computed from storage + stats."""
    expected = direction_expected(seeded.repo, seeded.run_id)
    shown = frame_with(app, "net harm")
    assert list(shown["task type"]) == [_shown_unit(t) for t in expected]
    judged_somewhere = 0
    for row, (unit, want) in zip(shown.to_dict(orient="records"), expected.items(), strict=True):
        for column in DIRECTION_COUNTS:
            assert row[column] == want[column], (unit, column)
        assert row["changed share"] == pytest.approx(want["changed"] / want["pairs"])
        low, high = want["net_harm_interval"]
        assert _numbers(row["net harm"]) == pytest.approx(
            [100 * want["net_harm"], 100 * low, 100 * high], abs=6e-3
        )
        judged = want["judged"]
        for name, count in (("win", "better"), ("tie", "tie"), ("loss", "worse")):
            if judged == 0:
                assert row[f"{name} rate"] == "–"
            else:
                assert _numbers(row[f"{name} rate"])[0] == pytest.approx(
                    100 * want[count] / judged, abs=0.051
                )
        judged_somewhere += judged
    assert judged_somewhere > 0
    pooled = expected[POOLED]
    assert pooled["by judge"] > 0
    assert 0 < pooled["by reference"] <= 2  # a label may override one
    assert pooled["failed"] > 0


def test_overview_shows_the_verdict_the_summary_and_the_label_rates(
    seeded: Seeded, open_app: OpenApp
) -> None:
    assert_overview_matches(open_app(seeded.url), seeded)


@pytest.mark.postgres
@pytest.mark.slow
def test_overview_on_postgresql(pg_schema_url: str, open_app: OpenApp) -> None:
    data = seed_database(pg_schema_url)
    try:
        assert_overview_matches(open_app(pg_schema_url), data)
    finally:
        data.repo.database.dispose()


def test_overview_without_a_verdict_says_so_and_never_gates(tmp_path, open_app: OpenApp) -> None:
    data = seed_database(f"sqlite:///{tmp_path / 'ungated.db'}", labels=False, gated=False)
    try:
        app = open_app(data.url)
        assert not app.exception
        assert [i.value for i in app.info if NO_VERDICT in unescape(i.value)]
        assert not app.warning
        table = frame_with(app, "similarity check")
        assert set(table["similarity check"]) == {"–"}
        assert data.repo.latest_verdict(data.run_id) is None  # the dashboard never gates
        assert any("No pairs of this run are labelled" in i.value for i in app.info)
    finally:
        data.repo.database.dispose()


def test_overview_names_a_route_that_was_not_evaluated_and_a_replay_shortfall(
    tmp_path, open_app: OpenApp
) -> None:
    data = seed_database(f"sqlite:///{tmp_path / 'routes.db'}", labels=False, judged=False)
    try:
        stored = data.repo.latest_verdict(data.run_id)
        assert stored is not None
        coverage = stored.coverage
        skip = "route not replayable: /v1/responses (the Responses API is not replayed: …)"
        routes = {
            **coverage.per_route,
            "/v1/responses": RouteCoverage(captured=15, skipped=15, skip_reasons={skip: 15}),
        }
        slow = ReplayPass(
            source="capture_log",
            pace=ReplayPace.RATE,
            asked_rate_per_s=500.0,
            achieved_rate_per_s=13.9,
            measured_starts=300,
        )
        verdict = stored.model_copy(
            update={
                "decided_at": stored.decided_at + timedelta(minutes=1),
                "coverage": coverage.model_copy(
                    update={"per_route": routes, "replay_passes": (slow,)}
                ),
            }
        )
        data.repo.save_verdict(verdict, "test")
        app = open_app(data.url)
        assert not app.exception
        warnings = [unescape(w.value) for w in app.warning]
        [route_warning] = [w for w in warnings if "Captured but not evaluated" in w]
        assert "`/v1/responses`" in route_warning
        assert "routes: {<route>: {required: false}}" in route_warning
        assert any("measured at 13.9 req/s of 500 asked" in w for w in warnings)
        shown = rows_by(frame_with(app, "skip reasons"), "route")
        assert shown[("/v1/responses",)]["evaluated"] == "NO"
        assert shown[("/v1/responses",)]["skip reasons"] == f"{skip} (15)"
        assert shown[("/v1/responses",)]["coverage"] == 0.0
    finally:
        data.repo.database.dispose()


def test_run_picker_switches_every_page_to_the_picked_run(tmp_path, open_app: OpenApp) -> None:
    from datetime import timedelta

    from shadoweval.testing.pair_seeding import T0

    from .conftest import seed_run

    data = seed_database(f"sqlite:///{tmp_path / 'two.db'}", labels=False)
    try:
        newer = seed_run(
            data.repo,
            mix={"chat": 30},
            run_id="run-newer",
            prefix="nx",
            created_at=T0 + timedelta(days=1),
        )
        app = open_app(data.url)
        assert not app.exception
        assert app.selectbox(key="run_picker").value == newer.run_id  # newest first
        assert any(NO_VERDICT in unescape(i.value) for i in app.info)
        assert app.query_params["run"] == newer.run_id
        app.selectbox(key="run_picker").set_value(data.run_id).run()
        assert not app.exception
        assert app.warning
        assert "HOLD" in app.warning[0].value
        app.switch_page(page_path("history")).run()
        assert not app.exception
        assert app.selectbox(key="run_picker").value == data.run_id
        assert len(frame_with(app, "decision")) == 1
    finally:
        data.repo.database.dispose()


def test_latency_table_is_numpy_quantiles_of_the_pairs_frame(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = open_app(seeded.url)
    app.switch_page(page_path("latency")).run()
    assert not app.exception
    pairs = pairs_of(seeded.repo, seeded.run_id)
    summary = task_type_summary(pairs, seeded.repo.latest_verdict(seeded.run_id))
    assert app.selectbox(key="latency_task").value == "chat"
    for task_type in ("chat", "summarize", POOLED):
        if task_type != "chat":
            app.selectbox(key="latency_task").set_value(task_type).run()
            assert not app.exception
        rows = summary_latency_rows(
            pairs if task_type == POOLED else pairs[pairs.task_type == task_type]
        )
        table = rows_by(frame_with(app, "ratio"), "metric", "quantile")
        for metric in ("e2e_ms", "ttft_ms", "ttfc_ms"):
            for name, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                base = quantile(rows[f"baseline_{metric}"], q)
                cand = quantile(rows[f"candidate_{metric}"], q)
                shown = table[(metric, name)]
                np.testing.assert_allclose(
                    [shown["baseline ms"], shown["candidate ms"]], [base, cand], equal_nan=True
                )
                if math.isnan(base):
                    assert math.isnan(shown["ratio"])
                else:
                    assert shown["ratio"] == pytest.approx(cand / base, rel=1e-12)
        expected = summary.set_index("task_type").loc[task_type]
        assert table[("e2e_ms", "p50")]["ratio"] == pytest.approx(
            expected["e2e_p50_ratio"], rel=1e-12
        )
        assert table[("e2e_ms", "p95")]["ratio"] == pytest.approx(
            expected["e2e_p95_ratio"], rel=1e-12
        )
    # summarize is not streamed: it has no TTFT at all
    app.selectbox(key="latency_task").set_value("summarize").run()
    assert any("No time to first token latencies" in i.value for i in app.info)
    checks = frame_with(app, "reason")
    assert set(checks["metric"]) <= {f"latency_e2e_ms_{q}" for q in ("p50", "p95", "p99")}


def test_divergence_shows_the_lowest_pairs_and_the_noise_floor(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = open_app(seeded.url)
    app.switch_page(page_path("divergence")).run()
    assert not app.exception
    assert app.selectbox(key="divergence_task").value == "chat"
    scores = [s for s in seeded.repo.load_pair_scores(seeded.run_id) if s.task_type == "chat"]
    lowest = sorted((s.similarity, s.exchange_id) for s in scores if s.similarity is not None)
    table = frame_with(app, "exchange id")
    assert list(table["exchange id"]) == [exchange_id for _, exchange_id in lowest[:20]]
    np.testing.assert_allclose(table["similarity"], [sim for sim, _ in lowest[:20]])
    below = sum(
        1
        for s in scores
        if s.similarity is not None
        and s.noise_similarity is not None
        and s.similarity < s.noise_similarity
    )
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["Pairs below their noise floor"] == f"{below:,}"
    summary = task_type_summary(pairs_of(seeded.repo, seeded.run_id))
    chat = summary.set_index("task_type").loc["chat"]
    assert metrics["Mean similarity"] == f"{chat['similarity_mean']:.3f}"
    assert metrics["Noise floor (mean)"] == f"{chat['noise_similarity_mean']:.3f}"
    assert app.get("arrow_vega_lite_chart") or app.get("vega_lite_chart")
    app.selectbox(key="divergence_task").set_value(POOLED).run()
    assert not app.exception
    assert frame_with(app, "exchange id")["similarity"].is_monotonic_increasing


def _open_samples(app: AppTest) -> AppTest:
    app.switch_page(page_path("samples")).run()
    assert not app.exception
    return app


def _header_total(app: AppTest) -> str:
    return next(m.value for m in app.markdown if "pairs match" in m.value)


def test_samples_count_and_keyset_paging(seeded: Seeded, open_app: OpenApp) -> None:
    app = _open_samples(open_app(seeded.url))
    scores = seeded.repo.load_pair_scores(seeded.run_id)
    order = page_order(scores)
    total = seeded.repo.count_samples(seeded.run_id, SampleFilter())
    assert total == len(scores) == sum(TASK_MIX.values())
    assert _header_total(app).startswith(f"**{total:,} pairs match** · page 1 of 22")
    assert shown_exchange_ids(app) == order[:20]
    assert app.button(key="samples_prev_top").disabled

    app.button(key="samples_next_top").click().run()
    assert not app.exception
    assert "page 2 of 22" in _header_total(app)
    assert shown_exchange_ids(app) == order[20:40]
    app.button(key="samples_next_top").click().run()
    assert shown_exchange_ids(app) == order[40:60]
    app.button(key="samples_prev_top").click().run()
    assert shown_exchange_ids(app) == order[20:40]
    app.button(key="samples_prev_top").click().run()
    assert shown_exchange_ids(app) == order[:20]


def test_samples_filters_by_task_type_flag_and_similarity(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = _open_samples(open_app(seeded.url))
    scores = seeded.repo.load_pair_scores(seeded.run_id)

    app.multiselect(key="samples_task_types").set_value(["extraction"]).run()
    app.multiselect(key="samples_flags").set_value(["format_regression"]).run()
    assert not app.exception
    wanted = [
        s
        for s in scores
        if s.task_type == "extraction" and PairFlag.FORMAT_REGRESSION in pair_flags(s)
    ]
    assert wanted
    assert _header_total(app).startswith(f"**{len(wanted):,} pairs match**")
    assert shown_exchange_ids(app) == page_order(wanted)[:20]
    flt = SampleFilter(task_types=("extraction",), flags=(PairFlag.FORMAT_REGRESSION,))
    assert seeded.repo.count_samples(seeded.run_id, flt) == len(wanted)

    app.multiselect(key="samples_task_types").set_value([]).run()
    app.multiselect(key="samples_flags").set_value([]).run()
    app.toggle(key="samples_by_similarity").set_value(True).run()
    app.slider(key="samples_similarity").set_range(0.5, 0.8).run()
    assert not app.exception
    band = [s for s in scores if s.similarity is not None and 0.5 <= s.similarity <= 0.8]
    assert _header_total(app).startswith(f"**{len(band):,} pairs match**")
    assert shown_exchange_ids(app) == page_order(band)[:20]


def test_submitting_the_label_form_stores_a_label(seeded: Seeded, open_app: OpenApp) -> None:
    app = _open_samples(open_app(seeded.url))
    first = shown_exchange_ids(app)[0]
    before = [lab for lab in seeded.repo.load_labels(seeded.run_id) if lab.exchange_id == first]

    app.radio(key=f"label-value-{first}").set_value(LabelValue.CANDIDATE_WORSE)
    app.button(key=f"FormSubmitter:label-form-{first}-Save label").click().run()
    assert not app.exception
    assert any("labeller" in e.value for e in app.error)  # no name given yet: nothing stored
    assert [
        lab for lab in seeded.repo.load_labels(seeded.run_id) if lab.exchange_id == first
    ] == before

    app.text_input(key="labeller").input("carla").run()
    app.radio(key=f"label-value-{first}").set_value(LabelValue.CANDIDATE_WORSE)
    app.text_input(key=f"label-note-{first}").input("drops the delivery date")
    app.button(key=f"FormSubmitter:label-form-{first}-Save label").click().run()
    assert not app.exception
    assert any("Saved: candidate worse by carla" in s.value for s in app.success)
    stored = [
        lab
        for lab in seeded.repo.load_labels(seeded.run_id)
        if lab.exchange_id == first and lab.labeller == "carla"
    ]
    assert len(stored) == 1
    label = stored[0]
    assert (label.label, label.note, label.source) == (
        LabelValue.CANDIDATE_WORSE,
        "drops the delivery date",
        "dashboard",
    )
    # the overview's label rates include it at once (the label cache was cleared)
    app.switch_page(page_path("overview")).run()
    rates = frame_with(app, "win low")
    expected = label_summary(seeded.repo.load_labels(seeded.run_id))
    assert list(rates["pairs"]) == list(expected["n"])
    assert list(rates["labels"]) == list(expected["labels"])


def test_export_download_of_the_current_filter(seeded: Seeded, open_app: OpenApp) -> None:
    app = _open_samples(open_app(seeded.url))
    app.multiselect(key="samples_task_types").set_value(["chat", "code"]).run()
    app.selectbox(key="export_format").set_value("jsonl")
    app.number_input(key="export_n").set_value(3)
    app.button(key="export_prepare").click().run()
    assert not app.exception
    _, download = app.session_state["samples.export"]
    assert app.get("download_button")
    with zipfile.ZipFile(io.BytesIO(download.data)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        lines = archive.read("samples.jsonl").decode().splitlines()
    assert manifest["run_id"] == seeded.run_id
    assert manifest["policy_hash"] == seeded.run.policy_hash
    assert manifest["format"] == "jsonl"
    assert manifest["counts"] == {
        "chat": {"matching": TASK_MIX["chat"], "exported": 3},
        "code": {"matching": TASK_MIX["code"], "exported": 3},
    }
    rows = [orjson.loads(line) for line in lines]
    assert [r["task_type"] for r in rows] == ["chat"] * 3 + ["code"] * 3
    order = page_order(
        [s for s in seeded.repo.load_pair_scores(seeded.run_id) if s.task_type == "chat"]
    )
    assert [r["exchange_id"] for r in rows[:3]] == order[:3]


def test_export_download_of_the_changed_pairs_not_judged_yet(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = _open_samples(open_app(seeded.url))
    app.selectbox(key="export_format").set_value("jsonl")
    app.number_input(key="export_n").set_value(1000)
    app.checkbox(key="export_changed_unjudged").check()
    app.button(key="export_prepare").click().run()
    assert not app.exception
    _, download = app.session_state["samples.export"]
    with zipfile.ZipFile(io.BytesIO(download.data)) as archive:
        manifest = orjson.loads(archive.read("manifest.json"))
        rows = [orjson.loads(line) for line in archive.read("samples.jsonl").splitlines()]
    expected = direction_expected(seeded.repo, seeded.run_id)
    left = expected[POOLED]["to judge"]
    assert manifest["filters"]["changed_unjudged"] is True
    assert manifest["filters"]["exchange_ids"] == left == len(rows)
    assert {t: c["exported"] for t, c in manifest["counts"].items()} == {
        t: e["to judge"] for t, e in expected.items() if t != POOLED
    }
    judged = {j.exchange_id for j in seeded.repo.list_judgements(seeded.run_id) if j.outcome}
    judged |= {label.exchange_id for label in seeded.repo.load_labels(seeded.run_id)}
    assert not judged & {r["exchange_id"] for r in rows}


def test_history_shows_verdicts_policy_and_audit_log(seeded: Seeded, open_app: OpenApp) -> None:
    app = open_app(seeded.url)
    app.switch_page(page_path("history")).run()
    assert not app.exception
    history = seeded.repo.verdict_history(seeded.run_id)
    timeline = frame_with(app, "decision")
    assert list(timeline["verdict id"]) == [e.id for e in history]
    assert list(timeline["decision"]) == [e.verdict.decision.value for e in history]
    assert list(timeline["look"]) == [e.verdict.look for e in history]
    assert list(timeline["command"]) == [e.command for e in history]
    assert any(seeded.run.policy_hash in s.value for s in app.success)
    assert app.code[0].value == seeded.run.policy_yaml.rstrip("\n")
    audit = seeded.repo.policy_audit(seeded.run_id)
    shown = frame_with(app, "action")
    assert list(shown["action"]) == [e.action.value for e in audit]
    assert list(shown["command"]) == [e.command for e in audit]
    assert list(pd.to_datetime(shown["recorded at"], utc=True)) == [e.recorded_at for e in audit]


def _open_at(url: str, monkeypatch: pytest.MonkeyPatch, run: str | None) -> AppTest:
    """The app opened at ``?run=<run>`` (no parameter for ``None``)."""
    from shadoweval.cli.dashboard_cmd import DATABASE_URL_ENV, app_path

    monkeypatch.setenv(DATABASE_URL_ENV, url)
    app = AppTest.from_file(str(app_path()), default_timeout=APP_TIMEOUT_S)
    if run is not None:
        app.query_params["run"] = run
    return app.run()


def test_unknown_run_in_the_address_is_an_error_not_another_run(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from shadoweval.testing.pair_seeding import T0

    from .conftest import seed_run

    data = seed_database(f"sqlite:///{tmp_path / 'two.db'}", labels=False)
    try:
        newer = seed_run(
            data.repo,
            mix={"chat": 30},
            run_id="noverdict",
            prefix="nx",
            created_at=T0 + timedelta(days=1),
        )
        app = _open_at(data.url, monkeypatch, "no-such_run")
        assert not app.exception
        errors = [unescape(e.value) for e in app.error]
        assert any("run 'no-such_run' not found in this database" in e for e in errors), errors
        assert not app.warning  # no verdict banner of another run
        assert not app.dataframe
        assert not app.title  # the page itself never ran
        picker = app.selectbox(key="run_picker")
        assert picker.value is None
        assert list(picker.options) == [
            f"{r.created_at:%Y-%m-%d %H:%M} · {r.name} · {r.status.value} · {r.run_id}"
            for r in (data.repo.get_run(i) for i in (newer.run_id, data.run_id))
            if r is not None
        ]
        assert app.query_params["run"] == "no-such_run"

        picker.set_value(data.run_id).run()  # picking a run replaces ?run=
        assert not app.exception
        assert not app.error
        assert app.query_params["run"] == data.run_id
        assert "HOLD" in app.warning[0].value

        fresh = _open_at(data.url, monkeypatch, None)  # no ?run=: the newest run
        assert not fresh.exception
        assert not fresh.error
        assert fresh.selectbox(key="run_picker").value == newer.run_id
        assert fresh.query_params["run"] == newer.run_id
        assert fresh.selectbox(key="run_picker").options[0].endswith(" · noverdict")

        known = _open_at(data.url, monkeypatch, data.run_id)  # a known ?run= is kept
        assert known.selectbox(key="run_picker").value == data.run_id
    finally:
        data.repo.database.dispose()


def test_latency_opens_on_the_task_type_with_the_worst_latency_check(
    tmp_path, open_app: OpenApp
) -> None:
    data = seed_database(f"sqlite:///{tmp_path / 'latency.db'}", labels=False)
    try:
        verdict = data.repo.latest_verdict(data.run_id)
        assert verdict is not None
        # gated as is, chat (alphabetically first) has the first inconclusive latency check
        app = open_app(data.url)
        app.switch_page(page_path("latency")).run()
        assert app.selectbox(key="latency_task").value == "chat"
        # a newer verdict where summarize's e2e p95 failed: the page opens on summarize
        failed = tuple(
            c.model_copy(update={"outcome": CheckOutcome.FAIL})
            if (c.task_type, c.metric) == ("summarize", "latency_e2e_ms_p95")
            else c
            for c in verdict.checks
        )
        assert failed != verdict.checks
        data.repo.save_verdict(
            verdict.model_copy(
                update={"checks": failed, "decided_at": verdict.decided_at + timedelta(hours=1)}
            ),
            "test",
        )
        assert data.repo.latest_verdict(data.run_id).checks == failed  # type: ignore[union-attr]
        st.cache_data.clear()  # the data-version token is cached for a few seconds
        app = open_app(data.url)
        app.switch_page(page_path("latency")).run()
        assert not app.exception
        assert app.selectbox(key="latency_task").value == "summarize"
        assert "fail" in set(frame_with(app, "reason")["outcome"])
    finally:
        data.repo.database.dispose()


def _shown_texts(app: AppTest) -> list[str]:
    """Every piece of text on the page: each element's proto as text (markdown, text,
    code, json, html, alerts, captions, widget labels and options …) and every
    dataframe's cells."""
    texts: list[str] = []

    def walk(node: object) -> None:
        children = getattr(node, "children", None)
        if isinstance(children, dict):
            for child in children.values():
                walk(child)
        proto = getattr(node, "proto", None)
        if proto is not None:
            texts.append(str(proto))
        if getattr(node, "type", None) in ("arrow_data_frame", "dataframe"):
            texts.append(node.value.to_csv())  # type: ignore[attr-defined]

    walk(app._tree)
    return texts


def test_samples_and_divergence_show_stored_texts_redacted(tmp_path, open_app: OpenApp) -> None:
    from shadoweval.storage import Database, Repository
    from shadoweval.testing.pair_seeding import add_secret_pair

    from .conftest import seed_run

    url = f"sqlite:///{tmp_path / 'secrets.db'}"
    db = Database(url)
    db.upgrade()
    repo = Repository(db)
    try:
        run = seed_run(repo, mix={"chat": 12})
        secret = add_secret_pair(repo, run)
        app = open_app(url)

        app.switch_page(page_path("samples")).run()
        assert not app.exception
        assert secret.exchange_id in shown_exchange_ids(app)  # all 13 pairs on page 1
        assert app.get("html")  # the word diff is on the page
        texts = _shown_texts(app)
        joined = "\n".join(texts)
        assert SECRET_KEY not in joined
        assert SECRET_EMAIL not in joined
        assert "CANARY" not in joined
        assert "[REDACTED:secret_key]" in joined
        assert "[REDACTED:email]" in joined
        shown = [t.value for t in app.text]
        assert any("[REDACTED:" in t and t.startswith("Baseline:") for t in shown)
        assert any("[REDACTED:" in t and t.startswith("Candidate:") for t in shown)
        assert any("[REDACTED:" in h.proto.body for h in app.get("html"))

        repo.save_judgements(
            [
                PairJudgement(
                    run_id=run.run_id,
                    exchange_id=secret.exchange_id,
                    task_type=secret.task_type,
                    source=JudgementSource.JUDGE,
                    outcome=QualityOutcome.CANDIDATE_WORSE,
                    rationale=f"it leaks {SECRET_KEY}",
                    votes=(
                        JudgeVote(
                            order="baseline_first",
                            preferred="baseline",
                            rationale=f"mail {SECRET_EMAIL}",
                        ),
                        JudgeVote(order="candidate_first", preferred="baseline"),
                    ),
                )
            ]
        )
        app.switch_page(page_path("judged")).run()
        assert not app.exception
        judged = "\n".join(_shown_texts(app))
        assert secret.exchange_id in judged
        assert SECRET_KEY not in judged
        assert SECRET_EMAIL not in judged
        assert "CANARY" not in judged
        assert "it leaks [REDACTED:secret_key]" in judged
        assert "mail [REDACTED:email]" in judged
        shown = [t.value for t in app.text]
        assert any("[REDACTED:" in t and t.startswith("Baseline:") for t in shown)

        app.switch_page(page_path("divergence")).run()
        assert not app.exception
        lowest = frame_with(app, "exchange id")
        assert lowest["exchange id"].iloc[0] == secret.exchange_id
        assert "[REDACTED:" in lowest["baseline"].iloc[0]
        assert "[REDACTED:" in lowest["candidate"].iloc[0]
        joined = "\n".join(_shown_texts(app))
        assert SECRET_KEY not in joined
        assert SECRET_EMAIL not in joined
        assert "CANARY" not in joined
    finally:
        db.dispose()


def _judged_rows(app: AppTest) -> pd.DataFrame:
    return frame_with(app, "candidate first")


def _open_judged(app: AppTest) -> AppTest:
    app.switch_page(page_path("judged")).run()
    assert not app.exception
    return app


def test_judged_pairs_page_lists_every_judgement_with_both_votes(
    seeded: Seeded, open_app: OpenApp
) -> None:
    repo, run_id = seeded.repo, seeded.run_id
    app = _open_judged(open_app(seeded.url))
    stored = repo.list_judgements(run_id)
    labelled = {label.exchange_id for label in repo.load_labels(run_id)}
    total = len(stored) + len(labelled)
    assert total > 20
    header = next(m.value for m in app.markdown if "judgements match" in m.value)
    assert header == f"**{total:,} judgements match** · page 1 of {math.ceil(total / 20)}"
    rows = _judged_rows(app)
    assert len(rows) == 20
    order = ["candidate worse", "candidate better", "tie", "failed"]
    ranks = [order.index(o) for o in rows["outcome"]]
    assert ranks == sorted(ranks)  # worst first
    by_key = {(j.exchange_id, j.source.value): j for j in stored}
    checked = 0
    for row in rows.to_dict(orient="records"):
        judgement = by_key.get((row["exchange id"], row["source"]))
        if row["source"] == "human":
            assert row["exchange id"] in labelled
            assert row["used"]  # a label always wins
            continue
        assert judgement is not None
        if judgement.source.value == "judge":
            votes = {v.order: v.preferred or "failed" for v in judgement.votes}
            assert row["baseline first"].startswith(votes["baseline_first"])
            assert row["candidate first"].startswith(votes["candidate_first"])
            checked += 1
        assert row["stratum"].startswith("stratum ")  # only changed pairs were judged
    assert checked > 5
    texts = [t.value for t in app.text]
    assert any(t.startswith("Rationale: the judge: worse") for t in texts)
    assert any(t == "baseline first: worse" for t in texts)

    app.number_input(key="judged_page").set_value(2).run()
    assert not app.exception
    assert len(_judged_rows(app)) == total - 20
    assert any("page 2 of 2" in m.value for m in app.markdown)


def test_judged_pairs_page_filters_by_source_outcome_and_task_type(
    seeded: Seeded, open_app: OpenApp
) -> None:
    stored = seeded.repo.list_judgements(seeded.run_id)
    app = _open_judged(open_app(seeded.url))
    app.selectbox(key="judged_source").set_value("reference").run()
    assert not app.exception
    rows = _judged_rows(app)
    assert len(rows) == sum(j.source.value == "reference" for j in stored) == 2
    assert set(rows["reference"]) == {"baseline pass · candidate fail (schema)"}
    assert set(rows["task type"]) == {"extraction"}

    app.selectbox(key="judged_source").set_value("judge").run()
    app.selectbox(key="judged_outcome").set_value("failed").run()
    assert not app.exception
    rows = _judged_rows(app)
    failed = [j for j in stored if j.outcome is None]
    assert sorted(rows["exchange id"]) == sorted(j.exchange_id for j in failed)
    assert set(rows["rationale"]) == {"failed: connection refused"}
    assert set(rows["baseline first"]) == {"failed: connection refused"}

    app.selectbox(key="judged_outcome").set_value("tie").run()
    app.selectbox(key="judged_task_type").set_value("chat").run()
    rows = _judged_rows(app)
    ties = [
        j
        for j in stored
        if j.source.value == "judge" and j.task_type == "chat" and j.outcome == "tie"
    ]
    assert list(rows["exchange id"]) == sorted(j.exchange_id for j in ties)
    # the position-biased pair: each order preferred the answer shown first → a tie
    assert (rows["baseline first"].iloc[0], rows["candidate first"].iloc[0]) == (
        "baseline",
        "candidate",
    )

    app.selectbox(key="judged_outcome").set_value("candidate_better").run()
    app.selectbox(key="judged_source").set_value("reference").run()
    assert not app.exception
    assert any("No judgements match" in i.value for i in app.info)


def test_overview_warns_of_a_degenerate_noise_floor(tmp_path, open_app: OpenApp) -> None:
    data = seed_database(f"sqlite:///{tmp_path / 'replica.db'}", labels=False, judged=False)
    try:
        scores = data.repo.load_pair_scores(data.run_id)
        recorded = [
            s.model_copy(update={"noise_similarity": 1.0, "noise_identical": True, "sampled": True})
            for s in scores
            if s.noise_similarity is not None
        ]
        assert len(recorded) > 100
        data.repo.save_pair_scores(recorded)
        app = open_app(data.url)
        assert not app.exception
        warnings = [unescape(w.value) for w in app.warning]
        assert warnings[0].startswith("**HOLD")  # the verdict banner stays first
        noise = [w for w in warnings if "The noise floor is degenerate" in w]
        assert len(noise) == 1
        pairs = pairs_of(data.repo, data.run_id)
        degenerate = classify_changes(pairs, parse_policy_yaml(data.run.policy_yaml)).degenerate
        assert degenerate is not None
        assert degenerate.sampled_with_repeat > 100
        assert degenerate.describe()[1:] in noise[0]  # the sentence, capitalised
        assert "sampled requests (100%)" in noise[0]
    finally:
        data.repo.database.dispose()
    plain = seed_database(f"sqlite:///{tmp_path / 'plain.db'}", labels=False, judged=False)
    try:  # on the seeded run no repeat is identical: no warning
        shown = open_app(plain.url)
        assert not [w for w in shown.warning if "degenerate" in w.value]
    finally:
        plain.repo.database.dispose()
