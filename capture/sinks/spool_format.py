"""The disk spool's on-disk format: frames, positions, the cursor file
(:mod:`shadoweval.capture.sinks.spool` re-exports these names; its docstring describes the
layout).

A frame is ``[u32 length][u32 crc32][u32 key_len][key][value]`` (big-endian), the CRC over
``key_len``, key and value, so a half-written tail never validates.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

HEADER = struct.Struct(">III")
"""Frame header: ``length``, ``crc32``, ``key_len``."""
KEY_LEN = struct.Struct(">I")
SEGMENT_RE = re.compile(r"^segment-(\d{12})\.spool$")
CURSOR_FILE = "cursor.json"

# The spool's logger: records keep the name they had before the split.
logger = logging.getLogger("shadoweval.capture.sinks.spool")


def frame_size(key: bytes, value: bytes) -> int:
    """Bytes one record takes on disk (12-byte header + key + value)."""
    return HEADER.size + len(key) + len(value)


def encode_frame(key: bytes, value: bytes) -> bytes:
    """Frame one record: ``[u32 length][u32 crc32][u32 key_len][key][value]``."""
    key_len = KEY_LEN.pack(len(key))
    crc = zlib.crc32(value, zlib.crc32(key, zlib.crc32(key_len)))
    return HEADER.pack(len(key) + len(value), crc, len(key)) + key + value


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """A place in the spool: segment number and byte offset in that segment."""

    segment: int
    offset: int


def _segment_name(seq: int) -> str:
    """The file name of segment ``seq``."""
    return f"segment-{seq:012d}.spool"


def _read_frame(fh: IO[bytes], offset: int, end: int) -> tuple[bytes, bytes, int] | None:
    """Read the frame at ``offset`` (``fh`` positioned there); ``None`` if torn or corrupt.

    Returns ``(key, value, next_offset)``.
    """
    if end - offset < HEADER.size:
        return None
    header = fh.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    length, crc, key_len = HEADER.unpack(header)
    if key_len > length or offset + HEADER.size + length > end:
        return None
    body = fh.read(length)
    if len(body) < length or zlib.crc32(body, zlib.crc32(KEY_LEN.pack(key_len))) != crc:
        return None
    return body[:key_len], body[key_len:], offset + HEADER.size + length


def read_cursor(directory: Path) -> Position | None:
    """The position saved in ``directory``'s cursor file; ``None`` when there is none or
    it is unreadable (logged: the spool is then re-read from its start)."""
    path = directory / CURSOR_FILE
    try:
        data = orjson.loads(path.read_bytes())
        return Position(int(data["segment"]), int(data["offset"]))
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        logger.error("spool cursor %s is unreadable; re-reading the spool from its start", path)
        return None


def fsync_directory(directory: Path) -> None:
    """fsync ``directory`` (a rename or a new file in it becomes durable)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
