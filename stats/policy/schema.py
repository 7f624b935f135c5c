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

import itertools
import numbers
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from shadoweval.records import POOLED, HarmKind

__all__ = [
    "HARM_DETECTORS",
    "BinaryMetricPolicy",
    "ChangeMode",
    "ChangePolicy",
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
]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, numbers.Real):
        return "a float" if not isinstance(value, numbers.Integral) else "an integer"
    return f"a {type(value).__name__}"


def _strict_number(value: object) -> object:
    """Let only real numbers through: YAML ``"0.05"`` or ``yes`` must not become a number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"must be a YAML number (unquoted), not {_kind(value)}")
    return value


def _strict_integer(value: object) -> object:
    """Let only integers through: ``"50"``, ``50.0`` and ``true`` are all rejected."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"must be a YAML integer (unquoted, no decimal point), not {_kind(value)}")
    return int(value)


def _optional_integer(value: object) -> object:
    """Like :func:`_strict_integer`, but YAML ``null`` (``None``) means "not set"."""
    return None if value is None else _strict_integer(value)


Number = Annotated[float, BeforeValidator(_strict_number)]
"""A finite float read from YAML, written as a YAML number (an integer is fine); strings
and booleans are rejected."""
Count = Annotated[int, BeforeValidator(_strict_integer)]
"""An integer read from YAML, written as a YAML integer; strings, floats (even ``2.0``)
and booleans are rejected."""

OptionalCount = Annotated[int | None, BeforeValidator(_optional_integer)]
"""An integer read from YAML, or ``null`` for "not set"."""

LatencyMetric = Literal["e2e_ms", "ttft_ms", "ttfc_ms"]
"""Latency columns the gate knows, milliseconds: end-to-end, time to first token (any
token, reasoning included) and time to first visible content (content or a tool call)."""


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class BinaryMetricPolicy(_Block):
    """A paired binary guardrail (the model's error/empty rate).

    ``error_rate`` counts failures attributable to the model or its serving config: an
    empty answer, or an error that is not an infrastructure error (e.g. HTTP 400/413, a
    request the candidate rejects). Pairs with an infrastructure error on either side are
    left out (they are gated by :class:`InfraErrorPolicy`).

    Attributes:
        margin: non-inferiority margin on the difference of failure proportions
            ``p_cand_fail − p_base_fail`` (absolute proportion, 0.01 = 1 percentage
            point). Default 0.01 (gate-statistics.md §2.2), so that a 2-point regression
            is twice the margin. Must be in (0, 1).
        critical: a significant harm (McNemar, Holm-adjusted at ``alpha_harm``) rolls
            the candidate back. Default true.
    """

    margin: Number = Field(default=0.01, gt=0, lt=1)
    critical: StrictBool = True


class InfraErrorPolicy(_Block):
    """The infrastructure-error guardrail (reference failure case 11).

    A side has an infrastructure error when its request timed out, could not connect,
    got HTTP 408/429/5xx, returned an undecodable body, or (baseline) was cancelled: the
    serving stack failed, the model was never judged. Such pairs are left out of every
    quality check; this paired binary check (Tango NI + McNemar mid-p, as ``error_rate``)
    gates them instead. Its FAIL means HOLD ("the candidate's serving infrastructure
    failed; quality could not be judged"), never ROLLBACK.

    Attributes:
        margin: non-inferiority margin on ``p_cand_infra − p_base_infra`` (absolute
            proportion). Default 0.02. Must be in (0, 1).
        critical: always false: infrastructure errors never roll a candidate back.
            Writing ``true`` is an error.
    """

    margin: Number = Field(default=0.02, gt=0, lt=1)
    critical: StrictBool = False

    @field_validator("critical")
    @classmethod
    def _never_critical(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "must be false: an infrastructure failure holds the candidate (HOLD), "
                "it never rolls it back"
            )
        return value


class FormatParsePolicy(BinaryMetricPolicy):
    """The format-parse guardrail, on pairs where a structured output was requested.

    Attributes:
        margin: non-inferiority margin on ``p_base_ok − p_cand_ok`` (absolute
            proportion). Default 0.01.
        critical: as for :class:`BinaryMetricPolicy`. Default true.
        success_flag: which parse counts as success: ``strict`` (the whole output is
            JSON), ``fence_stripped`` (JSON after removing one code fence) or
            ``extracted`` (the first JSON value found in the text). Default
            ``fence_stripped``. A schema that was given must also validate.
    """

    success_flag: Literal["strict", "fence_stripped", "extracted"] = "fence_stripped"


class SimilarityPolicy(_Block):
    """The output-divergence guardrail (divergence ``D = 1 − cosine similarity``, in [0, 2]).

    When the run sent baseline repeats (``Coverage.baseline_repeat_replayed``; the
    baseline replayed against itself gives ``noise_similarity``), each task type is judged
    against that noise floor on the exchanges that have one (gate-statistics.md §1.6; a
    task type without any usable one is inconclusive, even when every repeat failed):
    ``e_i = D_cand_i − (1 + noise_ratio)·D_noise_i`` must have a mean below
    ``noise_margin``, i.e. the candidate may diverge
    from the baseline at most ``noise_ratio`` more than the baseline does from itself,
    plus ``noise_margin``. Only a run that sent no baseline repeat at all uses the mean of
    ``D_cand`` against ``max_mean_divergence``; the check's reason says that no noise floor
    was available.

    Attributes:
        max_mean_divergence: absolute limit on ``E[D_cand]`` when there is no noise floor.
            Default 0.35. Must be in (0, 2).
        noise_ratio: relative margin ``r`` over the noise floor. Default 0.25. In [0, 10].
        noise_margin: absolute margin ``δ_abs`` on ``E[e]`` (divergence units); keeps the
            margin above 0 for near-deterministic tasks. Default 0.01. In (0, 2).
        tail_quantile: level of the noise-divergence threshold of the tail-rate report
            (report only, :func:`shadoweval.stats.noise_floor.tail_rate_split`). Default 0.95.
            In (0.5, 1).
        tail_seed: seed of the tail-rate report's random half split. Default 20240601.
    """

    max_mean_divergence: Number = Field(default=0.35, gt=0, lt=2)
    noise_ratio: Number = Field(default=0.25, ge=0, le=10)
    noise_margin: Number = Field(default=0.01, gt=0, lt=2)
    tail_quantile: Number = Field(default=0.95, gt=0.5, lt=1)
    tail_seed: Count = Field(default=20240601, ge=0)


class LatencyPolicy(_Block):
    """The latency guardrails: quantile ratios candidate / baseline.

    The ratio's interval is the resampling-free paired Poisson bootstrap
    (:func:`shadoweval.stats.quantiles.paired_quantile_ratios_rf`): each arm's bootstrap quantile is
    the order statistic ``x_(I)``, ``I ~ Binomial(n + 1, q)`` (Schultzberg & Ankargren
    2022), and the two arms' log quantiles are correlated as the pairs' quantile
    indicators are. Its level is the look's spent α (:mod:`shadoweval.stats.sequential`).

    Attributes:
        metrics: latency columns to gate. Default ``[e2e_ms, ttft_ms, ttfc_ms]``
            (TTFT and TTFC on streamed requests only). An empty list disables latency
            gating explicitly.
        p50_ratio_max: the p50 ratio's upper confidence bound must not exceed this.
            Default 1.1. Must be > 1.
        p95_ratio_max: the same for p95. Default 1.2. Must be > 1.
        p99_ratio_max: the same for p99, gated only where at least
            ``min_tail_observations`` pairs lie above it (n·0.01 ≥ that). Default 1.3.
        min_pairs_p95: fewer latency pairs than this make a p95 check inconclusive.
            Default 100.
        min_tail_observations: observations beyond the p99 needed before p99 is gated.
            Default 50 (so p99 is gated from 5,000 latency pairs).
    """

    metrics: tuple[LatencyMetric, ...] = ("e2e_ms", "ttft_ms", "ttfc_ms")
    p50_ratio_max: Number = Field(default=1.1, gt=1)
    p95_ratio_max: Number = Field(default=1.2, gt=1)
    p99_ratio_max: Number = Field(default=1.3, gt=1)
    min_pairs_p95: Count = Field(default=100, ge=2)
    min_tail_observations: Count = Field(default=50, ge=1)

    @field_validator("metrics")
    @classmethod
    def _unique_metrics(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("metrics must not repeat")
        return value


class OutputTokensPolicy(_Block):
    """The cost guardrail: mean output tokens, candidate / baseline.

    Tested through the linearisation ``e_i = c_i − ratio_max·b_i`` (gate-statistics.md
    §1.6; :mod:`shadoweval.stats.checks.cost`): ``E[e] < 0`` exactly when ``E[c]/E[b] < ratio_max``.

    Attributes:
        enabled: gate output tokens. Default true. A gated metric without token counts
            cannot pass; set false for servers that report no usage.
        ratio_max: limit on the ratio of mean output tokens. Default 1.2. Must be > 1.
    """

    enabled: StrictBool = True
    ratio_max: Number = Field(default=1.2, gt=1)


SpendingKind = Literal["obf", "pocock"]
"""Lan–DeMets spending function (O'Brien–Fleming type or Pocock type)."""


class SequentialPolicy(_Block):
    """How the verdict stays valid when a CI job polls it (gate-statistics.md §2.4).

    A poll with n pairs evaluates the first ``n_k`` pairs (capture order) at the latest
    checkpoint ``n_k ≤ n`` of the geometric schedule ``first_checkpoint·factor^(k−1)``
    (capped at ``n_max``); the verdict's ``look`` is ``k`` (:mod:`shadoweval.stats.checkpoints`).

    Attributes:
        first_checkpoint: pairs (all task types) of the first look; before it the gate
            holds. Default 200.
        factor: growth factor between checkpoints, in (1, 16]. Default 2.
        n_max: the sample cap (pairs, all task types), or null for none. With a cap every
            level is spent over the planned looks (Lan–DeMets ``spending``) and a gate
            still undecided at the cap is a final HOLD ("inconclusive"); without one the
            mean-type metrics use confidence sequences and the other tests spend
            ``α·6/(π²k²)`` at look k. Must be ≥ ``first_checkpoint``. Default null.
        spending: spending function, with ``n_max``, of the non-inferiority tests, the
            mean-type metrics, the quantile ratios and the task-mix test: ``obf`` (keeps
            most α for the last look) or ``pocock``. Default ``obf``.
        harm_spending: spending function, with ``n_max``, of the harm (rollback) family.
            Default ``pocock`` (spends early: harm should stop a run early).
        n_star: the n (pairs, in every analysis unit) where the confidence sequences are
            tightest, or null for the design sample size from the policy's margins
            (:func:`shadoweval.stats.power.design_min_pairs`). Default null.
    """

    first_checkpoint: Count = Field(default=200, ge=2)
    factor: Number = Field(default=2.0, gt=1, le=16)
    n_max: OptionalCount = Field(default=None, ge=2)
    spending: SpendingKind = "obf"
    harm_spending: SpendingKind = "pocock"
    n_star: OptionalCount = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _cap_after_first(self) -> SequentialPolicy:
        if self.n_max is not None and self.n_max < self.first_checkpoint:
            raise ValueError(
                f"n_max ({self.n_max}) must be >= first_checkpoint ({self.first_checkpoint})"
            )
        return self


class ValidityPolicy(_Block):
    """Checks of the run itself: pair completeness (gate-statistics.md §1.7).

    Attributes:
        mix_alpha: level of the χ² test comparing the replayed task mix with the
            capture log's, spent over looks like the other tests. Default 0.001.
            In (0, 0.5).
    """

    mix_alpha: Number = Field(default=0.001, gt=0, lt=0.5)


ChangeMode = Literal["judge", "no_change"]
"""What divergence beyond the noise floor means: select pairs for a quality judgement
(``judge``, the default), or fail the run by itself (``no_change``: e.g. a quantisation
swap that must not change answers)."""


class ChangePolicy(_Block):
    """When a pair counts as *changed*, and what a change means (:mod:`shadoweval.stats.change`).

    A pair is changed when its divergence ``D = 1 − similarity`` exceeds the unit's noise
    threshold — the ``noise_quantile`` of the baseline-repeat divergences ``D_noise`` of
    the unit (pooled noise when the task type has fewer than ``min_noise_pairs``) — or,
    without a usable noise floor, ``divergence_threshold``; or when the sides differ in
    a harm detector, in format-parse success, in tool behaviour, or in errors. Changed
    pairs are what a judge, an analyst or a reference checker is asked about; unchanged
    pairs count as ties.

    A *degenerate* noise floor — the baseline repeat returned exactly the captured answer
    on at least ``degenerate_identical_share`` of the pairs whose request sampled
    (temperature > 0 or unknown) — measures a recording, not sampling noise: the
    similarity check is then inconclusive, its first reason says so, and changes are
    measured against ``divergence_threshold``.

    Attributes:
        mode: ``judge`` (default): divergence selects pairs for judgement and never rolls
            back by itself; ``no_change``: the similarity check gates as a guardrail
            (any divergence beyond the noise margin fails).
        noise_quantile: level of the noise threshold. Default 0.95. In (0.5, 1).
        divergence_threshold: D above which a pair changed without a usable noise floor.
            Default 0.1. In (0, 2).
        min_noise_pairs: baseline-repeat pairs a task type needs for its own noise
            threshold. Default 30.
        degenerate_identical_share: share of identical repeats (among sampled requests)
            from which the noise floor is degenerate. Default 0.95. In (0, 1].
    """

    mode: ChangeMode = "judge"
    noise_quantile: Number = Field(default=0.95, gt=0.5, lt=1)
    divergence_threshold: Number = Field(default=0.1, gt=0, lt=2)
    min_noise_pairs: Count = Field(default=30, ge=2)
    degenerate_identical_share: Number = Field(default=0.95, gt=0, le=1)


HARM_DETECTORS: tuple[HarmKind, ...] = tuple(HarmKind)
"""Every answer-level harm detector, in check order."""


class HarmPolicy(_Block):
    """The directional harm detectors as paired binary checks
    (:mod:`shadoweval.stats.checks.harms`).

    One check per detector and unit: δ = P(candidate shows it) − P(baseline shows it),
    the same machinery as ``error_rate`` (McNemar mid-p harm, non-inferiority margin,
    sequential levels).

    Attributes:
        detectors: the detectors gated (default: all of :class:`~shadoweval.records.HarmKind`).
        margin: non-inferiority margin on δ. Default 0.01. In (0, 1).
        critical: a significant harm rolls back. Default true.
        length_ratio_max: a side whose answer is longer than this many times the other
            side's (and at least ``min_runaway_chars``) also counts as runaway length.
            Default 4. Must be > 1.
        min_runaway_chars: the shortest answer the length ratio can call runaway.
            Default 2000.
    """

    detectors: tuple[HarmKind, ...] = HARM_DETECTORS
    margin: Number = Field(default=0.01, gt=0, lt=1)
    critical: StrictBool = True
    length_ratio_max: Number = Field(default=4.0, gt=1)
    min_runaway_chars: Count = Field(default=2000, ge=1)


class ToolBehaviourPolicy(_Block):
    """Tool behaviour where the request offered tools (:mod:`shadoweval.stats.checks.tools`).

    ``tool_text_answer`` is a paired binary check of "answered in text, no call" (harm:
    the candidate answers in text where the baseline called, more than the reverse;
    counts of text-instead-of-call and call-instead-of-text in its reason). Whether text
    is right depends on the request (BFCL ``relevance`` wants no call), so it is not
    critical by default: reference labels or a judge decide the direction. Function,
    argument and order changes are counted and mark a pair changed.

    Attributes:
        margin: non-inferiority margin of ``tool_text_answer``. Default 0.02. In (0, 1).
        critical: its significant harm rolls back. Default false.
        order_free: call order does not matter (an order difference is then no change).
            Default false: reported as an order difference.
    """

    margin: Number = Field(default=0.02, gt=0, lt=1)
    critical: StrictBool = False
    order_free: StrictBool = False


class NetHarmPolicy(_Block):
    """The direction of the change: net harm from judged pairs (:mod:`shadoweval.stats.net_harm`).

    Per unit, net harm = P(candidate worse) − P(candidate better) over all pairs, unchanged
    pairs counted as ties, changed pairs estimated from the judged ones by stratum of
    divergence, each stratum weighted by its size (stratified estimator).

    Attributes:
        margin: non-inferiority margin on net harm (absolute, 0.02 = 2 points). PASS when
            the look's upper bound is below it. Default 0.02. In (0, 1).
        critical: significant net harm (lower bound above 0 at the harm level) rolls back.
            Default true.
        strata_edges: divergence edges of the changed pairs' strata (D = 1 − similarity);
            pairs without a similarity (tool or error changes) form one more stratum.
            Default [0.1, 0.2, 0.35]. Increasing, each in (0, 2).
        max_judged_per_task_type: the judge budget: at most this many changed pairs per
            task type are sent to a judge (the selection adds at most one per stratum left
            unjudged, :mod:`shadoweval.judge.selection`). Default 1500: a candidate 10.6 points
            better
            among 47% changed pairs is promoted by the design total in 99% of the direction
            simulation's runs with a sample cap, 78% without (600 and no top-up: 53%, 13%;
            docs/gate-simulation.md).
        min_judged: judged changed pairs a unit needs before its net harm can pass.
            Default 30.
    """

    margin: Number = Field(default=0.02, gt=0, lt=1)
    critical: StrictBool = True
    strata_edges: tuple[Number, ...] = (0.1, 0.2, 0.35)
    max_judged_per_task_type: Count = Field(default=1500, ge=1)
    min_judged: Count = Field(default=30, ge=1)

    @field_validator("strata_edges")
    @classmethod
    def _increasing(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < edge < 2 for edge in value):
            raise ValueError("every edge must be in (0, 2)")
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError("edges must be strictly increasing")
        return value


class ObservationPolicy(_Block):
    """How long the traffic must be observed before a PROMOTE.

    Attributes:
        min_window_hours: the pairs judged must span at least this much capture time
            (latest minus earliest ``captured_at``), so that every hour of the daily cycle
            of the traffic is in the sample. Default 24. ``0`` turns it off.
    """

    min_window_hours: Number = Field(default=24.0, ge=0)


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
        routes: per-route requirements (:class:`RoutePolicy`), keyed by the route as
            captured, without a trailing slash (``/v1/responses``); every captured route
            is required unless listed here with ``required: false``.
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
    task_types: dict[str, TaskTypePolicy] = Field(default_factory=dict)
    routes: dict[str, RoutePolicy] = Field(default_factory=dict)

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
    return TaskTypePolicy(
        min_pairs=min_pairs,
        error_rate=policy.error_rate,
        infra_error_rate=policy.infra_error_rate,
        format_parse=policy.format_parse,
        similarity=policy.similarity,
        latency=policy.latency,
        output_tokens=policy.output_tokens,
        change=policy.change,
        harm=policy.harm,
        tool_calls=policy.tool_calls,
        net_harm=policy.net_harm,
    )
