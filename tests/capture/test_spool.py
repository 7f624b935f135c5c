"""DiskSpool: FIFO order, the byte bound, a cursor that survives reopening, consumed
segments deleted, torn or corrupt tails cut off and counted, one process per directory;
a full disk (:class:`shadoweval.simulation.full_disk.FullDisk` through the ``opener`` seam) neither
loses the read position nor leaves empty segments."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from shadoweval.capture.sinks.spool import DiskSpool, SpoolError, encode_frame, frame_size
from shadoweval.testing.full_disk import FullDisk


def rec(i: int, size: int = 100) -> tuple[bytes, bytes]:
    """Record ``i``: key ``k<i % 7>``, a value of ``size`` bytes starting with ``v<i>:``."""
    head = f"v{i}:".encode()
    return f"k{i % 7}".encode(), head + b"x" * (size - len(head))


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("segment-*.spool"))


def drain(spool: DiskSpool, batch: int = 7) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    while not spool.empty:
        got = spool.peek(batch)
        assert got, "peek returned nothing while records remain"
        out.extend(got)
        spool.commit(len(got))
    return out


def test_fifo_order_across_segments_and_peek_does_not_consume(tmp_path: Path) -> None:
    records = [rec(i) for i in range(100)]
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=1024) as spool:
        assert spool.empty
        assert spool.append(records[:60]) == 60
        assert spool.append(records[60:]) == 40
        assert spool.record_count == 100
        assert spool.size_bytes == sum(frame_size(k, v) for k, v in records)
        assert len(segments(tmp_path)) > 5
        assert spool.peek(3) == records[:3]
        assert spool.peek(3) == records[:3]  # peeking again returns the same head
        spool.commit(2)
        assert spool.peek(2) == records[2:4]
        spool.commit(0)
        assert spool.record_count == 98
        assert drain(spool) == records[2:]
        assert spool.empty
        assert spool.size_bytes == 0
        assert segments(tmp_path) == []  # fully consumed segments are deleted


def test_commit_beyond_the_last_peek_is_refused(tmp_path: Path) -> None:
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        spool.append([rec(1), rec(2)])
        spool.peek(1)
        with pytest.raises(ValueError, match="peek of 1"):
            spool.commit(2)


def test_append_is_bounded_and_refuses_what_does_not_fit(tmp_path: Path) -> None:
    one = frame_size(*rec(0))
    with DiskSpool(tmp_path, max_bytes=10 * one + 5, segment_bytes=3 * one) as spool:
        assert spool.append([rec(i) for i in range(4)]) == 4
        assert spool.append([rec(i) for i in range(4, 20)]) == 6  # a prefix that fits
        assert spool.record_count == 10
        assert spool.size_bytes == 10 * one
        assert spool.free_bytes == 5
        assert spool.append([rec(99)]) == 0
        # Consuming a whole segment frees its bytes; a partly consumed head does not.
        spool.peek(2)
        spool.commit(2)
        assert spool.size_bytes == 10 * one
        spool.peek(1)
        spool.commit(1)
        assert spool.size_bytes == 7 * one
        assert spool.append([rec(i) for i in range(20, 30)]) == 3
        assert [v[:4] for _, v in drain(spool)] == [
            rec(i)[1][:4] for i in [*range(3, 10), 20, 21, 22]
        ]


def test_a_frame_larger_than_a_segment_gets_its_own_segment(tmp_path: Path) -> None:
    big = rec(1, size=5000)
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=1024) as spool:
        assert spool.append([rec(0), big, rec(2)]) == 3
        assert len(segments(tmp_path)) == 3
        assert drain(spool) == [rec(0), big, rec(2)]


def test_cursor_persists_across_reopen(tmp_path: Path) -> None:
    records = [rec(i) for i in range(50)]
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=1500) as spool:
        spool.append(records)
        spool.peek(17)
        spool.commit(17)
        spool.peek(5)  # peeked, never committed: read again after reopening
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=1500) as spool:
        assert spool.record_count == 33
        assert spool.corrupt_tails == 0
        spool.append([rec(50)])  # a reopened spool appends after what is there
        assert drain(spool) == [*records[17:], rec(50)]
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        assert spool.empty
        assert spool.size_bytes == 0
    assert segments(tmp_path) == []


def test_torn_tail_is_cut_off_and_counted_never_raises(tmp_path: Path) -> None:
    records = [rec(i) for i in range(10)]
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        spool.append(records)
    (last,) = segments(tmp_path)
    whole = last.stat().st_size
    frame = encode_frame(*rec(10))
    with last.open("ab") as fh:  # a crash in the middle of writing frame 10
        fh.write(frame[: len(frame) // 2])
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        assert spool.corrupt_tails == 1
        assert spool.corrupt_bytes == len(frame) // 2
        assert last.stat().st_size == whole
        assert spool.record_count == 10
        spool.append([rec(11)])  # appends stay readable after the cut
        assert drain(spool) == [*records, rec(11)]


def test_corrupt_frame_ends_its_segment_and_later_segments_survive(tmp_path: Path) -> None:
    records = [rec(i) for i in range(12)]
    one = frame_size(*rec(0))
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=4 * one) as spool:
        spool.append(records)
    first, second, third = segments(tmp_path)
    data = bytearray(second.read_bytes())
    data[one + 20] ^= 0xFF  # flip a byte inside the second frame of segment 2
    second.write_bytes(bytes(data))
    with first.open("ab") as fh:  # and zeros after segment 1, as a file system may leave
        fh.write(b"\0" * 64)
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=4 * one) as spool:
        assert spool.corrupt_tails == 2
        assert spool.corrupt_bytes == 64 + 3 * one
        assert drain(spool) == [*records[:5], *records[8:]]
    assert third.exists() is False


def test_unreadable_cursor_rereads_from_the_start(tmp_path: Path) -> None:
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        spool.append([rec(1), rec(2)])
        spool.peek(1)
        spool.commit(1)
    (tmp_path / "cursor.json").write_text("{garbage")
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        assert drain(spool) == [rec(1), rec(2)]  # at-least-once: re-sent, never lost


def test_one_open_spool_per_directory(tmp_path: Path) -> None:
    with DiskSpool(tmp_path, max_bytes=1 << 20), pytest.raises(SpoolError, match="in use"):
        DiskSpool(tmp_path, max_bytes=1 << 20)
    DiskSpool(tmp_path, max_bytes=1 << 20).close()  # the lock is released on close


def test_closed_spool_refuses_work(tmp_path: Path) -> None:
    spool = DiskSpool(tmp_path, max_bytes=1 << 20)
    spool.close()
    spool.close()
    with pytest.raises(ValueError, match="closed"):
        spool.append([rec(1)])


def test_concurrent_appends_and_drains_keep_every_record(tmp_path: Path) -> None:
    """Threads appending while another peeks and commits: nothing lost or duplicated."""
    with DiskSpool(tmp_path, max_bytes=1 << 22, segment_bytes=4096) as spool:
        got: list[tuple[bytes, bytes]] = []
        done = threading.Event()

        def producer(base: int) -> None:
            for i in range(base, base + 300, 3):
                spool.append([rec(i), rec(i + 1), rec(i + 2)])

        def consumer() -> None:
            while not (done.is_set() and spool.empty):
                batch = spool.peek(10)
                got.extend(batch)
                spool.commit(len(batch))

        threads = [threading.Thread(target=producer, args=(b,)) for b in (0, 1000, 2000)]
        reader = threading.Thread(target=consumer)
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reader.join(timeout=30)
        assert sorted(got) == sorted(rec(i) for b in (0, 1000, 2000) for i in range(b, b + 300))
        for base in (0, 1000, 2000):  # each appender's records stay in its order
            mine = [v for _, v in got if base <= int(v[1:].split(b":")[0]) < base + 300]
            assert mine == [rec(i)[1] for i in range(base, base + 300)]


# ------------------------------------------------------------------ a full disk


def saved_cursor(directory: Path) -> dict[str, int]:
    return dict(json.loads((directory / "cursor.json").read_text()))


def test_a_full_disk_keeps_the_read_position_in_memory_and_saves_it_later(
    tmp_path: Path,
) -> None:
    """Issue 13: the spool could not save its read position on a full disk, and the
    commit failed, so the drainer backed off after every record. Now the commit consumes
    the records, keeps the position in memory and saves it once space returns."""
    disk = FullDisk(tmp_path)
    records = [rec(i) for i in range(60)]
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=2048, opener=disk) as spool:
        assert spool.append(records) == 60
        before = saved_cursor(tmp_path)
        disk.fill()
        got: list[tuple[bytes, bytes]] = []
        while not spool.empty:
            batch = spool.peek(7)
            got.extend(batch)
            assert spool.commit(len(batch)) is False  # consumed, position not saved
        assert got == records  # drained in order while the disk was full
        assert not spool.cursor_saved
        assert spool.cursor_save_failures == 9
        assert saved_cursor(tmp_path) == before  # the file was never half-written
        assert list(tmp_path.glob("cursor.json.*.tmp")) == []
        assert spool.save_cursor() is False  # still full
        disk.recover()
        assert spool.save_cursor() is True
        assert spool.cursor_saved
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=2048) as spool:
        assert spool.empty  # nothing re-sent after a restart: the position was saved


def test_close_saves_a_position_the_full_disk_held_back(tmp_path: Path) -> None:
    disk = FullDisk(tmp_path)
    with DiskSpool(tmp_path, max_bytes=1 << 20, opener=disk) as spool:
        spool.append([rec(i) for i in range(10)])
        disk.fill()
        spool.peek(4)
        assert spool.commit(4) is False
        disk.recover()  # space came back; no commit since: close saves it
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        assert drain(spool) == [rec(i) for i in range(4, 10)]


def test_a_crash_before_the_position_is_saved_resends_never_loses(tmp_path: Path) -> None:
    disk = FullDisk(tmp_path)
    spool = DiskSpool(tmp_path, max_bytes=1 << 20, opener=disk)
    spool.append([rec(i) for i in range(10)])
    disk.fill()
    spool.peek(6)
    spool.commit(6)
    spool.close()  # still full at close: the saved position is the old one
    with DiskSpool(tmp_path, max_bytes=1 << 20) as reopened:
        assert drain(reopened) == [rec(i) for i in range(10)]  # at-least-once


def test_failed_appends_on_a_full_disk_reuse_their_segment(tmp_path: Path) -> None:
    """Every failed append used to leave a new empty segment behind."""
    disk = FullDisk(tmp_path)
    one = frame_size(*rec(0))
    with DiskSpool(tmp_path, max_bytes=1 << 20, segment_bytes=3 * one, opener=disk) as spool:
        assert spool.append([rec(i) for i in range(3)]) == 3  # segment 1 is full
        disk.recover(free=one // 2)  # room for half a frame: a short write, then ENOSPC
        for i in range(3, 23):
            with pytest.raises(SpoolError, match="No space left on device"):
                spool.append([rec(i)])
        assert len(segments(tmp_path)) == 2  # segment 1 and one cut back to nothing
        assert segments(tmp_path)[1].stat().st_size == 0
        assert spool.record_count == 3
        disk.recover()
        assert spool.append([rec(23), rec(24)]) == 2  # into the reused segment
        assert len(segments(tmp_path)) == 2
        assert drain(spool) == [rec(0), rec(1), rec(2), rec(23), rec(24)]


def test_a_spool_opens_on_a_full_disk(tmp_path: Path) -> None:
    with DiskSpool(tmp_path, max_bytes=1 << 20) as spool:
        spool.append([rec(1), rec(2)])
    disk = FullDisk(tmp_path)
    disk.fill()
    (tmp_path / "cursor.json").unlink()  # opening must write a new one: it cannot
    with DiskSpool(tmp_path, max_bytes=1 << 20, opener=disk) as spool:
        assert not spool.cursor_saved
        assert drain(spool) == [rec(1), rec(2)]
