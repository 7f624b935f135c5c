"""A bounded, append-only, crash-safe FIFO of ``(key, value)`` records on disk.

The Kafka sink keeps here what the broker has not acknowledged, so a broker outage (or a
sidecar restart during one) loses nothing that fitted. Layout of ``directory``::

    segment-000000000001.spool     records, appended in order
    segment-000000000002.spool
    cursor.json                    {"segment": 1, "offset": 4096}: the first unconsumed byte
    .lock                          flock'ed while a process has the spool open

Each record is one *frame* (big-endian unsigned 32-bit integers; written and read by
:mod:`shadoweval.capture.sinks.spool_format`)::

    [u32 length][u32 crc32][u32 key_len][key][value]

``length`` = ``key_len + len(value)`` (the bytes after the 12-byte header); ``crc32`` is
:func:`zlib.crc32` of the ``key_len`` field, the key and the value, so a zero-filled or
half-written tail never validates.

Durability and recovery:

* :meth:`DiskSpool.append` writes the frames of one call with one ``write`` and flushes
  them to the OS (a crash of the process loses nothing appended); with ``fsync=True``
  it also fsyncs (power loss). Segments are fsynced when they are closed.
* The read cursor is persisted by :meth:`DiskSpool.commit` atomically (temporary file,
  fsync, ``os.replace``). A restarted process resumes after the last commit: records
  peeked but not committed are read again (at-least-once).
* The read position lives in memory; the cursor file is its saved copy. When the cursor
  cannot be written (disk full, I/O error) the commit still consumes the records — the
  spool keeps draining at full speed — and :attr:`DiskSpool.cursor_saved` turns false;
  every later :meth:`DiskSpool.commit` and :meth:`DiskSpool.save_cursor` tries again,
  and :meth:`DiskSpool.close` once more. A crash before a save succeeds re-reads from the
  last saved position (duplicates, never a loss).
* A failed append is cut back off its segment, and the next append reuses that segment
  (reopened for appending) instead of creating a new one: a disk-full episode leaves no
  trail of empty segments.
* Opening scans every unconsumed frame. The first frame of a segment that is torn (crash
  mid-write) or fails its CRC ends that segment: the file is truncated there and the
  loss is counted in :attr:`DiskSpool.corrupt_tails` / :attr:`DiskSpool.corrupt_bytes`.
  Recovery never raises for bad data.
* Segments whose every record is committed are deleted; a fully consumed spool holds no
  segment file at all.

Bounds: :attr:`DiskSpool.size_bytes` is the size of the segment files on disk (including
the consumed head of the first segment until that segment is deleted) and never exceeds
``max_bytes``. :meth:`DiskSpool.append` refuses what does not fit (the caller counts the
drop as ``spool_full``).

Every file the spool writes is opened through ``opener`` (:data:`shadoweval.disk.Opener`:
a seam for disk-full tests).

Threading: methods are synchronous and do blocking file I/O, so asyncio callers run them
with :func:`asyncio.to_thread`. An internal lock makes every method safe to call from
several threads; the FIFO order is the order in which ``append`` calls take that lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import orjson

from shadoweval.capture.sinks.spool_format import CURSOR_FILE as CURSOR_FILE
from shadoweval.capture.sinks.spool_format import HEADER as HEADER
from shadoweval.capture.sinks.spool_format import KEY_LEN as KEY_LEN
from shadoweval.capture.sinks.spool_format import SEGMENT_RE as SEGMENT_RE
from shadoweval.capture.sinks.spool_format import Position as Position
from shadoweval.capture.sinks.spool_format import (
    _read_frame,
    _segment_name,
    fsync_directory,
    read_cursor,
)
from shadoweval.capture.sinks.spool_format import encode_frame as encode_frame
from shadoweval.capture.sinks.spool_format import frame_size as frame_size
from shadoweval.disk import Opener, open_binary, replace_durably
from shadoweval.errors import ShadowEvalError
from shadoweval.lifecycle import Closing
from shadoweval.log_limits import RateLimitedLog

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class SpoolError(ShadowEvalError):
    """The spool directory cannot be used: locked by another process, or an I/O error."""


class DiskSpool(Closing):
    """A bounded on-disk FIFO of ``(key, value)`` byte records (see the module docstring).

    Args:
        directory: created if missing; one process at a time (``flock``).
        max_bytes: bound on the segment files together, bytes.
        segment_bytes: a segment is closed once the next frame would pass this size (a
            single larger frame gets a segment of its own).
        fsync: fsync after every append (survives power loss, costs a disk flush).
        opener: opens the files the spool writes (a seam for disk-full tests); default
            :meth:`pathlib.Path.open`.

    Raises:
        SpoolError: the directory is locked by another open spool, or cannot be
            created/read.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        max_bytes: int,
        segment_bytes: int = 64 * 1024 * 1024,
        fsync: bool = False,
        opener: Opener | None = None,
    ) -> None:
        if max_bytes <= 0 or segment_bytes <= 0:
            raise ValueError("max_bytes and segment_bytes must be positive")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.corrupt_tails = 0
        """Segments found torn or corrupt (each truncated at its first bad frame)."""
        self.corrupt_bytes = 0
        """Bytes cut off by those truncations."""
        self.cursor_save_failures = 0
        """Attempts to write the cursor file that failed (the position stayed in memory)."""
        self._opener: Opener = opener or open_binary
        self._cursor_saved = True
        self._reopen_seq: int | None = None  # a segment cut back after a failed append
        self._errors = RateLimitedLog(logger, interval_s=10.0, clock=time.monotonic)
        self._lock = threading.Lock()
        self._sizes: dict[int, int] = {}  # segment number -> valid size in bytes, in order
        self._head = Position(1, 0)
        self._records = 0
        self._disk_bytes = 0
        self._writer: IO[bytes] | None = None
        self._write_seq = 0
        self._reader: tuple[int, IO[bytes]] | None = None
        self._peeked: list[Position] = []
        self._closed = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fh: IO[bytes] = (self.directory / LOCK_FILE).open("ab")
        except OSError as exc:
            raise SpoolError(f"cannot open spool directory {self.directory}: {exc}") from exc
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock_fh.close()
            raise SpoolError(
                f"spool directory {self.directory} is in use by another process ({exc})"
            ) from exc
        try:
            self._recover()
        except OSError as exc:
            self._release_lock()
            raise SpoolError(f"cannot read spool {self.directory}: {exc}") from exc

    # ------------------------------------------------------------------ properties

    @property
    def size_bytes(self) -> int:
        """Bytes of segment files on disk (what ``max_bytes`` bounds)."""
        return self._disk_bytes

    @property
    def record_count(self) -> int:
        """Records appended and not yet committed."""
        return self._records

    @property
    def empty(self) -> bool:
        """True when every appended record has been committed."""
        return self._records == 0

    @property
    def cursor_saved(self) -> bool:
        """False while the read position is newer than the cursor file (its last save
        failed); a restart would then re-read from the saved, older position."""
        return self._cursor_saved

    @property
    def free_bytes(self) -> int:
        """Bytes that may still be appended (frames included)."""
        return max(0, self.max_bytes - self._disk_bytes)

    # ------------------------------------------------------------------ recovery

    def _segment_path(self, seq: int) -> Path:
        """The file of segment ``seq`` in the spool directory."""
        return self.directory / _segment_name(seq)

    def _recover(self) -> None:
        for tmp in self.directory.glob(f"{CURSOR_FILE}.*.tmp"):
            tmp.unlink(missing_ok=True)
        seqs = sorted(
            int(m.group(1)) for p in self.directory.iterdir() if (m := SEGMENT_RE.match(p.name))
        )
        head = read_cursor(self.directory)
        if head is None:
            head = Position(seqs[0] if seqs else 1, 0)
        for seq in seqs:
            path = self._segment_path(seq)
            if seq < head.segment:  # consumed; its deletion was interrupted
                path.unlink(missing_ok=True)
                continue
            size = path.stat().st_size
            start = head.offset if seq == head.segment else 0
            count, valid_end = self._scan(path, min(start, size), size)
            if valid_end < size:
                self.corrupt_tails += 1
                self.corrupt_bytes += size - valid_end
                logger.error(
                    "spool segment %s is torn or corrupt at byte %d: %d bytes cut off",
                    path,
                    valid_end,
                    size - valid_end,
                )
                with path.open("r+b") as fh:
                    fh.truncate(valid_end)
                size = valid_end
            self._sizes[seq] = size
            self._records += count
            self._disk_bytes += size
        self._write_seq = max([*seqs, head.segment - 1, 0])
        if head.segment not in self._sizes:  # its file is gone: start at the next one
            head = Position(min(self._sizes) if self._sizes else self._write_seq + 1, 0)
        self._head = head
        self._normalize_head()
        self._try_save_cursor()

    def _scan(self, path: Path, start: int, end: int) -> tuple[int, int]:
        """Count valid frames of ``path`` from ``start``; return ``(count, valid_end)``."""
        count = 0
        offset = start
        with path.open("rb") as fh:
            fh.seek(offset)
            while offset < end:
                frame = _read_frame(fh, offset, end)
                if frame is None:
                    break
                offset = frame[2]
                count += 1
        return count, offset

    def _save_cursor(self) -> None:
        """Write the cursor file atomically; raise :class:`OSError` (nothing replaced)."""
        path = self.directory / CURSOR_FILE
        tmp = self.directory / f"{CURSOR_FILE}.{os.getpid()}.tmp"
        data = orjson.dumps({"segment": self._head.segment, "offset": self._head.offset})
        try:
            replace_durably(self._opener, tmp, path, data)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
        fsync_directory(self.directory)

    def _try_save_cursor(self) -> bool:
        """Save the cursor; on an error keep the position in memory (retried later)."""
        try:
            self._save_cursor()
        except OSError as exc:
            self.cursor_save_failures += 1
            self._cursor_saved = False
            self._errors.log(
                logging.ERROR,
                "cannot save the spool cursor in %s (%s); the read position is kept in "
                "memory and saved again on the next commit",
                self.directory,
                exc,
                key="cursor",
            )
            return False
        if not self._cursor_saved:
            logger.info("spool cursor in %s saved again", self.directory)
        self._cursor_saved = True
        return True

    def save_cursor(self) -> bool:
        """Write the read position to the cursor file if it is newer than the file;
        ``True`` when the file now holds it.

        Raises:
            ValueError: the spool is closed.
        """
        with self._lock:
            self._check_open()
            return self._cursor_saved or self._try_save_cursor()

    # ------------------------------------------------------------------ writing

    def append(self, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Append records in order; stop at the first one that does not fit.

        Returns:
            How many records (a prefix of ``records``) were appended. The rest did not
            fit in ``max_bytes``; the caller counts them as dropped (``spool_full``).

        Raises:
            SpoolError: an I/O error (e.g. disk full below ``max_bytes``); nothing of this
                call was appended (a partial write is truncated away, or left as a torn
                tail that the next open cuts off).
            ValueError: the spool is closed.
        """
        with self._lock:
            self._check_open()
            appended = 0
            pending: list[bytes] = []
            pending_bytes = 0
            for key, value in records:
                size = frame_size(key, value)
                if self._disk_bytes + pending_bytes + size > self.max_bytes:
                    break
                if self._writer is None or (
                    self._sizes[self._write_seq] + pending_bytes + size > self.segment_bytes
                    and self._sizes[self._write_seq] + pending_bytes > 0
                ):
                    self._flush_pending(pending, pending_bytes)
                    pending, pending_bytes = [], 0
                    if self._writer is None and self._can_reopen(size):
                        self._reopen()
                    else:
                        self._rotate()
                pending.append(encode_frame(key, value))
                pending_bytes += size
                appended += 1
            self._flush_pending(pending, pending_bytes)
            return appended

    def _flush_pending(self, frames: list[bytes], size: int) -> None:
        if not frames:
            return
        writer = self._writer
        assert writer is not None
        before = self._sizes[self._write_seq]
        try:
            writer.write(b"".join(frames))
            writer.flush()
            if self.fsync:
                os.fsync(writer.fileno())
        except OSError as exc:
            self._abandon_writer(before)
            raise SpoolError(f"cannot append to spool {self.directory}: {exc}") from exc
        self._sizes[self._write_seq] = before + size
        self._disk_bytes += size
        self._records += len(frames)

    def _abandon_writer(self, good_size: int) -> None:
        """After a failed write: close the segment, cut it back to ``good_size`` and let
        the next append reuse it."""
        writer, self._writer = self._writer, None
        path = self._segment_path(self._write_seq)
        with contextlib.suppress(OSError, ValueError):
            if writer is not None:
                writer.close()
        try:
            os.truncate(path, good_size)
        except OSError:
            self._reopen_seq = None
            logger.error("cannot truncate %s after a failed write; recovery will", path)
            return
        self._reopen_seq = self._write_seq

    def _can_reopen(self, frame_bytes: int) -> bool:
        """Whether the segment cut back after a failed append can take this frame."""
        seq = self._reopen_seq
        if seq is None or seq != self._write_seq or seq not in self._sizes:
            return False
        size = self._sizes[seq]
        return size == 0 or size + frame_bytes <= self.segment_bytes

    def _reopen(self) -> None:
        """Reopen the segment a failed append was cut back from, for appending."""
        path = self._segment_path(self._write_seq)
        try:
            self._writer = self._opener(path, "ab")
        except OSError as exc:
            raise SpoolError(f"cannot reopen spool segment {path}: {exc}") from exc
        self._reopen_seq = None

    def _rotate(self) -> None:
        self._close_writer()
        self._reopen_seq = None
        self._write_seq += 1
        path = self._segment_path(self._write_seq)
        try:
            self._writer = self._opener(path, "xb")
        except OSError as exc:
            raise SpoolError(f"cannot create spool segment {path}: {exc}") from exc
        self._sizes[self._write_seq] = 0

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.flush()
            os.fsync(writer.fileno())
        except OSError:
            logger.warning("fsync of spool segment %d failed", self._write_seq, exc_info=True)
        finally:
            writer.close()

    # ------------------------------------------------------------------ reading

    def peek(self, max_records: int) -> list[tuple[bytes, bytes]]:
        """Return up to ``max_records`` records from the head, oldest first, without
        consuming them (call :meth:`commit` after they are acknowledged).

        Raises:
            SpoolError: an I/O error reading a segment.
            ValueError: the spool is closed.
        """
        with self._lock:
            self._check_open()
            try:
                while True:
                    out = self._read_from_head(max_records)
                    if out is not None:
                        return out
            except OSError as exc:
                self._drop_reader()
                raise SpoolError(f"cannot read spool {self.directory}: {exc}") from exc

    def _read_from_head(self, max_records: int) -> list[tuple[bytes, bytes]] | None:
        """Read up to ``max_records`` frames; ``None`` after cutting off a corrupt frame."""
        out: list[tuple[bytes, bytes]] = []
        self._peeked = []
        pos = self._head
        while len(out) < max_records and self._records > len(out):
            size = self._sizes.get(pos.segment)
            if size is None:
                break
            if pos.offset >= size:
                nxt = self._next_segment(pos.segment)
                if nxt is None:
                    break
                pos = Position(nxt, 0)
                continue
            fh = self._reader_for(pos.segment)
            fh.seek(pos.offset)
            frame = _read_frame(fh, pos.offset, size)
            if frame is None:
                self._cut_corrupt(pos)
                return None
            key, value, end = frame
            out.append((key, value))
            pos = Position(pos.segment, end)
            self._peeked.append(pos)
        return out

    def _cut_corrupt(self, pos: Position) -> None:
        """A frame went bad after recovery (disk damage): cut its segment there, recount."""
        path = self._segment_path(pos.segment)
        size = self._sizes[pos.segment]
        logger.error("spool segment %s is corrupt at byte %d; cutting it there", path, pos.offset)
        self.corrupt_tails += 1
        self.corrupt_bytes += size - pos.offset
        self._drop_reader()
        with path.open("r+b") as fh:
            fh.truncate(pos.offset)
        self._sizes[pos.segment] = pos.offset
        self._disk_bytes -= size - pos.offset
        if pos.segment == self._write_seq:
            self._close_writer()
        self._records = 0
        for seq, seg_size in self._sizes.items():
            if seq < self._head.segment:
                continue
            start = self._head.offset if seq == self._head.segment else 0
            self._records += self._scan(self._segment_path(seq), start, seg_size)[0]

    def _next_segment(self, seq: int) -> int | None:
        later = [s for s in self._sizes if s > seq]
        return min(later) if later else None

    def _reader_for(self, seq: int) -> IO[bytes]:
        if self._reader is not None and self._reader[0] == seq:
            return self._reader[1]
        self._drop_reader()
        fh = self._segment_path(seq).open("rb")
        self._reader = (seq, fh)
        return fh

    def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader[1].close()

    def commit(self, n: int) -> bool:
        """Consume the first ``n`` records of the last :meth:`peek` and persist the cursor.

        Segments left fully consumed are deleted. Invalidates the last peek (peek again).
        The records are consumed even when the cursor file cannot be written: the
        position is kept in memory (:attr:`cursor_saved` false) and saved by a later
        commit or :meth:`save_cursor`; until then a restart re-reads from the last saved
        position.

        Returns:
            Whether the cursor file holds the new position.

        Raises:
            ValueError: ``n`` is negative or more than the last peek returned, or the
                spool is closed.
            SpoolError: a consumed segment could not be deleted (the position was
                moved all the same).
        """
        with self._lock:
            self._check_open()
            if n < 0 or n > len(self._peeked):
                raise ValueError(f"commit({n}) after a peek of {len(self._peeked)} records")
            if n == 0:
                return self._cursor_saved
            self._head = self._peeked[n - 1]
            self._peeked = []
            self._records -= n
            try:
                self._normalize_head()
            except OSError as exc:
                self._try_save_cursor()
                raise SpoolError(f"cannot delete a consumed spool segment: {exc}") from exc
            return self._try_save_cursor()

    def _normalize_head(self) -> None:
        """Delete fully consumed segments at the head and move the cursor past them."""
        for seq in [s for s in self._sizes if s < self._head.segment]:
            self._delete_segment(seq)
        while True:
            size = self._sizes.get(self._head.segment)
            if size is None or self._head.offset < size:
                return
            seq = self._head.segment
            self._delete_segment(seq)
            nxt = self._next_segment(seq)
            self._head = Position(nxt if nxt is not None else self._write_seq + 1, 0)

    def _delete_segment(self, seq: int) -> None:
        if seq == self._write_seq:
            self._close_writer()
        if self._reader is not None and self._reader[0] == seq:
            self._drop_reader()
        self._segment_path(seq).unlink(missing_ok=True)
        self._disk_bytes -= self._sizes.pop(seq)

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"spool {self.directory} is closed")

    def close(self) -> None:
        """Fsync and close the open segment, release the directory lock. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._drop_reader()
            self._close_writer()
            if not self._cursor_saved:
                self._try_save_cursor()
            self._release_lock()

    def _release_lock(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
        self._lock_fh.close()
