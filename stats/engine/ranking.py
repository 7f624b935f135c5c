"""The one reason ranking: in which order the open (blocking, not passed) checks are named.

The deciding checks come before the context, and a quality signal before a unit that
cannot be judged at all. Data faults first (unreadable numbers: the data itself is wrong),
then net harm that needs judgements (what a reviewer can do now), then unmet margins, then
too few pairs (the one that only needs more traffic), and last the checks that cannot judge
because their unit has no pairs to compare (``no pairs …``, the baseline failed on every
pair: ``nothing to compare against``), which a caller folds into one line naming the units
(:func:`cannot_judge`). The sort is stable, so checks of one rank keep their unit and family
order (the canary's checks all rank as unmet margins: its validity checks first, then its
promote checks, as registered).
"""

from __future__ import annotations

import re

from shadoweval.records import Check
from shadoweval.stats.net_harm import NET_HARM_METRIC

__all__ = ["CANNOT_JUDGE_RANK", "DATA_PROBLEMS", "cannot_judge", "reason_rank"]

DATA_PROBLEMS = ("(NaN)", "invalid", "outside [-1, 1]")
"""Words of a reason that says the data itself is wrong (ranked first)."""

NO_PAIRS = re.compile(r"no (?:\w+ )?pairs\b")
"""A reason that starts ``no pairs …`` or ``no latency pairs …``: nothing left to compare."""

NOTHING_TO_COMPARE = "nothing to compare"
"""Words of a reason that says the other side failed on every pair of the unit."""

CANNOT_JUDGE_RANK = 4
"""The rank of :func:`cannot_judge` checks: last."""


def cannot_judge(check: Check) -> bool:
    """True when ``check`` could not judge anything because its unit has no pairs to
    compare: its reason starts with ``no pairs`` or ``no <kind> pairs`` (no pair at all,
    none left after the infrastructure errors, none with a latency, a similarity or a
    token count) or says the baseline failed on every pair (``nothing to compare
    against``)."""
    return NO_PAIRS.match(check.reason) is not None or NOTHING_TO_COMPARE in check.reason


def reason_rank(check: Check) -> int:
    """The rank of an open check's reason: 0 data faults, 1 net harm to judge, 2 unmet
    margins, 3 too few pairs, :data:`CANNOT_JUDGE_RANK` (4) no pairs to judge."""
    reason = check.reason
    if cannot_judge(check):
        return CANNOT_JUDGE_RANK
    if check.metric == NET_HARM_METRIC:
        return 1
    if any(marker in reason for marker in DATA_PROBLEMS):
        return 0
    if reason.startswith("too few"):
        return 3
    return 2
