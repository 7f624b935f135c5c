"""The gate policy: every threshold of the gate, written down before a run starts.

* :mod:`shadoweval.stats.policy.blocks` — the metric blocks of the policy (defaults, bounds).
* :mod:`shadoweval.stats.policy.schema` — :class:`GatePolicy`, which composes them (per-task-type
  overrides, per-route requirements), :func:`effective`.
* :mod:`shadoweval.stats.policy.loading` — :func:`parse_policy`, :func:`parse_policy_yaml`,
  :func:`load_policy` (strict YAML, :class:`~shadoweval.errors.ConfigError` naming the
  field), :func:`policy_hash`, :func:`policy_to_yaml`, :data:`DEFAULT_POLICY_FILE`.
* :mod:`shadoweval.stats.policy.judge` — :class:`JudgePolicy`: the judge's agreement floor,
  with the token and money budgets and prices of
  :mod:`shadoweval.stats.policy.judge_cost` (:class:`JudgeCostPolicy`).
* :mod:`shadoweval.stats.policy.traffic` — :func:`policy_traffic_problems`: policy task types and
  routes that match no traffic of a run, with the closest name.

This package re-exports their public names, so callers import from :mod:`shadoweval.stats.policy`.
"""

from __future__ import annotations

from shadoweval.stats.policy.blocks import (
    HARM_DETECTORS,
    BinaryMetricPolicy,
    ChangeMode,
    ChangePolicy,
    CostPolicy,
    FormatParsePolicy,
    HarmPolicy,
    InfraErrorPolicy,
    LatencyMetric,
    LatencyPolicy,
    NetHarmPolicy,
    ObservationPolicy,
    OutputTokensPolicy,
    SequentialPolicy,
    SimilarityPolicy,
    SpendingKind,
    ToolBehaviourPolicy,
    ValidityPolicy,
)
from shadoweval.stats.policy.causes import CausesPolicy
from shadoweval.stats.policy.judge import JudgePolicy
from shadoweval.stats.policy.judge_cost import JudgeCostPolicy
from shadoweval.stats.policy.loading import (
    DEFAULT_POLICY_FILE,
    load_policy,
    parse_policy,
    parse_policy_yaml,
    policy_hash,
    policy_to_yaml,
)
from shadoweval.stats.policy.schema import GatePolicy, RoutePolicy, TaskTypePolicy, effective
from shadoweval.stats.policy.traffic import policy_traffic_problems

__all__ = [
    "DEFAULT_POLICY_FILE",
    "HARM_DETECTORS",
    "BinaryMetricPolicy",
    "CausesPolicy",
    "ChangeMode",
    "ChangePolicy",
    "CostPolicy",
    "FormatParsePolicy",
    "GatePolicy",
    "HarmPolicy",
    "InfraErrorPolicy",
    "JudgeCostPolicy",
    "JudgePolicy",
    "LatencyMetric",
    "LatencyPolicy",
    "NetHarmPolicy",
    "ObservationPolicy",
    "OutputTokensPolicy",
    "RoutePolicy",
    "SequentialPolicy",
    "SimilarityPolicy",
    "SpendingKind",
    "TaskTypePolicy",
    "ToolBehaviourPolicy",
    "ValidityPolicy",
    "effective",
    "load_policy",
    "parse_policy",
    "parse_policy_yaml",
    "policy_hash",
    "policy_to_yaml",
    "policy_traffic_problems",
]
