"""The Overview's coverage tables: what the verdict evaluated, by route and by task type.

Pure view builders (no Streamlit) over the stored verdict's
:class:`~shadoweval.records.Coverage`: one row per captured route (captured, replayed,
skipped, paired, share, why skipped, whether any of it was evaluated) and one per captured
task type (captured, paired, share). A route with captured traffic and no pair is traffic
the gate did not evaluate — the verdict holds on it unless the policy exempts the route.
"""

from __future__ import annotations

import pandas as pd

from shadoweval.records import Verdict

__all__ = ["ROUTE_COLUMNS", "TASK_TYPE_COLUMNS", "load_note", "route_table", "task_type_table"]

ROUTE_COLUMNS = (
    "route",
    "captured",
    "replayed",
    "skipped",
    "paired",
    "coverage",
    "evaluated",
    "skip reasons",
)
TASK_TYPE_COLUMNS = ("task type", "captured", "paired", "coverage")


def route_table(verdict: Verdict | None) -> pd.DataFrame:
    """One row per route of the verdict's coverage, routes in name order; ``coverage`` is
    paired / captured (a fraction), ``skip reasons`` ``"<reason> (n); …"``. Empty (with
    the columns) for no verdict, or one stored before coverage by route existed."""
    rows = []
    if verdict is not None:
        for route, c in sorted(verdict.coverage.per_route.items()):
            rows.append(
                {
                    "route": route,
                    "captured": c.captured,
                    "replayed": c.replayed,
                    "skipped": c.skipped,
                    "paired": c.paired,
                    "coverage": c.paired / c.captured if c.captured else None,
                    "evaluated": "yes" if c.paired else "NO",
                    "skip reasons": "; ".join(f"{r} ({n})" for r, n in c.skip_reasons.items()),
                }
            )
    return pd.DataFrame(rows, columns=list(ROUTE_COLUMNS))


def task_type_table(verdict: Verdict | None) -> pd.DataFrame:
    """One row per captured task type: captured, paired, paired / captured."""
    rows = []
    if verdict is not None:
        coverage = verdict.coverage
        for task_type, n in sorted(coverage.per_task_type.items()):
            paired = coverage.paired_per_task_type.get(task_type, 0)
            rows.append(
                {
                    "task type": task_type,
                    "captured": n,
                    "paired": paired,
                    "coverage": paired / n if n else None,
                }
            )
    return pd.DataFrame(rows, columns=list(TASK_TYPE_COLUMNS))


def load_note(verdict: Verdict | None) -> str | None:
    """``"measured at 13.9 req/s of 500 asked"`` when a replay pass of the run started its
    measured requests below 95% of the asked rate (the worst), else ``None``."""
    if verdict is None:
        return None
    short = verdict.coverage.load_shortfalls()
    return f"measured at {short[0].describe_load()}" if short else None
