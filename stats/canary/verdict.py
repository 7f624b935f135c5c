"""The verdict of one canary step: PROMOTE, HOLD or ROLLBACK, with every check's numbers.

:func:`step_verdict` reads the live requests of one step (each answered by **one**
version: two independent arms, baseline and candidate) and the spot-check ratings, and
applies a :class:`~shadoweval.stats.canary.policy.CanaryPolicy`. The checks, their formulas and the
decision table are in docs/canary-statistics.md; in short:

* **rollback** (any breach rolls back; each test at the rollback look's level, data cut at
  the rollback checkpoint, :mod:`shadoweval.stats.canary.looks`): error-rate, harm-rate,
  format-failure and spot-check-bad excess over the policy's ``*_max_increase``
  (:func:`shadoweval.stats.canary.two_arm.proportion_excess`, Farrington–Manning), the candidate's
  latency quantiles above the absolute limits
  (:func:`shadoweval.stats.canary.quantiles.quantile_above_limit`). The error-rate excess rolls back
  only once it has breached continuously for ``error_rate_sustained_s``.
* **validity**: the session split (:func:`shadoweval.stats.canary.srm.sample_ratio_mismatch`,
  always-valid, on the counts of sessions first seen in the step, :data:`SESSION_NEW`),
  the step's minimum window and minimum requests.
* **promote** (all must pass; each at the promote look's level, data cut at the promote
  checkpoint): non-inferiority of the error, harm, format-failure and spot-check-bad
  rates (:func:`shadoweval.stats.canary.two_arm.proportion_noninferiority`) and the latency quantile
  ratios (:func:`shadoweval.stats.canary.quantiles.quantile_ratio_interval`).

Why proportion_excess at a spent level for rollback rather than the always-valid
:func:`shadoweval.stats.canary.two_arm.conditional_binomial_evalue`: the policy's rollback condition
is an *excess over a tolerance* (``p_c − p_b > max_increase``); the conditional binomial
e-value tests ``p_c > p_b`` (any increase at all), so it would roll back a candidate
whose increase is within the written tolerance. The Farrington–Manning excess test has
exactly the policy's null ``p_c − p_b ≤ max_increase``; polled at the rollback
checkpoints with levels ``α_k = α·6/(π²k²)`` it stays valid under any number of polls
(union bound; tests/stats/test_canary_verdict.py simulates it under H0 with repeated
looks).

Known limits: requests of one session are not independent (one user's follow-ups share
a prompt style, a topic, a failure); the proportion and quantile tests treat requests as
independent, so their levels are optimistic when sessions are long. The session-level SRM
check guards the split itself. At share 1.0 (the last step) there is no baseline arm, so
only the candidate-alone checks (absolute latency limits) and the window apply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from pydantic import JsonValue

from shadoweval.stats.canary.exact import (
    EXACT_BELOW_EXPECTED,
    exact_unconditional_test,
    smallest_expected_count,
)
from shadoweval.stats.canary.looks import (
    Look,
    promote_look,
    rating_look,
    rollback_look,
    truncate_at_candidate,
)
from shadoweval.stats.canary.policy import CanaryPolicy, latency_key_parts
from shadoweval.stats.canary.quantiles import quantile_above_limit, quantile_ratio_interval
from shadoweval.stats.canary.srm import sample_ratio_mismatch
from shadoweval.stats.canary.two_arm import (
    TwoProportionResult,
    proportion_excess,
    proportion_noninferiority,
)
from shadoweval.stats.inputs import InvalidDataError

__all__ = [
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "SESSION_NEW",
    "CanaryCheck",
    "CanaryDecision",
    "StepVerdict",
    "step_verdict",
]

OBSERVATION_COLUMNS: tuple[str, ...] = (
    "arm",
    "observed_at",
    "session",
    "error",
    "format_expected",
    "format_ok",
    "harmed",
    "cache_hit",
    "e2e_ms",
    "ttft_ms",
)
"""Columns :func:`step_verdict` needs in ``observations`` (one row per live request)."""

SESSION_NEW = "session_new"
"""Optional boolean column of ``observations``: false for a request whose session was
already seen in an earlier step. Such a session is pinned to the arm an earlier (smaller)
share gave it, so only sessions first seen in the step are split at the step's share: the
sample-ratio check counts those. Absent: every session counts."""

RATING_COLUMNS: tuple[str, ...] = ("arm", "rating", "exchange_id")
"""Columns :func:`step_verdict` needs in ``ratings`` (one row per spot-check rating)."""

ARMS = ("baseline", "candidate")

Role = Literal["promote", "rollback", "validity"]
Status = Literal["pass", "fail", "not_enough_data", "breach"]


class CanaryDecision(StrEnum):
    """What the controller does with the step."""

    PROMOTE = "promote"
    HOLD = "hold"
    ROLLBACK = "rollback"


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class CanaryCheck:
    """One check's outcome.

    Attributes:
        name: ``error_rate``, ``harm_rate``, ``format_failure``, ``latency_ratio.<key>``,
            ``latency_limit.<key>``, ``spot_check_bad``, ``srm``, ``window``,
            ``min_requests``.
        role: ``promote`` (must pass to advance), ``rollback`` (a breach rolls back) or
            ``validity`` (must pass to advance; the data can be trusted and is enough).
        status: ``pass``, ``fail`` (a promote/validity check not met), ``not_enough_data``
            or ``breach`` (a rollback condition shown).
        estimate: the observed value (a rate difference, a ratio, ms, a share, seconds,
            a count), ``None`` when there is none.
        low, high: the one-sided bounds reported with the test (``None`` when unbounded
            or not computed).
        threshold: the policy's number the check compares with.
        level: the one-sided α the test was run at (``None`` for non-statistical checks).
        detail: one human sentence with the numbers.
    """

    name: str
    role: Role
    status: Status
    estimate: float | None
    low: float | None
    high: float | None
    threshold: float | None
    level: float | None
    detail: str

    def to_json(self) -> dict[str, JsonValue]:
        """A JSON-safe dict (NaN/inf → ``None``)."""
        return {
            "name": self.name,
            "role": self.role,
            "status": self.status,
            "estimate": _finite_or_none(self.estimate),
            "low": _finite_or_none(self.low),
            "high": _finite_or_none(self.high),
            "threshold": _finite_or_none(self.threshold),
            "level": _finite_or_none(self.level),
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """The verdict of one poll of one canary step.

    Attributes:
        decision: PROMOTE (advance; at the last step: complete), HOLD, or ROLLBACK.
        reasons: human sentences: why this decision.
        checks: every check's outcome.
        error_breach_since: when the current error-rate excess breach began (the first
            ``now`` that saw it), ``None`` when it is not breaching; the caller stores it
            and passes it back on the next poll.
        n_baseline, n_candidate: requests of the step per arm (all of them; cache hits
            are left out of latency only).
        sessions_baseline, sessions_candidate: sessions first seen in the step, per arm
            (:data:`SESSION_NEW`; a request without a session is its own session).
        look: the promote checkpoint index reached (0: none).
        rollback_look: the rollback checkpoint index reached (0: none).
    """

    decision: CanaryDecision
    reasons: tuple[str, ...]
    checks: tuple[CanaryCheck, ...]
    error_breach_since: datetime | None
    n_baseline: int
    n_candidate: int
    sessions_baseline: int
    sessions_candidate: int
    look: int
    rollback_look: int = 0

    def to_json(self) -> dict[str, JsonValue]:
        """A JSON-safe dict (no NaN; datetimes as ISO 8601 strings)."""
        return {
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "checks": [c.to_json() for c in self.checks],
            "error_breach_since": (
                None if self.error_breach_since is None else self.error_breach_since.isoformat()
            ),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "sessions_baseline": self.sessions_baseline,
            "sessions_candidate": self.sessions_candidate,
            "look": self.look,
            "rollback_look": self.rollback_look,
        }


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


def _aware(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidDataError(
            f"{name} must be a timezone-aware datetime, got {value!r}", name=name
        )
    return value


def _observations(frame: pd.DataFrame) -> pd.DataFrame:
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


def _ratings(frame: pd.DataFrame) -> pd.DataFrame:
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
class _Arm:
    requests: int
    errors: int
    answered: int
    harmed: int
    format_n: int
    format_failed: int


def _arm(frame: pd.DataFrame) -> _Arm:
    answered = ~frame["error"].to_numpy(dtype=bool)
    expected = answered & frame["format_expected"].to_numpy(dtype=bool)
    failed = expected & frame["format_ok"].map(lambda v: v is False or v == 0).to_numpy(dtype=bool)
    return _Arm(
        requests=len(frame),
        errors=int((~answered).sum()),
        answered=int(answered.sum()),
        harmed=int((answered & frame["harmed"].to_numpy(dtype=bool)).sum()),
        format_n=int(expected.sum()),
        format_failed=int(failed.sum()),
    )


def _arms(frame: pd.DataFrame) -> dict[str, _Arm]:
    return {arm: _arm(frame.loc[frame["arm"] == arm]) for arm in ARMS}


def _sessions(frame: pd.DataFrame) -> int:
    """Sessions first seen in the step (``session_new``; a request without a session key
    is a session of its own)."""
    fresh = frame.loc[frame[SESSION_NEW]]
    session = fresh["session"]
    missing = session.isna()
    return int(session[~missing].astype(str).nunique()) + int(missing.sum())


def _latencies(frame: pd.DataFrame, arm: str, column: str) -> npt.NDArray[np.float64]:
    rows = frame.loc[(frame["arm"] == arm) & ~frame["error"] & ~frame["cache_hit"], column]
    values: npt.NDArray[np.float64] = rows.to_numpy(dtype=float)
    finite: npt.NDArray[np.float64] = values[np.isfinite(values)]
    return finite


# ------------------------------------------------------------------ checks


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}%"


_RATE_WHAT = {
    "error_rate": ("error rate", "requests"),
    "harm_rate": ("harm rate", "answered requests"),
    "format_failure": ("format-failure rate", "format-expected answers"),
    "spot_check_bad": ("share of spot checks rated bad", "ratings"),
}


def _proportion_check(
    name: str,
    role: Literal["promote", "rollback"],
    counts: tuple[int, int, int, int],
    threshold: float,
    level: float,
    look_note: str,
) -> CanaryCheck:
    x_c, n_c, x_b, n_b = counts
    what, unit = _RATE_WHAT[name]
    if n_c == 0 or n_b == 0 or level <= 0.0:
        why = (
            f"no rollback look yet ({look_note})"
            if level <= 0.0
            else f"{n_c} candidate and {n_b} baseline {unit}"
        )
        return CanaryCheck(
            name, role, "not_enough_data", None, None, None, threshold, None, f"{what}: {why}"
        )
    result: TwoProportionResult = (
        proportion_noninferiority(x_c, n_c, x_b, n_b, threshold, level)
        if role == "promote"
        else proportion_excess(x_c, n_c, x_b, n_b, threshold, level)
    )
    method = "score p"
    if smallest_expected_count(x_c, n_c, x_b, n_b, threshold) < EXACT_BELOW_EXPECTED:
        exact = exact_unconditional_test(
            x_c, n_c, x_b, n_b, threshold, "smaller" if role == "promote" else "larger", level
        )
        result = replace(result, p_value=exact.p_value, rejected=exact.rejected)
        method = "exact unconditional p (an expected count < 5)"
    shown = f"candidate {x_c}/{n_c} ({_pct(x_c / n_c)}) vs baseline {x_b}/{n_b} ({_pct(x_b / n_b)})"
    tested = f"{method} = {result.p_value:.3g}, level {level:.4g}, {look_note}"
    status: Status
    if role == "promote":
        status = "pass" if result.passed else "fail"
        detail = (
            f"{what}: {shown}, difference {_pct(result.estimate)}, one-sided {1 - level:.4f} "
            f"upper bound {_pct(result.high)}; {'is' if result.passed else 'is not shown'} "
            f"below the margin {_pct(threshold)} ({tested})"
        )
    else:
        status = "breach" if result.breach else "pass"
        detail = (
            f"{what}: {shown}, excess {_pct(result.estimate)}, one-sided {1 - level:.4f} lower "
            f"bound {_pct(result.low)}; {'exceeds' if result.breach else 'is not shown above'} "
            f"the tolerated {_pct(threshold)} ({tested})"
        )
    return CanaryCheck(
        name, role, status, result.estimate, result.low, result.high, threshold, level, detail
    )


def _latency_ratio_check(
    frame: pd.DataFrame, key: str, margin: float, level: float, look_note: str
) -> tuple[CanaryCheck, bool]:
    column, q = latency_key_parts(key)
    cand = _latencies(frame, "candidate", column)
    base = _latencies(frame, "baseline", column)
    name = f"latency_ratio.{key}"
    if cand.size == 0 and base.size == 0:
        return (
            CanaryCheck(
                name,
                "promote",
                "not_enough_data",
                None,
                None,
                None,
                margin,
                level,
                f"{key}: no {column} values in either arm (not applicable, not required)",
            ),
            False,
        )
    result = quantile_ratio_interval(cand, base, q, level)
    if not result.enough:
        return (
            CanaryCheck(
                name,
                "promote",
                "not_enough_data",
                _finite_or_none(result.estimate),
                None,
                None,
                margin,
                level,
                f"{key}: {result.n_candidate} candidate and {result.n_baseline} baseline "
                f"latencies are too few for an order-statistic bound at level {level:.4g} "
                f"({look_note})",
            ),
            True,
        )
    passed = result.below(margin)
    detail = (
        f"{key}: candidate {result.candidate_quantile:.1f} ms vs baseline "
        f"{result.baseline_quantile:.1f} ms, ratio {result.estimate:.3f}, one-sided "
        f"{1 - level:.4f} upper bound {result.high:.3f} "
        f"({result.candidate_upper_ms:.1f} / {result.baseline_lower_ms:.1f} ms); "
        f"{'below' if passed else 'not shown below'} the margin {margin:g} ({look_note})"
    )
    return (
        CanaryCheck(
            name,
            "promote",
            "pass" if passed else "fail",
            result.estimate,
            None,
            result.high,
            margin,
            level,
            detail,
        ),
        True,
    )


def _latency_limit_check(
    frame: pd.DataFrame, key: str, limit_ms: float, level: float, look_note: str
) -> CanaryCheck:
    column, q = latency_key_parts(key)
    name = f"latency_limit.{key}"
    values = _latencies(frame, "candidate", column)
    if level <= 0.0:
        return CanaryCheck(
            name,
            "rollback",
            "not_enough_data",
            None,
            None,
            None,
            limit_ms,
            None,
            f"{key}: no rollback look yet ({look_note})",
        )
    result = quantile_above_limit(values, q, limit_ms, level)
    if not result.enough:
        return CanaryCheck(
            name,
            "rollback",
            "not_enough_data",
            _finite_or_none(result.estimate),
            None,
            None,
            limit_ms,
            level,
            f"{key}: {result.n} candidate latencies are too few for a lower order-statistic "
            f"bound at level {level:.4g} ({look_note})",
        )
    detail = (
        f"{key}: candidate {result.estimate:.1f} ms, one-sided {1 - level:.4f} lower bound "
        f"{result.low:.1f} ms; {'above' if result.above else 'not shown above'} the limit "
        f"{limit_ms:g} ms (n = {result.n}, {look_note})"
    )
    return CanaryCheck(
        name,
        "rollback",
        "breach" if result.above else "pass",
        result.estimate,
        result.low,
        None,
        limit_ms,
        level,
        detail,
    )


def _look_note(look: Look, what: str) -> str:
    if look.k == 0:
        return f"{what} look 0: first checkpoint {look.first} not reached"
    return f"{what} look {look.k} at checkpoint {look.n_k}"


# ------------------------------------------------------------------ the verdict


def step_verdict(
    observations: pd.DataFrame,
    ratings: pd.DataFrame,
    policy: CanaryPolicy,
    *,
    step_index: int,
    step_started_at: datetime,
    now: datetime,
    error_breach_since: datetime | None,
) -> StepVerdict:
    """Judge one poll of canary step ``step_index``.

    Args:
        observations: one row per live request of THIS step, columns
            :data:`OBSERVATION_COLUMNS`: ``arm`` ("baseline" | "candidate"),
            ``observed_at`` (tz-aware UTC), ``session`` (str or None: the request is its
            own session), ``error``, ``format_expected``, ``format_ok`` (bool or None),
            ``harmed``, ``cache_hit`` (bools), ``e2e_ms``, ``ttft_ms`` (float ms, NaN if
            unknown). May be empty (0 rows, same columns). Error rate = errors / all
            requests; harm rate = harmed / answered (not error); format failure =
            ``format_ok`` false / answered with ``format_expected``; latency over
            answered, non-cache-hit requests with a known value.
        ratings: one row per spot-check rating, columns :data:`RATING_COLUMNS`: ``arm``,
            ``rating`` (1–10), ``exchange_id``; in arrival order (oldest first). May be
            empty. A rating ≤ ``policy.rating_bad_at_or_below`` is bad.
        policy: the canary's frozen policy.
        step_index: the step being judged (0-based index into ``policy.steps``).
        step_started_at: when the step began (tz-aware).
        now: the time of this poll (tz-aware).
        error_breach_since: the value the previous poll's verdict returned (``None``
            at the first poll of a step or when it was not breaching).

    Decision (docs/canary-statistics.md, "Decision table"):
        ROLLBACK if any rollback check breaches — the error-rate excess only once it has
        breached continuously for ``rollback.error_rate_sustained_s`` (since
        ``error_breach_since``); else HOLD if the session split mismatches (SRM, the
        split is broken: nothing is promoted on it), the window or the minimum requests
        are not met, an error excess is breaching but not yet sustained, or a promote
        check fails or lacks data; else PROMOTE. At share 1.0 there is no baseline arm:
        PROMOTE (= complete) once the window and the candidate's minimum requests are met
        with no absolute-latency-limit breach.

    Requests in one session are not independent; the session-level SRM check guards the
    split, and the proportion and quantile tests treat requests as independent (a known
    limit: their levels are optimistic when sessions are long).

    Raises:
        InvalidDataError: a frame lacks a column (named), an ``arm`` value is unknown, a
            boolean column has a missing value, ``observed_at`` is not tz-aware, a
            rating is outside [1, 10], ``step_index`` is out of range, or a time is naive.
    """
    obs = _observations(observations)
    rated = _ratings(ratings)
    if (
        isinstance(step_index, bool)
        or not isinstance(step_index, int)
        or not (0 <= step_index < len(policy.steps))
    ):
        raise InvalidDataError(
            f"step_index must be in 0..{len(policy.steps) - 1}, got {step_index!r}",
            name="step_index",
        )
    _aware(step_started_at, "step_started_at")
    _aware(now, "now")
    if error_breach_since is not None:
        _aware(error_breach_since, "error_breach_since")
    step = policy.steps[step_index]
    last = step.share >= 1.0
    arms = _arms(obs)
    n_c, n_b = arms["candidate"].requests, arms["baseline"].requests
    sessions = {arm: _sessions(obs.loc[obs["arm"] == arm]) for arm in ARMS}

    promote_checks: list[tuple[CanaryCheck, bool]] = []  # (check, blocks promotion if not pass)
    rollback_checks: list[CanaryCheck] = []
    validity: list[CanaryCheck] = []
    reasons: list[str] = []

    # -- validity: window, minimum requests, split
    elapsed_s = (now - step_started_at).total_seconds()
    window_ok = elapsed_s >= step.min_window_s
    validity.append(
        CanaryCheck(
            "window",
            "validity",
            "pass" if window_ok else "fail",
            elapsed_s,
            None,
            None,
            step.min_window_s,
            None,
            f"the step has run {elapsed_s:.0f} s of its minimum window {step.min_window_s:g} s",
        )
    )
    needed = step.min_requests_per_arm
    enough_requests = n_c >= needed if last else min(n_c, n_b) >= needed
    counted = (
        f"{n_c} candidate requests (share 1.0: the only arm)"
        if last
        else f"{n_c} candidate and {n_b} baseline requests"
    )
    validity.append(
        CanaryCheck(
            "min_requests",
            "validity",
            "pass" if enough_requests else "not_enough_data",
            float(n_c if last else min(n_c, n_b)),
            None,
            None,
            float(needed),
            None,
            f"{counted}; at least {needed} per arm are needed (min_requests_per_arm)",
        )
    )
    if not last:
        srm = sample_ratio_mismatch(
            sessions["candidate"], sessions["baseline"], step.share, policy.srm_alpha
        )
        validity.append(
            CanaryCheck(
                "srm",
                "validity",
                "fail" if srm.mismatch else "pass",
                _finite_or_none(srm.observed_share),
                None,
                None,
                step.share,
                policy.srm_alpha,
                f"sessions: {sessions['candidate']} candidate, {sessions['baseline']} baseline "
                f"(candidate share {_fmt_share(srm.observed_share)}, expected {step.share:g}); "
                f"always-valid p = {srm.p_always_valid:.3g} (fixed-n chi-square p = "
                f"{_fmt_p(srm.p_fixed_n)}) at level {policy.srm_alpha:g}",
            )
        )

    # -- rollback: data cut at the rollback checkpoint
    r_look = rollback_look(n_c, needed, policy.alpha)
    r_note = _look_note(r_look, "rollback")
    r_frame = truncate_at_candidate(obs, r_look.n_k)
    r_arms = _arms(r_frame)
    rc, rb = r_arms["candidate"], r_arms["baseline"]
    error_check: CanaryCheck | None = None
    if not last:
        rb_max = policy.rollback
        error_check = _proportion_check(
            "error_rate",
            "rollback",
            (rc.errors, rc.requests, rb.errors, rb.requests),
            rb_max.error_rate_max_increase,
            r_look.level,
            r_note,
        )
        rollback_checks.append(error_check)
        rollback_checks.append(
            _proportion_check(
                "harm_rate",
                "rollback",
                (rc.harmed, rc.answered, rb.harmed, rb.answered),
                rb_max.harm_rate_max_increase,
                r_look.level,
                r_note,
            )
        )
        if rc.format_n or rb.format_n:
            rollback_checks.append(
                _proportion_check(
                    "format_failure",
                    "rollback",
                    (rc.format_failed, rc.format_n, rb.format_failed, rb.format_n),
                    rb_max.format_failure_max_increase,
                    r_look.level,
                    r_note,
                )
            )
    for key, limit in policy.rollback.latency_limits_ms.items():
        rollback_checks.append(_latency_limit_check(r_frame, key, limit, r_look.level, r_note))

    # -- spot checks: looks on the smaller arm's rating count
    bad_at = policy.rating_bad_at_or_below
    per_arm = {arm: rated.loc[rated["arm"] == arm, "rating"].to_numpy(dtype=float) for arm in ARMS}
    s_look = rating_look(
        min(per_arm["candidate"].size, per_arm["baseline"].size),
        policy.promote.min_ratings_per_arm,
        policy.alpha,
    )
    if not last:
        s_note = _look_note(s_look, "rating")
        if s_look.k == 0:
            spot_detail = (
                f"spot checks: {per_arm['candidate'].size} candidate and "
                f"{per_arm['baseline'].size} baseline ratings, fewer than "
                f"{policy.promote.min_ratings_per_arm} per arm (min_ratings_per_arm): "
                "not checked, not required"
            )
            promote_checks.append(
                (
                    CanaryCheck(
                        "spot_check_bad",
                        "promote",
                        "not_enough_data",
                        None,
                        None,
                        None,
                        policy.promote.spot_check_bad_margin,
                        None,
                        spot_detail,
                    ),
                    False,
                )
            )
            rollback_checks.append(
                CanaryCheck(
                    "spot_check_bad",
                    "rollback",
                    "not_enough_data",
                    None,
                    None,
                    None,
                    policy.rollback.spot_check_bad_max_increase,
                    None,
                    spot_detail,
                )
            )
        else:
            c_bad = int((per_arm["candidate"][: s_look.n_k] <= bad_at).sum())
            b_bad = int((per_arm["baseline"][: s_look.n_k] <= bad_at).sum())
            counts = (c_bad, s_look.n_k, b_bad, s_look.n_k)
            promote_checks.append(
                (
                    _proportion_check(
                        "spot_check_bad",
                        "promote",
                        counts,
                        policy.promote.spot_check_bad_margin,
                        s_look.level,
                        s_note,
                    ),
                    True,
                )
            )
            rollback_checks.append(
                _proportion_check(
                    "spot_check_bad",
                    "rollback",
                    counts,
                    policy.rollback.spot_check_bad_max_increase,
                    s_look.level,
                    s_note,
                )
            )

    # -- promote: data cut at the promote checkpoint
    p_look = promote_look(n_c, needed, policy.alpha)
    if not last:
        p_note = _look_note(p_look, "promote")
        if p_look.k == 0:
            reasons.append(
                f"waiting for the first promote checkpoint: {n_c} of {needed} candidate "
                "requests (promote tests run only at checkpoints, so repeated polls stay valid)"
            )
        else:
            p_frame = truncate_at_candidate(obs, p_look.n_k)
            p_arms = _arms(p_frame)
            pc, pb = p_arms["candidate"], p_arms["baseline"]
            pm = policy.promote
            promote_checks.append(
                (
                    _proportion_check(
                        "error_rate",
                        "promote",
                        (pc.errors, pc.requests, pb.errors, pb.requests),
                        pm.error_rate_margin,
                        p_look.level,
                        p_note,
                    ),
                    True,
                )
            )
            promote_checks.append(
                (
                    _proportion_check(
                        "harm_rate",
                        "promote",
                        (pc.harmed, pc.answered, pb.harmed, pb.answered),
                        pm.harm_rate_margin,
                        p_look.level,
                        p_note,
                    ),
                    True,
                )
            )
            if pc.format_n or pb.format_n:
                promote_checks.append(
                    (
                        _proportion_check(
                            "format_failure",
                            "promote",
                            (pc.format_failed, pc.format_n, pb.format_failed, pb.format_n),
                            pm.format_failure_margin,
                            p_look.level,
                            p_note,
                        ),
                        True,
                    )
                )
            for key, margin in pm.latency_ratio_margins.items():
                promote_checks.append(
                    _latency_ratio_check(p_frame, key, margin, p_look.level, p_note)
                )

    # -- decision
    checks = (*validity, *rollback_checks, *(c for c, _ in promote_checks))

    def verdict(decision: CanaryDecision, why: list[str], since: datetime | None) -> StepVerdict:
        return StepVerdict(
            decision=decision,
            reasons=tuple(why),
            checks=checks,
            error_breach_since=since,
            n_baseline=n_b,
            n_candidate=n_c,
            sessions_baseline=sessions["baseline"],
            sessions_candidate=sessions["candidate"],
            look=p_look.k,
            rollback_look=r_look.k,
        )

    since: datetime | None = None
    error_sustained = False
    sustained_s = policy.rollback.error_rate_sustained_s
    if error_check is not None and error_check.status == "breach":
        since = error_breach_since if error_breach_since is not None else now
        held_s = (now - since).total_seconds()
        error_sustained = held_s >= sustained_s
    breaches = [
        c
        for c in rollback_checks
        if c.status == "breach" and (c.name != "error_rate" or error_sustained)
    ]
    if breaches:
        why = []
        for c in breaches:
            if c.name == "error_rate" and since is not None:
                why.append(
                    f"rollback: the error-rate excess has breached continuously for "
                    f"{(now - since).total_seconds():.0f} s since {since.isoformat()} "
                    f"(error_rate_sustained_s = {sustained_s:g} s): {c.detail}"
                )
            else:
                why.append(f"rollback: {c.detail}")
        return verdict(CanaryDecision.ROLLBACK, why, since)
    hold: list[str] = []
    if since is not None and error_check is not None:
        hold.append(
            f"error-rate excess breaching since {since.isoformat()}; it rolls back once "
            f"sustained for {sustained_s:g} s: {error_check.detail}"
        )
    hold_prefix = {
        "srm": "the session split does not match the step's share (SRM): the split is "
        "broken, nothing is promoted on it",
        "window": "window not passed",
        "min_requests": "not enough requests",
    }
    hold.extend(f"{hold_prefix[c.name]}: {c.detail}" for c in validity if c.status != "pass")
    for check, blocking in promote_checks:
        if blocking and check.status != "pass":
            word = "failed" if check.status == "fail" else "lacks data"
            hold.append(f"promote check {check.name} {word}: {check.detail}")
    hold.extend(reasons)  # the promote look not reached yet, if so
    if last:
        note = (
            "share 1.0 (full rollout): there is no baseline arm, so the proportion and "
            "ratio checks are not run; the step is judged on the candidate's absolute "
            "latency limits, its minimum requests and the window"
        )
        if hold:
            return verdict(CanaryDecision.HOLD, [*hold, note], since)
        return verdict(
            CanaryDecision.PROMOTE,
            [
                f"complete: window {elapsed_s:.0f} s >= {step.min_window_s:g} s, {n_c} "
                "candidate requests, no rollback condition shown",
                note,
            ],
            since,
        )
    if hold:
        return verdict(CanaryDecision.HOLD, hold, since)
    return verdict(
        CanaryDecision.PROMOTE,
        [
            f"all promote checks passed at promote look {p_look.k} (checkpoint {p_look.n_k} "
            f"candidate requests, level {p_look.level:.4g}); no rollback condition shown; "
            "the session split matches; window and requests met"
        ],
        since,
    )


def _fmt_share(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.4f}"


def _fmt_p(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"
