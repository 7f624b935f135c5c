"""Strict YAML reading and validation-error wording shared by the policy loaders.

Both written-down policies, the paired gate's (:mod:`shadoweval.stats.policy.loading`, subject
``"gate policy"``) and the live canary's (:mod:`shadoweval.stats.canary.policy`, subject
``"canary policy"``), are YAML files validated by pydantic. This module holds what they
share, with the subject passed in so every message names the policy it is about:

* :func:`read_policy_yaml` — YAML text to plain data: a repeated key is an error (PyYAML
  keeps the last silently), plain ``5e-3`` reads as a float (YAML 1.2, not YAML 1.1's
  string), empty text and invalid YAML are errors.
* :func:`describe_error` — one pydantic error as a short explanation (``must be > 0``).
* :func:`other_errors_note` — the ``" (also: ...)"`` tail listing further errors.
* :func:`read_policy_file` and :func:`validate_policy` — the one loader both policies go
  through: the file read with its errors, and a mapping validated into the policy model
  (each policy only supplies how its validation errors are worded).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from shadoweval.errors import ConfigError

__all__ = [
    "describe_error",
    "other_errors_note",
    "read_policy_file",
    "read_policy_yaml",
    "validate_policy",
]

ModelT = TypeVar("ModelT", bound=BaseModel)

Loc = tuple[int | str, ...]
"""A pydantic error location: field names and list indices from the root."""


def _bound(value: object) -> str:
    if isinstance(value, int | float) and float(value).is_integer():
        return str(int(value))
    return str(value)


def describe_error(error: ErrorDetails) -> str:
    """Explain one pydantic validation error in a few words.

    Args:
        error: one entry of ``ValidationError.errors()``.

    Returns:
        ``"must be > 0"``, ``"unknown field"``, ``"must be a number"``, ... for the common
        kinds; otherwise pydantic's own message without its ``"Value error, "`` prefix (a
        validator's ``ValueError`` text).
    """
    kind = error["type"]
    ctx = error.get("ctx", {})
    if kind == "greater_than":
        return f"must be > {_bound(ctx['gt'])}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx['ge'])}"
    if kind == "less_than":
        return f"must be < {_bound(ctx['lt'])}"
    if kind == "less_than_equal":
        return f"must be <= {_bound(ctx['le'])}"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind in ("float_type", "float_parsing"):
        return "must be a number"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind == "bool_type":
        return "must be true or false"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping"
    message = error["msg"]
    return message.removeprefix("Value error, ")


def other_errors_note(
    errors: Sequence[ErrorDetails], dotted: Callable[[Loc], str], *, listed: int = 5
) -> str:
    """The tail naming the errors after the first: ``" (also: a.b: must be > 0; c: ...)"``.

    Args:
        errors: all errors of one ``ValidationError``, the first being the one reported.
        dotted: how the caller writes a location as a field path.
        listed: at most this many further errors are named; ``" …"`` marks more.

    Returns:
        ``""`` when there is only one error.
    """
    if len(errors) <= 1:
        return ""
    others = "; ".join(f"{dotted(e['loc'])}: {describe_error(e)}" for e in errors[1 : listed + 1])
    return f" (also: {others}{' …' if len(errors) > listed + 1 else ''})"


class _DuplicateKeyError(Exception):
    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line}")
        self.key = key


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that rejects duplicate keys (PyYAML keeps the last silently)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise _DuplicateKeyError(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


# YAML 1.1 (PyYAML) reads an exponent without a dot (``5e-3``, ``1e4``) as a string; YAML 1.2
# reads it as a float. Thresholds are often written that way, so plain (unquoted) scalars of
# the YAML 1.2 float form resolve to floats here; quoted ``"5e-3"`` stays a string (an error).
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)
_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def read_policy_yaml(text: str, *, subject: str, source: str) -> Any:
    """Parse a policy's YAML text strictly into plain data (not yet validated).

    Args:
        text: the YAML text.
        subject: what the text is, first in every message (``"gate policy"``).
        source: where it came from (``"file /etc/policy.yaml"``, ``"<policy>"``).

    Returns:
        The parsed document (a mapping for a well-formed policy; the caller validates it).

    Raises:
        ConfigError: ``"{subject} {source}: duplicate key 'alpha' at line 3"`` (``field`` =
            the key), ``"{subject} {source} is not valid YAML: ..."``, or
            ``"{subject} {source} is empty; ..."`` (``value`` = ``source``).
    """
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKeyError as exc:
        raise ConfigError(f"{subject} {source}: {exc}", field=str(exc.key), value=exc.key) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{subject} {source} is not valid YAML: {exc}", value=source) from exc
    if data is None:
        raise ConfigError(f"{subject} {source} is empty; write every threshold down", value=source)
    return data


def read_policy_file(path: Path, *, subject: str) -> str:
    """The text of a policy file.

    Raises:
        ConfigError: ``"{subject} file not found: {path}"`` or ``"{subject} file {path}
            cannot be read: ..."`` (``value`` = the path).
    """
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{subject} file not found: {path}", value=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{subject} file {path} cannot be read: {exc}", value=str(path)) from exc


def validate_policy(
    model: type[ModelT],
    mapping: Mapping[str, Any],
    *,
    subject: str,
    to_error: Callable[[ValidationError], ConfigError],
) -> ModelT:
    """Validate parsed data into the policy ``model``.

    Raises:
        ConfigError: ``"{subject} must be a mapping of fields, got ..."``, or
            ``to_error`` of the validation error (the policy's wording, naming the field).
    """
    if not isinstance(mapping, Mapping):
        raise ConfigError(
            f"{subject} must be a mapping of fields, got {type(mapping).__name__}",
            value=mapping,
        )
    try:
        return model.model_validate(dict(mapping))
    except ValidationError as exc:
        raise to_error(exc) from None
