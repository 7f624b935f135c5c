"""The manifest written beside every export (``manifest.json``).

It says what the file holds and how it was drawn, so an analyst's sample can be traced
and drawn again:

* ``schema_version`` (:data:`MANIFEST_SCHEMA_VERSION`), ``created_at`` (UTC, ISO 8601);
* ``run_id``, ``policy_hash`` (the run's frozen gate policy), ``baseline`` and
  ``candidate`` model names;
* ``format``, ``file`` (``samples.<ext>``), ``columns`` (in file order), ``cells``:
  ``formula_escaped`` (a CSV whose text cells starting like a formula got a leading
  ``'``), ``raw`` (a CSV written with ``raw_cells``) or ``typed`` (JSONL, Parquet: never
  escaped);
* ``order`` (``lowest`` / ``random``), ``per_task_type`` (N; ``null`` when ``fraction``
  is set), ``fraction`` (F: ``ceil(F × matching)`` pairs of each task type; ``null`` when
  N is), ``seed`` (``null`` unless given or drawn);
* ``filters``: ``task_types``, ``flags`` (a pair must have all), ``min_similarity``,
  ``max_similarity`` (``null`` = unbounded), ``changed_unjudged`` (only pairs that
  changed beyond the noise and have no successful judgement of any source) and
  ``exchange_ids`` (how many exchange ids the export was restricted to, ``null`` = no
  restriction; for ``changed_unjudged`` the number of changed, unjudged pairs of the run);
* ``counts``: per task type ``{"matching": …, "exported": …}`` (sorted by task type), and
  ``total`` the same summed;
* ``redaction``: ``rules`` applied (in order) and ``counts`` — hits per rule in the
  exported text (every rule listed, 0 when it did not fire);
* ``ppi_sample``: ``null``, or for the random label sample
  (:attr:`~shadoweval.export.request.ExportRequest.ppi_sample`) ``{"id": …,
  "population": "changed pairs per task type", "seed": S, "fraction": F or null,
  "per_task_type": N or null, "exchange_ids": [every pair drawn, sorted]}``; ``counts``
  then holds each task type's changed pairs (``matching``) and the pairs drawn
  (``exported``). ``shadow-eval labels import`` reads it to mark the labels of those
  pairs with the sample's id (:mod:`shadoweval.export.ppi`).

Fields are only ever added (``ppi_sample``, ``fraction``), so readers of version 1 keep
working and :data:`MANIFEST_SCHEMA_VERSION` stays 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from shadoweval.export.request import PPI_POPULATION, ExportRequest

MANIFEST_SCHEMA_VERSION = 1
"""Version of the manifest's shape; bump on an incompatible change."""


def samples_file_name(fmt: str) -> str:
    """``samples.csv``, ``samples.jsonl`` or ``samples.parquet``."""
    return f"samples.{fmt}"


def cells_mode(request: ExportRequest) -> str:
    """The manifest's ``cells``: ``formula_escaped``, ``raw`` (CSV) or ``typed``."""
    if request.fmt != "csv":
        return "typed"
    return "raw" if request.raw_cells else "formula_escaped"


def build_manifest(
    request: ExportRequest,
    *,
    policy_hash: str,
    baseline: str,
    candidate: str,
    created_at: datetime,
    counts: Mapping[str, tuple[int, int]],
    redaction_rules: Sequence[str],
    redaction_counts: Mapping[str, int],
    columns: Sequence[str],
    drawn: Sequence[str] = (),
) -> dict[str, Any]:
    """The manifest of one export as a JSON-ready ``dict`` (see the module doc).

    Args:
        counts: per task type, ``(matching, exported)`` pair counts.
        drawn: the exchange ids exported (listed under ``ppi_sample`` for the random
            label sample, ignored otherwise).
        redaction_counts: hits per rule; rules that fired but are not in
            ``redaction_rules`` (markers of an unlisted rule) are listed after them.
    """
    flt = request.flt
    per_rule = {rule: int(redaction_counts.get(rule, 0)) for rule in redaction_rules}
    for rule, n in redaction_counts.items():
        per_rule.setdefault(rule, int(n))
    by_type = {
        task_type: {"matching": matching, "exported": exported}
        for task_type, (matching, exported) in sorted(counts.items())
    }
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "created_at": created_at.isoformat(),
        "run_id": request.run_id,
        "policy_hash": policy_hash,
        "baseline": baseline,
        "candidate": candidate,
        "format": request.fmt,
        "file": samples_file_name(request.fmt),
        "columns": list(columns),
        "cells": cells_mode(request),
        "order": request.order,
        "per_task_type": request.per_task_type if request.fraction is None else None,
        "fraction": request.fraction,
        "seed": request.seed,
        "filters": {
            "task_types": list(flt.task_types),
            "flags": [flag.value for flag in flt.flags],
            "min_similarity": flt.min_similarity,
            "max_similarity": flt.max_similarity,
            "changed_unjudged": request.changed_unjudged,
            "exchange_ids": None if request.exchange_ids is None else len(request.exchange_ids),
        },
        "counts": by_type,
        "total": {
            "matching": sum(m for m, _ in counts.values()),
            "exported": sum(e for _, e in counts.values()),
        },
        "redaction": {"rules": list(redaction_rules), "counts": per_rule},
        "ppi_sample": _ppi_section(request, drawn),
    }


def _ppi_section(request: ExportRequest, drawn: Sequence[str]) -> dict[str, Any] | None:
    """The manifest's ``ppi_sample`` (``None`` unless the export is the random sample)."""
    if request.sample_id is None:
        return None
    return {
        "id": request.sample_id,
        "population": PPI_POPULATION,
        "seed": request.seed,
        "fraction": request.fraction,
        "per_task_type": request.per_task_type if request.fraction is None else None,
        "exchange_ids": sorted(drawn),
    }
