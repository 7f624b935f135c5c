"""The Judged page shows the judge's figures first (issue 31 item 2).

The seeded judge (:func:`tests.dashboard.conftest.add_judgements`) judges six changed pairs
per task type: worse, better, a position-biased tie (each order preferred the answer shown
first), better, a failure, worse. So in every task type 1 of the 5 pairs judged in both
orders flips, and 6 of the 10 votes for one answer go to the answer shown first (worse and
better: one of two each; the biased pair: both).
"""

from __future__ import annotations

from collections.abc import Callable

from streamlit.testing.v1 import AppTest

from shadoweval.application.judging import judge_quality_report, judge_quality_rows
from shadoweval.testing.pair_seeding import TASK_MIX

from .conftest import Seeded, page_path

OpenApp = Callable[[str], AppTest]


def test_the_judged_page_opens_with_the_judges_agreement_flips_and_first_position(
    seeded: Seeded, open_app: OpenApp
) -> None:
    app = open_app(seeded.url)
    app.switch_page(page_path("judged")).run()
    assert not app.exception
    assert app.subheader[0].value == "Does the judge earn its vote?"
    first = app.dataframe[0].value  # the figures come before the judged pairs
    assert list(first.columns) == [
        "task type", "labelled", "agreement", "kappa", "flip rate", "first position", "votes",
    ]  # fmt: skip
    rows = {row["task type"]: row for row in first.to_dict(orient="records")}
    assert set(rows) == {*TASK_MIX, "pooled"}
    for task_type in TASK_MIX:
        # Wilson 95%: 1 of 5 → 3.6–62.4%; 6 of 10 → 31.3–83.2%
        assert rows[task_type]["flip rate"] == "20% of 5 (4–62%)"
        assert rows[task_type]["first position"] == "60% of 10 (31–83%)"
    n = len(TASK_MIX)
    assert rows["pooled"]["flip rate"].startswith(f"20% of {5 * n} (")
    report = judge_quality_report(
        seeded.run,
        seeded.repo.list_judgements(seeded.run_id),
        seeded.repo.load_labels(seeded.run_id),
    )
    expected = {row["task type"]: row for row in judge_quality_rows(report)}
    assert rows == expected
    # Too few labelled judge pairs to read the floor: the judge votes everywhere
    assert {rows[t]["votes"] for t in TASK_MIX} == {"yes (floor not read)"}
    assert not app.warning
    assert any("judge.min_agreement" in c.value for c in app.caption)
