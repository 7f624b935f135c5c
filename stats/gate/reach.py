"""How many pairs PROMOTE needs: one line for a HOLD whose blocking checks are only open.

Each open check carries the pairs at which it would pass with its rates and spread as
observed (:attr:`~shadoweval.records.Check.pairs_needed`, computed by the check from its
own interval and power code: :func:`shadoweval.stats.checks.sequential_interval.
pairs_to_clear`, :func:`shadoweval.stats.power.paired_binary_min_pairs`). Per task type
PROMOTE needs the largest of them; the line names the check that needs the most, its
margin and what it was computed at (docs/gate.md, "When can PROMOTE be reached?").
"""

from __future__ import annotations

from collections.abc import Sequence

from shadoweval.records import POOLED, Check, CheckOutcome
from shadoweval.stats.engine import Judged

__all__ = ["PROMOTE_NEEDS", "promote_reach"]

PROMOTE_NEEDS = "PROMOTE needs about"
"""Start of the line."""


def promote_reach(judged: Sequence[Judged[Check]]) -> list[str]:
    """``["PROMOTE needs about 1,050 pairs per task type (now 75 to 252): error_rate's
    1-point margin at zero discordance (…); …"]``, or ``[]`` when no open blocking check of
    a task type has a pair count.

    Only the blocking checks of task types (not pooled) that are INCONCLUSIVE count; those
    without a pair count (latency quantiles, net harm that needs judgements, …) are named
    at the end, grouped by metric, as needing more than pairs.
    """
    open_checks = [
        j.check
        for j in judged
        if j.blocking
        and j.check.task_type != POOLED
        and j.check.outcome is CheckOutcome.INCONCLUSIVE
    ]
    counted = [c for c in open_checks if c.pairs_needed is not None]
    if not counted:
        return []
    binding = max(counted, key=lambda c: (c.pairs_needed or 0, -c.n))
    # The task types' pair counts, read on the counted checks: a check with no usable pair
    # (latency without timings: n 0) says nothing of how many pairs the task type has.
    sizes = [c.n for c in counted]
    line = (
        f"{PROMOTE_NEEDS} {binding.pairs_needed:,} pairs per task type (now {min(sizes):,} "
        f"to {max(sizes):,}): {binding.metric}'s {binding.pairs_needed_basis}"
    )
    others = sorted({c.metric for c in counted if c.pairs_needed == binding.pairs_needed})
    others = [m for m in others if m != binding.metric]
    if others:
        line += f"; {', '.join(others)} need as many"
    uncounted: dict[str, list[str]] = {}
    for c in open_checks:
        if c.pairs_needed is None:
            uncounted.setdefault(c.metric, []).append(c.task_type)
    if uncounted:
        named = "; ".join(f"{m} in {', '.join(sorted(set(t)))}" for m, t in uncounted.items())
        line += f"; not counted here (their reasons say what they need): {named}"
    return [line]
