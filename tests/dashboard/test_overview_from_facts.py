"""The overview read from packed pair facts (issue 15) shows exactly what it showed when it
read and validated every pair score: the per-task-type table and the direction table, on
the seeded, gated, labelled and judged run, and again after pairs are rescored."""

from __future__ import annotations

import pandas as pd

from shadoweval.application.run_views import (
    PairsCache,
    direction_of,
    direction_summary,
    task_summary,
)
from shadoweval.dashboard.overview_table import direction_view, overview_table
from shadoweval.records import HarmKind
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml
from shadoweval.stats.summary import task_type_summary

from .conftest import Seeded


def _before(seeded: Seeded) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The frame, overview table and direction view as the dashboard built them before:
    every record read and validated (``load_pair_scores`` → ``pairs_frame``)."""
    repo, run = seeded.repo, seeded.run
    policy = parse_policy_yaml(run.policy_yaml)
    frame = pairs_frame(repo.load_pair_scores(run.run_id), policy)
    verdict = repo.latest_verdict(run.run_id)
    overview = overview_table(task_type_summary(frame, verdict), verdict)
    direction = direction_of(
        frame, policy, repo.list_judgements(run.run_id), repo.load_labels(run.run_id)
    )
    return frame, overview.values, direction_view(direction.table, verdict).values


def _now(seeded: Seeded) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The same three as the dashboard builds them now (packed facts, no latency columns)."""
    repo, run = seeded.repo, seeded.run
    frame = PairsCache.for_run(run).table(repo)
    verdict = repo.latest_verdict(run.run_id)
    overview = overview_table(task_summary(frame, verdict, latency=False), verdict)
    direction = direction_summary(repo, run, pairs=frame)
    return frame, overview.values, direction_view(direction.table, verdict).values


def _assert_same(seeded: Seeded) -> None:
    before, now = _before(seeded), _now(seeded)
    for old, new in zip(before, now, strict=True):
        pd.testing.assert_frame_equal(new, old, check_exact=True)


def test_the_overview_shows_the_same_numbers(seeded: Seeded) -> None:
    frame, overview, direction = _now(seeded)
    assert len(frame) == 440
    assert overview["n"].tolist()[-1] == 440
    assert direction["judged"].sum() > 0  # the seeded run is judged
    _assert_same(seeded)


def test_the_overview_shows_the_same_numbers_after_a_rescore(seeded: Seeded) -> None:
    repo, run = seeded.repo, seeded.run
    scores = repo.load_pair_scores(run.run_id)
    rescored = [
        s.model_copy(
            update={
                "similarity": None if s.similarity is None else s.similarity / 2,
                "candidate_harms": (*s.candidate_harms, HarmKind.DEGENERATION),
            }
        )
        for s in scores[::9]
    ]
    repo.save_pair_scores(rescored)
    _assert_same(seeded)
