"""Canary page: a canary's steps, the share per version over time, each step's last verdict
with its checks, and the audit trail.

The share timeline is :func:`shadoweval.application.canary.share_timeline`'s (built from the steps'
windows); the step verdict is the typed :class:`shadoweval.records.StepVerdict` storage reads
back on each step (``last_verdict``: ``decision``, ``reasons``, ``checks`` — each check with
``name``, ``role``, ``status``, ``estimate``, ``low``, ``high``, ``threshold``, ``detail``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import altair as alt
import orjson
import pandas as pd

from shadoweval.application.canary import CanaryView, SharePoint
from shadoweval.dashboard.check_cells import check_rows_table
from shadoweval.records import StepVerdict
from shadoweval.storage import CanaryInfo, PolicyAuditEntry

__all__ = [
    "AUDIT_COLUMNS",
    "CHECK_COLUMNS",
    "STEP_COLUMNS",
    "audit_table",
    "canary_label",
    "check_table",
    "evaluated_at_text",
    "share_chart",
    "share_frame",
    "steps_table",
    "verdict_reasons",
]

STEP_COLUMNS = (
    "step",
    "share",
    "started at",
    "ended at",
    "outcome",
    "evaluations",
    "last decision",
)
CHECK_COLUMNS = ("name", "role", "status", "estimate", "low", "high", "threshold", "detail")
_NUMERIC_COLUMNS = ("estimate", "low", "high", "threshold")
AUDIT_COLUMNS = ("recorded at", "action", "who", "why", "what", "command")

_VERSION_COLOURS = {"baseline": "#1f77b4", "candidate": "#ff7f0e"}
_WHAT_LEFT_OUT = frozenset({"why", "canary_id"})


def canary_label(canary: CanaryInfo) -> str:
    """How a canary is listed in the picker: creation time, name, state, share, id."""
    return (
        f"{canary.created_at:%Y-%m-%d %H:%M} · {canary.name} · {canary.state.value} · "
        f"{canary.candidate_share:.1%} · {canary.canary_id}"
    )


def steps_table(view: CanaryView) -> pd.DataFrame:
    """One row per step reached, in step order: share (0..1), window (UTC; ``ended at``
    empty while the step runs), outcome (``running`` while it runs), evaluations and the
    last step decision."""
    frame = pd.DataFrame(
        [
            {
                "step": s.step_index,
                "share": s.share,
                "started at": s.started_at,
                "ended at": s.ended_at,
                "outcome": s.outcome or "running",
                "evaluations": s.evaluations,
                "last decision": s.last_decision or "",
            }
            for s in view.steps
        ],
        columns=list(STEP_COLUMNS),
    )
    frame["started at"] = pd.to_datetime(frame["started at"], utc=True)
    frame["ended at"] = pd.to_datetime(frame["ended at"], utc=True)
    return frame


def share_frame(points: Sequence[SharePoint]) -> pd.DataFrame:
    """The share timeline as a frame: ``at`` (UTC), ``version``, ``share`` (0..1),
    ``step``, ``order`` (the vertex order along each version's line)."""
    frame = pd.DataFrame(
        [
            {
                "at": p.at,
                "version": p.version,
                "share": p.share,
                "step": p.step_index,
                "order": p.order,
            }
            for p in points
        ],
        columns=["at", "version", "share", "step", "order"],
    )
    frame["at"] = pd.to_datetime(frame["at"], utc=True)
    return frame


def share_chart(frame: pd.DataFrame) -> alt.Chart:
    """Share of sessions per version over time: one line per version (baseline = 1 −
    candidate), joined in step order (tooltip: step, version, share)."""
    domain = list(_VERSION_COLOURS)
    chart: alt.Chart = (
        alt.Chart(frame)
        .mark_line(point=True, interpolate="linear")
        .encode(
            x=alt.X("at:T", title="time (UTC)", axis=alt.Axis(format="%Y-%m-%d %H:%M")),
            y=alt.Y(
                "share:Q",
                title="share of sessions",
                scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%"),
            ),
            color=alt.Color(
                "version:N",
                scale=alt.Scale(domain=domain, range=[_VERSION_COLOURS[v] for v in domain]),
            ),
            order="order:Q",
            tooltip=["at:T", "step:Q", "version:N", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(height=240)
    )
    return chart


def check_table(verdict: StepVerdict) -> pd.DataFrame:
    """The checks of one step verdict, in the verdict's order, through the one checks table
    (:func:`shadoweval.dashboard.check_cells.check_rows_table`)."""
    rows = [
        {
            "name": c.name,
            "role": c.role.value,
            "status": c.status,
            "estimate": c.estimate,
            "low": c.low,
            "high": c.high,
            "threshold": c.threshold,
            "detail": c.detail,
        }
        for c in verdict.checks
    ]
    return check_rows_table(rows, CHECK_COLUMNS, numeric=_NUMERIC_COLUMNS)


def verdict_reasons(verdict: StepVerdict) -> list[str]:
    """The reasons of one step verdict, as text."""
    return list(verdict.reasons)


def audit_table(entries: Sequence[PolicyAuditEntry]) -> pd.DataFrame:
    """The canary's audit trail, oldest first: who (``actor``), why (``detail["why"]``),
    what (the rest of the detail, compact JSON: step, shares, split revision)."""
    rows = []
    for e in entries:
        what = {k: v for k, v in e.detail.items() if k not in _WHAT_LEFT_OUT}
        why = e.detail.get("why")
        rows.append(
            {
                "recorded at": e.recorded_at,
                "action": e.action.value,
                "who": e.actor,
                "why": "" if why is None else str(why),
                "what": orjson.dumps(what, option=orjson.OPT_SORT_KEYS).decode(),
                "command": e.command,
            }
        )
    frame = pd.DataFrame(rows, columns=list(AUDIT_COLUMNS))
    frame["recorded at"] = pd.to_datetime(frame["recorded at"], utc=True)
    return frame


def evaluated_at_text(at: datetime | None) -> str:
    """When a step verdict was made, for a caption (``never`` before the first)."""
    return "never" if at is None else f"{at:%Y-%m-%d %H:%M:%S} UTC"
