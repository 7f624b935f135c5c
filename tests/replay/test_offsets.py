"""OffsetTracker: commit positions never pass an unfinished record, whatever the order."""

from __future__ import annotations

import random

import pytest

from shadoweval.replay.offsets import OffsetTracker

TP = ("shadoweval.exchanges.v1", 0)
TP1 = ("shadoweval.exchanges.v1", 1)


def test_out_of_order_completion_waits_for_the_head() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.add(TP, offset)
    assert tracker.committable() == {}
    assert tracker.done(TP, 11)
    assert tracker.committable() == {}  # 10 is unfinished
    assert tracker.done(TP, 10)
    assert tracker.committable() == {TP: 12}
    assert tracker.unfinished() == 1
    assert tracker.done(TP, 12)
    assert tracker.committable() == {TP: 13}
    assert tracker.unfinished() == 0


def test_gaps_between_fetched_offsets_are_contiguous_in_fetch_order() -> None:
    """Compaction and transaction markers leave gaps: 3 and 7 are neighbours here."""
    tracker = OffsetTracker()
    tracker.add(TP, 3)
    tracker.add(TP, 7)
    assert not tracker.done(TP, 5)  # never fetched
    tracker.done(TP, 7)
    assert tracker.committable() == {}
    tracker.done(TP, 3)
    assert tracker.committable() == {TP: 8}


def test_partitions_are_independent_and_forget_drops_one() -> None:
    tracker = OffsetTracker()
    tracker.add(TP, 0)
    tracker.add(TP1, 5)
    tracker.add(TP1, 6)
    tracker.done(TP1, 5)
    assert tracker.committable() == {TP1: 6}
    tracker.forget([TP1])
    assert tracker.committable() == {}
    assert tracker.partitions() == [TP]
    assert not tracker.done(TP1, 6)  # a replay of a revoked partition finishing late
    tracker.add(TP1, 5)  # re-assigned: read again from the committed position
    assert tracker.unfinished(TP1) == 1
    assert tracker.unfinished() == 2


def test_done_twice_or_unknown_is_ignored() -> None:
    tracker = OffsetTracker()
    tracker.add(TP, 0)
    tracker.add(TP, 1)
    assert tracker.done(TP, 1)
    assert not tracker.done(TP, 1)
    assert not tracker.done(TP, 2)
    assert not tracker.done(TP1, 0)
    assert tracker.done(TP, 0)
    assert not tracker.done(TP, 0)  # already passed
    assert tracker.committable() == {TP: 2}


def test_offsets_must_ascend_per_partition() -> None:
    tracker = OffsetTracker()
    tracker.add(TP, 4)
    with pytest.raises(ValueError, match="not above"):
        tracker.add(TP, 4)
    tracker.done(TP, 4)
    with pytest.raises(ValueError, match="not above"):
        tracker.add(TP, 2)  # behind the committable position
    with pytest.raises(ValueError, match=">= 0"):
        tracker.add(TP1, -1)


def test_memory_is_bounded_by_what_is_in_flight() -> None:
    tracker = OffsetTracker()
    for offset in range(100_000):
        tracker.add(TP, offset)
        if offset >= 8:
            tracker.done(TP, offset - 8)
        assert tracker.unfinished() <= 9
    assert tracker.committable() == {TP: 100_000 - 8}


@pytest.mark.parametrize("seed", range(40))
def test_random_completion_orders_match_the_reference(seed: int) -> None:
    """Property: after any completion order, the position is the first unfinished offset
    (in fetch order) of each partition — never past it, never behind a finished prefix."""
    rng = random.Random(seed)
    tracker = OffsetTracker()
    fetched: dict[tuple[str, int], list[int]] = {}
    for tp in (TP, TP1):
        offset = rng.randrange(0, 1000)
        offsets = []
        for _ in range(rng.randrange(1, 60)):
            offset += rng.choice((1, 1, 1, 2, 5))  # with gaps
            offsets.append(offset)
            tracker.add(tp, offset)
        fetched[tp] = offsets
    pending = [(tp, o) for tp, offsets in fetched.items() for o in offsets]
    rng.shuffle(pending)
    finished: set[tuple[tuple[str, int], int]] = set()
    for tp, offset in pending:
        assert tracker.done(tp, offset)
        finished.add((tp, offset))
        expected: dict[tuple[str, int], int] = {}
        for part, offsets in fetched.items():
            prefix = 0
            while prefix < len(offsets) and (part, offsets[prefix]) in finished:
                prefix += 1
            if prefix:
                expected[part] = offsets[prefix - 1] + 1
        assert tracker.committable() == expected
        assert tracker.unfinished() == len(pending) - len(finished)
    assert tracker.committable() == {tp: offsets[-1] + 1 for tp, offsets in fetched.items()}
