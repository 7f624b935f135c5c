"""The gate policy's metric blocks: strict number types and one pydantic block per metric
family, with its defaults and bounds (:mod:`shadoweval.stats.policy.schema` composes them into
:class:`~shadoweval.stats.policy.schema.GatePolicy`)."""

from __future__ import annotations

import itertools
import numbers
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    field_validator,
    model_validator,
)

from shadoweval.records import HarmKind

__all__ = [
    "HARM_DETECTORS",
    "BinaryMetricPolicy",
    "ChangeMode",
    "ChangePolicy",
    "CostPolicy",
    "Count",
    "FormatParsePolicy",
    "HarmPolicy",
    "InfraErrorPolicy",
    "LatencyMetric",
    "LatencyPolicy",
    "NetHarmPolicy",
    "Number",
    "ObservationPolicy",
    "OptionalCount",
    "OutputTokensPolicy",
    "SequentialPolicy",
    "SimilarityPolicy",
    "SpendingKind",
    "ToolBehaviourPolicy",
    "ValidityPolicy",
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
        context_length: what a failure at the candidate's own context window is (a
            stream cut after content without finish or ``[DONE]``, or an HTTP error naming
            the context length; :mod:`shadoweval.llm_protocol.interruption`): ``hold``
            (default) gates it here with the infrastructure errors, and the HOLD's reason
            names the context length; ``rollback`` counts it as the candidate's error
            (``error_rate``), so a significant excess rolls the candidate back, and the
            reason says the policy chose so.
    """

    margin: Number = Field(default=0.02, gt=0, lt=1)
    critical: StrictBool = False
    context_length: Literal["hold", "rollback"] = "hold"

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


class CostPolicy(_Block):
    """Whether cost may decide a verdict on its own.

    Attributes:
        decides: ``false`` (default): a cost guardrail (``output_tokens``) that fails while
            the candidate's quality is significantly better (``net_harm`` significantly
            below 0 in some unit) does not roll back: the verdict states the trade-off
            ("quality better in 6 task types, output tokens ×1.52") and HOLDs for a person
            to weigh it. ``true``: a cost FAIL rolls back whatever the quality. A cost FAIL
            without a quality gain rolls back either way.
    """

    decides: StrictBool = False


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
    (temperature > 0 or unknown) — is a deterministic replica (a fixed seed or stored
    answers), not sampling noise: the
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
        ppi_min_labels: labels of a random sample (``export --ppi-sample``) on a unit's
            changed pairs from which its net harm is estimated by prediction-powered
            inference (:mod:`shadoweval.stats.net_harm.ppi`: the judge or the detectors
            predict every changed pair, the random labels correct them) instead of the
            judged pairs alone; at least 2 per changed task type as well. Default 20.
    """

    margin: Number = Field(default=0.02, gt=0, lt=1)
    critical: StrictBool = True
    strata_edges: tuple[Number, ...] = (0.1, 0.2, 0.35)
    max_judged_per_task_type: Count = Field(default=1500, ge=1)
    min_judged: Count = Field(default=30, ge=1)
    ppi_min_labels: Count = Field(default=20, ge=2)

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
