"""The gate policy on disk: YAML parsing, field-by-field error messages, hash, dump.

A policy is a YAML file (``stats/default_policy.yaml`` documents every field) validated
on load into a frozen :class:`~shadoweval.stats.policy.schema.GatePolicy`. It is hashed with the
run (:func:`policy_hash`), so no threshold can change while someone looks at the data.

Every validation problem is raised as :class:`~shadoweval.errors.ConfigError` naming the
dotted field and the value read, e.g. ``policy field error_rate.margin = -0.01: must be
> 0``; unknown keys list the allowed ones; a repeated YAML key is an error (PyYAML would
keep the last silently); plain ``5e-3`` reads as a float (YAML 1.2), not as a string.
The strict YAML reading and the error wording are shared with the canary policy
(:mod:`shadoweval.stats.policy.yaml_loading`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from shadoweval.errors import ConfigError
from shadoweval.stats.policy.blocks import CostPolicy
from shadoweval.stats.policy.canonical import canonical_sha256
from shadoweval.stats.policy.causes import CausesPolicy
from shadoweval.stats.policy.judge import JudgePolicy
from shadoweval.stats.policy.schema import GatePolicy, RoutePolicy, TaskTypePolicy
from shadoweval.stats.policy.yaml_loading import (
    describe_error,
    other_errors_note,
    read_policy_file,
    read_policy_yaml,
    validate_policy,
)

__all__ = [
    "DEFAULT_POLICY_FILE",
    "load_policy",
    "parse_policy",
    "parse_policy_yaml",
    "policy_hash",
    "policy_to_yaml",
]

DEFAULT_POLICY_FILE = Path(__file__).parent.parent / "default_policy.yaml"
"""The shipped, fully commented default policy (``stats/default_policy.yaml``); it loads
equal to ``GatePolicy()``."""


def _allowed_fields(loc: tuple[int | str, ...]) -> list[str] | None:
    """Field names allowed at the parent of ``loc`` (for unknown-key messages)."""
    model: type[BaseModel] = GatePolicy
    parts = list(loc[:-1])
    if parts and parts[0] == "task_types":
        if len(parts) < 2:
            return None
        model, parts = TaskTypePolicy, parts[2:]
    elif parts and parts[0] == "routes":
        if len(parts) < 2:
            return None
        model, parts = RoutePolicy, parts[2:]
    for part in parts:
        info = model.model_fields.get(str(part))
        annotation = getattr(info, "annotation", None) if info else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return list(model.model_fields)


def _dotted(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _config_error(exc: ValidationError) -> ConfigError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = _dotted(first["loc"])
    value = first.get("input")
    explanation = describe_error(first)
    if first["type"] == "extra_forbidden":
        allowed = _allowed_fields(first["loc"])
        if allowed:
            explanation += f" (allowed: {', '.join(allowed)})"
    message = f"policy field {field or '<root>'} = {value!r}: {explanation}"
    message += other_errors_note(errors, _dotted)
    return ConfigError(message, field=field, value=value)


def parse_policy(mapping: Mapping[str, Any]) -> GatePolicy:
    """Validate a mapping (e.g. parsed YAML) into a :class:`GatePolicy`.

    Missing fields take their documented defaults.

    Raises:
        ConfigError: the mapping is not a mapping, or a field is unknown or invalid;
            ``field`` is the dotted path (``"error_rate.margin"``), ``value`` the value read.
    """
    return validate_policy(GatePolicy, mapping, subject="gate policy", to_error=_config_error)


def parse_policy_yaml(text: str, *, source: str = "<policy>") -> GatePolicy:
    """Parse and validate a gate policy from YAML text (``source`` names it in errors).

    Raises:
        ConfigError: not valid YAML, empty, a repeated key, or :func:`parse_policy` fails.
    """
    return parse_policy(read_policy_yaml(text, subject="gate policy", source=source))


def load_policy(path: str | Path) -> GatePolicy:
    """Read and validate a gate policy YAML file.

    Raises:
        ConfigError: the file is missing or unreadable, is not valid YAML, is empty,
            repeats a key, or fails :func:`parse_policy`'s validation.
    """
    path = Path(path)
    text = read_policy_file(path, subject="gate policy")
    return parse_policy_yaml(text, source=f"file {path}")


_ADDED_KEYS = ("routes", "baseline_model")
"""Keys added after runs were first frozen: left out of the canonical JSON when empty."""


def _canonical(policy: GatePolicy) -> dict[str, Any]:
    dumped = policy.model_dump(mode="json")
    for key in _ADDED_KEYS:
        # Left out when empty: a policy without the key hashes (and dumps) as it did
        # before the key existed, so runs frozen then keep their hash.
        if not dumped[key]:
            del dumped[key]
    if dumped["cost"] == CostPolicy().model_dump(mode="json"):
        # Likewise the cost block at its default: policies frozen before it keep their hash.
        del dumped["cost"]
    if dumped["causes"] == CausesPolicy().model_dump(mode="json"):
        # Likewise cause attribution at its defaults (issue 29 item 9).
        del dumped["causes"]
    if dumped["judge"] == JudgePolicy().model_dump(mode="json"):
        # Likewise the judge block at its defaults: the agreement floor (issue 31 item 2)
        # and no cost cap (item 3).
        del dumped["judge"]
    for block in (dumped, *dumped["task_types"].values()):
        # Leaves added later, at their defaults, here and in every task type's resolved
        # view: infra_error_rate.context_length (issue 29 item 8), net_harm.ppi_min_labels
        # (issue 31 item 1), judge.max_flip_rate (issue 31 item 2, after the judge block).
        for (section, leaf), default in _ADDED_LEAVES.items():
            part = block.get(section)
            if isinstance(part, dict) and part.get(leaf) == default:
                del part[leaf]
    return dumped


_ADDED_LEAVES: dict[tuple[str, str], Any] = {
    ("infra_error_rate", "context_length"): "hold",
    ("net_harm", "ppi_min_labels"): 20,
    ("judge", "max_flip_rate"): 0.5,
}
"""Policy leaves added after runs were frozen, with their defaults: left out of the canonical
JSON while at the default, so those runs keep their hash."""


def policy_hash(policy: GatePolicy) -> str:
    """Return the sha256 hex digest of the fully-resolved policy's canonical JSON.

    Canonical JSON: keys sorted, no whitespace, ASCII only, defaults filled in and
    per-task-type overrides resolved, so key order, comments and omitted defaults in
    the YAML file do not change the hash.
    """
    return canonical_sha256(_canonical(policy))


def policy_to_yaml(policy: GatePolicy) -> str:
    """Return the fully-resolved policy as YAML that :func:`load_policy` reads back equal."""
    header = f"# shadow-eval gate policy (fully resolved), sha256 {policy_hash(policy)}\n"
    body = yaml.safe_dump(_canonical(policy), sort_keys=False, default_flow_style=False)
    return header + body
