"""A run's gate policy as the replay needs it: loaded, frozen and checked against traffic.

Opening a run (:mod:`shadoweval.application.runs`) freezes its policy (YAML and hash) and a
replay warns about policy keys that match none of the run's traffic. Both need the policy
schema only (:mod:`shadoweval.stats.policy`: pydantic and YAML), not the gate's statistics,
so they live here rather than in :mod:`shadoweval.application.gating` (which needs pandas,
SciPy and statsmodels): ``replay run`` works in the light install (``pip install
shadow-eval``, no ``evaluate`` extra). :mod:`shadoweval.application.gating` re-exports
both (:func:`load_gate_policy`, :func:`run_policy_warnings`).

The policy schema is imported inside the two functions, when a run is opened or checked:
importing ``replay run``'s modules (and its ``--help``) loads nothing of
:mod:`shadoweval.stats` (issue 33; ``tests/packaging/test_live_path_imports.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shadoweval.storage import Repository, RunInfo

if TYPE_CHECKING:
    from shadoweval.stats.policy import GatePolicy

__all__ = ["load_gate_policy", "run_policy_warnings"]


def load_gate_policy(path: Path | None) -> tuple[GatePolicy, str, str]:
    """Return (policy, its YAML text, its hash); the default policy when ``path`` is None.

    Raises:
        ConfigError: the file cannot be read or is not a valid policy.
    """
    from shadoweval.stats.policy import (
        DEFAULT_POLICY_FILE,
        load_policy,
        policy_hash,
        policy_to_yaml,
    )

    policy = load_policy(path if path is not None else DEFAULT_POLICY_FILE)
    return policy, policy_to_yaml(policy), policy_hash(policy)


def run_policy_warnings(repo: Repository, run: RunInfo) -> tuple[str, ...]:
    """``policy task_types.extration matches no traffic (…); did you mean 'extraction'?``
    for every key of ``run``'s frozen policy that matches none of its stored traffic
    (captured task types and routes; no pairs needed: a replay can warn before scoring).
    """
    from shadoweval.stats.policy import (
        parse_policy_yaml,
        policy_traffic_problems,
    )

    policy = parse_policy_yaml(run.policy_yaml)
    coverage = repo.coverage_counts(run.run_id)
    seen = {t for t, n in coverage.per_task_type.items() if n > 0}
    routes = set(coverage.per_route) if coverage.per_route else None
    problems = policy_traffic_problems(policy, task_types=seen, routes=routes)
    return tuple(f"policy {problem.describe()}" for problem in problems)
