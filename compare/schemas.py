"""JSON Schema validation that never crashes and never touches the network.

Used for ``response_format`` schemas (:mod:`shadoweval.compare.formats`) and tool ``parameters``
(:mod:`shadoweval.compare.tool_calls`). The dialect is the schema's ``$schema`` when it names one
jsonschema knows, else Draft 2020-12 (what OpenAI structured outputs document). The
schema is checked against its metaschema first: a schema that is itself invalid (for
example BFCL's ``"type": "dict"``) gives a failed check whose detail says so.

``$ref`` resolution uses an empty :class:`referencing.Registry`, so a remote reference
is reported as unresolvable instead of being fetched. ``format`` is an annotation only
(no format checker), as in the JSON Schema default.

Compiled validators are cached by the schema's canonical JSON (a few hundred entries),
because the same tool list arrives with thousands of requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema
import referencing
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from shadoweval.compare.json_parse import canonical_json

__all__ = ["SchemaCheck", "check_against_schema"]

_DETAIL_LIMIT = 300
_EMPTY_REGISTRY: referencing.Registry[Any] = referencing.Registry()


@dataclass(frozen=True, slots=True)
class SchemaCheck:
    """Outcome of validating one value.

    ``valid`` is the result; ``schema_invalid`` is true when the schema itself is not a
    valid schema (then ``valid`` is false); ``detail`` is a short reason when not valid.
    """

    valid: bool
    schema_invalid: bool = False
    detail: str | None = None


def check_against_schema(value: Any, schema: dict[str, Any]) -> SchemaCheck:
    """Validate a parsed JSON ``value`` against ``schema``.

    Never raises: an invalid schema, an unresolvable ``$ref`` or a schema too deeply
    recursive to evaluate all give ``valid=False`` with the reason in ``detail``.
    """
    try:
        key = canonical_json(schema)
    except (TypeError, ValueError) as exc:
        return SchemaCheck(valid=False, schema_invalid=True, detail=f"schema is not JSON: {exc}")
    compiled = _compile(key)
    if isinstance(compiled, str):
        return SchemaCheck(valid=False, schema_invalid=True, detail=compiled)
    try:
        error = best_match(compiled.iter_errors(value))
    except Exception as exc:  # an unresolvable $ref, a regex Python rejects, deep recursion
        detail = _trim(f"schema cannot be evaluated: {type(exc).__name__}: {exc}")
        return SchemaCheck(valid=False, schema_invalid=True, detail=detail)
    if error is None:
        return SchemaCheck(valid=True)
    where = "/".join(str(part) for part in error.absolute_path)
    return SchemaCheck(valid=False, detail=_trim(f"at /{where}: {error.message}"))


@lru_cache(maxsize=512)
def _compile(schema_json: str) -> Validator | str:
    """Return a validator for the schema, or a message saying why the schema is invalid."""
    schema = json.loads(schema_json)
    try:
        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        return _trim(f"schema itself is invalid at /{where}: {exc.message}")
    except Exception as exc:  # a metaschema $ref that cannot resolve, deep recursion
        return _trim(f"schema itself is invalid: {type(exc).__name__}: {exc}")
    return cls(schema, registry=_EMPTY_REGISTRY)


def _trim(text: str) -> str:
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 1] + "…"
