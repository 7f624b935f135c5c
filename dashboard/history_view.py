"""History page: a run's verdict timeline and the policy audit log.

The frozen policy's integrity (does its YAML still hash to the run's policy hash) is
:func:`shadoweval.application.run_views.policy_integrity`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import orjson
import pandas as pd

from shadoweval.records import Decision
from shadoweval.storage import PolicyAuditEntry, VerdictEntry

__all__ = [
    "AUDIT_COLUMNS",
    "TIMELINE_COLUMNS",
    "audit_table",
    "timeline_chart",
    "verdict_timeline",
]

TIMELINE_COLUMNS = (
    "verdict id",
    "decided at",
    "look",
    "decision",
    "paired",
    "captured",
    "coverage",
    "checks failed",
    "checks inconclusive",
    "command",
    "first reason",
)
AUDIT_COLUMNS = ("recorded at", "action", "policy hash", "command", "actor", "detail")

_DECISION_ORDER = [Decision.ROLLBACK.value, Decision.HOLD.value, Decision.PROMOTE.value]
_DECISION_COLOURS = ["#d62728", "#e6a700", "#2ca02c"]


def verdict_timeline(entries: Sequence[VerdictEntry]) -> pd.DataFrame:
    """One row per stored verdict, oldest first (as :meth:`Repository.verdict_history`).

    ``coverage`` is the verdict's paired / captured share; ``checks failed`` /
    ``checks inconclusive`` count its checks by outcome; ``first reason`` is the
    deciding reason.
    """
    rows = []
    for entry in entries:
        verdict = entry.verdict
        outcomes = [c.outcome.value for c in verdict.checks]
        rows.append(
            {
                "verdict id": entry.id,
                "decided at": verdict.decided_at,
                "look": verdict.look,
                "decision": verdict.decision.value,
                "paired": verdict.coverage.paired,
                "captured": verdict.coverage.captured,
                "coverage": verdict.coverage.share,
                "checks failed": outcomes.count("fail"),
                "checks inconclusive": outcomes.count("inconclusive"),
                "command": entry.command,
                "first reason": verdict.reasons[0] if verdict.reasons else "",
            }
        )
    frame = pd.DataFrame(rows, columns=list(TIMELINE_COLUMNS))
    frame["decided at"] = pd.to_datetime(frame["decided at"], utc=True)
    return frame


def timeline_chart(timeline: pd.DataFrame) -> alt.Chart:
    """Decision by time: one point per verdict (tooltip: look, pairs, command), joined."""
    base = alt.Chart(timeline).encode(
        x=alt.X("decided at:T", title="decided at (UTC)", axis=alt.Axis(format="%Y-%m-%d %H:%M")),
        y=alt.Y("decision:N", sort=_DECISION_ORDER, scale=alt.Scale(domain=_DECISION_ORDER)),
    )
    points = base.mark_circle(size=120).encode(
        color=alt.Color(
            "decision:N",
            scale=alt.Scale(domain=_DECISION_ORDER, range=_DECISION_COLOURS),
            legend=None,
        ),
        tooltip=["verdict id:Q", "decided at:T", "look:Q", "decision:N", "paired:Q", "command:N"],
    )
    chart: alt.Chart = (base.mark_line(color="#999999", strokeDash=[4, 3]) + points).properties(
        height=220
    )
    return chart


def audit_table(entries: Sequence[PolicyAuditEntry]) -> pd.DataFrame:
    """The policy audit log, oldest first; ``detail`` as compact JSON."""
    frame = pd.DataFrame(
        [
            {
                "recorded at": e.recorded_at,
                "action": e.action.value,
                "policy hash": e.policy_hash,
                "command": e.command,
                "actor": e.actor,
                "detail": orjson.dumps(e.detail, option=orjson.OPT_SORT_KEYS).decode(),
            }
            for e in entries
        ],
        columns=list(AUDIT_COLUMNS),
    )
    frame["recorded at"] = pd.to_datetime(frame["recorded at"], utc=True)
    return frame
