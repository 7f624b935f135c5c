"""Rate-limited logging: a repeating problem is logged once per interval, not per event.

A wrong API token sent in a loop, or a full disk under every capture write, would
otherwise write one log line per event. :class:`RateLimitedLog` logs the first event of
a *key* at once, then at most one line per ``interval_s`` for that key; the line that
ends a quiet period says how many events were not logged since the last line::

    limiter = RateLimitedLog(logger, interval_s=60.0)
    limiter.log(logging.WARNING, "rejected a request to %s", path, key="invalid_token")
    # → "rejected a request to /v1/runs (37 more like it not logged in the last 60 s)"

The clock is injectable (``clock``, seconds, monotonic), so tests advance it instead of
sleeping. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""The log line of every shadow-eval service (capture front ends, the follow compare, the
HTTP API): local time with milliseconds, level, logger, message."""


@dataclass(slots=True)
class _KeyState:
    last_logged: float
    suppressed: int = 0


class RateLimitedLog:
    """At most one log line per ``interval_s`` and key (see the module docstring).

    Args:
        logger: where the lines go.
        interval_s: the least time between two lines of one key, seconds (> 0).
        clock: the time source, seconds (default :func:`time.monotonic`).

    Raises:
        ValueError: ``interval_s`` is not positive.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be positive, got {interval_s!r}")
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._keys: dict[str, _KeyState] = {}
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: object, key: str = "") -> bool:
        """Log ``msg % args`` at ``level`` unless ``key`` was logged less than
        ``interval_s`` ago; return whether it was logged.

        A line after suppressed events ends with ``(N more like it not logged in the last
        S s)``.
        """
        now = self.clock()
        with self._lock:
            state = self._keys.get(key)
            if state is not None and now - state.last_logged < self.interval_s:
                state.suppressed += 1
                return False
            suppressed = state.suppressed if state is not None else 0
            since = now - state.last_logged if state is not None else 0.0
            self._keys[key] = _KeyState(last_logged=now)
        if suppressed:
            msg += " (%d more like it not logged in the last %.0f s)"
            args = (*args, suppressed, since)
        self.logger.log(level, msg, *args)
        return True

    def suppressed(self, key: str = "") -> int:
        """Events of ``key`` not logged since its last line."""
        with self._lock:
            state = self._keys.get(key)
            return state.suppressed if state is not None else 0
