"""Does the policy fit the traffic? Names under ``task_types`` and ``routes`` that match none.

A per-task-type override whose name matches no task type of the run applies to nothing: a
typo (``extration`` for ``extraction``) would leave the stricter margin unapplied and change
the verdict silently. :func:`policy_traffic_problems` names every such key and the closest
existing name (:func:`difflib.get_close_matches`); the gate turns each into a HOLD reason
(:mod:`shadoweval.stats.gate`), and the CLI prints them as warnings.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass

from shadoweval.stats.policy.schema import GatePolicy

__all__ = ["PolicyTrafficProblem", "policy_traffic_problems"]


@dataclass(frozen=True, slots=True)
class PolicyTrafficProblem:
    """One policy key that matches no traffic: ``field`` (``task_types.extration``), the
    name, the names the traffic has, and the closest of them (``None`` when none is close).
    """

    field: str
    name: str
    seen: tuple[str, ...]
    closest: str | None

    def describe(self) -> str:
        """``task_types.extration matches no traffic (task types seen: …); did you mean
        'extraction'?``"""
        kind = "task types" if self.field.startswith("task_types.") else "routes"
        seen = ", ".join(self.seen) if self.seen else "none"
        field = self.field
        if self.name != self.name.strip() or not self.name.isprintable():
            # A trailing space or an invisible character is the whole problem: show it.
            field = f"{self.field.split('.', 1)[0]}.{self.name!r}"
        text = f"{field} matches no traffic ({kind} seen: {seen})"
        if self.closest is not None:
            text += f"; did you mean {self.closest!r}?"
        return text


def _closest(name: str, seen: Collection[str]) -> str | None:
    """The most similar of ``seen`` (case-insensitive), or ``None`` when none is close."""
    lowered = {s.lower(): s for s in seen}
    matches = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[matches[0]] if matches else None


def policy_traffic_problems(
    policy: GatePolicy,
    *,
    task_types: Collection[str],
    routes: Collection[str] | None = None,
) -> list[PolicyTrafficProblem]:
    """The policy's ``task_types`` and ``routes`` keys that match none of the traffic.

    Args:
        policy: the gate policy.
        task_types: the task types the run's traffic has (captured or paired).
        routes: the routes it has; ``None`` when not known (routes are then not checked).

    Returns:
        One problem per unmatched key, task types first, each in name order.
    """
    seen_types = tuple(sorted(set(task_types)))
    problems = [
        PolicyTrafficProblem(f"task_types.{name}", name, seen_types, _closest(name, seen_types))
        for name in sorted(policy.task_types)
        if name not in seen_types
    ]
    if routes is not None:
        seen_routes = tuple(sorted(set(routes)))
        problems += [
            PolicyTrafficProblem(f"routes.{name}", name, seen_routes, _closest(name, seen_routes))
            for name in sorted(policy.routes)
            if name not in seen_routes
        ]
    return problems
