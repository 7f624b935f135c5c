"""The gate policy: every threshold of the gate, written down before a run starts.

* :mod:`shadoweval.stats.policy.schema` — :class:`GatePolicy` and its metric blocks (defaults,
  bounds, per-task-type overrides), :func:`effective`.
* :mod:`shadoweval.stats.policy.loading` — :func:`parse_policy`, :func:`parse_policy_yaml`,
  :func:`load_policy` (strict YAML, :class:`~shadoweval.errors.ConfigError` naming the
  field), :func:`policy_hash`, :func:`policy_to_yaml`, :data:`DEFAULT_POLICY_FILE`.
* :mod:`shadoweval.stats.policy.traffic` — :func:`policy_traffic_problems`: policy task types and
  routes that match no traffic of a run, with the closest name.

This package re-exports both, so callers import from :mod:`shadoweval.stats.policy`.
"""

from __future__ import annotations

from shadoweval.stats.policy.loading import (
    DEFAULT_POLICY_FILE,
    load_policy,
    parse_policy,
    parse_policy_yaml,
    policy_hash,
    policy_to_yaml,
)
from shadoweval.stats.policy.schema import (
    HARM_DETECTORS,
    BinaryMetricPolicy,
    ChangeMode,
    ChangePolicy,
    CostPolicy,
    FormatParsePolicy,
    GatePolicy,
    HarmPolicy,
    InfraErrorPolicy,
    LatencyMetric,
    LatencyPolicy,
    NetHarmPolicy,
    ObservationPolicy,
    OutputTokensPolicy,
    RoutePolicy,
    SequentialPolicy,
    SimilarityPolicy,
    SpendingKind,
    TaskTypePolicy,
    ToolBehaviourPolicy,
    ValidityPolicy,
    effective,
)
from shadoweval.stats.policy.traffic import policy_traffic_problems

__all__ = [
    "DEFAULT_POLICY_FILE",
    "HARM_DETECTORS",
    "BinaryMetricPolicy",
    "ChangeMode",
    "ChangePolicy",
    "CostPolicy",
    "FormatParsePolicy",
    "GatePolicy",
    "HarmPolicy",
    "InfraErrorPolicy",
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
