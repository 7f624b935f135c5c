"""Which Kafka offsets may be committed, when records finish out of order (pure).

A replay worker fetches records in offset order but finishes them in any order (a slow
candidate answer holds up one record while later ones complete). Kafka stores one
position per partition — "everything before this offset is done" — so the committable
position is the first offset that is *not* done yet, never past it (DESIGN §6:
at-least-once; an unfinished record is re-delivered after a crash, never skipped).

:class:`OffsetTracker` keeps, per partition, the offsets fetched and not yet committable,
in fetch order. Offsets need not be contiguous (compaction and transaction markers leave
gaps): "contiguous" means contiguous in fetch order. Memory is bounded by what is in
flight: done offsets at the head of a partition are dropped as soon as they are passed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

Partition = tuple[str, int]
"""``(topic, partition)``."""


@dataclass(slots=True)
class _PartitionState:
    pending: deque[int] = field(default_factory=deque)
    """Offsets added and not yet passed, in fetch (ascending) order."""
    done: set[int] = field(default_factory=set)
    """Members of ``pending`` that are done."""
    position: int | None = None
    """Next offset to commit (highest contiguous done offset + 1), once one is done."""


class OffsetTracker:
    """Per-partition commit positions for records finished in any order.

    Usage::

        tracker.add(tp, 10); tracker.add(tp, 11); tracker.add(tp, 12)
        tracker.done(tp, 11)          # committable() == {}   (10 is unfinished)
        tracker.done(tp, 10)          # committable() == {tp: 12}
        tracker.done(tp, 12)          # committable() == {tp: 13}

    Not thread-safe; use it from one event loop.
    """

    def __init__(self) -> None:
        self._parts: dict[Partition, _PartitionState] = {}

    def add(self, partition: Partition, offset: int) -> None:
        """Register a fetched record. Offsets of one partition must arrive ascending.

        Raises:
            ValueError: ``offset`` is not above the last one added for ``partition`` (a
                partition is re-read only after :meth:`forget`), or is negative.
        """
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._parts.setdefault(partition, _PartitionState())
        last = state.pending[-1] if state.pending else (state.position or 0) - 1
        if offset <= last:
            raise ValueError(
                f"offset {offset} of {partition} is not above the last one tracked ({last}); "
                "forget() the partition before reading it again"
            )
        state.pending.append(offset)

    def done(self, partition: Partition, offset: int) -> bool:
        """Mark a record finished (in any order). Returns False when it is not tracked
        (its partition was forgotten after a revoke, or it was already passed)."""
        state = self._parts.get(partition)
        if state is None or offset in state.done:
            return False
        if not state.pending or not state.pending[0] <= offset <= state.pending[-1]:
            return False
        if offset not in state.pending:  # a gap between fetched offsets
            return False
        state.done.add(offset)
        while state.pending and state.pending[0] in state.done:
            head = state.pending.popleft()
            state.done.discard(head)
            state.position = head + 1
        return True

    def committable(self) -> dict[Partition, int]:
        """``{partition: next offset to read}`` for every partition with a done prefix.

        The value is the highest offset done contiguously (in fetch order) from the start
        plus one; a partition whose first tracked record is unfinished is left out.
        """
        return {tp: s.position for tp, s in self._parts.items() if s.position is not None}

    def forget(self, partitions: Iterable[Partition]) -> None:
        """Drop all state of ``partitions`` (they were revoked in a rebalance)."""
        for tp in partitions:
            self._parts.pop(tp, None)

    def unfinished(self, partition: Partition | None = None) -> int:
        """Records added and not yet done (of one partition, or of all)."""
        states = (
            self._parts.values()
            if partition is None
            else [s for tp, s in self._parts.items() if tp == partition]
        )
        return sum(len(s.pending) - len(s.done) for s in states)

    def partitions(self) -> list[Partition]:
        """Partitions with any state."""
        return list(self._parts)
