"""Waiting on a condition instead of a clock: the one way a test says "eventually".

A test that needs something to have happened (a record spooled, a port closed, a file
written) polls the condition it then asserts. The deadline only bounds a hang: it is far
above how long the condition takes on a loaded machine, and running out of it fails with
a message naming what never became true. Speed is measured by ``benchmarks/``, not here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

HANG_S = 60.0
"""Default deadline, seconds: long enough that only a hang (or a bug) runs out of it."""


def wait_until(
    predicate: Callable[[], object],
    what: str,
    timeout_s: float = HANG_S,
    interval_s: float = 0.01,
) -> None:
    """Poll ``predicate`` every ``interval_s`` seconds until it is truthy.

    Args:
        predicate: the condition the test asserts next; called from this thread.
        what: the condition in words, for the failure message ("the spool to drain").
        timeout_s: deadline in seconds; it bounds a hang, it is not a speed check.
        interval_s: pause between polls, seconds.

    Raises:
        AssertionError: ``predicate`` was still falsy after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)


async def eventually(
    predicate: Callable[[], object],
    what: str,
    timeout_s: float = HANG_S,
    interval_s: float = 0.01,
) -> None:
    """:func:`wait_until` for a coroutine: polls with ``asyncio.sleep`` between checks.

    Raises:
        AssertionError: ``predicate`` was still falsy after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(interval_s)
