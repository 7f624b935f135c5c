"""The verdict engine: one check record, one decision rule, one reason ranking.

The shadow gate (:mod:`shadoweval.stats.gate`) and the canary step
(:mod:`shadoweval.stats.canary.verdict`) are two callers of this engine:

* every check is a :class:`~shadoweval.records.Check` (the canary's
  :class:`~shadoweval.records.StepCheck` adds its role and level), decided into a
  :class:`Judged` — what its FAIL does (``on_fail``), whether it blocks PROMOTE, whether it
  is a harm that rolls back whatever else holds;
* check families share one signature (:class:`CheckFamily`: a unit of analysis in, its
  checks out) and are registered in one tuple per caller
  (:data:`shadoweval.stats.gate.families.GATE_FAMILIES`,
  :data:`shadoweval.stats.canary.families.CANARY_FAMILIES`), run in that order by
  :func:`run_families`;
* :func:`findings` sorts the judged checks into what rolls back, what holds and what is
  still open (ranked by :func:`reason_rank`: quality signals before the checks that
  :func:`cannot_judge` for want of pairs), and :func:`decide` applies the one decision
  rule (harm first, then validity, then failures, then open checks, else PROMOTE) with each
  caller's :class:`ReasonLayout` (which sections its reasons list, in which order).
"""

from __future__ import annotations

from shadoweval.stats.engine.decision import (
    Decided,
    Findings,
    ReasonLayout,
    Section,
    decide,
    unique,
)
from shadoweval.stats.engine.families import CheckFamily, run_families
from shadoweval.stats.engine.judged import CheckLines, Judged, OnFail, findings, open_checks
from shadoweval.stats.engine.ranking import (
    CANNOT_JUDGE_RANK,
    DATA_PROBLEMS,
    cannot_judge,
    reason_rank,
)

__all__ = [
    "CANNOT_JUDGE_RANK",
    "DATA_PROBLEMS",
    "CheckFamily",
    "CheckLines",
    "Decided",
    "Findings",
    "Judged",
    "OnFail",
    "ReasonLayout",
    "Section",
    "cannot_judge",
    "decide",
    "findings",
    "open_checks",
    "reason_rank",
    "run_families",
    "unique",
]
