"""Files the capture path writes, opened through one seam, and what a disk error means.

Every file a capture sink writes (capture-log segments, spool segments and its cursor,
offloaded exchanges) is opened through an :data:`Opener`: ``opener(path, mode)`` with a
binary write mode (``"xb"``, ``"ab"`` or ``"wb"``) returning a buffered binary file.
The default, :func:`open_binary`, is :meth:`pathlib.Path.open`. Tests and benchmarks hand
the sinks a disk that fills up (:class:`shadoweval.simulation.full_disk.FullDisk`) through the same
seam instead of patching the standard library.

:func:`replace_durably` writes a small file whole (the spool's cursor, an offloaded exchange)
through the seam: a temporary file, flushed to the disk, renamed over the target.

:func:`disk_error_reason` names a write error for the drop counters: ``disk_full``
(``ENOSPC``, ``EDQUOT``: space may come back) or ``io_error`` (``EIO`` and the rest).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

Opener = Callable[[Path, str], IO[bytes]]
"""Opens ``path`` in a binary write mode (``"xb"``, ``"ab"``, ``"wb"``) for writing."""

DISK_FULL_ERRNOS: frozenset[int] = frozenset({errno.ENOSPC, errno.EDQUOT})
"""Errors that mean "no space left": the disk (or the user's quota) is full."""


def open_binary(path: Path, mode: str) -> IO[bytes]:
    """The default :data:`Opener`: ``path.open(mode)`` (buffered, binary).

    Raises:
        ValueError: ``mode`` is not a binary write mode.
        OSError: the file cannot be opened.
    """
    if "b" not in mode or mode[0] not in "xaw":
        raise ValueError(f"mode {mode!r} is not a binary write mode ('xb', 'ab', 'wb')")
    return path.open(mode)


def replace_durably(opener: Opener, tmp: Path, path: Path, data: bytes) -> None:
    """Write ``data`` to ``tmp`` through ``opener`` (mode ``"wb"``), flush it to the disk
    (``fsync``), then rename it over ``path`` (atomic on POSIX: a reader sees the old file
    or the new one, whole).

    Raises:
        OSError: a step failed; ``path`` is unchanged and ``tmp`` may be left behind (the
            caller removes it).
    """
    with opener(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def disk_error_reason(exc: BaseException) -> str:
    """``disk_full`` for ``ENOSPC``/``EDQUOT``, else ``io_error`` (``EIO``, a closed file…)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
        return "disk_full"
    return "io_error"
