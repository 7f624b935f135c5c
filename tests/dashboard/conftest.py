"""Dashboard fixtures: a seeded, gated, labelled and judged run and Streamlit's AppTest over it.

The database URL reaches the app the way ``shadow-eval dashboard`` hands it over: in the
``SHADOWEVAL_DATABASE__URL`` environment variable. Streamlit's caches are process-wide,
so every test starts and ends with empty caches (releasing a cached repository disposes
its engine).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from shadoweval.application.gating import gate_run, load_gate_policy
from shadoweval.cli.dashboard_cmd import DATABASE_URL_ENV, app_path
from shadoweval.records import (
    HumanLabel,
    JudgementSource,
    JudgeVote,
    PairJudgement,
    QualityOutcome,
)
from shadoweval.stats.change import classify_changes
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.storage import Database, Repository, RunInfo
from shadoweval.testing import pair_seeding
from shadoweval.testing.pair_seeding import T0, add_labels

GATE_COMMAND = "shadow-eval gate"
"""The command recorded with the seeded run's verdict (as ``shadow-eval gate`` records it)."""

APP_TIMEOUT_S = 120.0
"""Seconds one AppTest run may take (the first imports pandas, scipy and Streamlit)."""


@dataclass
class Seeded:
    """A seeded database: its URL, repository, run, the labels and judgements stored."""

    url: str
    repo: Repository
    run: RunInfo
    labels: list[HumanLabel]
    judgements: list[PairJudgement]

    @property
    def run_id(self) -> str:
        return self.run.run_id


def seed_run(repo: Repository, **options: Any) -> RunInfo:
    """:func:`shadoweval.simulation.pair_seeding.seed_run` frozen with the default gate policy."""
    _, policy_yaml, policy_hash = load_gate_policy(None)
    return pair_seeding.seed_run(repo, policy_yaml=policy_yaml, policy_hash=policy_hash, **options)


JUDGED_PER_TASK_TYPE = 6
"""Changed pairs judged per task type by :func:`add_judgements` (the first by capture time)."""

_PLAN: tuple[tuple[str, QualityOutcome | None], ...] = (
    ("worse", QualityOutcome.CANDIDATE_WORSE),
    ("better", QualityOutcome.CANDIDATE_BETTER),
    ("position bias", QualityOutcome.TIE),
    ("better", QualityOutcome.CANDIDATE_BETTER),
    ("failed", None),
    ("worse", QualityOutcome.CANDIDATE_WORSE),
)
"""What the simulated judge says of the k-th changed pair of a task type."""

Side = Literal["candidate", "baseline", "tie"]
_VOTES: dict[str, tuple[Side | None, Side | None]] = {
    "worse": ("baseline", "baseline"),
    "better": ("candidate", "candidate"),
    "position bias": ("baseline", "candidate"),  # each order prefers the answer shown first
    "failed": (None, None),
}


def _judge_votes(kind: str) -> tuple[JudgeVote, ...]:
    first, second = _VOTES[kind]
    error = "connection refused" if kind == "failed" else None
    return (
        JudgeVote(
            order="baseline_first",
            preferred=first,
            rationale="" if error else f"baseline first: {kind}",
            error=error,
        ),
        JudgeVote(
            order="candidate_first",
            preferred=second,
            rationale="" if error else f"candidate first: {kind}",
            error=error,
        ),
    )


def add_judgements(repo: Repository, run: RunInfo) -> list[PairJudgement]:
    """Judge the first :data:`JUDGED_PER_TASK_TYPE` changed pairs of every task type as
    :data:`_PLAN` says (a test double of the LLM judge: both orders voted, one pair
    position-biased into a tie, one failed), and reference-check two more ``extraction``
    pairs (baseline pass, candidate fail: candidate worse)."""
    policy = parse_policy_yaml(run.policy_yaml)
    pairs = pairs_frame(repo.load_pair_scores(run.run_id), policy)
    changed = pairs[classify_changes(pairs, policy).changed]
    judgements: list[PairJudgement] = []
    for task_type, rows in changed.groupby("task_type", sort=True):
        ids = list(rows["exchange_id"])
        for k, (kind, outcome) in enumerate(_PLAN[: len(ids)]):
            judgements.append(
                PairJudgement(
                    run_id=run.run_id,
                    exchange_id=ids[k],
                    task_type=str(task_type),
                    source=JudgementSource.JUDGE,
                    outcome=outcome,
                    rationale="" if outcome is None else f"the judge: {kind}",
                    votes=_judge_votes(kind),
                    error="connection refused" if outcome is None else None,
                    judged_at=T0 + timedelta(days=2, minutes=len(judgements)),
                )
            )
        if task_type == "extraction":
            for exchange_id in ids[len(_PLAN) : len(_PLAN) + 2]:
                judgements.append(
                    PairJudgement(
                        run_id=run.run_id,
                        exchange_id=exchange_id,
                        task_type="extraction",
                        source=JudgementSource.REFERENCE,
                        outcome=QualityOutcome.CANDIDATE_WORSE,
                        baseline_pass=True,
                        candidate_pass=False,
                        checker="schema",
                        judged_at=T0 + timedelta(days=2, hours=1),
                    )
                )
    repo.save_judgements(judgements)
    return judgements


def seed_database(
    url: str, *, labels: bool = True, gated: bool = True, judged: bool = True
) -> Seeded:
    """Upgrade ``url``, seed :data:`~shadoweval.simulation.pair_seeding.TASK_MIX`, gate, label and
    judge it.

    Gated as ``shadow-eval gate`` gates (:func:`shadoweval.application.gating.gate_run`), before the
    labels and judgements are stored.
    """
    db = Database(url)
    db.upgrade()
    repo = Repository(db)
    run = seed_run(repo)
    if gated:
        gate_run(repo, run, command=GATE_COMMAND)
    stored = add_labels(repo, run) if labels else []
    judgements = add_judgements(repo, run) if judged else []
    return Seeded(url, repo, run, stored, judgements)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """One seeded SQLite database per test module (tests that write add, never remove)."""
    path = tmp_path_factory.mktemp("dashboard") / "shadow-eval.db"
    data = seed_database(f"sqlite:///{path}")
    try:
        yield data
    finally:
        data.repo.database.dispose()


@pytest.fixture(autouse=True)
def _restore_main_module() -> Iterator[None]:
    """Put back ``sys.modules["__main__"]`` after AppTest ran the app as ``__main__``.

    Streamlit's script runner installs the app module as ``__main__`` and leaves it there;
    a later test in this process that spawns a worker (the capture sidecar's builder, with
    the ``spawn`` start method) would then re-run ``dashboard/app.py`` in the child.
    """
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _fresh_streamlit_caches() -> Iterator[None]:
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def open_app(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], AppTest]:
    """Run the dashboard's entrypoint against a database URL; returns the AppTest."""

    def run(url: str) -> AppTest:
        monkeypatch.setenv(DATABASE_URL_ENV, url)
        app = AppTest.from_file(str(app_path()), default_timeout=APP_TIMEOUT_S)
        return app.run()

    return run


def page_path(name: str) -> str:
    """A page's path relative to the entrypoint, for ``AppTest.switch_page``."""
    return str(Path("app_pages") / f"{name}.py")
