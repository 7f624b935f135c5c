"""The capture-log file format: JSONL segments of :class:`~shadoweval.records.Exchange`.

Format (documented for operators in ``docs/capture-log.md``):

* A capture log is a directory of *segments*, or a single segment file.
* A segment is UTF-8 JSON Lines, optionally gzip-compressed (detected by the gzip magic
  bytes, not the file name). Segment names sort in write order:
  ``exchanges-<UTC yyyymmddThhmmss>-<seq:06d>.jsonl[.gz]``.
* Each line is one Exchange object with its own ``schema_version``; a reader accepts the
  versions it knows and reports any other line as rejected, with its location and reason.
  A UTF-8 byte-order mark at the start of a segment is ignored.
* A line must carry ``captured_at``. A line without ``exchange_id`` (absent or ``null``)
  gets a deterministic one, :func:`content_exchange_id`, so every read of the same line
  gives the same id (a resumed replay finds it done).
* Nothing is lost: a line that does not decode — and a blank (white-space-only) line,
  reason ``blank_line`` — is yielded as a :class:`LogEntry` with an ``error``, so callers
  can store and count it.

The capture sidecar writes this format; ``shadow-eval import`` produces it from tables;
``shadow-eval replay run`` reads it.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, cast

import orjson
from pydantic import AwareDatetime, TypeAdapter, ValidationError
from ulid import ULID

from shadoweval.disk import Opener, open_binary
from shadoweval.errors import RecordDecodeError
from shadoweval.lifecycle import Closing
from shadoweval.records import SCHEMA_VERSION, Exchange
from shadoweval.text import held_invalid_utf8

ULID_TIME_MAX_MS = 2**48 - 1

GZIP_MAGIC = b"\x1f\x8b"
SEGMENT_GLOBS = ("*.jsonl", "*.jsonl.gz", "*.ndjson", "*.ndjson.gz")
_EMPTY_FINAL_BLOCK = b"\x03\x00"
"""A final, empty fixed-Huffman deflate block: ends a stream cut at a sync-flush point."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of a capture log: an exchange, or the error that kept it from decoding.

    ``location`` is ``"<file>:<line>"`` (1-based); ``raw`` is the line's text.
    """

    location: str
    raw: str
    exchange: Exchange | None = None
    error: RecordDecodeError | None = None


def content_exchange_id(payload: dict[str, object], captured_at: datetime) -> str:
    """The exchange id of a capture-log line that has none: a ULID made of its content.

    The 48-bit time part is ``captured_at`` in milliseconds since the Unix epoch (clamped
    to the ULID range), so the id sorts by capture time like a sidecar's; the 80 "random"
    bits are the first 10 bytes of SHA-256 over the line's canonical content: the JSON
    object without ``exchange_id``, keys sorted at every level, compact separators
    (``orjson.dumps(..., option=OPT_SORT_KEYS)``). The same line — however its keys are
    ordered or spaced — gets the same id on every read.
    """
    content = {k: v for k, v in payload.items() if k != "exchange_id"}
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).digest()
    ms = min(max(int(captured_at.timestamp() * 1000), 0), ULID_TIME_MAX_MS)
    return str(ULID.from_bytes(ms.to_bytes(6, "big") + digest[:10]))


_AWARE_DATETIME: TypeAdapter[AwareDatetime] = TypeAdapter(AwareDatetime)


def _schema_error(location: str, exc: ValidationError, field: str = "") -> RecordDecodeError:
    """The first error of ``exc`` as a message naming the field (dotted) and the value."""
    first = exc.errors()[0]
    field = ".".join([field, *(str(p) for p in first["loc"])]).strip(".") or "(line)"
    message = str(first["msg"]).removeprefix("Value error, ")
    return RecordDecodeError(
        f"{location}: field {field!r}: {message} (value {first.get('input')!r:.80})",
        location=location,
        reason="schema",
    )


def decode_exchange_line(line: str, location: str = "") -> Exchange:
    """Decode one capture-log line (one JSON object; see the module doc).

    A line without ``exchange_id`` (absent or ``null``) gets :func:`content_exchange_id`.

    Raises:
        RecordDecodeError: invalid JSON (``reason="invalid_json"``), an unknown
            ``schema_version`` (``"schema_version"``) or a shape or value error
            (``"schema"``: the message names the field and the value — a missing
            ``captured_at``, a negative duration, a blank task type, a base64 body that
            does not decode …).
    """
    try:
        payload = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordDecodeError(
            f"{location}: line is not valid JSON ({exc})", location=location, reason="invalid_json"
        ) from exc
    if not isinstance(payload, dict):
        raise RecordDecodeError(
            f"{location}: line is not a JSON object", location=location, reason="schema"
        )
    version = payload.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # not True, not 1.0
        raise RecordDecodeError(
            f"{location}: schema_version={version!r} is not supported (expected {SCHEMA_VERSION})",
            location=location,
            reason="schema_version",
        )
    if payload.get("captured_at") is None:
        raise RecordDecodeError(
            f"{location}: field 'captured_at' is missing: a capture-log line must say when "
            "it was captured",
            location=location,
            reason="schema",
        )
    if payload.get("exchange_id") is None:
        try:
            at = _AWARE_DATETIME.validate_python(payload["captured_at"])
        except ValidationError as exc:
            raise _schema_error(location, exc, field="captured_at") from exc
        payload["exchange_id"] = content_exchange_id(payload, at)
    try:
        return Exchange.model_validate(payload)
    except ValidationError as exc:
        raise _schema_error(location, exc) from exc
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # A value no validator foresaw (pydantic raises ValidationError for what it
        # checks): still this line's fault, and still a rejection with its reason.
        raise RecordDecodeError(
            f"{location}: line cannot be read as an exchange: {type(exc).__name__}: {exc}",
            location=location,
            reason="schema",
        ) from exc


def segment_files(path: Path) -> list[Path]:
    """Return the segment files of a capture log (a file, or a directory's segments sorted).

    Raises:
        FileNotFoundError: the path does not exist, or is a directory without segments.
    """
    if path.is_file():
        return [path]
    if path.is_dir():
        files = {p for pattern in SEGMENT_GLOBS for p in path.glob(pattern)}
        if not files:
            raise FileNotFoundError(
                f"no capture-log segments ({', '.join(SEGMENT_GLOBS)}) in directory {path}"
            )
        return sorted(files)
    raise FileNotFoundError(f"capture log not found: {path}")


def _open_text(path: Path) -> IO[str]:
    # utf-8-sig: a byte-order mark at the start of the segment is not part of line 1.
    # surrogateescape: a byte that is not UTF-8 becomes a lone surrogate, which no valid
    # line can hold, so the reader refuses that line (``invalid_utf8``) instead of
    # storing a replacement character the client never sent.
    with path.open("rb") as probe:
        head = probe.read(2)
    if head == GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="surrogateescape", newline="\n")
    return path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="\n")


def _first_bad_byte(text: str) -> str:
    """``0xFF at character 12``: the first byte of ``text`` that was not UTF-8."""
    for index, char in enumerate(text):
        if "\udc80" <= char <= "\udcff":
            return f"0x{ord(char) - 0xDC00:02X} at character {index + 1}"
    return "unknown"


def read_capture_log(path: str | Path) -> Iterator[LogEntry]:
    """Iterate every line of a capture log in order, decoded or with its error.

    Every line yields exactly one entry. A blank (empty or white-space-only) line is an
    entry with ``reason="blank_line"`` (no writer makes one: it is counted and kept like
    any other line that holds no exchange); a line with bytes that are not UTF-8 is an
    entry with ``reason="invalid_utf8"`` naming the first such byte. A truncated gzip
    member (a segment cut by a crash) yields a final entry with
    ``reason="truncated_segment"`` instead of raising.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    for file in segment_files(Path(path)):
        with _open_text(file) as fh:
            lineno = 0
            try:
                for lineno, line in enumerate(fh, start=1):
                    yield line_entry(line.rstrip("\n"), f"{file.name}:{lineno}")
            except (EOFError, gzip.BadGzipFile, OSError) as exc:
                yield _truncated(file, lineno + 1, exc)


def _truncated(file: Path, lineno: int, exc: BaseException) -> LogEntry:
    location = f"{file.name}:{lineno}"
    return LogEntry(
        location,
        "",
        error=RecordDecodeError(
            f"{location}: segment ends mid-record ({exc})",
            location=location,
            reason="truncated_segment",
        ),
    )


def line_entry(text: str, location: str) -> LogEntry:
    """One capture-log line (without its newline, read with ``surrogateescape``) as an
    entry: the exchange, or the error of a blank line, bytes that are not UTF-8 or a line
    that does not decode (:func:`read_capture_log` explains each reason)."""
    if not text.strip():
        return LogEntry(
            location,
            text,
            error=RecordDecodeError(
                f"{location}: blank line ({len(text)} white-space characters)",
                location=location,
                reason="blank_line",
            ),
        )
    if held_invalid_utf8(text):
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return LogEntry(
            location,
            shown,
            error=RecordDecodeError(
                f"{location}: the line is not valid UTF-8 (byte "
                f"{_first_bad_byte(text)}); a capture log is UTF-8 JSON Lines",
                location=location,
                reason="invalid_utf8",
            ),
        )
    try:
        return LogEntry(location, text, exchange=decode_exchange_line(text, location))
    except RecordDecodeError as exc:
        return LogEntry(location, text, error=exc)


def read_segment_from(
    file: Path, *, start_byte: int = 0, start_line: int = 0
) -> Iterator[tuple[LogEntry, int]]:
    """Read one uncompressed segment from a byte offset: each complete line (ending in a
    newline) as ``(entry, end_byte)``, ``end_byte`` the offset just past its newline, so a
    reader that stores it resumes there without reading the file again
    (:func:`shadoweval.application.canary.ingest_capture_log`). A last line without its newline (the
    writer is still writing it) is not yielded. Locations count from ``start_line`` (the
    lines before ``start_byte``). A byte-order mark at offset 0 is skipped.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the segment is gzip-compressed (a gzip stream cannot be resumed at a
            byte offset; read it with :func:`read_capture_log`).
    """
    with file.open("rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            raise ValueError(f"{file} is gzip-compressed: it cannot be read from an offset")
        fh.seek(start_byte)
        offset = start_byte
        lineno = start_line
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            end = offset + len(raw)
            if offset == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            offset = end
            lineno += 1
            text = raw[:-1].decode("utf-8", "surrogateescape")
            yield line_entry(text, f"{file.name}:{lineno}"), end


class CaptureLogWriter(Closing):
    """Append exchanges to a capture-log directory, rotating segments by size.

    Args:
        directory: created if missing.
        compress: gzip each segment.
        max_segment_bytes: rotate after this many uncompressed bytes.
        opener: opens each new segment (``opener(path, "xb")``; a seam for disk-full
            tests, :data:`shadoweval.disk.Opener`); default :meth:`pathlib.Path.open`.

    Lines are buffered; :meth:`flush` pushes them to the operating system. A disk error
    (``OSError`` from :meth:`write_line`, :meth:`flush` or :meth:`close`) never leaves a
    half-written line or an empty segment behind: the segment is cut back to what the
    last successful flush wrote (a gzip segment is then closed properly, so it still
    reads without a ``truncated_segment`` error — when the disk has no room even for the
    gzip trailer's 10 bytes, the next write, flush or close adds it first), an empty one
    is deleted, and the next write opens a new segment. :attr:`records_durable` counts
    the lines that reached the operating system (flushed, or in a segment closed without
    error); lines accepted after the last flush are lost by the error.

    Use as a context manager; :meth:`close` is idempotent. Not thread-safe: one writer
    per thread or task.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        compress: bool = False,
        max_segment_bytes: int = 64 * 1024 * 1024,
        opener: Opener | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.compress = compress
        self.max_segment_bytes = max_segment_bytes
        self.records_written = 0
        """Lines accepted (:meth:`write`/:meth:`write_line` returned)."""
        self.records_durable = 0
        """Lines that reached the operating system (flushed or in a closed segment)."""
        self.segments: list[Path] = []
        self._opener: Opener = opener or open_binary
        self._fh: IO[bytes] | None = None
        self._raw: IO[bytes] | None = None
        self._segment_bytes = 0
        self._seq = 0
        self._closed = False
        # What the last successful flush of the current segment left on disk: the raw
        # file's size, and (for the gzip trailer) the CRC-32 and length of its lines.
        self._durable_raw_bytes = 0
        self._durable_crc = 0
        self._durable_size = 0
        self._crc = 0
        self._size = 0
        self._pending = 0  # lines accepted since that flush
        # A gzip segment cut back whose trailer could not be written yet: path, size, CRC
        # and length of its lines.
        self._unterminated: tuple[Path, int, int, int] | None = None

    def write(self, exchange: Exchange) -> None:
        """Append one exchange as one line.

        Raises:
            ValueError: the writer is closed.
            OSError: the file system failed (see the class docstring).
        """
        if self._closed:
            raise ValueError("CaptureLogWriter is closed")
        self._append(orjson.dumps(exchange.model_dump(mode="json")) + b"\n")

    def write_line(self, line: bytes) -> None:
        """Append one pre-serialized exchange: its compact JSON, newline optional.

        The caller guarantees the bytes are one Exchange's JSON (as
        :meth:`write` produces: ``orjson.dumps(exchange.model_dump(mode="json"))``).

        Raises:
            ValueError: the writer is closed, or ``line`` holds a newline before its end
                (it would become two lines).
            OSError: the file system failed (see the class docstring).
        """
        if self._closed:
            raise ValueError("CaptureLogWriter is closed")
        body = line[:-1] if line.endswith(b"\n") else line
        if b"\n" in body:
            raise ValueError("a capture-log line must not contain a newline")
        self._append(body + b"\n")

    def _append(self, data: bytes) -> None:
        self._terminate_cut_segment()
        try:
            if self._fh is None or self._segment_bytes + len(data) > self.max_segment_bytes:
                self._rotate()
            assert self._fh is not None
            self._fh.write(data)
        except OSError:
            self._abandon_segment()
            raise
        self._segment_bytes += len(data)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._pending += 1
        self.records_written += 1

    def _rotate(self) -> None:
        self._close_segment()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        suffix = ".jsonl.gz" if self.compress else ".jsonl"
        while True:  # never overwrite a segment another writer made in the same second
            self._seq += 1
            path = self.directory / f"exchanges-{stamp}-{self._seq:06d}{suffix}"
            try:
                raw = self._opener(path, "xb")
                break
            except FileExistsError:
                continue
        self._fh = cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb")) if self.compress else raw
        self._raw = raw
        self.segments.append(path)
        self._segment_bytes = 0
        self._durable_raw_bytes = self._durable_crc = self._durable_size = 0
        self._crc = self._size = self._pending = 0

    def _close_segment(self) -> None:
        """Close the current segment (gzip trailer included); on a disk error cut it back
        to the last flush and raise."""
        fh, raw = self._fh, self._raw
        if fh is None:
            return
        try:
            fh.close()
            if raw is not None and raw is not fh:
                raw.close()
        except OSError:
            self._abandon_segment()
            raise
        self._fh = self._raw = None
        self.records_durable += self._pending
        self._pending = 0

    def _abandon_segment(self) -> None:
        """After a disk error: close the segment without writing more, cut it back to what
        the last flush wrote, delete it when that is nothing, else end its gzip stream."""
        fh, raw = self._fh, self._raw
        self._fh = self._raw = None
        lost, self._pending = self._pending, 0
        self.records_written -= lost
        if raw is None or not self.segments:
            return
        for handle in (raw, fh):  # raw first: the gzip trailer must not reach the file
            if handle is not None:
                with contextlib.suppress(OSError, ValueError):
                    handle.close()
        path = self.segments[-1]
        good = self._durable_raw_bytes
        try:
            if good == 0:
                path.unlink(missing_ok=True)
                self.segments.pop()
                return
            os.truncate(path, good)
        except OSError:
            return  # what is left past the last flush is a torn tail; readers report it
        if self.compress:
            self._unterminated = (path, good, self._durable_crc, self._durable_size)
            with contextlib.suppress(OSError):
                self._terminate_cut_segment()

    def _terminate_cut_segment(self) -> None:
        """End the gzip stream of a segment cut back to a sync-flush point (a final empty
        deflate block and the gzip trailer), so it reads as a complete gzip member.

        Raises:
            OSError: the disk still has no room (tried again on the next call).
        """
        if self._unterminated is None:
            return
        path, good, crc, size = self._unterminated
        trailer = _EMPTY_FINAL_BLOCK + struct.pack("<II", crc, size & 0xFFFFFFFF)
        try:
            with self._opener(path, "ab") as fh:
                fh.write(trailer)
        except OSError:
            with contextlib.suppress(OSError):
                os.truncate(path, good)
            raise
        self._unterminated = None

    def flush(self) -> None:
        """Push buffered lines to the operating system (a gzip segment stays readable up to
        here after a crash). Cheap when nothing was written since the last flush.

        Raises:
            OSError: the file system failed: the lines since the previous flush are lost
                and the segment is cut back to it (see the class docstring).
        """
        self._terminate_cut_segment()
        fh, raw = self._fh, self._raw
        if fh is None or raw is None:
            return
        try:
            fh.flush()
            if raw is not fh:
                raw.flush()
        except OSError:
            self._abandon_segment()
            raise
        self._durable_raw_bytes = raw.tell()
        self._durable_crc, self._durable_size = self._crc, self._size
        self.records_durable += self._pending
        self._pending = 0

    def close(self) -> None:
        """Flush and close the current segment.

        Raises:
            OSError: the file system failed (see :meth:`flush`); the writer is closed
                anyway.
        """
        self._closed = True
        try:
            self._close_segment()
        finally:
            self._terminate_cut_segment()
