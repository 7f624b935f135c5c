"""A decided check and its role in the decision, and how judged checks become findings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from shadoweval.records import Check, CheckOutcome
from shadoweval.stats.engine.ranking import reason_rank

__all__ = ["Judged", "OnFail", "findings", "open_checks"]

OnFail = Literal["rollback", "hold", "report"]
"""What a check's FAIL does: roll back, hold (report-and-block), or nothing by itself
(report; a blocking check that does not pass still keeps PROMOTE open)."""

CheckT = TypeVar("CheckT", bound=Check)


@dataclass(frozen=True)
class Judged(Generic[CheckT]):
    """A decided check and its role in the decision.

    Attributes:
        check: the check record (:class:`~shadoweval.records.Check`, or the canary's
            :class:`~shadoweval.records.StepCheck`).
        harm: significant harm: it rolls back, even when the run or step is blocked.
        blocking: PROMOTE needs it to pass.
        minor: its unit has less than ``min_traffic_share`` of the pairs (gate only).
        on_fail: what its FAIL does (:data:`OnFail`).
        blocks_run: its FAIL makes the run unjudgeable (the gate's ``infra_error_rate``):
            HOLD, never ROLLBACK, like an invalid run.
    """

    check: CheckT
    harm: bool
    blocking: bool
    minor: bool
    on_fail: OnFail
    blocks_run: bool = False

    @property
    def run_blocked(self) -> bool:
        """A FAIL of a :attr:`blocks_run` check."""
        return self.blocks_run and self.check.outcome == CheckOutcome.FAIL


def open_checks(judged: Sequence[Judged[CheckT]]) -> list[Judged[CheckT]]:
    """The blocking checks that did not pass, in :func:`reason_rank` order (stable: unit
    and family order within a rank)."""
    return sorted(
        (j for j in judged if j.blocking and j.check.outcome != CheckOutcome.PASS),
        key=lambda j: reason_rank(j.check),
    )


@dataclass(frozen=True, slots=True)
class CheckLines:
    """The reason lines of judged checks, by what they do to the decision."""

    harms: list[str]
    blocked: list[str]
    fails: list[str]
    holds: list[str]


def findings(judged: Sequence[Judged[CheckT]], line: Callable[[Judged[CheckT]], str]) -> CheckLines:
    """Sort judged checks into what they do: ``harms`` (roll back whatever else holds),
    ``blocked`` (:attr:`Judged.run_blocked`: HOLD, never ROLLBACK), ``fails`` (a FAIL that
    rolls back unless the run is blocked) and ``holds`` (a report-and-block FAIL), each as
    ``line(j)`` in check order."""
    failed = [j for j in judged if j.check.outcome == CheckOutcome.FAIL and not j.harm]
    return CheckLines(
        harms=[line(j) for j in judged if j.harm],
        blocked=[line(j) for j in judged if j.run_blocked],
        fails=[line(j) for j in failed if j.on_fail == "rollback"],
        holds=[line(j) for j in failed if j.on_fail == "hold" and not j.run_blocked],
    )
