"""Validity (quality) checks: does the paired sample represent the captured traffic?

A replay has no randomisation, so the A/B sample-ratio-mismatch (SRM) check becomes
**pair completeness**: the paired exchanges' task-type mix must match the capture log's,
and every task type must be replayed to a reasonable share (gate-statistics.md §1.7).
A replay that loses, say, long extraction prompts to timeouts would otherwise gate on a
biased sample. A failed check means HOLD (invalid): promotion blocked.

* :func:`task_mix_chi2` — Pearson χ² goodness of fit against the captured mix (fixed-n;
  T20). Re-running it on every poll at a fixed level inflates false alarms (pitfall
  11), so the gate tests it at each look's spent ``validity.mix_alpha``.
* :func:`coverage_by_task_type` — task types replayed below a minimum share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from shadoweval.stats.inputs import InsufficientDataError, InvalidDataError, count

__all__ = ["MixCheck", "coverage_by_task_type", "task_mix_chi2"]


@dataclass(frozen=True)
class MixCheck:
    """Result of :func:`task_mix_chi2`.

    Attributes:
        statistic: Pearson's χ² = Σ (O − E)²/E over task types.
        p_value: upper-tail χ² p-value with ``dof`` degrees of freedom (1 when dof = 0).
        dof: task types with a captured count > 0, minus 1.
        worst_task_type: the task type with the largest (O − E)²/E, or ``None`` when
            every type matches its expectation exactly.
        ok: ``p_value ≥ alpha`` (no evidence that the mix differs).
        alpha: the level used.
    """

    statistic: float
    p_value: float
    dof: int
    worst_task_type: str | None
    ok: bool
    alpha: float = math.nan


def _counts(mapping: Mapping[str, int], name: str) -> dict[str, int]:
    if not isinstance(mapping, Mapping):
        raise InvalidDataError(f"{name} must be a mapping task type -> count", name=name)
    return {str(key): count(value, f"{name}[{key!r}]") for key, value in mapping.items()}


def task_mix_chi2(
    observed: Mapping[str, int], expected_counts: Mapping[str, int], *, alpha: float
) -> MixCheck:
    """Pearson χ² goodness of fit of the paired task-type mix against the captured mix.

    Expected counts are the captured shares times the paired total:
    ``E_t = N_paired · captured_t / N_captured``; a task type captured but never paired
    counts as observed 0; task types captured 0 times are left out. The test treats the
    paired sample as multinomial draws from the captured mix; since it is a subsample
    drawn without replacement the true variance is smaller, so the test is
    conservative. Source: :func:`scipy.stats.chisquare`; Eppo's SRM check (α = 0.001);
    T20: [600, 400] against 50/50 gives χ² = 40.00, p = 2.540e-10.

    Args:
        observed: paired exchanges per task type (counts ≥ 0), summing to > 0.
        expected_counts: captured exchanges per task type (counts ≥ 0; only their
            proportions matter).
        alpha: level in (0, 1) (default policy 0.001).

    Raises:
        InvalidDataError: a count negative or not an integer, a task type paired but
            never captured, no captured exchanges, alpha outside (0, 1).
        InsufficientDataError: no paired exchanges.
    """
    if not 0.0 < alpha < 1.0:
        raise InvalidDataError(f"alpha must be in (0, 1), got {alpha}", name="alpha")
    obs = _counts(observed, "observed")
    cap = _counts(expected_counts, "expected_counts")
    unknown = sorted(t for t, n in obs.items() if n > 0 and cap.get(t, 0) == 0)
    if unknown:
        raise InvalidDataError(
            f"task types paired but never captured: {', '.join(unknown)}", name="observed"
        )
    types = sorted(t for t, n in cap.items() if n > 0)
    if not types:
        raise InvalidDataError("no captured exchanges (expected counts sum to 0)")
    o = np.array([obs.get(t, 0) for t in types], dtype=np.float64)
    if o.sum() == 0:
        raise InsufficientDataError("no paired exchanges to compare with the captured mix")
    c = np.array([cap[t] for t in types], dtype=np.float64)
    e = o.sum() * c / c.sum()
    contributions = (o - e) ** 2 / e
    statistic = float(contributions.sum())
    dof = len(types) - 1
    p = float(scipy_stats.chi2.sf(statistic, dof)) if dof > 0 else 1.0
    worst = types[int(np.argmax(contributions))] if statistic > 0.0 else None
    return MixCheck(statistic, p, dof, worst, p >= alpha, float(alpha))


def coverage_by_task_type(
    paired: Mapping[str, int], captured: Mapping[str, int], min_share: float
) -> list[tuple[str, float]]:
    """Task types whose paired share of their captured exchanges is below ``min_share``.

    ``share_t = paired_t / captured_t`` for every task type captured at least once
    (a type never paired has share 0). Sorted by share, then name.

    Args:
        paired: paired exchanges per task type (counts ≥ 0).
        captured: captured exchanges per task type (counts ≥ 0).
        min_share: the minimum share in [0, 1].

    Returns:
        ``[(task_type, share), …]`` for the types below the minimum; empty when all pass.

    Raises:
        InvalidDataError: a count negative or not an integer, a task type with more
            pairs than captures (or paired but never captured), min_share outside [0, 1].
    """
    if not 0.0 <= min_share <= 1.0:
        raise InvalidDataError(f"min_share must be in [0, 1], got {min_share}", name="min_share")
    pairs = _counts(paired, "paired")
    caps = _counts(captured, "captured")
    too_many = sorted(t for t, n in pairs.items() if n > caps.get(t, 0))
    if too_many:
        raise InvalidDataError(
            f"task types with more pairs than captured exchanges: {', '.join(too_many)}"
        )
    shares = [(t, pairs.get(t, 0) / n) for t, n in caps.items() if n > 0]
    return sorted(((t, s) for t, s in shares if s < min_share), key=lambda item: (item[1], item[0]))
