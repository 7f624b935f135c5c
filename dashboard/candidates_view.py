"""The Candidates page's tables: several candidates on one shadow sample, side by side
(:mod:`shadoweval.application.candidates`)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from shadoweval.application.candidates import DIRECTION_NOTE, CandidateComparison

__all__ = ["DIRECTION_NOTE", "candidates_table", "pairwise_table"]


def candidates_table(comparison: CandidateComparison, run_ids: Mapping[str, str]) -> pd.DataFrame:
    """One row per candidate: name, run id (``run_ids`` by name), its own gate's decision,
    no worse (Holm), its intersection–union p and Holm-adjusted p, requests with a
    direction, the mean direction on them in points (``direction``: :data:`DIRECTION_NOTE`,
    not the gate's net harm), best or tied."""
    rows = [
        {
            "candidate": r.name,
            "run": run_ids.get(r.name, ""),
            "decision": r.decision.value.upper(),
            "no worse": r.no_worse,
            "p": r.p_value,
            "Holm p": r.adjusted_p,
            "requests": r.requests,
            "direction": r.direction_pp,
            "pick": (
                "best" if r.name == comparison.best else "tied" if r.name in comparison.tied else ""
            ),
        }
        for r in comparison.candidates
    ]
    return pd.DataFrame(rows)


def pairwise_table(comparison: CandidateComparison) -> pd.DataFrame:
    """The paired sign tests among the no-worse candidates: the two names, shared
    requests, where each was better, the p-value, its Bonferroni level, the winner."""
    return pd.DataFrame(
        [
            {
                "first": t.first,
                "second": t.second,
                "shared requests": t.shared,
                "first better": t.first_better,
                "second better": t.second_better,
                "p": t.p_value,
                "level": t.level,
                "winner": t.winner or "",
            }
            for t in comparison.pairwise
        ],
        columns=[
            "first",
            "second",
            "shared requests",
            "first better",
            "second better",
            "p",
            "level",
            "winner",
        ],
    )
