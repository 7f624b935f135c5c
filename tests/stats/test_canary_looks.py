"""Canary looks: checkpoints on the candidate arm, truncation, and levels under repeated looks."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from shadoweval.stats.canary.looks import (
    promote_look,
    rating_look,
    rollback_look,
    truncate_at_candidate,
)
from shadoweval.stats.canary.two_arm import (
    TwoProportionResult,
    proportion_excess,
    proportion_noninferiority,
)
from shadoweval.stats.sequential import checkpoint_schedule

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def test_schedules_and_levels() -> None:
    assert promote_look(199, 200, 0.05).k == 0
    look = promote_look(200, 200, 0.05)
    assert (look.k, look.n_k) == (1, 200)
    assert look.level == pytest.approx(0.05 * 6 / math.pi**2)
    look = promote_look(1599, 200, 0.05)
    assert (look.k, look.n_k) == (3, 800)
    assert look.level == pytest.approx(0.05 * 6 / (math.pi**2 * 9))
    assert checkpoint_schedule(50, 1.5, limit=6) == (50, 75, 113, 169, 254, 380)
    r = rollback_look(300, 200, 0.05)
    assert (r.k, r.n_k, r.first) == (5, 254, 50)
    assert rollback_look(49, 200, 0.05).level == 0.0
    assert rating_look(61, 30, 0.05).n_k == 60
    assert sum(promote_look(200 * 2**k, 200, 0.05).level for k in range(200)) < 0.05


def test_truncate_at_candidate_cuts_both_arms_at_the_same_time() -> None:
    arms = ["baseline", "candidate", "baseline", "candidate", "candidate", "baseline"]
    times = [T0 + timedelta(seconds=s) for s in (5, 1, 2, 3, 3, 4)]
    frame = pd.DataFrame({"arm": arms, "observed_at": times})
    cut = truncate_at_candidate(frame, 2)
    # candidate rows at 1 s and 3 s, 3 s twice (tie kept); baseline up to 3 s
    assert list(cut["arm"]) == ["candidate", "baseline", "candidate", "candidate"]
    assert truncate_at_candidate(frame, 4).empty
    assert truncate_at_candidate(frame, 0).empty
    assert len(truncate_at_candidate(frame, 1)) == 1


def _h0_rates(spent: bool, *, kind: str, reps: int, seed: int) -> float:
    """Share of H0 canaries with a rejection at any rollback (excess) or promote (NI) look."""
    rng = np.random.default_rng(seed)
    if kind == "excess":
        p_b, delta, first, factor = 0.05, 0.02, 50, 1.5
        p_c = p_b + delta
        test: Callable[..., TwoProportionResult] = proportion_excess
        look = rollback_look
    else:
        p_b, delta, first, factor = 0.05, 0.02, 200, 2.0
        p_c = p_b + delta  # the NI null boundary: candidate exactly margin worse
        test = proportion_noninferiority
        look = promote_look
    schedule = checkpoint_schedule(first, factor, limit=8)
    n_max = schedule[-1]
    rejected = 0
    for _ in range(reps):
        is_cand = rng.random(3 * n_max) < 0.5
        events = np.where(is_cand, rng.random(is_cand.size) < p_c, rng.random(is_cand.size) < p_b)
        cand_pos = np.flatnonzero(is_cand)
        cum_c = np.cumsum(events & is_cand)
        cum_b = np.cumsum(events & ~is_cand)
        cum_nb = np.cumsum(~is_cand)
        for n in schedule:
            at = cand_pos[n - 1]
            level = look(n, 200, 0.05).level if spent else 0.05
            r = test(int(cum_c[at]), n, int(cum_b[at]), int(cum_nb[at]), delta, level)
            if r.rejected:
                rejected += 1
                break
    return rejected / reps


@pytest.mark.parametrize("kind", ["excess", "noninferiority"])
def test_spent_levels_hold_alpha_over_repeated_looks(kind: str) -> None:
    reps = 1500
    spent = _h0_rates(True, kind=kind, reps=reps, seed=1)
    naive = _h0_rates(False, kind=kind, reps=reps, seed=1)
    noise = 3 * math.sqrt(0.05 * 0.95 / reps)
    assert spent <= 0.05 + noise
    assert naive > 0.05 + noise  # the same 8 looks at a fixed 0.05 peek
