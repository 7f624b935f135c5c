"""The gate policy's schema: every threshold of the gate, its default and its bounds.

A policy is a frozen :class:`GatePolicy` of metric blocks (pydantic models; the YAML
form, its loading and its hash are in :mod:`shadoweval.stats.policy.loading`). Validation is
strict: unknown keys are rejected with their name, margins must be > 0 (a
zero or negative margin would make a non-inferiority test pass or fail by construction),
alphas lie in (0, 0.5), ratio limits are > 1, confidences lie in (0.5, 1). Every threshold
must be written as a YAML number: a string (``alpha: "0.05"``) or a boolean
(``margin: yes``) is rejected, never coerced, and an integer field (``min_pairs_pooled``,
``seed``, …) must be an integer (``50``, not ``50.0``); a float field may be written as an
integer (``p95_ratio_max: 2``). :mod:`shadoweval.stats.policy.loading` raises every problem as
:class:`~shadoweval.errors.ConfigError` naming the dotted field and the value read, e.g.
``policy field error_rate.margin = -0.01: must be > 0``.

Per-task-type overrides (``task_types: {code: {error_rate: {margin: 0.01}}}``) are
deep-merged over the top-level blocks when the policy is validated; the stored policy is
fully resolved, so :func:`effective` is a lookup and the hash covers what is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from shadoweval.records import POOLED
from shadoweval.stats.policy.blocks import (
    BinaryMetricPolicy,
    ChangePolicy,
    CostPolicy,
    Count,
    FormatParsePolicy,
    HarmPolicy,
    InfraErrorPolicy,
    LatencyPolicy,
    NetHarmPolicy,
    Number,
    ObservationPolicy,
    OutputTokensPolicy,
    SequentialPolicy,
    SimilarityPolicy,
    ToolBehaviourPolicy,
    ValidityPolicy,
    _Block,
    _strict_integer,
)
from shadoweval.stats.policy.causes import CausesPolicy
from shadoweval.stats.policy.judge import JudgePolicy

__all__ = [
    "GatePolicy",
    "RoutePolicy",
    "TaskTypePolicy",
    "effective",
]


class TaskTypePolicy(_Block):
    """The policy as applied to one task type (or to the pooled analysis).

    Attributes:
        min_pairs: fewer pairs than this make every check of the task type
            inconclusive (HOLD). Default: the policy's ``min_pairs_per_task_type``.
        error_rate, infra_error_rate, format_parse, similarity, latency, output_tokens:
            the metric blocks, each the top-level block with this task type's overrides
            merged in.
    """

    min_pairs: Count = Field(default=50, ge=2)
    error_rate: BinaryMetricPolicy = BinaryMetricPolicy()
    infra_error_rate: InfraErrorPolicy = InfraErrorPolicy()
    format_parse: FormatParsePolicy = FormatParsePolicy()
    similarity: SimilarityPolicy = SimilarityPolicy()
    latency: LatencyPolicy = LatencyPolicy()
    output_tokens: OutputTokensPolicy = OutputTokensPolicy()
    change: ChangePolicy = ChangePolicy()
    harm: HarmPolicy = HarmPolicy()
    tool_calls: ToolBehaviourPolicy = ToolBehaviourPolicy()
    net_harm: NetHarmPolicy = NetHarmPolicy()


_METRIC_BLOCKS = (
    "error_rate",
    "infra_error_rate",
    "format_parse",
    "similarity",
    "latency",
    "output_tokens",
    "change",
    "harm",
    "tool_calls",
    "net_harm",
)


class RoutePolicy(_Block):
    """What the gate asks of one captured route (``routes: {"/v1/responses": {...}}``).

    Attributes:
        required: traffic captured on the route must be replayed and scored before a
            PROMOTE (default ``true``): a captured route with no pair, or with replay
            coverage below ``min_coverage``, is a HOLD naming the route. ``false`` exempts
            it: the verdict still names the route and its unevaluated exchanges, as a
            note, and they still count in the run's and their task types' coverage.
    """

    required: StrictBool = True


def _as_mapping(value: object) -> dict[str, Any] | None:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, Mapping):
        return dict(value)
    return None


class GatePolicy(_Block):
    """All thresholds of the gate (DESIGN §5; methods in gate-statistics.md §2).

    Attributes:
        version: policy format version; only 1 exists.
        alpha: one-sided level of each non-inferiority test. Default 0.025 (a 95%
            two-sided interval clears the margin). In (0, 0.5).
        alpha_harm: family-wise level of the harm (rollback) tests, Holm-adjusted
            across task types × critical metrics and spent over looks. Default 0.01.
            In (0, 0.5).
        power: design power of each non-inferiority test; a check's minimum pairs is
            the larger of its ``min_pairs`` and the power calculation at the observed
            discordance / spread (:mod:`shadoweval.stats.power`). Default 0.8. In (0.5, 1).
        min_pairs_per_task_type: floor on the pairs a task type needs before it can
            pass. Default 50.
        min_pairs_pooled: floor on the pairs the pooled analysis needs before it can
            pass. Default 100.
        min_traffic_share: task types with a smaller share of the pairs are reported
            but do not block PROMOTE (harm in them can still roll back). Default 0.05.
        min_coverage: paired / captured below this, for the run or for any captured
            task type, is HOLD (invalid). Default 0.9.
        sequential: checkpoints, sample cap and α spending (:class:`SequentialPolicy`).
        validity: the task-mix test (:class:`ValidityPolicy`).
        error_rate, infra_error_rate, format_parse, similarity, latency, output_tokens:
            metric blocks.
        task_types: per-task-type overrides of any metric block and of ``min_pairs``,
            resolved on validation into full :class:`TaskTypePolicy` views. A name that
            matches no task type of the run's traffic is a HOLD naming it (a typo must
            not change the verdict silently; :mod:`shadoweval.stats.policy.traffic`).
        cost: whether a cost guardrail alone may roll back a candidate whose quality is
            significantly better (:class:`CostPolicy`; not per task type).
        causes: when the verdict names the tokenizer, the chat template, the token budget
            or the sampling defaults as the likely cause (:class:`CausesPolicy`; not per
            task type).
        judge: the LLM judge's vote and cost (:class:`JudgePolicy`; not per task type):
            the floor on its agreement with labels below which it does not vote, and
            what one judge run may spend — a token budget, a money budget, prices.
        routes: per-route requirements (:class:`RoutePolicy`), keyed by the route as
            captured, without a trailing slash (``/v1/responses``); every captured route
            is required unless listed here with ``required: false``.
        baseline_model: the baseline model that counts when the capture holds exchanges
            of several (the live model was changed while capturing): only its exchanges
            are gated. ``None`` (default): a capture with several baseline models holds
            the verdict, naming them (a blend of two baselines compares to neither).
    """

    version: Annotated[Literal[1], BeforeValidator(_strict_integer)] = 1
    alpha: Number = Field(default=0.025, gt=0, lt=0.5)
    alpha_harm: Number = Field(default=0.01, gt=0, lt=0.5)
    power: Number = Field(default=0.8, gt=0.5, lt=1)
    min_pairs_per_task_type: Count = Field(default=50, ge=2)
    min_pairs_pooled: Count = Field(default=100, ge=2)
    min_traffic_share: Number = Field(default=0.05, ge=0, lt=1)
    min_coverage: Number = Field(default=0.9, gt=0, le=1)
    sequential: SequentialPolicy = SequentialPolicy()
    validity: ValidityPolicy = ValidityPolicy()
    error_rate: BinaryMetricPolicy = BinaryMetricPolicy()
    infra_error_rate: InfraErrorPolicy = InfraErrorPolicy()
    format_parse: FormatParsePolicy = FormatParsePolicy()
    similarity: SimilarityPolicy = SimilarityPolicy()
    latency: LatencyPolicy = LatencyPolicy()
    output_tokens: OutputTokensPolicy = OutputTokensPolicy()
    change: ChangePolicy = ChangePolicy()
    harm: HarmPolicy = HarmPolicy()
    tool_calls: ToolBehaviourPolicy = ToolBehaviourPolicy()
    net_harm: NetHarmPolicy = NetHarmPolicy()
    observation: ObservationPolicy = ObservationPolicy()
    cost: CostPolicy = CostPolicy()
    causes: CausesPolicy = CausesPolicy()
    judge: JudgePolicy = JudgePolicy()
    task_types: dict[str, TaskTypePolicy] = Field(default_factory=dict)
    routes: dict[str, RoutePolicy] = Field(default_factory=dict)
    baseline_model: str | None = Field(default=None, min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _resolve_task_types(cls, data: Any) -> Any:
        """Deep-merge each task type's overrides over the top-level blocks."""
        if not isinstance(data, Mapping):
            return data
        overrides = data.get("task_types")
        if not isinstance(overrides, Mapping):
            return data
        base: dict[str, Any] = {
            "min_pairs": data.get(
                "min_pairs_per_task_type", cls.model_fields["min_pairs_per_task_type"].default
            )
        }
        for block in _METRIC_BLOCKS:
            if block in data:
                base[block] = _as_mapping(data[block])
        resolved: dict[Any, Any] = {}
        for name, override in overrides.items():
            if isinstance(override, TaskTypePolicy):
                resolved[name] = override
                continue
            raw = {} if override is None else _as_mapping(override)
            if raw is None:
                resolved[name] = override  # not a mapping: let field validation say so
                continue
            merged = {k: v for k, v in base.items() if v is not None}
            for key, value in raw.items():
                inner = _as_mapping(value)
                if key in _METRIC_BLOCKS and inner is not None and key in merged:
                    merged[key] = {**merged[key], **inner}
                else:
                    merged[key] = value
            resolved[name] = merged
        return {**data, "task_types": resolved}

    @field_validator("task_types")
    @classmethod
    def _task_type_names(cls, value: dict[str, TaskTypePolicy]) -> dict[str, TaskTypePolicy]:
        for name in value:
            if not name.strip():
                raise ValueError("task type names must not be empty")
            if name == POOLED:
                raise ValueError(f"{POOLED!r} is reserved for the pooled analysis")
        return value

    @field_validator("routes")
    @classmethod
    def _route_names(cls, value: dict[str, RoutePolicy]) -> dict[str, RoutePolicy]:
        for route in value:
            if not route.startswith("/") or "?" in route:
                raise ValueError(
                    f"route {route!r} must be a path starting with '/', without a query"
                )
            if route != "/" and route.endswith("/"):
                raise ValueError(
                    f"route {route!r}: write it without the trailing slash "
                    f"({route.rstrip('/') or '/'!r}); requests with one are captured under it"
                )
        return value

    def route_required(self, route: str) -> bool:
        """Whether captured traffic on ``route`` must be evaluated (not exempted here)."""
        listed = self.routes.get(route)
        return True if listed is None else listed.required


def effective(policy: GatePolicy, task_type: str) -> TaskTypePolicy:
    """Return the policy as applied to ``task_type``.

    ``task_type == POOLED`` gives the top-level blocks with ``min_pairs_pooled``; a task
    type listed under ``task_types`` gives its resolved view; any other task type gives
    the top-level blocks with ``min_pairs_per_task_type``.
    """
    if task_type != POOLED and task_type in policy.task_types:
        return policy.task_types[task_type]
    min_pairs = policy.min_pairs_pooled if task_type == POOLED else policy.min_pairs_per_task_type
    blocks = {block: getattr(policy, block) for block in _METRIC_BLOCKS}
    return TaskTypePolicy(min_pairs=min_pairs, **blocks)
