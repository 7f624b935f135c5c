"""The stored observations and ratings as the frames the step verdict reads."""

from __future__ import annotations

import math
from collections.abc import Sequence, Set

import pandas as pd

from shadoweval.stats.canary.verdict import OBSERVATION_COLUMNS as VERDICT_OBSERVATION_COLUMNS
from shadoweval.stats.canary.verdict import SESSION_NEW
from shadoweval.storage import (
    CanaryObservation,
    CanaryRating,
)

__all__ = [
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "observation_frame",
    "rating_frame",
]


OBSERVATION_COLUMNS = ("exchange_id", *VERDICT_OBSERVATION_COLUMNS, SESSION_NEW)
"""Columns of :func:`observation_frame`: the step verdict's ``observations`` columns, the
exchange id, and :data:`~shadoweval.stats.canary.verdict.SESSION_NEW`."""


RATING_COLUMNS = ("exchange_id", "arm", "rating")
"""Columns of :func:`rating_frame` (the step verdict's ``ratings``)."""


def observation_frame(
    observations: Sequence[CanaryObservation], *, earlier_sessions: Set[str] = frozenset()
) -> pd.DataFrame:
    """The observations as the frame :func:`shadoweval.stats.canary.verdict.step_verdict` reads:
    one row
    a request, columns :data:`OBSERVATION_COLUMNS` (latencies float ms, NaN when unknown).

    ``session_new`` is false for a request whose session was already observed in an
    earlier step (``earlier_sessions``): such a session is pinned to the arm an earlier
    share gave it, so only sessions first seen in the step show the step's share (the
    sample-ratio check counts those).
    """
    frame = pd.DataFrame(
        [
            (
                o.exchange_id,
                o.arm,
                o.observed_at,
                o.session,
                o.error,
                o.format_expected,
                o.format_ok,
                o.harmed,
                o.cache_hit,
                math.nan if o.e2e_ms is None else float(o.e2e_ms),
                math.nan if o.ttft_ms is None else float(o.ttft_ms),
            )
            for o in observations
        ],
        columns=list(OBSERVATION_COLUMNS[:-1]),
    )
    frame[SESSION_NEW] = [
        o.session is None or o.session not in earlier_sessions for o in observations
    ]
    frame["observed_at"] = pd.to_datetime(frame["observed_at"], utc=True)
    for column in ("e2e_ms", "ttft_ms"):
        frame[column] = frame[column].astype(float)
    return frame


def rating_frame(
    ratings: Sequence[CanaryRating], observations: Sequence[CanaryObservation]
) -> pd.DataFrame:
    """The spot-check ratings of ``observations`` (one row a rating, columns
    :data:`RATING_COLUMNS`), each with the arm that served the rated exchange; ratings of
    exchanges outside ``observations`` (another step) are left out."""
    arm_of = {o.exchange_id: o.arm for o in observations}
    return pd.DataFrame(
        [
            (r.exchange_id, arm_of[r.exchange_id], float(r.rating))
            for r in ratings
            if r.exchange_id in arm_of
        ],
        columns=list(RATING_COLUMNS),
    )
