"""The Candidates page (issue 31 item 4): several candidates of one sample side by side.

The side-by-side data come from the stored runs (``application.candidates``; end to end
with two mock-llm candidates in ``tests/cli/test_evaluate_candidates.py`` and over Kafka
in ``tests/replay/test_kafka_candidates.py``); here: the page on a run evaluated alone,
and the page's tables from a comparison.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from shadoweval.dashboard.candidates_view import candidates_table, pairwise_table
from shadoweval.records import Coverage, Decision, Verdict
from shadoweval.stats.candidates import CandidateEvidence, compare_candidates

from .conftest import Seeded, page_path
from .test_app_pages import OpenApp


def test_a_run_evaluated_alone_says_how_to_compare_candidates(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = open_app(seeded.url)
    app.switch_page(page_path("candidates")).run()
    assert not app.exception
    assert any("--candidate-url A=URL --candidate-url B=URL" in i.value for i in app.info)


def _evidence(name: str, decision: Decision, worse: float, better: float) -> CandidateEvidence:
    coverage = Coverage(
        captured=300, replayed=300, paired=300, errored=0, warmup=0, skipped=0, share=1.0
    )
    verdict = Verdict(run_id=name, decision=decision, coverage=coverage, policy_hash="h")
    u = np.random.default_rng(len(name)).random(300)
    values = np.where(u < worse, 1.0, np.where(u < worse + better, -1.0, 0.0))
    return CandidateEvidence(name, verdict, pd.Series(values, index=[f"e{i}" for i in range(300)]))


def test_the_tables_show_each_candidate_and_the_pick() -> None:
    comparison = compare_candidates(
        [
            _evidence("good", Decision.PROMOTE, 0.02, 0.3),
            _evidence("ok", Decision.PROMOTE, 0.1, 0.1),
            _evidence("bad", Decision.ROLLBACK, 0.4, 0.0),
        ],
        alpha=0.025,
    )
    table = candidates_table(comparison, {"good": "g-run"})
    assert list(table["candidate"]) == ["good", "ok", "bad"]
    assert list(table["decision"]) == ["PROMOTE", "PROMOTE", "ROLLBACK"]
    assert list(table["no worse"]) == [True, True, False]
    assert list(table["pick"]) == ["best", "", ""]
    assert list(table["run"]) == ["g-run", "", ""]
    # The mean direction, in points, named as such (it is not the gate's net harm).
    assert "net harm" not in table.columns
    by_name = {r.name: r for r in comparison.candidates}
    assert list(table["direction"]) == pytest.approx(
        [100 * by_name[n].mean_direction for n in ("good", "ok", "bad")]
    )
    assert table["direction"].iloc[0] < 0 < table["direction"].iloc[2]  # − better, + worse
    pairs = pairwise_table(comparison)
    assert list(pairs["winner"]) == ["good"]
