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

from dataclasses import replace
from datetime import datetime

import pandas as pd

from shadoweval.records import CheckRole, StepVerdict
from shadoweval.stats.canary.families import CANARY_FAMILIES, ROLE_ORDER
from shadoweval.stats.canary.frames import OBSERVATION_COLUMNS, RATING_COLUMNS, SESSION_NEW
from shadoweval.stats.canary.policy import CanaryPolicy
from shadoweval.stats.canary.step import CanaryJudged, StepContext, step_context
from shadoweval.stats.engine import (
    Findings,
    ReasonLayout,
    decide,
    findings,
    open_checks,
    run_families,
)

__all__ = [
    "CANARY_LAYOUT",
    "OBSERVATION_COLUMNS",
    "RATING_COLUMNS",
    "SESSION_NEW",
    "StepVerdict",
    "step_verdict",
]

CANARY_LAYOUT = ReasonLayout(
    rollback_blocked=("harms",),
    hold_blocked=("blocked", "holds", "open", "waiting", "notes"),
    rollback=("harms",),
    hold=("holds", "open", "waiting", "notes"),
    hold_leading=("holds",),
)
"""The step verdict's reasons: a ROLLBACK lists its breaches only; a HOLD the error-rate
excess not yet sustained, then the validity and promote checks not passed (in check
order), then the promote checkpoint not reached, then (at share 1.0) the full-rollout note."""

_HOLD_PREFIX = {
    "srm": "the session split does not match the step's share (SRM): the split is "
    "broken, nothing is promoted on it",
    "window": "window not passed",
    "min_requests": "not enough requests",
}

_LAST_NOTE = (
    "share 1.0 (full rollout): there is no baseline arm, so the proportion and "
    "ratio checks are not run; the step is judged on the candidate's absolute "
    "latency limits, its minimum requests and the window"
)


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
    ctx = step_context(
        observations,
        ratings,
        policy,
        step_index=step_index,
        step_started_at=step_started_at,
        now=now,
        error_breach_since=error_breach_since,
    )
    checks = sorted(run_families(CANARY_FAMILIES, ctx), key=lambda j: ROLE_ORDER[j.check.role])
    checks, since = _sustained(checks, policy, now, error_breach_since)

    def line(j: CanaryJudged) -> str:
        return _line(j, since, now, policy)

    found = findings(checks, line)
    waiting = []
    if not ctx.last and ctx.promote.k == 0:
        waiting.append(
            f"waiting for the first promote checkpoint: {ctx.n_candidate} of "
            f"{ctx.step.min_requests_per_arm} candidate requests (promote tests run only at "
            "checkpoints, so repeated polls stay valid)"
        )
    decided = decide(
        Findings(
            harms=found.harms,
            holds=found.holds,
            open=[line(j) for j in open_checks(checks)],
            waiting=waiting,
            notes=[_LAST_NOTE] if ctx.last else [],
        ),
        CANARY_LAYOUT,
        promote=lambda: _promote_reasons(ctx),
    )
    return StepVerdict(
        decision=decided.decision,
        reasons=tuple(decided.reasons),
        checks=tuple(j.check for j in checks),
        error_breach_since=since,
        n_baseline=ctx.n_baseline,
        n_candidate=ctx.n_candidate,
        sessions_baseline=ctx.sessions["baseline"],
        sessions_candidate=ctx.sessions["candidate"],
        look=ctx.promote.k,
        rollback_look=ctx.rollback.k,
    )


def _is_error_rollback(j: CanaryJudged) -> bool:
    return j.check.name == "error_rate" and j.check.role == CheckRole.ROLLBACK


def _sustained(
    checks: list[CanaryJudged],
    policy: CanaryPolicy,
    now: datetime,
    error_breach_since: datetime | None,
) -> tuple[list[CanaryJudged], datetime | None]:
    """The error-rate excess rolls back only once it has breached continuously for
    ``error_rate_sustained_s``: before that its breach holds. Returns the checks so
    decided and when the current breach began (``None``: not breaching)."""
    error = next((j for j in checks if _is_error_rollback(j)), None)
    if error is None or error.check.status != "breach":
        return checks, None
    since = error_breach_since if error_breach_since is not None else now
    if (now - since).total_seconds() >= policy.rollback.error_rate_sustained_s:
        return checks, since
    pending = replace(error, harm=False, on_fail="hold")
    return [pending if j is error else j for j in checks], since


def _line(j: CanaryJudged, since: datetime | None, now: datetime, policy: CanaryPolicy) -> str:
    """A check's reason line: a breach that rolls back, the error-rate excess not yet
    sustained, or a validity or promote check that keeps the step open."""
    c = j.check
    sustained_s = policy.rollback.error_rate_sustained_s
    if c.role == CheckRole.ROLLBACK:
        if _is_error_rollback(j) and since is not None:
            if not j.harm:
                return (
                    f"error-rate excess breaching since {since.isoformat()}; it rolls back "
                    f"once sustained for {sustained_s:g} s: {c.detail}"
                )
            return (
                f"rollback: the error-rate excess has breached continuously for "
                f"{(now - since).total_seconds():.0f} s since {since.isoformat()} "
                f"(error_rate_sustained_s = {sustained_s:g} s): {c.detail}"
            )
        return f"rollback: {c.detail}"
    if c.role == CheckRole.VALIDITY:
        return f"{_HOLD_PREFIX[c.name]}: {c.detail}"
    word = "failed" if c.status == "fail" else "lacks data"
    return f"promote check {c.name} {word}: {c.detail}"


def _promote_reasons(ctx: StepContext) -> list[str]:
    if ctx.last:
        return [
            f"complete: window {ctx.elapsed_s:.0f} s >= {ctx.step.min_window_s:g} s, "
            f"{ctx.n_candidate} candidate requests, no rollback condition shown",
            _LAST_NOTE,
        ]
    look = ctx.promote
    return [
        f"all promote checks passed at promote look {look.k} (checkpoint {look.n_k} "
        f"candidate requests, level {look.level:.4g}); no rollback condition shown; "
        "the session split matches; window and requests met"
    ]
