"""The one reason ranking: in which order the open (blocking, not passed) checks are named.

Data problems first, then net harm that needs judgements (what a reviewer can do now), then
unmet margins, then too few pairs (the one that only needs more traffic). The sort is
stable, so checks of one rank keep their unit and family order (the canary's checks all
rank as unmet margins: its validity checks first, then its promote checks, as registered).
"""

from __future__ import annotations

from shadoweval.records import Check
from shadoweval.stats.net_harm import NET_HARM_METRIC

__all__ = ["DATA_PROBLEMS", "reason_rank"]

DATA_PROBLEMS = ("(NaN)", "no pairs", "invalid", "outside [-1, 1]", "nothing to compare")
"""Words of a reason that says the data itself is wrong (ranked first)."""


def reason_rank(check: Check) -> int:
    """The rank of an open check's reason: 0 data problems (and net harm without pairs), 1
    net harm to judge, 2 unmet margins, 3 too few pairs."""
    reason = check.reason
    if check.metric == NET_HARM_METRIC and reason.startswith("no pairs"):
        return 0
    if check.metric == NET_HARM_METRIC:
        return 1
    if any(marker in reason for marker in DATA_PROBLEMS):
        return 0
    if reason.startswith("too few"):
        return 3
    return 2
