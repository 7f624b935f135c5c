"""Check families: one signature for every family of checks, run in registration order.

A family takes one unit of analysis (the gate: one task type or the pooled pairs with the
look's levels, :class:`shadoweval.stats.checks.unit.GateUnit`; the canary: one poll of one
step, :class:`shadoweval.stats.canary.step.StepContext`) and returns its checks, in order
(the gate's paired tests still waiting for Holm's adjustment, or decided
:class:`~shadoweval.stats.engine.judged.Judged` checks). Adding a check is one new module
with a function of this signature and one line in the caller's registration tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["CheckFamily", "run_families"]

UnitT = TypeVar("UnitT")
EntryT = TypeVar("EntryT")


@dataclass(frozen=True, slots=True)
class CheckFamily(Generic[UnitT, EntryT]):
    """One registered family of checks.

    Attributes:
        name: what the family checks (``binary``, ``harms``, ``srm`` …), for readers.
        run: the unit in, the family's checks out (possibly none), in their order.
    """

    name: str
    run: Callable[[UnitT], Sequence[EntryT]]


def run_families(families: Sequence[CheckFamily[UnitT, EntryT]], unit: UnitT) -> list[EntryT]:
    """Every family's checks of ``unit``, family by family in registration order."""
    out: list[EntryT] = []
    for family in families:
        out.extend(family.run(unit))
    return out
