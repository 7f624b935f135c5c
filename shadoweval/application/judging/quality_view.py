"""The judge's figures as the faces show them: one row of text cells per task type.

``judge summary`` (text), the gate's report and the dashboard's Judged page show the same
numbers (:func:`shadoweval.stats.judge_quality.apply_judge_floor` under the run's frozen
``judge`` floor): agreement with labels with its interval and the labelled pairs, Cohen's κ,
the position-flip rate, the first-position rate, and whether the judge votes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shadoweval.records import POOLED, HumanLabel, PairJudgement
from shadoweval.stats.judge_quality import apply_judge_floor
from shadoweval.stats.policy import JudgePolicy, parse_policy_yaml
from shadoweval.storage import RunInfo

__all__ = ["JUDGE_QUALITY_COLUMNS", "judge_quality_report", "judge_quality_rows"]

JUDGE_QUALITY_COLUMNS: tuple[str, ...] = (
    "task type",
    "labelled",
    "agreement",
    "kappa",
    "flip rate",
    "first position",
    "votes",
)
"""The columns of :func:`judge_quality_rows`, in order."""


def judge_quality_report(
    run: RunInfo | None, judgements: Sequence[PairJudgement], labels: Sequence[HumanLabel]
) -> dict[str, Any]:
    """:meth:`~shadoweval.stats.judge_quality.JudgeFloor.as_dict` of the run's judgements and
    labels under its frozen ``judge`` floor (the default floor when ``run`` is ``None``).

    Raises:
        ConfigError: the run's frozen policy no longer parses.
    """
    block = JudgePolicy() if run is None else parse_policy_yaml(run.policy_yaml).judge
    return apply_judge_floor(judgements, labels, block).as_dict()


def _pct(share: Mapping[str, Any]) -> str:
    """``50% of 40 (35–65%)``; ``–`` at n 0."""
    if not share["n"]:
        return "–"
    return (
        f"{100 * share['share']:.0f}% of {share['n']:,} "
        f"({100 * share['low']:.0f}–{100 * share['high']:.0f}%)"
    )


def _votes(standing: Mapping[str, Any] | None, floor: Mapping[str, Any]) -> str:
    if standing is None:
        return ""
    flip = standing.get("flip")
    ceiling = floor.get("max_flip_rate", 1.0)
    if flip is not None and flip["share"] > ceiling:
        return f"NO (flips {100 * flip['share']:.0f}% > {100 * ceiling:.0f}%)"
    if standing["read"] == "not_read":
        return "yes (floor not read)"
    level = f"{100 * floor['min_agreement']:.0f}%"
    how = " on pooled" if standing["read"] == "pooled" else ""
    return f"yes (≥ {level}{how})" if standing["votes"] else f"NO (< {level}{how})"


def judge_quality_rows(report: Mapping[str, Any]) -> list[dict[str, str]]:
    """One row of text cells (:data:`JUDGE_QUALITY_COLUMNS`) per task type, then pooled,
    of a :func:`judge_quality_report` (or the ``judge_quality`` section of a judgement
    summary); empty when the judge judged nothing."""
    units = dict(report.get("per_task_type") or {})
    if report.get("pooled") is not None:
        units[POOLED] = report["pooled"]
    rows = []
    for task_type, unit in units.items():
        kappa = unit["kappa"]["kappa"]
        rows.append(
            {
                "task type": "pooled" if task_type == POOLED else task_type,
                "labelled": f"{unit['agreement']['n']:,} ({unit['labels']['human']:,} human, "
                f"{unit['labels']['reference']:,} reference)",
                "agreement": _pct(unit["agreement"]),
                "kappa": "–" if kappa is None else f"{kappa:.2f}",
                "flip rate": _pct(unit["flip"]),
                "first position": _pct(unit["first_position"]),
                "votes": _votes(unit.get("standing"), report["floor"]),
            }
        )
    return rows
