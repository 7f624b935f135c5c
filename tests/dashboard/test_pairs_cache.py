"""The dashboard's incremental pairs table equals a full read after every step."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import text

from shadoweval.application.run_views import PairsCache
from shadoweval.stats.frame import pairs_frame
from shadoweval.stats.policy import parse_policy_yaml

from .conftest import seed_database


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
def test_new_pairs_are_read_incrementally_and_the_table_equals_a_full_read(
    tmp_path: Path,
) -> None:
    seeded = seed_database(f"sqlite:///{tmp_path / 'pairs.db'}", labels=False, gated=False)
    repo, run = seeded.repo, seeded.run
    policy = parse_policy_yaml(run.policy_yaml)
    scores = repo.load_pair_scores(run.run_id)
    with repo.database.engine.begin() as conn:
        conn.execute(text("DELETE FROM pair_score WHERE run_id = :r"), {"r": run.run_id})
    # Scored out of capture order: every other pair first, the rest later.
    first, later = scores[1::2], scores[0::2]
    clock = FakeClock()
    cache = PairsCache(run.run_id, policy, full_reload_s=60.0, clock=clock)

    assert cache.table(repo).empty
    repo.save_pair_scores(first)
    pd.testing.assert_frame_equal(cache.table(repo), pairs_frame(first, policy))
    repo.save_pair_scores(later)
    full = pairs_frame(repo.load_pair_scores(run.run_id), policy)
    pd.testing.assert_frame_equal(cache.table(repo), full)
    assert (cache.full_reads, cache.incremental_reads) == (1, 2)
    assert len(full) == len(scores)

    # A rescored pair keeps its row id: only the periodic full read sees the change.
    rescored = scores[0].model_copy(update={"similarity": -0.5})
    repo.save_pair_scores([rescored])
    assert cache.table(repo).loc[0, "similarity"] != -0.5
    clock.now = 61.0
    after = cache.table(repo)
    assert cache.full_reads == 2
    pd.testing.assert_frame_equal(after, pairs_frame(repo.load_pair_scores(run.run_id), policy))
    assert (after["similarity"] == -0.5).sum() == 1
    repo.database.dispose()
