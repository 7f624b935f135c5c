"""The canary policy: the ramp of candidate shares and the numbers written before it starts.

A live canary sends a growing share of real users' sessions to the candidate model; each
live request is answered by one version only, so every check compares two independent
arms (:mod:`shadoweval.stats.canary.two_arm`). This module holds the frozen pydantic schema
(:class:`CanaryPolicy`), its YAML form (``stats/canary/default_canary_policy.yaml``
documents every field), loading with field-by-field
:class:`~shadoweval.errors.ConfigError` messages (``canary policy field
steps[1].min_window_s = 600: ...``), a repeated YAML key as an error, and the hash
(sha256 of the canonical JSON) that freezes the policy with the canary.

It mirrors :mod:`shadoweval.stats.policy.loading` (the paired gate's policy): the strict-number
types come from :mod:`shadoweval.stats.policy.blocks`, the strict YAML reading (duplicate keys,
YAML 1.2 floats) and the error wording from :mod:`shadoweval.stats.policy.yaml_loading`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from shadoweval.errors import ConfigError
from shadoweval.stats.policy.blocks import Count, Number
from shadoweval.stats.policy.canonical import canonical_sha256
from shadoweval.stats.policy.yaml_loading import (
    describe_error,
    other_errors_note,
    read_policy_file,
    read_policy_yaml,
    validate_policy,
)

__all__ = [
    "DAILY_CYCLE_S",
    "DEFAULT_CANARY_POLICY_FILE",
    "DEFAULT_STEPS",
    "LATENCY_KEY",
    "CanaryPolicy",
    "CanaryStep",
    "PromoteChecks",
    "RollbackConditions",
    "canary_policy_hash",
    "canary_policy_to_yaml",
    "latency_key_parts",
    "load_canary_policy",
    "parse_canary_policy",
    "parse_canary_policy_yaml",
]

DAILY_CYCLE_S = 86400.0
"""One daily traffic cycle, seconds: the shortest window of a step before full rollout
(unless ``allow_short_windows``), so every step sees the day's whole traffic mix."""

DEFAULT_CANARY_POLICY_FILE = Path(__file__).parent / "default_canary_policy.yaml"
"""The shipped, fully commented default (loads equal to ``CanaryPolicy(steps=DEFAULT_STEPS)``)."""

LATENCY_KEY = re.compile(r"^(e2e|ttft)_p([0-9]{2})$")
"""A latency key ``{metric}_p{NN}``: metric ``e2e`` (end-to-end) or ``ttft`` (time to first
token), NN the percentile 01–99 (``e2e_p95`` = the 0.95-quantile of e2e latency)."""


def latency_key_parts(key: str) -> tuple[str, float]:
    """Split a latency key into ``(column, q)``: ``"e2e_p95"`` → ``("e2e_ms", 0.95)``.

    Raises:
        ValueError: the key is not ``{e2e|ttft}_p{NN}`` with NN in 01–99.
    """
    match = LATENCY_KEY.match(key)
    if match is None or int(match.group(2)) == 0:
        raise ValueError(
            f"latency key {key!r} must be {{e2e|ttft}}_p{{NN}} with NN in 01-99, e.g. e2e_p95"
        )
    return f"{match.group(1)}_ms", int(match.group(2)) / 100.0


class _FieldError(ValueError):
    """A cross-field problem that names its own dotted field and value."""

    def __init__(self, field: str, value: object, explanation: str) -> None:
        super().__init__(f"{field} = {_show(value)}: {explanation}")
        self.field = field
        self.value = value
        self.explanation = explanation


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def _check_latency_keys(values: Mapping[str, float], what: str) -> None:
    for key in values:
        try:
            latency_key_parts(key)
        except ValueError as exc:
            raise _FieldError(f"{what}.{key}", key, str(exc)) from None


class CanaryStep(_Block):
    """One step of the ramp.

    Attributes:
        share: the candidate's share of sessions, in (0, 1] (1.0 = full rollout).
        min_window_s: the minimum observation time at this step, seconds (> 0).
        min_requests_per_arm: requests each arm must have answered before the step
            can be promoted (≥ 1; default 200, the paired gate's first checkpoint).
    """

    share: Number = Field(gt=0, le=1)
    min_window_s: Number = Field(gt=0)
    min_requests_per_arm: Count = Field(default=200, ge=1)


DEFAULT_STEPS: tuple[CanaryStep, ...] = (
    CanaryStep(share=0.01, min_window_s=DAILY_CYCLE_S),
    CanaryStep(share=0.05, min_window_s=DAILY_CYCLE_S),
    CanaryStep(share=0.25, min_window_s=DAILY_CYCLE_S),
    CanaryStep(share=0.5, min_window_s=DAILY_CYCLE_S),
    CanaryStep(share=1.0, min_window_s=DAILY_CYCLE_S),
)
"""The default ramp: 1%, 5%, 25%, 50% of sessions for a day each, then full rollout."""


def _default_latency_limits() -> dict[str, float]:
    return {"e2e_p99": 60000.0, "ttft_p95": 5000.0}


def _default_latency_margins() -> dict[str, float]:
    return {"e2e_p50": 1.10, "e2e_p95": 1.20, "ttft_p95": 1.20}


class RollbackConditions(_Block):
    """Numbers written before the canary starts; any one met rolls the candidate back.

    Proportions are absolute (0.01 = one percentage point). Each excess is candidate −
    baseline over the same step.

    Attributes:
        error_rate_max_increase: candidate error rate − baseline's above this ...
        error_rate_sustained_s: ... continuously for this long (seconds) rolls back.
        harm_rate_max_increase: excess share of answered requests with ≥ 1 harm flag.
        format_failure_max_increase: excess format-failure share among answered
            requests that expected a format.
        latency_limits_ms: absolute limits on the candidate's quantiles, ms, keyed
            ``{e2e|ttft}_p{NN}`` (e.g. ``e2e_p99: 60000``).
        spot_check_bad_max_increase: excess share of spot-checked outputs rated bad.
    """

    error_rate_max_increase: Number = Field(default=0.01, gt=0, lt=1)
    error_rate_sustained_s: Number = Field(default=600.0, ge=0)
    harm_rate_max_increase: Number = Field(default=0.02, gt=0, lt=1)
    format_failure_max_increase: Number = Field(default=0.05, gt=0, lt=1)
    latency_limits_ms: dict[str, Number] = Field(default_factory=_default_latency_limits)
    spot_check_bad_max_increase: Number = Field(default=0.10, gt=0, lt=1)

    @model_validator(mode="after")
    def _latency(self) -> RollbackConditions:
        _check_latency_keys(self.latency_limits_ms, "latency_limits_ms")
        for key, limit in self.latency_limits_ms.items():
            if not limit > 0:
                raise _FieldError(f"latency_limits_ms.{key}", limit, "must be > 0 (ms)")
        return self


class PromoteChecks(_Block):
    """Non-inferiority margins a step must pass to advance.

    Attributes:
        error_rate_margin: candidate error rate may exceed the baseline's by less than
            this (absolute).
        harm_rate_margin: the same for the harm-flag share of answered requests.
        format_failure_margin: the same for format failures among format-expected
            answered requests.
        latency_ratio_margins: candidate q-quantile ≤ margin × baseline's, keyed
            ``{e2e|ttft}_p{NN}``; each margin > 1.
        spot_check_bad_margin: the same for the share of spot checks rated bad; only
            checked when both arms have ≥ ``min_ratings_per_arm`` ratings.
        min_ratings_per_arm: ratings per arm needed to check spot checks (≥ 1).
    """

    error_rate_margin: Number = Field(default=0.005, gt=0, lt=1)
    harm_rate_margin: Number = Field(default=0.01, gt=0, lt=1)
    format_failure_margin: Number = Field(default=0.02, gt=0, lt=1)
    latency_ratio_margins: dict[str, Number] = Field(default_factory=_default_latency_margins)
    spot_check_bad_margin: Number = Field(default=0.05, gt=0, lt=1)
    min_ratings_per_arm: Count = Field(default=30, ge=1)

    @model_validator(mode="after")
    def _latency(self) -> PromoteChecks:
        _check_latency_keys(self.latency_ratio_margins, "latency_ratio_margins")
        for key, margin in self.latency_ratio_margins.items():
            if not margin > 1:
                raise _FieldError(
                    f"latency_ratio_margins.{key}", margin, "must be > 1 (a ratio limit)"
                )
        return self


class CanaryPolicy(_Block):
    """The whole canary policy (frozen; hashed with the canary by :func:`canary_policy_hash`).

    Attributes:
        version: schema version, 1.
        steps: the ramp; shares strictly increasing, the last exactly 1.0.
        alpha: one-sided level of each promote and rollback test, in (0, 0.5).
        srm_alpha: level of the always-valid sample-ratio-mismatch test, in (0, 0.5).
        rating_bad_at_or_below: spot-check ratings are 1–10 (MT-Bench single-answer
            grading, Zheng et al. 2023); a rating ≤ this is "bad". In [1, 10).
        allow_short_windows: unless true, every step but the last needs
            ``min_window_s`` ≥ 86400 s (one daily cycle); true only for a rehearsal.
        rollback: :class:`RollbackConditions`.
        promote: :class:`PromoteChecks`.
    """

    version: Literal[1] = 1
    steps: tuple[CanaryStep, ...]
    alpha: Number = Field(default=0.05, gt=0, lt=0.5)
    srm_alpha: Number = Field(default=0.001, gt=0, lt=0.5)
    rating_bad_at_or_below: Number = Field(default=3.0, ge=1, lt=10)
    allow_short_windows: StrictBool = False
    rollback: RollbackConditions = RollbackConditions()
    promote: PromoteChecks = PromoteChecks()

    @model_validator(mode="after")
    def _ramp(self) -> CanaryPolicy:
        if not self.steps:
            raise _FieldError("steps", [], "at least one step is needed (the last has share 1.0)")
        for i in range(1, len(self.steps)):
            if not self.steps[i].share > self.steps[i - 1].share:
                raise _FieldError(
                    f"steps[{i}].share",
                    self.steps[i].share,
                    f"shares must be strictly increasing (steps[{i - 1}].share = "
                    f"{self.steps[i - 1].share:g})",
                )
        last = len(self.steps) - 1
        if self.steps[last].share != 1.0:
            raise _FieldError(
                f"steps[{last}].share",
                self.steps[last].share,
                "the last step must be exactly 1.0 (full rollout)",
            )
        if not self.allow_short_windows:
            for i, step in enumerate(self.steps[:-1]):
                if step.min_window_s < DAILY_CYCLE_S:
                    raise _FieldError(
                        f"steps[{i}].min_window_s",
                        step.min_window_s,
                        "below one daily cycle (86400 s); set allow_short_windows: true "
                        "for a rehearsal",
                    )
        return self


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _config_error(exc: ValidationError) -> ConfigError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, _FieldError):
        prefix = _dotted(first["loc"])
        field = f"{prefix}.{cause.field}" if prefix else cause.field
        message = f"canary policy field {field} = {_show(cause.value)}: {cause.explanation}"
        return ConfigError(message, field=field, value=cause.value)
    field = _dotted(first["loc"])
    value = first.get("input")
    explanation = describe_error(first)
    if first["type"] == "extra_forbidden":
        explanation += " (see stats/canary/default_canary_policy.yaml for the fields)"
    message = f"canary policy field {field or '<root>'} = {_show(value)}: {explanation}"
    message += other_errors_note(errors, _dotted)
    return ConfigError(message, field=field, value=value)


def parse_canary_policy(mapping: Mapping[str, Any]) -> CanaryPolicy:
    """Validate a mapping (e.g. parsed YAML) into a :class:`CanaryPolicy`.

    Raises:
        ConfigError: not a mapping, or a field unknown or invalid; ``field`` is the
            dotted path (``"steps[1].min_window_s"``), ``value`` the value read.
    """
    return validate_policy(CanaryPolicy, mapping, subject="canary policy", to_error=_config_error)


def parse_canary_policy_yaml(text: str, *, source: str = "<canary policy>") -> CanaryPolicy:
    """Parse and validate a canary policy from YAML text (``source`` names it in errors).

    Plain ``5e-3`` reads as a float (YAML 1.2); a repeated key is an error.

    Raises:
        ConfigError: not valid YAML, empty, a repeated key, or validation fails.
    """
    return parse_canary_policy(read_policy_yaml(text, subject="canary policy", source=source))


def load_canary_policy(path: Path | None) -> CanaryPolicy:
    """Read and validate a canary policy YAML file (``None``: the shipped default).

    Raises:
        ConfigError: the file is missing or unreadable, or :func:`parse_canary_policy_yaml`
            fails.
    """
    file = DEFAULT_CANARY_POLICY_FILE if path is None else Path(path)
    text = read_policy_file(file, subject="canary policy")
    return parse_canary_policy_yaml(text, source=f"file {file}")


def canary_policy_hash(policy: CanaryPolicy) -> str:
    """sha256 hex digest of the policy's canonical JSON (keys sorted, no whitespace,
    ASCII, defaults filled in), so comments, key order and omitted defaults do not
    change it."""
    return canonical_sha256(policy.model_dump(mode="json"))


def canary_policy_to_yaml(policy: CanaryPolicy) -> str:
    """The fully-resolved policy as YAML that :func:`parse_canary_policy_yaml` reads back equal."""
    header = f"# shadow-eval canary policy (fully resolved), sha256 {canary_policy_hash(policy)}\n"
    body = yaml.safe_dump(policy.model_dump(mode="json"), sort_keys=False)
    return header + body
