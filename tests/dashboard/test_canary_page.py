"""The Canary page under Streamlit's AppTest, over a real SQLite database holding a canary
with two steps and a stored step verdict; and the share-per-version timeline it charts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from shadoweval.application.canary import canary_view, rollback_canary, share_timeline
from shadoweval.errors import ConfigError
from shadoweval.storage import CanaryInfo, Database, Repository
from tests.canary_seed import VERDICT, make_run, split_spec, two_step_canary

from .conftest import page_path
from .expected import frame_with

OpenApp = Callable[[str], AppTest]


def _seeded(tmp_path: Path) -> tuple[str, Repository, CanaryInfo]:
    url = f"sqlite:///{tmp_path / 'shadow-eval.db'}"
    db = Database(url)
    db.upgrade()
    repo = Repository(db)
    canary = two_step_canary(repo, split_spec(tmp_path / "split"), make_run(repo, "run-1", 1))
    return url, repo, canary


def _texts(app: AppTest) -> str:
    return "\n".join(
        [m.value for m in app.markdown]
        + [c.value for c in app.caption]
        + [i.value for i in app.info]
        + [e.label for e in app.expander]
    )


def test_the_page_shows_state_steps_verdict_checks_and_audit(
    tmp_path: Path, open_app: OpenApp
) -> None:
    url, repo, canary = _seeded(tmp_path)
    try:
        app = open_app(url)
        app.switch_page(page_path("canary")).run()
        assert not app.exception, app.exception
        assert app.title[0].value == "Canary"
        assert app.selectbox(key="canary_picker").value == canary.canary_id
        metrics = {m.label: m.value for m in app.metric}
        assert metrics == {
            "State": "running",
            "Current step": "1",
            "Candidate share": "5.0%",
            "Split revision": str(canary.split_revision),
        }

        steps = frame_with(app, "last decision")
        assert list(steps["step"]) == [0, 1]
        assert list(steps["share"]) == [0.01, 0.05]
        assert list(steps["outcome"]) == ["promoted", "running"]
        assert list(steps["evaluations"]) == [1, 0]
        assert list(steps["last decision"]) == ["hold", ""]
        stored = repo.canary_steps(canary.canary_id)
        assert list(pd.to_datetime(steps["started at"], utc=True)) == [s.started_at for s in stored]

        texts = _texts(app)
        assert "Step 0 · share 1.0% · hold" in texts
        assert "**hold**" in texts
        assert "candidate arm has 40 requests, the step needs 200" in texts
        assert "run `run-1`" in texts
        checks = frame_with(app, "threshold")
        assert list(checks["name"]) == [c["name"] for c in VERDICT["checks"]]
        assert list(checks["status"]) == ["pass", "not_enough_data"]
        assert list(checks["role"]) == ["rollback", "promote"]
        assert list(checks["estimate"]) == [0.004, 1.04]
        assert list(checks["high"]) == [0.012, 1.12]
        assert list(checks["detail"]) == [c["detail"] for c in VERDICT["checks"]]

        audit = frame_with(app, "who")
        assert list(audit["action"]) == ["canary_started", "canary_advanced"]
        assert list(audit["who"]) == ["ops", "controller"]
        assert list(audit["why"]) == ["ok", "step 0 promoted"]
        assert '"share":0.05' in audit["what"].iloc[1]
    finally:
        repo.database.dispose()


def test_the_page_follows_a_rollback_and_says_when_there_is_no_canary(
    tmp_path: Path, open_app: OpenApp
) -> None:
    url, repo, canary = _seeded(tmp_path)
    try:
        rollback_canary(
            repo, canary.canary_id, spec=split_spec(tmp_path / "split"), why="p99", actor="sre"
        )
        app = open_app(url)
        app.switch_page(page_path("canary")).run()
        assert not app.exception, app.exception
        metrics = {m.label: m.value for m in app.metric}
        assert metrics["State"] == "rolled_back"
        assert metrics["Candidate share"] == "0.0%"
        steps = frame_with(app, "last decision")
        assert list(steps["outcome"]) == ["promoted", "rolled_back"]
        audit = frame_with(app, "who")
        assert list(audit["who"])[-1] == "sre"
        assert list(audit["why"])[-1] == "p99"
    finally:
        repo.database.dispose()

    empty = tmp_path / "empty"
    empty.mkdir()
    url = f"sqlite:///{empty / 'shadow-eval.db'}"
    with Database(url) as db:
        db.upgrade()
        make_run(Repository(db), "run-1", 1)
    app = open_app(url)
    app.switch_page(page_path("canary")).run()
    assert not app.exception, app.exception
    assert any("No canary in this database yet" in i.value for i in app.info)


def test_share_timeline_holds_each_steps_share_and_ends_at_the_rollback(
    tmp_path: Path,
) -> None:
    _, repo, canary = _seeded(tmp_path)
    try:
        now = datetime.now(UTC) + timedelta(minutes=5)
        running = canary_view(repo, canary.canary_id)
        points = share_timeline(running, now=now)
        steps = running.steps
        candidate = [(p.at, p.share) for p in points if p.version == "candidate"]
        assert candidate == [
            (steps[0].started_at, 0.01),
            (steps[0].ended_at, 0.01),
            (steps[1].started_at, 0.05),
            (now, 0.05),
        ]
        baseline = [p.share for p in points if p.version == "baseline"]
        assert baseline == pytest.approx([0.99, 0.99, 0.95, 0.95])
        assert [p.order for p in points if p.version == "baseline"] == [0, 1, 2, 3]

        rollback_canary(
            repo, canary.canary_id, spec=split_spec(tmp_path / "split"), why="p99", actor="sre"
        )
        done = canary_view(repo, canary.canary_id)
        final = [(p.at, p.share) for p in share_timeline(done, now=now) if p.version == "candidate"]
        ended = done.steps[1].ended_at
        assert final[-2:] == [(ended, 0.05), (ended, 0.0)]
        with pytest.raises(ConfigError, match=r"now = .*timezone-aware"):
            share_timeline(done, now=datetime(2026, 1, 1))
    finally:
        repo.database.dispose()
