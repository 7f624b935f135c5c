"""The one decision rule of the engine and the order of a verdict's reasons.

Rule (gate-statistics.md §2.3, docs/canary-statistics.md "Decision table"):

1. a harm rolls back, whatever else holds (a significant critical harm of the gate, a
   breached rollback condition of the canary);
2. a blocked run or step (invalid, unjudgeable) holds;
3. a failed check whose FAIL rolls back rolls back;
4. a report-and-block failure, an open blocking check or something still awaited (the
   observation window, the first promote checkpoint) holds;
5. otherwise PROMOTE.

Which reasons each decision lists, and in which order, is the caller's
:class:`ReasonLayout`; the first reason always says what decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from shadoweval.records import Decision

__all__ = ["Decided", "Findings", "ReasonLayout", "Section", "decide", "unique"]

Section = Literal["harms", "blocked", "fails", "holds", "open", "waiting", "notes", "leading"]
"""A section of reasons (:class:`Findings`' fields)."""


def unique(lines: Sequence[str]) -> list[str]:
    """``lines`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(lines))


@dataclass(frozen=True, slots=True)
class Findings:
    """What the checks and the validity rules found, as reason lines per section.

    Attributes:
        harms: roll back whatever else holds.
        blocked: the run or step cannot be judged (validity, infrastructure): HOLD.
        fails: roll back unless blocked.
        holds: report-and-block failures: HOLD.
        open: blocking checks not passed, ranked.
        waiting: what PROMOTE still waits for besides the checks.
        notes: context lines (reported, not deciding).
        leading: context that leads a HOLD not decided by validity (the gate's degenerate
            noise floor).
    """

    harms: Sequence[str] = ()
    blocked: Sequence[str] = ()
    fails: Sequence[str] = ()
    holds: Sequence[str] = ()
    open: Sequence[str] = ()
    waiting: Sequence[str] = ()
    notes: Sequence[str] = ()
    leading: Sequence[str] = ()

    def lines(self, sections: Sequence[Section]) -> list[str]:
        """The lines of ``sections``, in that order, without repeats."""
        out: list[str] = []
        for section in sections:
            out.extend(getattr(self, section))
        return unique(out)


@dataclass(frozen=True, slots=True)
class ReasonLayout:
    """Which sections a caller's verdict lists for each decision, in order.

    ``hold_leading``: the sections of a HOLD (not blocked) counted as its leading reasons
    (what a sample-cap line is inserted after).
    """

    rollback_blocked: tuple[Section, ...]
    hold_blocked: tuple[Section, ...]
    rollback: tuple[Section, ...]
    hold: tuple[Section, ...]
    hold_leading: tuple[Section, ...]


@dataclass(frozen=True, slots=True)
class Decided:
    """The decision, its reasons, and how many leading reasons say why it is blocked or
    what decided a HOLD (0 for PROMOTE and ROLLBACK)."""

    decision: Decision
    reasons: list[str]
    leading: int


def decide(found: Findings, layout: ReasonLayout, promote: Callable[[], list[str]]) -> Decided:
    """Apply the decision rule (module docstring) to ``found``; ``promote()`` gives the
    reasons of a PROMOTE (listed as given)."""
    if found.blocked:
        if found.harms:
            return Decided(Decision.ROLLBACK, found.lines(layout.rollback_blocked), 0)
        blocked = unique(found.blocked)
        return Decided(Decision.HOLD, found.lines(layout.hold_blocked), len(blocked))
    if found.harms or found.fails:
        return Decided(Decision.ROLLBACK, found.lines(layout.rollback), 0)
    if not found.open and not found.holds and not found.waiting:
        return Decided(Decision.PROMOTE, promote(), 0)
    leading = found.lines(layout.hold_leading)
    return Decided(Decision.HOLD, found.lines(layout.hold), len(leading))
