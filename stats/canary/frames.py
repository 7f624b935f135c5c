"""The canary step's inputs: the observation and rating frames, checked, and the per-arm
counts the checks read (:func:`shadoweval.stats.canary.verdict.step_verdict`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.records import CANARY_OBSERVATION_COLUMNS
from shadoweval.stats.inputs import InvalidDataError

__all__ = [
    "ARMS",
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "SESSION_NEW",
    "ArmCounts",
    "arm_counts",
    "aware",
    "checked_observations",
    "checked_ratings",
    "latencies",
    "new_sessions",
]

OBSERVATION_COLUMNS: tuple[str, ...] = CANARY_OBSERVATION_COLUMNS
"""Columns :func:`step_verdict` needs in ``observations`` (one row per live request)."""

SESSION_NEW = "session_new"
"""Optional boolean column of ``observations``: false for a request whose session was
already seen in an earlier step. Such a session is pinned to the arm an earlier (smaller)
share gave it, so only sessions first seen in the step are split at the step's share: the
sample-ratio check counts those. Absent: every session counts."""

RATING_COLUMNS: tuple[str, ...] = ("arm", "rating", "exchange_id")
"""Columns :func:`step_verdict` needs in ``ratings`` (one row per spot-check rating)."""

ARMS = ("baseline", "candidate")

# ------------------------------------------------------------------ input checks


def _require(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise InvalidDataError(f"{what} must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidDataError(
            f"{what} lacks column{'s' if len(missing) > 1 else ''}: {', '.join(missing)}",
            name=missing[0],
        )


def _check_arms(frame: pd.DataFrame, what: str) -> None:
    bad = ~frame["arm"].isin(ARMS)
    if bool(bad.any()):
        value = frame.loc[bad, "arm"].iloc[0]
        raise InvalidDataError(
            f"{what}.arm must be 'baseline' or 'candidate', got {value!r} ({int(bad.sum())} rows)",
            name="arm",
            count=int(bad.sum()),
        )


def aware(value: datetime, name: str) -> datetime:
    """``value``, checked to be a timezone-aware datetime.

    Raises:
        InvalidDataError: it is not (named ``name``).
    """
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidDataError(
            f"{name} must be a timezone-aware datetime, got {value!r}", name=name
        )
    return value


def checked_observations(frame: pd.DataFrame) -> pd.DataFrame:
    """The observations (columns :data:`OBSERVATION_COLUMNS` and :data:`SESSION_NEW`), checked
    and typed: UTC times, booleans, float ms.

    Raises:
        InvalidDataError: a column is missing, an arm unknown, a boolean missing, a time naive.
    """
    _require(frame, OBSERVATION_COLUMNS, "observations")
    _check_arms(frame, "observations")
    out = frame.loc[:, list(OBSERVATION_COLUMNS)].copy()
    if SESSION_NEW in frame.columns:
        flags = frame[SESSION_NEW]
        if bool(flags.isna().any()):
            raise InvalidDataError(
                f"observations.{SESSION_NEW} must be true or false, got a missing value",
                name=SESSION_NEW,
            )
        out[SESSION_NEW] = flags.astype(bool)
    else:
        out[SESSION_NEW] = True
    if len(out):
        times = out["observed_at"]
        if not isinstance(times.dtype, pd.DatetimeTZDtype):
            try:
                times = pd.to_datetime(times, utc=False)
            except (TypeError, ValueError) as exc:
                raise InvalidDataError(
                    f"observations.observed_at must be timezone-aware datetimes ({exc})",
                    name="observed_at",
                ) from exc
            if not isinstance(times.dtype, pd.DatetimeTZDtype):
                raise InvalidDataError(
                    "observations.observed_at must be timezone-aware (UTC) datetimes",
                    name="observed_at",
                )
        out["observed_at"] = times.dt.tz_convert("UTC")
        for column in ("error", "format_expected", "harmed", "cache_hit"):
            if bool(out[column].isna().any()):
                raise InvalidDataError(
                    f"observations.{column} must be true or false, got a missing value",
                    name=column,
                )
            out[column] = out[column].astype(bool)
        for column in ("e2e_ms", "ttft_ms"):
            out[column] = pd.to_numeric(out[column], errors="raise").astype(float)
    return out


def checked_ratings(frame: pd.DataFrame) -> pd.DataFrame:
    """The ratings (columns :data:`RATING_COLUMNS`), checked: ratings are numbers in [1, 10].

    Raises:
        InvalidDataError: a column is missing, an arm unknown, a rating outside [1, 10].
    """
    _require(frame, RATING_COLUMNS, "ratings")
    _check_arms(frame, "ratings")
    out = frame.loc[:, list(RATING_COLUMNS)].copy()
    if len(out):
        values = pd.to_numeric(out["rating"], errors="coerce").astype(float)
        bad = ~np.isfinite(values.to_numpy()) | (values < 1).to_numpy() | (values > 10).to_numpy()
        if bool(bad.any()):
            raise InvalidDataError(
                f"ratings.rating must be a number in [1, 10], got {out['rating'][bad].iloc[0]!r} "
                f"({int(bad.sum())} rows)",
                name="rating",
                count=int(bad.sum()),
            )
        out["rating"] = values
    return out


# ------------------------------------------------------------------ per-arm counts


@dataclass(frozen=True, slots=True)
class ArmCounts:
    """Counts of one arm's requests: all, errors, answered, harmed, format-expected
    answers and format failures among them."""

    requests: int
    errors: int
    answered: int
    harmed: int
    format_n: int
    format_failed: int


def _one_arm(frame: pd.DataFrame) -> ArmCounts:
    answered = ~frame["error"].to_numpy(dtype=bool)
    expected = answered & frame["format_expected"].to_numpy(dtype=bool)
    failed = expected & frame["format_ok"].map(lambda v: v is False or v == 0).to_numpy(dtype=bool)
    return ArmCounts(
        requests=len(frame),
        errors=int((~answered).sum()),
        answered=int(answered.sum()),
        harmed=int((answered & frame["harmed"].to_numpy(dtype=bool)).sum()),
        format_n=int(expected.sum()),
        format_failed=int(failed.sum()),
    )


def arm_counts(frame: pd.DataFrame) -> dict[str, ArmCounts]:
    """:class:`ArmCounts` of each arm of ``frame``."""
    return {arm: _one_arm(frame.loc[frame["arm"] == arm]) for arm in ARMS}


def new_sessions(frame: pd.DataFrame) -> int:
    """Sessions first seen in the step (``session_new``; a request without a session key
    is a session of its own)."""
    fresh = frame.loc[frame[SESSION_NEW]]
    session = fresh["session"]
    missing = session.isna()
    return int(session[~missing].astype(str).nunique()) + int(missing.sum())


def latencies(frame: pd.DataFrame, arm: str, column: str) -> npt.NDArray[np.float64]:
    """The finite ``column`` values of ``arm``'s answered, non-cache-hit requests (ms)."""
    rows = frame.loc[(frame["arm"] == arm) & ~frame["error"] & ~frame["cache_hit"], column]
    values: npt.NDArray[np.float64] = rows.to_numpy(dtype=float)
    finite: npt.NDArray[np.float64] = values[np.isfinite(values)]
    return finite
