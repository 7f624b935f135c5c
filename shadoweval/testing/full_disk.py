"""A **test double** of a file system that fills up, for the capture sinks' disk-full tests
and benchmarks.

:class:`FullDisk` is an :data:`shadoweval.disk.Opener` over a real directory (``root``):
files opened through it are real files, and the directory tree acts as a small volume
of :attr:`FullDisk.capacity` bytes — the sum of the sizes of the files under ``root``
may not pass it. A write that does not fit entirely is short (what still fits is
written) and the next one fails with ``OSError(ENOSPC)`` — what ``write(2)`` does on a
full Linux file system — or with :attr:`FullDisk.errno_code` (e.g. ``EIO`` for a failing
device). Creating a file still succeeds on a full disk (an inode needs no data block),
and truncating or deleting a file gives its bytes back, as on a real volume.
:meth:`FullDisk.fill` makes it full and keeps it full (as when another process takes
every byte freed), :meth:`FullDisk.recover` makes room again.

Thread-safe: the sinks write from worker threads. Meant for small directories (each
write sums the sizes of the files under ``root``).
"""

from __future__ import annotations

import errno
import io
import os
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class FullDisk:
    """An opener for files under ``root``, a volume of bounded size (module docstring).

    Args:
        root: the directory standing for the volume (created if missing).
        free: bytes that may still be written now; ``None`` for no limit.
        errno_code: the error a write that does not fit raises (default ``ENOSPC``).

    Attributes:
        capacity: the volume's size in bytes (``None``: unlimited).
        failures: writes refused so far.
        opened: ``(path, mode)`` of every file opened, in order.
    """

    def __init__(
        self, root: str | Path, *, free: int | None = None, errno_code: int = errno.ENOSPC
    ) -> None:
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.errno_code = errno_code
        self.failures = 0
        self.opened: list[tuple[Path, str]] = []
        self.lock = threading.Lock()
        self.capacity: int | None = None if free is None else self.used_bytes() + free
        self.full = False
        """Set by :meth:`fill`: no write fits, whatever is freed."""

    def __call__(self, path: Path, mode: str) -> IO[bytes]:
        """Open ``path`` (under ``root``) for writing (``"xb"``, ``"ab"``, ``"wb"``).

        Raises:
            ValueError: ``mode`` is not a binary write mode, or ``path`` is not under
                ``root``.
            OSError: the file cannot be opened (``"xb"`` on an existing file, …).
        """
        if "b" not in mode or mode[0] not in "xaw":
            raise ValueError(f"mode {mode!r} is not a binary write mode ('xb', 'ab', 'wb')")
        target = Path(path).absolute()
        if not target.is_relative_to(self.root):
            raise ValueError(f"path {str(path)!r} is not under the disk's root {self.root}")
        raw = _BudgetFile(target, mode, self)
        with self.lock:
            self.opened.append((target, mode))
        return io.BufferedWriter(raw)

    def used_bytes(self) -> int:
        """Bytes held by the files under ``root`` now."""
        total = 0
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                try:
                    total += os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:  # deleted meanwhile
                    continue
        return total

    @property
    def free_bytes(self) -> int | None:
        """Bytes that may still be written (``None``: unlimited)."""
        with self.lock:
            if self.full:
                return 0
            return None if self.capacity is None else max(0, self.capacity - self.used_bytes())

    def fill(self) -> None:
        """No byte fits any more, even after files shrink, until :meth:`recover`."""
        with self.lock:
            self.full = True

    def recover(self, free: int | None = None) -> None:
        """Make room: ``free`` bytes from now (``None``: no limit again)."""
        with self.lock:
            self.full = False
            self.capacity = None if free is None else self.used_bytes() + free

    def _write(self, file: _BudgetFile, view: memoryview) -> int:
        """Write what fits of ``view`` to ``file``; raise when nothing does."""
        with self.lock:
            n = len(view)
            if self.full or self.capacity is not None:
                room = 0
                if self.capacity is not None and not self.full:
                    room = self.capacity - self.used_bytes()
                if room <= 0:
                    self.failures += 1
                    raise OSError(self.errno_code, os.strerror(self.errno_code), str(file.path))
                n = min(n, room)
            written = io.FileIO.write(file, view[:n])
            return 0 if written is None else written


class _BudgetFile(io.FileIO):
    """A real file whose writes must fit in its :class:`FullDisk`."""

    def __init__(self, path: Path, mode: str, disk: FullDisk) -> None:
        super().__init__(path, mode)
        self._disk = disk
        self.path = path

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data).cast("B")
        if not len(view):
            return 0
        return self._disk._write(self, view)
