"""Give a large capture's memory back to the system: :func:`trim_heap`.

CPython frees a large body's ``bytes`` when the last reference goes, but glibc's
``malloc`` keeps the freed pages of its heap (pieces under the mmap threshold: the socket
reads of a body, its copies in the builder) for later allocations: the process's RSS stays
where the body took it (issue 33 item 3: ≈ 110 MB per 64 MiB body before). ``malloc_trim(0)``
hands every whole free page of every arena back (``madvise(MADV_DONTNEED)``). The capture
pipeline calls it off the live path, when it goes idle after a large batch
(:class:`~shadoweval.capture.pipeline.CapturePipeline`), at most once per
:data:`MIN_INTERVAL_S`, in its own process and in its builder process.

Only on Linux with glibc (``gnu_get_libc_version`` present); elsewhere (musl, macOS)
:func:`trim_heap` does nothing and returns ``False``.

Source: malloc_trim(3) and mallopt(3) (``M_MMAP_THRESHOLD``, its dynamic adjustment),
Linux man-pages; glibc ``malloc/malloc.c`` (``mtrim``: releases free pages of all arenas
since glibc 2.8).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

LARGE_BATCH_BYTES = 4 * 1024 * 1024
"""A build batch holding at least this many bytes (request bodies + captured response bytes,
:meth:`~shadoweval.capture.raw.RawCapture.size_bytes`) makes the pipeline release memory
when it next goes idle."""

MIN_INTERVAL_S = 1.0
"""At most one release per this many seconds (a trim walks the heap)."""

_malloc_trim: Any = None
if sys.platform.startswith("linux"):
    try:
        _libc = ctypes.CDLL(None)  # this program's symbols: libc's included
        if hasattr(_libc, "gnu_get_libc_version"):  # glibc, not musl
            _malloc_trim = _libc.malloc_trim
            _malloc_trim.argtypes = [ctypes.c_size_t]
            _malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        _malloc_trim = None

SUPPORTED = _malloc_trim is not None
"""Whether :func:`trim_heap` can return memory here (Linux with glibc)."""


def trim_heap() -> bool:
    """``malloc_trim(0)``: return the heap's free pages to the system.

    Returns:
        Whether any memory was released (``False`` as well where unsupported). Never raises.
    """
    if _malloc_trim is None:
        return False
    try:
        return bool(_malloc_trim(0))
    except Exception:  # a failed trim costs memory, never the caller
        return False


def release_in_worker() -> bool:
    """In a builder process: :func:`trim_heap`. Submitted to the builder executor after a
    large batch; the call also replaces the large pickle the executor's feeder thread still
    references (``multiprocessing.queues.Queue._feed`` keeps the last object it sent)."""
    return trim_heap()
