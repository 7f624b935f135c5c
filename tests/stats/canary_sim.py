"""Seeded live-canary traffic for the step-verdict tests (one row per live request)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from shadoweval.stats.canary.verdict import OBSERVATION_COLUMNS, RATING_COLUMNS

START = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
"""When the simulated step starts."""


@dataclass(frozen=True)
class ArmSpec:
    """One arm's true rates and latency (lognormal e2e, ms)."""

    error: float = 0.02
    harm: float = 0.01
    format_fail: float = 0.03
    e2e_median_ms: float = 800.0
    e2e_sigma: float = 0.5
    cache_hit: float = 0.1


def traffic(
    rng: np.random.Generator,
    *,
    sessions: int,
    share: float,
    candidate: ArmSpec | None = None,
    baseline: ArmSpec | None = None,
    duration_s: float = 86400.0,
    requests_per_session: int = 3,
    start: datetime = START,
    candidate_sessions: int | None = None,
) -> pd.DataFrame:
    """``sessions`` sessions, each routed to the candidate with probability ``share`` (or
    exactly ``candidate_sessions`` of them), each with 1..2·requests_per_session−1
    requests spread uniformly over ``duration_s`` from ``start``, in time order."""
    specs = {"candidate": candidate or ArmSpec(), "baseline": baseline or ArmSpec()}
    if candidate_sessions is None:
        to_candidate = rng.random(sessions) < share
    else:
        to_candidate = np.zeros(sessions, dtype=bool)
        to_candidate[rng.choice(sessions, candidate_sessions, replace=False)] = True
    sizes = rng.integers(1, 2 * requests_per_session, sessions)
    arm = np.repeat(np.where(to_candidate, "candidate", "baseline"), sizes)
    session = np.repeat([f"s{i}" for i in range(sessions)], sizes)
    n = arm.size
    offsets = np.sort(rng.uniform(0.0, duration_s, n))
    order = rng.permutation(n)  # sessions interleave in time
    arm, session = arm[order], session[order]
    rows: dict[str, object] = {
        "arm": arm,
        "observed_at": [start + timedelta(seconds=float(s)) for s in offsets],
        "session": session,
    }
    error = np.empty(n, dtype=bool)
    harmed = np.empty(n, dtype=bool)
    fmt_ok = np.empty(n, dtype=bool)
    cache = np.empty(n, dtype=bool)
    e2e = np.empty(n)
    for name, spec in specs.items():
        m = arm == name
        k = int(m.sum())
        error[m] = rng.random(k) < spec.error
        harmed[m] = rng.random(k) < spec.harm
        fmt_ok[m] = rng.random(k) >= spec.format_fail
        cache[m] = rng.random(k) < spec.cache_hit
        e2e[m] = spec.e2e_median_ms * np.exp(spec.e2e_sigma * rng.standard_normal(k))
    expected = rng.random(n) < 0.5
    rows["error"] = error
    rows["format_expected"] = expected
    rows["format_ok"] = [
        bool(ok) if exp else None for ok, exp in zip(fmt_ok, expected, strict=True)
    ]
    rows["harmed"] = harmed & ~error
    rows["cache_hit"] = cache & ~error
    rows["e2e_ms"] = np.where(error, np.nan, e2e)
    rows["ttft_ms"] = np.where(error, np.nan, e2e * 0.2)
    return pd.DataFrame(rows, columns=list(OBSERVATION_COLUMNS))


def ratings(
    rng: np.random.Generator, *, candidate: int, baseline: int, bad_c: float, bad_b: float
) -> pd.DataFrame:
    """Spot-check ratings 1-10 per arm; a share ``bad_*`` rated 1-3, the rest 6-10."""
    out = []
    for arm, k, bad in (("candidate", candidate, bad_c), ("baseline", baseline, bad_b)):
        is_bad = rng.random(k) < bad
        values = np.where(is_bad, rng.integers(1, 4, k), rng.integers(6, 11, k)).astype(float)
        out.append(
            pd.DataFrame(
                {"arm": arm, "rating": values, "exchange_id": [f"{arm}{i}" for i in range(k)]}
            )
        )
    frame = pd.concat(out, ignore_index=True)
    return frame.sample(frac=1.0, random_state=int(rng.integers(1 << 31))).reset_index(drop=True)[
        list(RATING_COLUMNS)
    ]


def empty_observations() -> pd.DataFrame:
    """A 0-row observations frame with the right columns."""
    return pd.DataFrame({c: [] for c in OBSERVATION_COLUMNS})


def empty_ratings() -> pd.DataFrame:
    """A 0-row ratings frame with the right columns."""
    return pd.DataFrame({c: [] for c in RATING_COLUMNS})
