"""The query parameters of ``GET /v1/runs/{run_id}/export``, parsed into an export request.

Parameters (names as in the query string; the OpenAPI document lists them with
:data:`EXPORT_PARAMETERS`): ``per_task_type`` (1..:data:`MAX_PER_TASK_TYPE`, default
20), ``order`` (``lowest`` / ``random``), ``seed`` (in [0, 2**63 - 1]; required with
``random``, refused with ``lowest``), ``format`` (``csv`` / ``jsonl`` / ``parquet``),
``task_type`` and ``flag`` (repeatable),
``min_similarity`` and ``max_similarity`` (in [-1, 1]), ``changed_unjudged`` (``true`` /
``false``, also ``1`` / ``0``: only pairs that changed and have no successful judgement
yet), ``raw_cells`` (``true`` / ``false``: a CSV's cells as they are, without the
formula escaping that is the default), ``fraction`` (in (0, 1]: ``ceil(F × pairs)`` of
each task type instead of ``per_task_type``), ``ppi_sample`` (``true`` / ``false``: the
random label sample, drawn from every changed pair of each task type; ``order`` defaults
to ``random`` and a seed is drawn when none is given; similarity bounds, flags,
``order=lowest`` and ``changed_unjudged`` are refused). An unknown parameter, a
single-valued one given twice, or a bad value is a :class:`BadParameterError` whose message
names the parameter and the value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.datastructures import QueryParams

from shadoweval.application.exporting import (
    DEFAULT_PER_TASK_TYPE,
    FORMATS,
    MAX_SEED,
    ORDERS,
    ExportRequest,
    make_request,
)
from shadoweval.errors import ConfigError
from shadoweval.pair_flags import PairFlag

MAX_PER_TASK_TYPE = 10_000
"""Most pairs per task type one API export returns (the archive is built in memory)."""

SINGLE: tuple[str, ...] = (
    "per_task_type",
    "order",
    "seed",
    "format",
    "min_similarity",
    "max_similarity",
    "changed_unjudged",
    "raw_cells",
    "fraction",
    "ppi_sample",
)
REPEATABLE: tuple[str, ...] = ("task_type", "flag")

T = TypeVar("T")


class BadParameterError(ValueError):
    """A query parameter the export cannot use (the message names it and its value)."""


def _one(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise BadParameterError(f"{name} is given {len(values)} times ({values!r}); give it once")
    return values[0] if values else None


def _number(value: str | None, name: str, kind: Callable[[str], T], what: str) -> T | None:
    if value is None:
        return None
    try:
        return kind(value.strip())
    except ValueError:
        raise BadParameterError(f"{name} {value!r} is not {what}") from None


_TRUE = ("true", "1")
_FALSE = ("false", "0")


def _flag(value: str | None, name: str) -> bool:
    if value is None:
        return False
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadParameterError(f"{name} {value!r} is not true or false (or 1 / 0)")


def _or(value: str | None, default: str) -> str:
    return default if value is None else value


def export_request(run_id: str, params: QueryParams) -> ExportRequest:
    """The export a query string asks for.

    Raises:
        BadParameterError: an unknown or repeated parameter, or a bad value.
    """
    unknown = sorted(set(params.keys()) - set(SINGLE) - set(REPEATABLE))
    if unknown:
        known = ", ".join((*SINGLE, *REPEATABLE))
        raise BadParameterError(
            f"unknown query parameter {unknown[0]!r} (= {params.get(unknown[0])!r}); known: {known}"
        )
    per_task_type = _number(_one(params, "per_task_type"), "per_task_type", int, "an integer")
    if per_task_type is not None and per_task_type > MAX_PER_TASK_TYPE:
        raise BadParameterError(
            f"per_task_type {per_task_type!r} is above the API's limit of {MAX_PER_TASK_TYPE} "
            "(use `shadow-eval export` for more)"
        )
    bounds: dict[str, float | None] = {}
    for name in ("min_similarity", "max_similarity"):
        bound = _number(_one(params, name), name, float, "a number")
        if bound is not None and not math.isfinite(bound):
            raise BadParameterError(f"{name} {params.get(name)!r} is not a finite number")
        bounds[name] = bound
    changed_unjudged = _flag(_one(params, "changed_unjudged"), "changed_unjudged")
    raw_cells = _flag(_one(params, "raw_cells"), "raw_cells")
    fraction = _number(_one(params, "fraction"), "fraction", float, "a number")
    try:
        return make_request(
            run_id,
            per_task_type=per_task_type,
            fraction=fraction,
            ppi_sample=_flag(_one(params, "ppi_sample"), "ppi_sample"),
            order=_one(params, "order"),
            seed=_number(_one(params, "seed"), "seed", int, "an integer"),
            fmt=_or(_one(params, "format"), "csv"),
            task_types=params.getlist("task_type"),
            flags=params.getlist("flag"),
            min_similarity=bounds["min_similarity"],
            max_similarity=bounds["max_similarity"],
            changed_unjudged=changed_unjudged,
            raw_cells=raw_cells,
        )
    except ConfigError as exc:
        raise BadParameterError(str(exc)) from None


def _param(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


EXPORT_PARAMETERS: list[dict[str, Any]] = [
    _param(
        "per_task_type",
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_PER_TASK_TYPE,
            "default": DEFAULT_PER_TASK_TYPE,
        },
        "Most pairs exported per task type (N).",
    ),
    _param(
        "order",
        {"type": "string", "enum": list(ORDERS), "default": "lowest"},
        "lowest: the first N pairs in page order — pairs without a similarity (an errored "
        "side) first unless a similarity bound is set, then by similarity ascending; "
        "random: N drawn without replacement with numpy default_rng(seed) over the "
        "matching pairs sorted by exchange id.",
    ),
    _param(
        "seed",
        {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "Seed of the random draw; required with order=random and refused with "
        "order=lowest; recorded in the manifest.",
    ),
    _param(
        "format",
        {"type": "string", "enum": list(FORMATS), "default": "csv"},
        "Format of samples.<ext> inside the zip.",
    ),
    {
        **_param(
            "task_type",
            {"type": "array", "items": {"type": "string"}},
            "Only these task types (repeat the parameter; default: every task type).",
        ),
        "style": "form",
        "explode": True,
    },
    {
        **_param(
            "flag",
            {"type": "array", "items": {"type": "string", "enum": [f.value for f in PairFlag]}},
            "Only pairs that have every one of these flags (repeat the parameter).",
        ),
        "style": "form",
        "explode": True,
    },
    _param(
        "min_similarity",
        {"type": "number", "minimum": -1, "maximum": 1},
        "Only pairs with similarity >= this (pairs without a similarity are left out).",
    ),
    _param(
        "max_similarity",
        {"type": "number", "minimum": -1, "maximum": 1},
        "Only pairs with similarity <= this: the divergent band (pairs without a "
        "similarity are left out).",
    ),
    _param(
        "changed_unjudged",
        {"type": "boolean", "default": False},
        "Only pairs that changed beyond the noise (under the run's frozen policy) and have "
        "no successful quality judgement of any source yet (judge, human label, "
        "reference; a pair whose judgements all failed counts as not judged). Recorded "
        "in the manifest.",
    ),
    _param(
        "raw_cells",
        {"type": "boolean", "default": False},
        "Write the CSV's cells as they are. By default a text cell that starts with =, +, "
        "-, @, a tab, a carriage return or a line feed gets a leading ' and text cells are "
        "quoted, so a spreadsheet does not run it as a formula (CSV injection); numbers are "
        "never escaped, JSONL and Parquet never. Recorded in the manifest (cells).",
    ),
    _param(
        "fraction",
        {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "Export ceil(fraction x pairs) of each task type's matching pairs instead of "
        "per_task_type (not with per_task_type): 0.1 takes 3 of 30 and 1 of 3.",
    ),
    _param(
        "ppi_sample",
        {"type": "boolean", "default": False},
        "The random label sample for prediction-powered inference of net harm: pairs drawn "
        "at random from every changed pair of each task type (judged or not); order "
        "defaults to random, a seed is drawn when none is given. The manifest's ppi_sample "
        "records the sample's id, seed, fraction and exchange ids. Refused with "
        "order=lowest, similarity bounds, flag and changed_unjudged.",
    ),
]
"""OpenAPI parameter objects of the export endpoint."""
