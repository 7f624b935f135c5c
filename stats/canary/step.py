"""One poll of one canary step, as the unit its check families read (:class:`StepContext`),
and how a canary check becomes a :class:`~shadoweval.stats.engine.Judged`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict, Unpack

import numpy as np
import numpy.typing as npt
import pandas as pd

from shadoweval.records import CheckRole, StepCheck
from shadoweval.stats.canary.frames import (
    ARMS,
    ArmCounts,
    arm_counts,
    aware,
    checked_observations,
    checked_ratings,
    new_sessions,
)
from shadoweval.stats.canary.looks import (
    Look,
    promote_look,
    rating_look,
    rollback_look,
    truncate_at_candidate,
)
from shadoweval.stats.canary.policy import CanaryPolicy, CanaryStep
from shadoweval.stats.engine import Judged
from shadoweval.stats.inputs import InvalidDataError

__all__ = ["CanaryJudged", "StepContext", "StepPoll", "judged", "look_note", "step_context"]

CanaryJudged = Judged[StepCheck]
"""A decided canary check."""


def judged(check: StepCheck, *, blocking: bool = True) -> CanaryJudged:
    """A canary check's role in the engine's decision: a rollback check's breach is a harm
    (it rolls back; the error-rate excess only once sustained,
    :func:`shadoweval.stats.canary.verdict.step_verdict`); a validity or promote check that
    does not pass keeps the step open when it is ``blocking``."""
    if check.role == CheckRole.ROLLBACK:
        return Judged(check, check.status == "breach", False, False, "rollback")
    return Judged(check, False, blocking, False, "report")


def look_note(look: Look, what: str) -> str:
    """``promote look 2 at checkpoint 400``, or why there is no look yet."""
    if look.k == 0:
        return f"{what} look 0: first checkpoint {look.first} not reached"
    return f"{what} look {look.k} at checkpoint {look.n_k}"


@dataclass(frozen=True)
class StepContext:
    """What every canary check family reads for one poll of one step.

    Attributes:
        obs: the step's observations, checked (:mod:`shadoweval.stats.canary.frames`).
        ratings: the spot-check ratings per arm (1–10, arrival order).
        policy, step: the frozen policy and the step judged.
        last: the step's share is 1.0 (no baseline arm).
        n_candidate, n_baseline: requests per arm; ``sessions``: new sessions per arm.
        elapsed_s: seconds since the step began.
        rollback, rating, promote: the looks reached (rollback and promote on the
            candidate's request count, rating on the smaller arm's rating count).
        rollback_arms: per-arm counts of the data cut at the rollback checkpoint, and
            ``rollback_frame`` that data.
    """

    obs: pd.DataFrame
    ratings: dict[str, npt.NDArray[np.float64]]
    policy: CanaryPolicy
    step: CanaryStep
    last: bool
    n_candidate: int
    n_baseline: int
    sessions: dict[str, int]
    elapsed_s: float
    rollback: Look
    rating: Look
    promote: Look
    rollback_frame: pd.DataFrame
    rollback_arms: dict[str, ArmCounts]


def _step_index(step_index: int, policy: CanaryPolicy) -> int:
    if (
        isinstance(step_index, bool)
        or not isinstance(step_index, int)
        or not (0 <= step_index < len(policy.steps))
    ):
        raise InvalidDataError(
            f"step_index must be in 0..{len(policy.steps) - 1}, got {step_index!r}",
            name="step_index",
        )
    return step_index


class StepPoll(TypedDict):
    """Which step a poll judges and its times, as
    :func:`shadoweval.stats.canary.verdict.step_verdict` takes them (documented there)."""

    step_index: int
    step_started_at: datetime
    now: datetime
    error_breach_since: datetime | None


def step_context(
    observations: pd.DataFrame,
    ratings: pd.DataFrame,
    policy: CanaryPolicy,
    **poll: Unpack[StepPoll],
) -> StepContext:
    """The checked inputs of one poll and its looks
    (:func:`shadoweval.stats.canary.verdict.step_verdict` documents the arguments).

    Raises:
        InvalidDataError: as :func:`shadoweval.stats.canary.verdict.step_verdict`.
    """
    obs = checked_observations(observations)
    rated = checked_ratings(ratings)
    step = policy.steps[_step_index(poll["step_index"], policy)]
    aware(poll["step_started_at"], "step_started_at")
    aware(poll["now"], "now")
    if (since := poll["error_breach_since"]) is not None:
        aware(since, "error_breach_since")
    arms = arm_counts(obs)
    n_c, n_b = arms["candidate"].requests, arms["baseline"].requests
    needed = step.min_requests_per_arm
    r_look = rollback_look(n_c, needed, policy.alpha)
    r_frame = truncate_at_candidate(obs, r_look.n_k)
    per_arm = {arm: rated.loc[rated["arm"] == arm, "rating"].to_numpy(dtype=float) for arm in ARMS}
    return StepContext(
        obs=obs,
        ratings=per_arm,
        policy=policy,
        step=step,
        last=step.share >= 1.0,
        n_candidate=n_c,
        n_baseline=n_b,
        sessions={arm: new_sessions(obs.loc[obs["arm"] == arm]) for arm in ARMS},
        elapsed_s=(poll["now"] - poll["step_started_at"]).total_seconds(),
        rollback=r_look,
        rating=rating_look(
            min(per_arm["candidate"].size, per_arm["baseline"].size),
            policy.promote.min_ratings_per_arm,
            policy.alpha,
        ),
        promote=promote_look(n_c, needed, policy.alpha),
        rollback_frame=r_frame,
        rollback_arms=arm_counts(r_frame),
    )
